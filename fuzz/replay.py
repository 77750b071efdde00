"""Replay scripts of fuzz findings: short stand-alone Python that repeats the failing call.

The script resolves the sampler by its ``--sampler`` name, rebuilds the call's inputs
(printed literally when small, else from the example's recipe), seeds torch's global
RNG as the fuzz phase did, makes the call and checks the broken rule, printing
``REPRODUCED`` or ``not reproduced``.
"""

from __future__ import annotations

import math

import torch

from specexact.decoders.adapters.protocol import LogitsVerifyInputs
from specexact.strategies import params_repr

from specexact.fuzz.examples import REPLAY_IMPORTS, ProbInputs
from specexact.fuzz.invariants import GLOBAL_SEED, OTHER_GLOBAL_SEED
from specexact.fuzz.subject import Call

__all__ = ["replay_script", "tensor_literal", "LITERAL_MAX_NUMBERS"]

LITERAL_MAX_NUMBERS = 600
"""Inputs with at most this many numbers are printed literally in a replay."""


def _number(x) -> str:
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return repr(x)
    return repr(x)


def _nested(values) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_nested(v) for v in values) + "]"
    return _number(values)


def tensor_literal(t: torch.Tensor) -> str:
    """``torch.tensor(...)`` that rebuilds ``t`` exactly (values, dtype, and the shape of an
    empty tensor, e.g. ``draft_probs [1, 0, V]`` with no drafts); ``nan`` and ``inf`` are the
    names the script defines."""
    dtype = str(t.dtype).removeprefix("torch.")
    values = t.detach().cpu()
    if t.is_floating_point():
        values = values.to(torch.float64)
    literal = f"torch.tensor({_nested(values.tolist())}, dtype=torch.{dtype})"
    if t.numel() == 0 and t.dim() != 1:  # a nested list cannot say the shape of an empty tensor
        literal += f".reshape({tuple(t.shape)!r})"
    return literal


def _numbers(inputs) -> int:
    if hasattr(inputs, "FIELDS"):  # the tree inputs
        return sum(getattr(inputs, k).numel() for k in inputs.FIELDS)
    if isinstance(inputs, ProbInputs):
        return inputs.draft_token_ids.numel() + inputs.draft_probs.numel() + inputs.target_probs.numel()
    return sum(getattr(inputs, k).numel() for k in ("draft_token_ids", "draft_probs", "target_logits",
                                                     "prompt_token_ids", "output_token_ids"))


def _inputs_code(call: Call) -> tuple[str, bool]:
    x = call.inputs
    if _numbers(x) > LITERAL_MAX_NUMBERS and call.source:
        return f"inputs = {call.source}\n", False
    if hasattr(x, "FIELDS"):
        return ("inputs = TreeProbInputs(\n" + "".join(f"    {k}={tensor_literal(getattr(x, k))},\n" for k in x.FIELDS)
                + ")\n"), True
    if isinstance(x, ProbInputs):
        return (f"inputs = ProbInputs(\n    {tensor_literal(x.draft_token_ids)},\n    {tensor_literal(x.draft_probs)},\n"
                f"    {tensor_literal(x.target_probs)})\n"), True
    params = ", ".join(params_repr(p) for p in x.target_params)
    return ("inputs = LogitsVerifyInputs(\n"
            f"    draft_token_ids={tensor_literal(x.draft_token_ids)},\n"
            f"    draft_probs={tensor_literal(x.draft_probs)},\n"
            f"    target_logits={tensor_literal(x.target_logits)},\n"
            f"    target_params=({params},),\n"
            f"    prompt_token_ids={tensor_literal(x.prompt_token_ids)},\n"
            f"    output_token_ids={tensor_literal(x.output_token_ids)})\n"), True


def _call_expr(call: Call) -> str:
    if call.entry == "verify":
        return "sampler(inputs.draft_token_ids, inputs.draft_probs, inputs.target_probs, gen)"
    if call.entry == "verify_with_uniforms":
        return ("sampler.verify_with_uniforms(inputs.draft_token_ids, inputs.draft_probs, inputs.target_probs, "
                "uniforms, gen)")
    if call.entry == "verify_logits":
        return "sampler.verify_logits(inputs, gen)"
    if call.entry == "verify_tree":
        return "sampler(inputs.draft_token_ids, inputs.parent_ids, inputs.draft_probs, inputs.target_probs, gen)"
    return "sampler.verify_logits_with_uniforms(inputs, uniforms, gen)"


