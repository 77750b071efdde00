"""The version sweep's table: one engine's end-to-end audits over its released versions.

``scripts/version_sweep.py`` installs each version in an environment of its own, runs
``specexact audit --engine ENGINE --method M`` there for each method and the findings'
replay scripts, and hands the outcomes to this module, which only reads and renders them
(no installs, no engine): one row per version × method (the verdict by tier, sequences,
the findings' check names, the detectable TV), one row per version × replay (reproduced or
not, what it printed) and, per finding, its first and last affected version in the sweep
(``affects``) and ``fixed_in`` in the form the verify-level findings use
(``specexact.decoders.adapters.transformers.ZERO_PROBABILITY_ACCEPTANCE``).

Two kinds of finding, read differently:

- an **audit finding** (a failing check of an audit, named by its check, e.g.
  ``accepted_length[class 1]``) is statistical: a version whose audit did not fail that
  check is not evidence of a fix (the audit's power at the sweep's budget is the row's
  detectable TV), so an audit finding never gets a ``fixed_in``; its range lists the versions
  where the method ran without it (``not_seen_in``);
- a **replay finding** (a replay script's exit status: 1 reproduced, 0 not reproduced,
  anything else an error) is a deterministic check of the engine's code path, so a swept
  version after the last affected one where the replay ran and did not reproduce is its
  ``fixed_in``.
"""

from __future__ import annotations

import re
import posixpath
from typing import Iterable, Mapping, Sequence

__all__ = [
    "TABLE_SCHEMA",
    "audit_row",
    "failure_row",
    "finding_name",
    "finding_ranges",
    "replay_row",
    "version_key",
    "version_table",
    "version_table_markdown",
]

TABLE_SCHEMA = "specexact.version-sweep/1"
"""The ``schema`` field of the sweep's JSON table."""

#: What a failure row's ``status`` may be: the environment could not be installed, or the
#: audit could not run (exit status 2, a crash, a timeout) or left no report.
FAILURE_STATUSES = ("env-failed", "audit-failed")

_TIERS = ("inexact", "defect", "under_accepting", "hardening")


def version_key(version: str) -> tuple:
    """A sort key of a release string: its numeric release, then the rest (``5.9.0`` < ``5.10.4``).

    Parameters
    ----------
    version : str
        e.g. ``"5.14.1"``, ``"0.32.0"``, ``"5.0.0rc1"``.

    Raises
    ------
    ValueError
        ``version`` does not start with a number (the message names it).
    """
    match = re.match(r"^(\d+(?:\.\d+)*)(.*)$", str(version))
    if match is None:
        raise ValueError(f"version must start with a release number such as 5.14.1, got {version!r}")
    release = tuple(int(part) for part in match.group(1).split("."))
    release += (0,) * (4 - len(release))
    # A pre-release (rc, a, b, dev) sorts before its release; a local or post part after.
    rest = match.group(2)
    return release, (0 if rest and re.match(r"^[.-]?(a|b|rc|dev)", rest) else 1), rest


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def finding_name(finding: Mapping) -> str:
    """A finding's name in the table: its check, and for a defect (a crash, a broken output
    protocol) the first line of what went wrong, without the call number, so one crash found
    in several versions is one finding and two different crashes are two.

    Parameters
    ----------
    finding : mapping
        One entry of an audit report's ``findings``.
    """
    check = str(finding.get("check"))
    if finding.get("tier") != "defect":
        return check
    text = str(finding.get("defect") or finding.get("message") or "").splitlines()
    what = re.sub(r"^.*? call \d+: ", "", text[0] if text else "")
    # What the audit did after the crash is not the crash (vLLM: a second engine that could
    # not start; classes rerun in fresh processes).
    what = re.split(r"; (?:alone|the engine could not be loaded again|in fresh processes)", what)[0].strip()
    # An index read from uninitialised memory differs from run to run: one crash, one name.
    what = re.sub(r"\bindex -?\d+ is out of bounds", "index <n> is out of bounds", what)
    return f"{check}: {what[:100]}" if what else check


