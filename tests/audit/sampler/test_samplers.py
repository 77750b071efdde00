"""Sampler resolution: built-in, MODULE:CALLABLE, entry points (a real one, installed as a
dist-info on sys.path), metadata, refusals."""

import importlib
import re
import textwrap
from importlib.metadata import entry_points

import pytest

from specexact.audit import SamplerError, quick_cases, resolve_sampler, run_audit
from specexact.audit.cases.dispatch import checks_per_case
from specexact.audit.sampler.samplers import ENTRY_POINT_GROUP, available_samplers, sampler_metadata
from specexact.decoders import verify


@pytest.fixture
def user_distribution(tmp_path, monkeypatch):
    """A throwaway distribution ``mypkg`` that registers ``mysampler`` in the group
    ``specexact.samplers`` the way an installed package does (a ``.dist-info`` folder with
    ``entry_points.txt`` on sys.path, found by importlib.metadata)."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        """A user's sampler: modified rejection sampling written by hand, one row at a time."""
        import torch

        def verify(draft_token_ids, draft_probs, target_probs, generator=None):
            B, K = draft_token_ids.shape
            out = torch.full((B, K + 1), -1, dtype=torch.long)
            for b in range(B):
                for k in range(K):
                    d = int(draft_token_ids[b, k])
                    p, q = float(target_probs[b, k, d]), float(draft_probs[b, k, d])
                    u = float(torch.rand((), generator=generator, dtype=torch.float64))
                    if u * q < p:
                        out[b, k] = d
                        continue
                    law = (target_probs[b, k].double() - draft_probs[b, k].double()).clamp_min(0)
                    if law.sum() <= 0:
                        law = target_probs[b, k].double()
                    out[b, k] = int(torch.multinomial(law, 1, generator=generator))
                    break
                else:
                    out[b, K] = int(torch.multinomial(target_probs[b, K].double(), 1, generator=generator))
            return out
    '''))
    info = tmp_path / "mypkg-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nmysampler = mypkg:verify\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path


def test_builtin_and_module_callable():
    assert resolve_sampler("builtin") == (verify, "specexact.decoders:verify")
    assert resolve_sampler("specexact.decoders:verify")[0] is verify
    assert callable(resolve_sampler("specexact.audit.zoo:resample_from_target")[0])


def test_entry_point_is_discovered_and_loaded(user_distribution):
    assert "mysampler" in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert available_samplers()["mysampler"] == "mypkg:verify"
    fn, target = resolve_sampler("mysampler")
    import mypkg

    assert fn is mypkg.verify and target == "mypkg:verify"
    assert sampler_metadata(fn) is None  # a plain function carries no adapter metadata


CASE = [c for c in quick_cases() if c.name == "v8-plain"]
CASE_CHECKS = sum(checks_per_case(c) for c in CASE)


@pytest.mark.statistical(checks=CASE_CHECKS)
def test_entry_point_sampler_is_audited(user_distribution, alpha):
    fn, target = resolve_sampler("mysampler")
    report = run_audit(fn, sampler_name="mysampler", sampler_target=target, cases=CASE,
                       false_fail_rate=alpha * CASE_CHECKS, num_batches=2, budget_s=None, seed=0)
    assert report["verdict"] == "pass", report["findings"]
    assert report["sampler"]["name"] == "mysampler" and len(report["checks"]) == CASE_CHECKS


def test_broken_entry_point_is_a_sampler_error(user_distribution):
    (user_distribution / "mypkg-0.0.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nbroken = mypkg.nowhere:verify\n")
    importlib.invalidate_caches()
    with pytest.raises(SamplerError, match="cannot load sampler 'broken'"):
        resolve_sampler("broken")


def test_missing_adapter_dependency_gets_an_install_hint():
    with pytest.raises(SamplerError, match=r"specexact\[thirdparty\]"):
        resolve_sampler("specexact.decoders.adapters.no_such_library:verify")


def test_not_callable_and_unknown():
    with pytest.raises(SamplerError, match="not callable"):
        resolve_sampler("specexact.decoders:PLACEHOLDER_ID")
    with pytest.raises(SamplerError, match="unknown sampler"):
        resolve_sampler("no-such-sampler")
    with pytest.raises(SamplerError, match="empty"):
        resolve_sampler("")


def test_logits_level_adapter_needs_verify_logits(tmp_path, monkeypatch):
    (tmp_path / "logits_adapter.py").write_text(textwrap.dedent('''
        import torch
        from specexact.decoders.adapters import Capabilities

        class Adapter:
            name = "engine"
            capabilities = Capabilities(max_batch_size=None, dtypes=(torch.float32,), devices=("cpu",),
                                        randomness="generator", logits_level=True,
                                        order_of_operations=("penalties", "temperature", "top_k", "top_p"))
            def metadata(self):
                return {"library": "example"}
            def __call__(self, *args):
                raise AssertionError

        adapter = Adapter()
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SamplerError, match="no verify_logits"):
        resolve_sampler("logits_adapter:adapter")