_CHECKS = {
    "no_crash": ("try:\n    out = call()\nexcept Exception as exc:\n"
                 "    print('REPRODUCED:', type(exc).__name__, exc)\nelse:\n    print(out.tolist(), 'not reproduced')\n"),
    "no_hang": ("import time\nt0 = time.perf_counter()\nout = call()\ndt = time.perf_counter() - t0\n"
                "print('%.1f s:' % dt, 'REPRODUCED' if dt > {limit} else 'not reproduced')\n"),
    "output_protocol": ("from specexact.decoders import VerifierProtocolError, check_verifier_output\n"
                        "out = call()\ntry:\n    check_verifier_output(out, inputs.draft_token_ids, {V})\n"
                        "except VerifierProtocolError as exc:\n    print('REPRODUCED:', exc)\n"
                        "else:\n    print(out.tolist(), 'not reproduced')\n"),
    "zero_probability_token": (
        "from specexact.fuzz.reference import forbidden_tokens\nfrom specexact.fuzz.subject import Subject\n"
        "forbidden = forbidden_tokens(Subject.of(sampler, {name!r}), inputs)  # target probability 0 there\n"
        "out = call()\n"
        "bad = [(b, j, t) for b, row in enumerate(out.tolist()) for j, t in enumerate(row) "
        "if t >= 0 and forbidden[b, j, t]]\n"
        "print(out.tolist(), 'REPRODUCED: (row, position, token) ' + str(bad) if bad else 'not reproduced')\n"),
    "inputs_unmodified": (
        "from specexact.fuzz.invariants import same_inputs, snapshot\n"
        "copy = snapshot(inputs)\ncall()\nchanged = same_inputs(inputs, copy)\n"
        "print('REPRODUCED: modified ' + changed if changed else 'not reproduced')\n"),
    "uses_generator": (
        "gen = torch.Generator().manual_seed({gseed})\nbefore = gen.get_state()\ncall(generator=gen)\n"
        "print('REPRODUCED: generator untouched' if torch.equal(before, gen.get_state()) else 'not reproduced')\n"),
    "same_generator_same_output": (
        "a, b = call(global_seed={g1}), call(global_seed={g2})  # same generator seed, other global RNG\n"
        "print(a.tolist(), b.tolist(), 'not reproduced' if torch.equal(a, b) else 'REPRODUCED')\n"),
    "refuses_invalid_input": (
        "try:\n    out = call(generator={bad_gen})\nexcept (ValueError, TypeError) as exc:\n"
        "    print('not reproduced:', type(exc).__name__, exc)\nexcept Exception as exc:\n"
        "    print('REPRODUCED:', type(exc).__name__, exc)\nelse:\n    print('REPRODUCED: returned', out.tolist())\n"),
    "acceptance_rule": (
        "out = call()\naccepted = bool((out >= 0).sum(1)[0] == 2)\n"
        "print(out.tolist(), 'accepted' if accepted else 'rejected', "
        "'REPRODUCED' if accepted != {must_accept} else 'not reproduced')\n"),
}


_TREE_CHECKS = {
    **_CHECKS,
    "no_crash": _CHECKS["no_crash"].replace("print(out.tolist(), 'not reproduced')",
                                            "print(out[0].tolist(), 'not reproduced')"),
    "output_protocol": ("from specexact.decoders import VerifierProtocolError\n"
                        "from specexact.decoders.tree import check_tree_output\n"
                        "out = call()\ntry:\n    check_tree_output(out, inputs.draft_token_ids, inputs.parent_ids, {V})\n"
                        "except VerifierProtocolError as exc:\n    print('REPRODUCED:', exc)\n"
                        "else:\n    print(out[0].tolist(), 'not reproduced')\n"),
    "zero_probability_token": (
        "tokens, nodes = (t.long().tolist() for t in call())\n"
        "p = inputs.target_probs\n"
        "bad = [(b, j, t) for b, row in enumerate(tokens) for j, t in enumerate(row) if t >= 0 and "
        "p[b, 0 if j == 0 else nodes[b][j - 1] + 1, t] == 0]  # the row each token is drawn from\n"
        "print(tokens, 'REPRODUCED: (row, position, token) ' + str(bad) if bad else 'not reproduced')\n"),
    "inputs_unmodified": (
        "copy = inputs.clone()\ncall()\n"
        "changed = [k for k in inputs.FIELDS if not torch.equal(torch.nan_to_num(getattr(inputs, k)), "
        "torch.nan_to_num(getattr(copy, k)))]\n"
        "print('REPRODUCED: modified ' + ', '.join(changed) if changed else 'not reproduced')\n"),
    "same_generator_same_output": (
        "a, b = call(global_seed={g1}), call(global_seed={g2})  # same generator seed, other global RNG\n"
        "same = torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])\n"
        "print(a[0].tolist(), b[0].tolist(), 'not reproduced' if same else 'REPRODUCED')\n"),
    "refuses_invalid_input": _CHECKS["refuses_invalid_input"].replace("out.tolist()", "type(out).__name__"),
}
"""The checks of a tree call (``verify_tree``: the output is ``(tokens, accepted_nodes)``)."""


