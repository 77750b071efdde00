"""Where a long end-to-end case's fault shows: its per-token checks by output-position band.

A long case (:mod:`specexact.audit.cases.e2e.token_checks`) checks every emitted token in
position bands (``token_law[positions 16-31]``, ``plain_token_law[...]``), over all its
classes together: a failure is located by *position*, not by class. :func:`band_notes` says,
per path, which bands fail and from which output position the fault shows, and scores the
parts the failing checks cover as suspects (the checks cannot tell them apart), for
:func:`~specexact.audit.verdict.diagnosis_e2e.diagnose_e2e`.
"""

from __future__ import annotations

from specexact.audit.verdict.diagnosis_parts import check_type

__all__ = ["BAND_CHECK_TYPES", "band_notes"]

BAND_CHECK_TYPES = ("token_law", "plain_token_law")
"""The per-token check types of a long case, speculative then plain."""


def _positions(chk: dict) -> tuple[int, int] | None:
    pos = (chk.get("details") or {}).get("positions")
    return (int(pos[0]), int(pos[1])) if pos and len(pos) == 2 else None


def band_notes(case: str, checks: list[dict], coverage: dict, score: dict) -> list[str]:
    """Notes on ``case``'s band checks, and suspects scored into ``score``.

    Parameters
    ----------
    case : str
        The case's name.
    checks : list of dict
        The case's checks (report form); only :data:`BAND_CHECK_TYPES` are read.
    coverage : dict
        ``{id(check): set of parts}`` (:func:`~specexact.audit.verdict.diagnosis_e2e.coverage`).
    score : dict
        Part -> suspicion score, added to (1 per failing band check and part it covers, the
        emitted law and batching left out).

    Returns
    -------
    list of str
        One note per path with a failing band: the failing and passing bands, and the first
        output position of the fault when every band from there on fails.
    """
    notes = []
    for path in BAND_CHECK_TYPES:
        bands = sorted((b, c) for c in checks if check_type(c) == path and (b := _positions(c)) is not None)
        failing = [b for b, c in bands if not c["passed"]]
        if not failing:
            continue
        for _, c in bands:
            if not c["passed"]:
                for part in coverage.get(id(c), set()) - {"emitted_law", "batching"}:
                    score[part] += 1
        passing = [b for b, c in bands if c["passed"]]
        text = (f"{case}: {path} fails in positions {', '.join(f'{a}-{b - 1}' for a, b in failing)}"
                + (f" and passes in {', '.join(f'{a}-{b - 1}' for a, b in passing)}" if passing else ""))
        first = failing[0][0]
        if all(not c["passed"] for b, c in bands if b[0] >= first) and first > 0:
            text += f": the fault shows from output position {first} on"
        if path == "plain_token_law":
            text += " (the plain path too: the parts both paths share)"
        notes.append(text)
    return notes
