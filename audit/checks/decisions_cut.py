"""The observer's checks of the cut at EOS / ``max_new_tokens``.

:class:`CutChecks` is a mixin of :class:`~specexact.audit.checks.decisions.DecisionObserver`:
after every round it checks that each row kept exactly the emitted tokens up to its first
EOS and its ``max_new_tokens`` and got no round after it finished
(:meth:`CutChecks._check_round`), and at the end of a call that the returned tokens are the
rounds' kept tokens, with nothing after an EOS and no row stopped early
(:meth:`CutChecks._check_output`). Violations are counted in the observer's ``cut``
entry, the first :data:`~specexact.audit.checks.decisions_tally.MAX_EVENTS` of them with
the row's history.
"""

from __future__ import annotations

import torch

from specexact.audit.checks.decisions_tally import MAX_EVENTS

__all__ = ["CutChecks"]


class CutChecks:
    """The cut checks of :class:`~specexact.audit.checks.decisions.DecisionObserver` (module
    docstring); they read and update the observer's ``cut``, ``done``, ``hist`` and
    ``length`` (``B`` rows, ``L = max_new_tokens``, ``eos``, ``row_class``, ``call``,
    ``round``)."""

    def _cut_violation(self, message: str, row: int) -> None:
        self.cut["violations"] += 1
        if len(self.cut["events"]) < MAX_EVENTS:
            self.cut["events"].append({"call": self.call, "round": self.round, "row": row,
                                       "class": int(self.row_class[row]), "message": message,
                                       "history": self.hist[row, :int(self.length[row])].tolist()})

    def _check_round(self, rows, out, num, kept, ngen) -> None:
        self.cut["rounds"] += int(rows.numel())
        steps = torch.arange(out.shape[1])
        keep = steps[None] < num[:, None]
        if self.eos is not None:
            is_eos = (out == self.eos) & keep
            after = (is_eos.long().cumsum(1) - is_eos.long()) > 0
            keep &= ~after
        keep &= steps[None] < (self.L - ngen)[:, None]
        expected = keep.sum(1)
        for a in torch.nonzero((expected != kept) | self.done[rows] | (ngen != self.length[rows])).squeeze(1).tolist():
            r = int(rows[a])
            if bool(self.done[r]):
                self._cut_violation(f"row {r} got another round after it finished (EOS kept or "
                                    f"{self.L} tokens): nothing may be emitted past a cut", r)
            elif int(ngen[a]) != int(self.length[r]):
                self._cut_violation(f"row {r}: the decoder reports {int(ngen[a])} generated tokens, the kept "
                                    f"tokens of its rounds are {int(self.length[r])}", r)
            else:
                self._cut_violation(f"row {r} kept {int(kept[a])} of {int(num[a])} emitted tokens; the cut at EOS / "
                                    f"max_new_tokens={self.L} keeps {int(expected[a])}", r)
        fin = (ngen + kept) >= self.L
        if self.eos is not None:
            fin |= ((out == self.eos) & keep).any(1)
        self.done[rows] |= fin

    def _check_output(self, output) -> None:
        tokens = output.tokens.cpu().long()
        if tokens.shape != (self.B, self.L):
            self._cut_violation(f"the decoder returned tokens of shape {tuple(tokens.shape)}, expected "
                                f"[{self.B}, {self.L}]", 0)
            return
        bad = torch.nonzero((tokens != self.hist).any(1)).squeeze(1).tolist()
        for r in bad[:MAX_EVENTS]:
            self._cut_violation(f"row {r}: the returned tokens {tokens[r].tolist()} differ from the kept tokens of "
                                f"its rounds {self.hist[r].tolist()}", r)
        self.cut["violations"] += max(0, len(bad) - MAX_EVENTS)
        if self.eos is not None:
            is_eos = tokens == self.eos
            after = (is_eos.long().cumsum(1) - is_eos.long()) > 0
            past = torch.nonzero((after & (tokens >= 0)).any(1)).squeeze(1).tolist()
            for r in past[:MAX_EVENTS]:
                self._cut_violation(f"row {r} has tokens after its EOS: {tokens[r].tolist()}", r)
        short = ~self.done & (self.length < self.L)
        for r in torch.nonzero(short).squeeze(1).tolist()[:MAX_EVENTS]:
            self._cut_violation(f"row {r} stopped after {int(self.length[r])} tokens without EOS or "
                                f"max_new_tokens={self.L}", r)
