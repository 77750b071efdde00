"""scripts/calibration.py's e2e-scenarios group: each calibration seed gets an engine whose
unseeded stream is its own, so trials are independent (one engine for every seed repeated
the unseeded requests' outputs across trials: half of each trial's draws)."""

import importlib.util
from pathlib import Path

from specexact.audit.cases.e2e.case import E2ECase, E2ERowClass
from specexact.audit.cases.e2e.engine_call import ensure_loaded, generate_call
from specexact.decoders.params import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("calibration_script", ROOT / "scripts" / "calibration.py")
calibration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibration)

CASE = E2ECase(name="e2e-calibration-streams", pair="llama-v64", method="draft_model", num_speculative_tokens=2,
               row_classes=(E2ERowClass((3, 9, 4), SamplingParams(), max_tokens=3),), requests_per_class=8,
               unseeded=True)


def _unseeded_outputs(engine):
    ensure_loaded(engine, CASE)
    _, results = generate_call(engine, CASE, 0, speculative=True)
    return [r.token_ids for i, r in enumerate(results) if not CASE.is_seeded(i)]


def test_each_calibration_seed_draws_its_own_unseeded_stream():
    first, again, other = (_unseeded_outputs(calibration.e2e_engine(s)) for s in (0, 0, 1))
    assert len(first) == 4
    assert first == again  # a seed's trial is reproducible
    assert first != other  # and another seed's unseeded requests draw afresh (64**3 outcomes each)