def _plain(text: str) -> str:
    """``text`` for one comment line, as written: no line break (a report shows the script
    literally: the Markdown in a fence longer than any backtick run in it, the HTML
    escaped; HTML entities here would show as ``&gt;`` in both)."""
    return text.replace("\r", " ").replace("\n", " ")


def replay_script(*, sampler: str, family: str, rule: str, message: str, example: str, call: Call,
                  call_timeout_s: float = 30.0, corruption: str | None = None, must_accept: bool | None = None) -> str:
    """The replay script of a finding (module docstring).

    Parameters
    ----------
    sampler : str
        ``--sampler`` name.
    family, rule, message : str
        Where it was found, the rule broken, what happened.
    example : str
        The shrunk example's ``repr``.
    call : Call
        The failing call.
    call_timeout_s : float
        The per-call limit (``no_hang``).
    corruption : str, optional
        The corruption of an invalid-input finding (``not_a_generator`` passes a non-generator).
    must_accept : bool, optional
        ``acceptance_rule`` (and ``declared_processing`` found by a probe): the decision the
        rule requires.
    """
    inputs, literal = _inputs_code(call)
    # Comment lines carry the sampler's own text (exception messages) as written: the reports
    # escape the script as a whole (reports.fuzz_section).
    head = "\n".join(f"# {_plain(line)}" for line in (f"specexact fuzz finding: {sampler} / {family} / {rule}",
                                                       *message.splitlines()[:3], f"shrunk example: {example}"))
    imports = ["import torch", "from specexact.audit import resolve_sampler",
               "from specexact.decoders import SamplingParams",
               "from specexact.decoders.adapters import LogitsVerifyInputs",
               "from specexact.fuzz.examples import ProbInputs"]
    if call.entry == "verify_tree":
        imports.append("from specexact.fuzz.trees import TreeExample, TreeProbInputs, corrupt_tree")
        if not literal:
            imports.append("from specexact.strategies import TreeVerifyCase")
    if not literal:
        imports += [REPLAY_IMPORTS.rstrip("\n").replace("from specexact.decoders import SamplingParams\n", ""),
                    "from specexact.fuzz.invalid import corrupt",
                    "from specexact.fuzz.probes import all_probe_rows, stack_rows"]
    uniforms = "" if call.uniforms is None else f"uniforms = {tensor_literal(call.uniforms.to(torch.float64))}\n"
    checks = _TREE_CHECKS if call.entry == "verify_tree" else _CHECKS
    if rule == "declared_processing":  # a probe's decision, or an emitted token, the declared order forbids
        rule = "acceptance_rule" if must_accept is not None else "zero_probability_token"
    check = checks[rule].format(limit=call_timeout_s, V=call.vocab_size, name=sampler, gseed=call.generator_seed,
                                 g1=GLOBAL_SEED, g2=OTHER_GLOBAL_SEED, must_accept=must_accept,
                                 bad_gen="object()" if corruption == "not_a_generator" else "None")
    return (
        f"{head}\n" + "\n".join(imports) + "\n"
        "nan, inf = float('nan'), float('inf')\n"
        f"sampler, _ = resolve_sampler({sampler!r})\n"
        f"{inputs}{uniforms}\n"
        f"def call(global_seed={GLOBAL_SEED}, generator=None):\n"
        "    torch.manual_seed(global_seed)  # the fuzz phase seeds torch's global RNG around every call\n"
        f"    gen = torch.Generator().manual_seed({call.generator_seed}) if generator is None else generator\n"
        f"    return {_call_expr(call)}\n\n\n"
        f"{check}"
    )


def is_logits(call: Call) -> bool:
    return isinstance(call.inputs, LogitsVerifyInputs)