def test_logits_level_entry_points_resolve():
    from specexact.decoders.adapters import is_logits_level

    obj, target = resolve_sampler("builtin-logits")
    assert target == "specexact.decoders.adapters.builtin_logits:verify_logits_level"
    assert is_logits_level(obj) and obj.capabilities.processing.is_builtin


def test_sampler_metadata_of_adapters():
    class Good:
        def metadata(self):
            return {"library": "x", "version": "1"}

        def __call__(self, *a):
            pass

    class Bad(Good):
        def metadata(self):
            raise RuntimeError("no version")

    assert sampler_metadata(Good()) == {"library": "x", "version": "1"}
    assert sampler_metadata(Bad()) == {"error": "RuntimeError: no version"}
    assert sampler_metadata(verify) is None


def test_transformers_entry_point_without_transformers_is_exit_2_material(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # import fails as if not installed
    monkeypatch.delitem(sys.modules, "specexact.decoders.adapters.transformers", raising=False)
    with pytest.raises(SamplerError, match=r"cannot load sampler 'transformers'.*specexact\[thirdparty\]"):
        resolve_sampler("transformers")


def test_restricted_case_keeps_name_seed_and_class_numbers():
    from specexact.audit import default_cases
    from specexact.audit.cases.dispatch import case_seed, checks_per_case

    case = next(c for c in default_cases() if c.name == "v6-trunc-penalties")
    r = case.restricted([0, 2])
    assert r.name == case.name and case_seed(0, r) == case_seed(0, case)
    assert r.class_ids == (0, 2) and r.row_classes == (case.row_classes[0], case.row_classes[2])
    assert r.batch_size % 8 == 0 and r.batch_size <= case.batch_size
    from specexact.audit.checks.decisions_checks import DECISION_CHECKS

    # the per-class checks scale with the classes kept; the per-event checks are per case
    assert (checks_per_case(r) - DECISION_CHECKS) * 3 == (checks_per_case(case) - DECISION_CHECKS) * 2
    assert r.restricted([1]).class_ids == (2,)
    assert case.restricted([0, 1, 2]) is case
    for bad in ([], [2, 0], [0, 0], [3]):
        with pytest.raises(ValueError, match="keep must be"):
            case.restricted(bad)


@pytest.mark.parametrize("name, env", [("vllm", "tox -e vllm-cpu"), ("lmdeploy", "tox -e lmdeploy"),
                                       ("mlx", "tox -e mlx"), ("flashinfer", "CUDA machine")])
def test_an_engine_missing_from_this_environment_points_to_its_own(name, env):
    """The engines live in their own environments (they conflict with the suite's): a
    missing engine says which one, not 'pip install specexact[thirdparty]'."""
    try:
        __import__({"vllm": "vllm", "lmdeploy": "lmdeploy", "mlx": "mlx_lm", "flashinfer": "flashinfer"}[name])
    except ImportError:
        pass
    else:
        pytest.skip(f"{name} is installed here")
    with pytest.raises(SamplerError, match=re.escape(env)) as info:
        resolve_sampler(name)
    assert "thirdparty" not in str(info.value)


def test_a_target_that_is_no_sampler_is_named_once_with_its_type():
    with pytest.raises(SamplerError) as info:
        resolve_sampler("math:pi")
    message = str(info.value)
    assert message.startswith("sampler 'math:pi' cannot be audited: ") and message.endswith("; it is a float")
    assert message.count("math:pi") == 1, message