def audit_row(version: str, method: str, report: Mapping, *, path: str | None = None,
              exit_status: int | None = None) -> dict:
    """One version × method row from an audit's JSON report (schema ``specexact.audit/1``).

    Parameters
    ----------
    version : str
        The engine's release the audit ran on.
    method : str
        The drafting method (``--method``).
    report : mapping
        The parsed JSON report (:func:`specexact.reports.read_json`).
    path : str, optional
        Where the report is kept (relative to the repository root), for the table's link.
    exit_status : int, optional
        The audit command's exit status (0 pass, 1 fail).

    Returns
    -------
    dict
        ``version``, ``method``, ``status`` (``"ran"``), ``verdict``, ``tiers`` (findings per
        tier), ``sequences``, ``wall_time_s``, ``budget_s``, ``detectable_tv`` (the largest
        of the sequence-law checks' detectable TVs: the smallest discrepancy of every
        class's law the audit was sure to catch, or None where none had power: too few
        sequences for a statistical test, only the exact support checks ran),
        ``sequence_law_checks`` (how many ran), ``cases`` (the cases that ran) and
        ``cases_left_out`` (``settings.skipped_cases``: left out for the budget or not applicable),
        ``findings`` (``check``: :func:`finding_name`, ``tier``, ``source`` of each), ``engine_version`` (what the
        report's engine said), ``report`` and ``exit_status``.

    Raises
    ------
    ValueError
        ``report`` is not an audit report (no ``verdict`` or ``tiers``).
    """
    if not isinstance(report, Mapping) or "verdict" not in report or "tiers" not in report:
        raise ValueError(f"report must be a specexact.audit/1 report with verdict and tiers, got "
                         f"{sorted(report) if isinstance(report, Mapping) else type(report).__name__}")
    seq_checks = [c for c in report.get("checks", []) if str(c.get("name", "")).startswith("sequence_law[")]
    seq_tvs = [c["detectable_tv"] for c in seq_checks if isinstance(c.get("detectable_tv"), (int, float))]
    metadata = (report.get("sampler") or {}).get("metadata") or {}
    return {
        "version": str(version),
        "method": str(method),
        "status": "ran",
        "verdict": report["verdict"],
        "tiers": {tier: int(report["tiers"].get(tier, 0)) for tier in _TIERS},
        "sequences": report.get("num_sequences"),
        "wall_time_s": report.get("wall_time_s"),
        "budget_s": (report.get("settings") or {}).get("budget_s"),
        "detectable_tv": max(seq_tvs) if seq_tvs else None,
        "sequence_law_checks": len(seq_checks),
        "cases": [str(c.get("name")) for c in report.get("cases", [])],
        "cases_left_out": [str(c.get("case")) for c in (report.get("settings") or {}).get("skipped_cases") or []],
        "findings": [{"check": finding_name(f), "tier": f.get("tier"), "source": f.get("source")}
                     for f in report.get("findings", [])],
        "engine_version": metadata.get("version") if isinstance(metadata, Mapping) else None,
        "report": path,
        "exit_status": exit_status,
    }


def failure_row(version: str, method: str | None, status: str, error: str) -> dict:
    """A row saying that a version's environment or an audit could not run.

    Parameters
    ----------
    version : str
    method : str or None
        None where the environment failed (the row stands for every method).
    status : {"env-failed", "audit-failed"}
    error : str
        What went wrong; the table keeps its last non-empty line.

    Raises
    ------
    ValueError
        ``status`` is not one of :data:`FAILURE_STATUSES`.
    """
    if status not in FAILURE_STATUSES:
        raise ValueError(f"status must be one of {FAILURE_STATUSES}, got {status!r}")
    return {"version": str(version), "method": method, "status": status, "error": _one_line(error) or "(no message)"}


