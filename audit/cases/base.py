"""What the case kinds on a toy model pair share: row classes, base dataclasses, ``keep``.

Decoder-level (:class:`~specexact.audit.cases.decoder_case.AuditCase`), tree-level
(:class:`~specexact.audit.cases.tree_case.TreeCase`) and verify-level
(:class:`~specexact.audit.cases.verify_case.VerifyCase`) cases all run a seeded toy model and
its draft:

- :class:`RowClass`: one kind of batch row (a prompt, the target's and the draft's parameters);
- :class:`ModelCase`: the base dataclass of those cases (``name``, ``model``, ``mismatch``; the
  model pair, ``eos_token_id``, ``to_dict``);
- :class:`InterleavedCase`: the base of the cases whose batch interleaves several row classes
  (decoder- and tree-level: ``class_id``, ``restricted``, ``batch``);
- :func:`checked_keep`: the checked argument of every case's ``restricted``.

The subclasses declare their own fields after these (the order of a case's config in reports).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Sequence

import torch

from specexact.decoders import SamplingParams, ToyLM, ToyLMConfig

__all__ = ["RowClass", "ModelCase", "InterleavedCase", "checked_keep"]


@dataclass(frozen=True)
class RowClass:
    """One kind of batch row: a prompt and the target's and the draft's parameters."""

    prompt: tuple[int, ...]
    target_params: SamplingParams
    draft_params: SamplingParams

    def describe(self) -> str:
        return (f"prompt {list(self.prompt)}; target {self.target_params.describe()}; "
                f"draft {self.draft_params.describe()}")


def checked_keep(keep: Sequence[int], num_classes: int) -> tuple[int, ...]:
    """``keep`` as a tuple of ints, checked to be ascending distinct class indices in
    ``[0, num_classes)`` (the argument of every case's ``restricted``).

    Raises
    ------
    ValueError
        ``keep`` is empty, unsorted, repeats or is out of range.
    """
    keep = tuple(int(c) for c in keep)
    if not keep or list(keep) != sorted(set(keep)) or keep[0] < 0 or keep[-1] >= num_classes:
        raise ValueError(f"keep must be ascending distinct class indices in [0, {num_classes}), got {keep!r}")
    return keep


@dataclass(frozen=True)
class ModelCase:
    """A case on a toy model pair: its first fields and what they give.

    A subclass has ``row_classes`` (a field or a property) and its own ``description``,
    ``weight`` and ``tags`` fields.

    Parameters
    ----------
    name : str
        Unique, short, file-name safe.
    model : ToyLMConfig
        The target model; the draft is ``ToyLM(model).draft(mismatch)``.
    mismatch : float
        Draft/target mismatch (0: identical models).
    """

    name: str
    model: ToyLMConfig
    mismatch: float

    @property
    def eos_token_id(self) -> int | None:
        return self.model.eos_token_id

    def models(self, device: torch.device | str = "cpu") -> tuple[ToyLM, ToyLM]:
        """The (target, draft) pair on ``device``."""
        target = ToyLM(self.model, device=device)
        return target, target.draft(self.mismatch)

    def to_dict(self) -> dict:
        """The case's fields (its config in reports), the row classes described."""
        d = asdict(self)
        d["row_classes"] = [rc.describe() for rc in self.row_classes]
        return d


@dataclass(frozen=True)
class InterleavedCase(ModelCase):
    """A case whose batch interleaves row classes: row ``r`` is of class ``r % C``.

    A subclass declares ``batch_size`` (a multiple of ``4 * C``: quads of same-class rows)
    and ``class_ids`` (the classes' numbers in check names, ``sequence_law[class 2]``;
    None: ``0..C-1``).

    Parameters
    ----------
    name, model, mismatch
        As in :class:`ModelCase`.
    row_classes : tuple of RowClass
        Interleaved batch rows (``C`` classes).
    """

    row_classes: tuple[RowClass, ...]

    def class_id(self, c: int) -> int:
        """The number of class ``c`` (its index in ``row_classes``) in check names."""
        return c if self.class_ids is None else self.class_ids[c]

    def restricted(self, keep: Sequence[int]) -> "InterleavedCase":
        """The case with only the classes of indices ``keep`` (ascending), the same name
        and seed, and the batch size rounded down to a multiple of ``4 * len(keep)``. The
        classes keep their numbers (:meth:`class_id`), so a check means the same class in
        every report.

        Raises
        ------
        ValueError
            If ``keep`` is empty, unsorted, repeats or is out of range.
        """
        keep = checked_keep(keep, len(self.row_classes))
        C = len(self.row_classes)
        if len(keep) == C:
            return self
        step = 4 * len(keep)
        return replace(self, row_classes=tuple(self.row_classes[c] for c in keep),
                       class_ids=tuple(self.class_id(c) for c in keep),
                       batch_size=max(step, self.batch_size // step * step))

    def batch(self, device: torch.device | str = "cpu"):
        """Prompt ``[B, T0]`` and per-row target / draft parameters for one decoder call."""
        C = len(self.row_classes)
        classes = [self.row_classes[r % C] for r in range(self.batch_size)]
        prompts = torch.tensor([rc.prompt for rc in classes], dtype=torch.int64, device=device)
        return prompts, [rc.target_params for rc in classes], [rc.draft_params for rc in classes]
