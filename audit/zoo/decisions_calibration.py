"""Calibration of the per-event PIT checks on a correct verifier, with many replicates per
decoder call.

A per-event PIT check pools the events of a whole case into one test, so a run of the audit
gives one trial of it per case and seed. Its null law, though, needs only that the events'
slots are i.i.d. uniform (:mod:`~specexact.exactness.pit`), which holds for *any* fixed set
of rows: rows of a call are independent for a correct sampler. :func:`decision_null_pvalues`
therefore splits each batch into groups of ``group_rows`` rows, gives every group its own
slots and fillers (the observer's per-class slots, with the group as the class), and runs
the check on each group: ``B / group_rows`` independent trials per call, each exactly the
check of the audit (same observer, same slot plan, same
:func:`~specexact.exactness.pit.pit_uniformity_check`) at a smaller size. The records feed
:func:`~specexact.audit.zoo.selfcheck.calibration_table` like the audit's own calibration.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from specexact.audit.cases.decoder_case import AuditCase
from specexact.audit.cases.result import case_seed
from specexact.audit.checks.decisions import DecisionObserver
from specexact.audit.zoo.selfcheck import NullRecord
from specexact.decoders import speculative_generate
from specexact.decoders.adapters.protocol import scheme_of
from specexact.exactness.pit import pit_uniformity_check

__all__ = ["PIT_CHECKS", "decision_null_pvalues"]

PIT_CHECKS = {"acceptance": "decisions", "recovered_token_law": "recovered", "bonus_token_law": "bonus"}
"""The per-event PIT checks and the observer family each reads."""


def decision_null_pvalues(case: AuditCase, verifier: Callable, *, seeds: Iterable[int], num_batches: int,
                          group_rows: int, min_expected: float = 20.0) -> list[NullRecord]:
    """One record per (seed, group of ``group_rows`` rows, PIT check) on a correct ``verifier``.

    Parameters
    ----------
    case : AuditCase
        Its ``batch_size`` must be a multiple of ``group_rows``.
    verifier : callable
        Believed correct.
    seeds : iterable of int
        Audit seeds (the case's generator and the observer's are seeded as in
        :func:`~specexact.audit.cases.dispatch.run_case`).
    num_batches : int
        Decoder calls per seed.
    group_rows : int
        Rows per replicate.
    min_expected : float
        Smallest expected count per PIT cell.

    Returns
    -------
    list of NullRecord
        ``check`` is ``"<check>[group g]"``; ``has_power`` is False for a group whose slots
        fit fewer than two cells.

    Raises
    ------
    ValueError
        If ``group_rows`` does not divide the batch size, or ``num_batches < 1``.
    RuntimeError
        If the verifier breaks an exact rule (a correct one must not).
    """
    B = case.batch_size
    if group_rows < 1 or B % group_rows:
        raise ValueError(f"group_rows={group_rows} must divide batch_size={B}")
    if num_batches < 1:
        raise ValueError(f"num_batches must be >= 1, got {num_batches}")
    groups = B // group_rows
    target, draft = case.models()
    prompts, t_params, d_params = case.batch()
    records: list[NullRecord] = []
    for seed in seeds:
        s = case_seed(seed, case)
        gen = torch.Generator().manual_seed(s)
        obs = DecisionObserver(batch_size=B, num_draft_tokens=case.num_draft_tokens, max_new_tokens=case.length,
                               row_class=torch.arange(B) // group_rows, num_classes=groups, prompts=prompts,
                               eos_token_id=case.eos_token_id, scheme=scheme_of(verifier), seed=s ^ 0xDEC15)
        for _ in range(num_batches):
            obs.start_call()
            out = speculative_generate(target, draft, prompts, t_params, d_params,
                                       num_draft_tokens=case.num_draft_tokens, max_new_tokens=case.length,
                                       generator=gen, eos_token_id=case.eos_token_id, verifier=verifier, observer=obs)
            obs.finish_call(out)
        summ = obs.summary()
        bad = summ["must"]["accept_violations"] + summ["must"]["reject_violations"] + summ["recovered"]["violations"] \
            + summ["bonus"]["violations"] + summ["cut"]["violations"]
        if bad:
            raise RuntimeError(f"case {case.name} seed {seed}: {bad} exact-rule violation(s) by a 'correct' verifier")
        for name, fam in PIT_CHECKS.items():
            f = summ[fam]
            for g in range(groups):
                res = pit_uniformity_check(f["slot_fine_by_class"][g], num_events=f["events_in_slots_by_class"][g],
                                           false_fail_rate=0.5, min_expected=min_expected, name=name)
                records.append(NullRecord(case.name, f"{name}[group {g}]", seed, res.pvalue, res.n, res.method,
                                          res.details["num_cells"] >= 2 and res.details["num_events"] > 0))
    return records