def replay_row(version: str, finding: str, script: str, exit_status: int | None, output: str,
               *, method: str | None = None, matches: str | Sequence[str] | None = None) -> dict:
    """One replay's outcome on one version: reproduced (exit status 1 and the last line printed
    ``finding reproduced``), not reproduced (exit 0, ``not reproduced``), else an error (a
    Python exception exits 1 too, so the status alone does not say reproduced).

    Parameters
    ----------
    version : str
    finding : str
        The finding's id (e.g. ``"transformers-assistant-double-warpers"``).
    script : str
        The replay script's path (relative to the repository root).
    exit_status : int or None
        None where it could not be started or timed out.
    output : str
        What it printed (stdout and stderr); the row keeps the non-empty lines, at most the
        last five.
    method : str, optional
        The drafting method the finding concerns.
    matches : str or sequence of str, optional
        A piece of the name of the audit finding this replay confirms (e.g.
        ``"MinLengthLogitsProcessor"``, ``"accepted_length["``): :func:`finding_ranges` lists
        the replay beside that method's audit findings whose names contain it (a sequence: any of
        them, e.g. the several messages of one crash).
    """
    lines = [line.rstrip() for line in str(output).splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    # An uncaught exception also exits 1: reproduced needs the script's own last line too.
    if exit_status == 1 and last == "finding reproduced":
        status = "reproduced"
    elif exit_status == 0 and last == "not reproduced":
        status = "not reproduced"
    else:
        status = "error"
    if matches is not None and not isinstance(matches, str):
        matches = list(matches)
    return {"version": str(version), "finding": finding, "script": script, "method": method, "matches": matches,
            "status": status, "exit_status": exit_status, "printed": lines[-5:]}


def _confirms(matches, check: str) -> bool:
    """Whether a replay's ``matches`` (a piece of a name, or several) is in the audit finding's name."""
    pieces = [matches] if isinstance(matches, str) else list(matches or ())
    return any(piece and piece in check for piece in pieces)


def _sorted_versions(versions: Iterable[str]) -> list[str]:
    return sorted(set(versions), key=version_key)


def finding_ranges(rows: Sequence[Mapping], replays: Sequence[Mapping] = ()) -> list[dict]:
    """Each finding's affected versions in the sweep.

    Parameters
    ----------
    rows : sequence of dict
        :func:`audit_row` and :func:`failure_row` rows.
    replays : sequence of dict
        :func:`replay_row` rows.

    Returns
    -------
    list of dict
        Audit findings first (by method, then check), then replay findings (by id). Each:
        ``kind`` (``"audit"`` / ``"replay"``), ``finding`` (the check name, or the replay's
        id), ``method``, ``tier`` (audit findings: the tiers seen), ``versions`` (the swept
        versions where it was found / reproduced), ``affects`` (``[first, last]`` of those),
        ``fixed_in`` (replay findings only: the first swept version after the last affected
        one where the replay ran and did not reproduce; None otherwise), ``not_seen_in``
        (swept versions where the method ran, or the replay ran, without it), ``errors``
        (replay findings: versions where the replay itself failed) and, for an audit
        finding, ``replays_at_ends``: the replays that confirm it (same method, ``matches`` in
        its name) on its first and last affected versions (``{version: {finding id: status}}``).
    """
    out = []
    ran = {}
    found: dict[tuple, dict] = {}
    for row in rows:
        if row.get("status") != "ran":
            continue
        ran.setdefault(row["method"], set()).add(row["version"])
        for f in row.get("findings", []):
            entry = found.setdefault((row["method"], f["check"]), {"versions": set(), "tiers": set()})
            entry["versions"].add(row["version"])
            entry["tiers"].add(f.get("tier"))
    by_replay: dict[str, list] = {}
    for rep in replays:
        by_replay.setdefault(rep["finding"], []).append(rep)
    for (method, check), entry in sorted(found.items()):
        versions = _sorted_versions(entry["versions"])
        ends = {}
        for v in dict.fromkeys((versions[0], versions[-1])):
            ends[v] = {rep["finding"]: rep["status"] for rep in replays
                       if rep["version"] == v and rep.get("method") == method and _confirms(rep.get("matches"), check)}
        out.append({"kind": "audit", "finding": check, "method": method,
                    "tier": sorted(t for t in entry["tiers"] if t), "versions": versions,
                    "affects": [versions[0], versions[-1]], "fixed_in": None,
                    "not_seen_in": _sorted_versions(ran.get(method, set()) - entry["versions"]),
                    "replays_at_ends": ends})
    for finding, reps in sorted(by_replay.items()):
        hit = _sorted_versions(r["version"] for r in reps if r["status"] == "reproduced")
        clean = _sorted_versions(r["version"] for r in reps if r["status"] == "not reproduced")
        errors = _sorted_versions(r["version"] for r in reps if r["status"] == "error")
        fixed_in = None
        if hit:
            later = [v for v in clean if version_key(v) > version_key(hit[-1])]
            fixed_in = later[0] if later else None
        out.append({"kind": "replay", "finding": finding, "method": reps[0].get("method"),
                    "script": reps[0]["script"], "tier": [], "versions": hit,
                    "affects": [hit[0], hit[-1]] if hit else None, "fixed_in": fixed_in,
                    "not_seen_in": clean, "errors": errors})
    return out


def version_table(rows: Sequence[Mapping], replays: Sequence[Mapping] = (), *, engine: str,
                  settings: Mapping | None = None, notes: Sequence[str] = ()) -> dict:
    """The sweep's JSON table.

    Parameters
    ----------
    rows, replays : sequences of dict
        See :func:`finding_ranges`.
    engine : str
        The engine swept (``"transformers"``).
    settings : mapping, optional
        The sweep's settings (budget, seed, requests per class, methods, threads).
    notes : sequence of str
        Free text kept with the table (why these versions, what was left out).

    Returns
    -------
    dict
        ``schema`` (:data:`TABLE_SCHEMA`), ``engine``, ``settings``, ``versions`` (sorted),
        ``rows`` and ``replays`` (sorted by version, then method / finding), ``findings``
        (:func:`finding_ranges`) and ``notes``.
    """
    rows = sorted(rows, key=lambda r: (version_key(r["version"]), r.get("method") or ""))
    replays = sorted(replays, key=lambda r: (version_key(r["version"]), r["finding"]))
    versions = _sorted_versions([r["version"] for r in rows] + [r["version"] for r in replays])
    return {"schema": TABLE_SCHEMA, "engine": engine, "settings": dict(settings or {}), "versions": versions,
            "rows": list(rows), "replays": list(replays), "findings": finding_ranges(rows, replays),
            "notes": list(notes)}


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text) -> str:
    """A code span whose text holds no backtick (an exception message may quote with them)."""
    return "`" + _cell(text).replace("`", "'") + "`"


