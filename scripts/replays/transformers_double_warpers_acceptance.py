"""The double-warpers finding in the audit's acceptance counts: transformers' first rounds
accept as a draft sampled at ``T**2`` does, not as one at the request's ``T``.

``python scripts/replays/transformers_double_warpers_acceptance.py [REPORT.json]`` (default:
the newest draft_model report under ``reports/engines/transformers-e2e/``). For the row
classes whose doubled warpers are again one set of sampling parameters (``T`` then top-k,
``T`` then min-p: applying them twice is ``T**2`` then the same truncation, the second min-p
cut being the stricter), it compares the report's observed first-round accepted counts with
the exact acceptance law of a draft at the request's parameters (the audit's reference) and at
the doubled ones (Pearson chi-square, informative p-values: one look, no threshold tuned).
Exit status 1 when, for some class, the doubled law fits (p > 0.01) and the request's does
not (p < 1e-6).
No engine runs here: the laws come from the tiny models' weights
(:func:`specexact.decoders.tiny_models.expected_acceptance`).
"""

import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import chisquare

from specexact.decoders.engines.transformers import TRANSFORMERS_E2E_PROCESSING
from specexact.decoders.params import SamplingParams
from specexact.decoders.tiny_models import catalog_pair, expected_acceptance, load_model

if len(sys.argv) > 1:
    path = Path(sys.argv[1])
else:
    reports = sorted(Path("reports/engines/transformers-e2e").glob("audit-engine-transformers-*.json"))
    path = next(p for p in reversed(reports) if "draft_model" in json.loads(p.read_text())["cases"][0]["name"])
report = json.loads(path.read_text())
case = report["cases"][0]
config = case["config"]
gamma = int(config["num_speculative_tokens"])
target, draft = (load_model(d) for d in catalog_pair(config["pair"]))
DOUBLED = {  # request parameters -> the assistant's, warpers applied twice
    (0.6, 8, 0.0): SamplingParams(temperature=0.36, top_k=8),
    (0.8, 0, 0.05): SamplingParams(temperature=0.64, min_p=0.05),
}
fits = []
for c, rc in enumerate(config["row_classes"]):
    prompt = tuple(json.loads(rc.split(";")[0].removeprefix("prompt ")))
    check = next((k for k in case["checks"] if k["name"] == f"accepted_length[class {c}]"), None)
    for (T, k, m), doubled in DOUBLED.items():
        request = SamplingParams(temperature=T, top_k=k, min_p=m)
        if check is None or request.describe() not in rc:
            continue
        observed = np.asarray(check["details"]["observed_counts"], dtype=float)
        n = observed.sum()
        line = [f"class {c} ({request.describe()}): observed mean {observed @ np.arange(gamma + 1) / n:.3f}"]
        ps = []
        for name, draft_params in (("request", request), ("doubled", doubled)):
            at_least = expected_acceptance(target, draft, prompt, request, draft_params,
                                           processing=TRANSFORMERS_E2E_PROCESSING, num_speculative_tokens=gamma)
            ge = np.concatenate([[1.0], at_least, [0.0]])
            law = ge[:-1] - ge[1:]
            p = chisquare(observed, law * n).pvalue
            ps.append(p)
            line.append(f"{name} law ({draft_params.describe()}) mean {law @ np.arange(gamma + 1):.3f}, "
                        f"chi-square p={p:.3g}")
        print("; ".join(line))
        fits.append(ps[0] < 1e-6 and ps[1] > 0.01)
print(f"{path}: " + ("the counts follow the doubled warpers' law" if fits and any(fits) else "not reproduced"))
sys.exit(1 if fits and any(fits) else 0)