def _tv_cell(row: Mapping) -> str:
    if row["detectable_tv"] is not None:
        return format(row["detectable_tv"], ".3g")
    return "none: exact checks only" if row.get("sequence_law_checks") else "–"


def _link(path: str, links_from: str | None) -> str:
    return posixpath.relpath(path, links_from) if links_from else path


def _verdict_cell(row: Mapping) -> str:
    if row["status"] != "ran":
        return f"**{row['status']}**: {_cell(row['error'])}"
    tiers = row["tiers"]
    counts = ", ".join(f"{t.replace('_', '-')} {tiers[t]}" for t in _TIERS)
    return f"**{row['verdict']}** ({counts})"


def _short_case(name: str, method: str) -> str:
    """``e2e-llama-v64-draft_model-long-g4`` -> ``long-g4`` (the method's part of a case name)."""
    return name.split(f"-{method}-", 1)[-1]


def _cases_cell(row: Mapping) -> str:
    ran = ", ".join(_short_case(c, row["method"]) for c in row.get("cases", [])) or "none"
    out = ", ".join(_short_case(c, row["method"]) for c in row.get("cases_left_out", []))
    return ran + (f" (left out: {out})" if out else "")


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def version_table_markdown(table: Mapping, *, links_from: str | None = None) -> str:
    """The sweep's table as Markdown: settings, version × method rows, replays, finding ranges, notes.

    Parameters
    ----------
    table : mapping
        :func:`version_table`'s result (or the JSON read back).
    links_from : str, optional
        The folder the Markdown file is kept in, relative to the root the rows' report paths
        start from (e.g. ``"reports/versions"``): the links to the reports are made relative
        to it. None: the paths as recorded.
    """
    s = table.get("settings") or {}
    lines = [f"# {table['engine']}: end-to-end audits across released versions", ""]
    if s:
        lines += ["Settings: " + ", ".join(f"`{k}` {v}" for k, v in s.items()), ""]
    lines += ["## Verdicts", "",
              "| version | method | verdict by tier | cases run | sequences | wall time | detectable TV (sequence law, per class) | findings (check: tier) | report |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in table["rows"]:
        if row["status"] == "ran":
            findings = "; ".join(f"{_code(f['check'])}: {f['tier']}" for f in row["findings"]) or "none"
            report = f"[json]({_link(row['report'], links_from)})" if row.get("report") else "–"
            lines.append(f"| {row['version']} | {row['method']} | {_verdict_cell(row)} | {_cases_cell(row)} | "
                         f"{_fmt(row['sequences'], ',')} | "
                         f"{_fmt(row['wall_time_s'], '.0f')} s | {_tv_cell(row)} | {findings} | {report} |")
        else:
            lines.append(f"| {row['version']} | {row['method'] or '(all)'} | {_verdict_cell(row)} | – | – | – | – | – | – |")
    if table["replays"]:
        lines += ["", "## Replays", "", "| version | finding | method | replay | printed |", "|---|---|---|---|---|"]
        for rep in table["replays"]:
            printed = "<br>".join(_cell(p).replace("`", "'") for p in rep["printed"]) or "–"
            lines.append(f"| {rep['version']} | `{rep['finding']}` | {rep.get('method') or '–'} | "
                         f"**{rep['status']}** (exit {rep['exit_status']}) | {printed} |")
    lines += ["", "## Findings and their versions", ""]
    if not table["findings"]:
        lines.append("No finding in any swept version.")
    else:
        lines += ["| finding | kind | method | affects (first – last) | versions found | fixed_in | not seen in | confirmation |",
                  "|---|---|---|---|---|---|---|---|"]
        for f in table["findings"]:
            affects = f"{f['affects'][0]} – {f['affects'][1]}" if f["affects"] else "none"
            if f["kind"] == "audit":
                confirm = "; ".join(f"{v}: " + (", ".join(f"`{k}` {st}" for k, st in reps.items()) or "no replay")
                                    for v, reps in f["replays_at_ends"].items())
                name = f"{_code(f['finding'])} ({', '.join(f['tier'])})"
            else:
                confirm = f"replay `{f['script']}`" + (f"; errors in {', '.join(f['errors'])}" if f["errors"] else "")
                name = f"`{f['finding']}`"
            lines.append(f"| {name} | {f['kind']} | {f.get('method') or '–'} | {affects} | {', '.join(f['versions']) or '–'} | "
                         f"{f['fixed_in'] or '–'} | {', '.join(f['not_seen_in']) or '–'} | {confirm} |")
    if table.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in table["notes"]]
    return "\n".join(lines) + "\n"
