"""The adapter protocol: Capabilities, seeding torch's global RNG from a generator, log-probs."""

import pytest
import torch

from specexact.decoders.adapters import (
    Capabilities,
    LogitsSamplerAdapter,
    check_auditable,
    is_logits_level,
    processing_of,
    probs_to_logits,
    seeded_global_rng,
)


def caps(**kw):
    base = dict(max_batch_size=1, dtypes=(torch.float32,), devices=("cpu",), randomness="global_rng")
    return Capabilities(**{**base, **kw})


def test_capabilities_to_dict_is_json_ready():
    d = caps(notes="x").to_dict()
    assert d == {"max_batch_size": 1, "dtypes": ["float32"], "devices": ["cpu"], "randomness": "global_rng",
                 "logits_level": False, "order_of_operations": [], "repetition_penalty_scope": "output",
                 "greedy": True, "notes": "x", "scheme": "tokenwise", "scheme_params": {}, "protocol": "chain",
                 "tree_drafting": []}


@pytest.mark.parametrize("kw, match", [
    ({"randomness": "os.urandom"}, "randomness"),
    ({"max_batch_size": 0}, "max_batch_size"),
    ({"dtypes": (torch.int64,)}, "dtypes"),
    ({"dtypes": ()}, "dtypes"),
    ({"devices": ()}, "devices"),
    ({"logits_level": True, "order_of_operations": ("temperature", "nucleus")}, "unknown operations"),
    ({"order_of_operations": ("temperature",)}, "logits-level"),
    ({"logits_level": True}, "must declare its order_of_operations"),
    ({"logits_level": True, "order_of_operations": ("penalties", "repetition_penalty")}, "more than once"),
    ({"logits_level": True, "order_of_operations": ("temperature",), "repetition_penalty_scope": "all"},
     "repetition_penalty_scope"),
    ({"protocol": "graph"}, "protocol must be one of"),
    ({"protocol": "tree", "tree_drafting": ("beam",)}, "unknown tree_drafting"),
    ({"tree_drafting": ("iid",)}, "tree-protocol samplers only"),
    ({"protocol": "tree", "logits_level": True, "order_of_operations": ("temperature",)}, "probability level"),
])
def test_capabilities_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        caps(**kw)


class _LogitsLevel:
    name = "engine"
    capabilities = caps(logits_level=True, order_of_operations=("penalties", "temperature", "top_k", "top_p"))

    def metadata(self):
        return {}

    def verify_logits(self, inputs, generator=None):
        raise AssertionError("never called")


class _LogitsLevelWithoutMethod(_LogitsLevel):
    verify_logits = None


def test_logits_level_adapters_need_verify_logits():
    adapter = _LogitsLevel()
    assert isinstance(adapter, LogitsSamplerAdapter) and is_logits_level(adapter)
    check_auditable(adapter)
    assert processing_of(adapter).order == ("repetition_penalty", "frequency_penalty", "presence_penalty",
                                            "temperature", "top_k", "top_p")
    with pytest.raises(TypeError, match="no verify_logits"):
        check_auditable(_LogitsLevelWithoutMethod())
    check_auditable(lambda *a: None)  # plain callables are probability level
    assert not is_logits_level(lambda *a: None) and processing_of(lambda *a: None).is_builtin
    with pytest.raises(TypeError, match="not callable"):
        check_auditable(object())


def test_probs_to_logits_keeps_zeros_exact():
    p = torch.tensor([[0.0, 0.25, 0.75, 0.0]], dtype=torch.float64)
    logits = probs_to_logits(p)
    assert logits.dtype == torch.float32 and torch.isneginf(logits[0, [0, 3]]).all()
    back = logits.softmax(-1)
    assert back[0, 0] == 0 and back[0, 3] == 0
    torch.testing.assert_close(back, p.float())


def test_seeded_global_rng_restores_state_and_replays():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    gen = torch.Generator().manual_seed(7)
    with seeded_global_rng(gen) as seed1:
        a = torch.rand(5)
    assert torch.equal(torch.get_rng_state(), before), "the global RNG must be restored"
    with seeded_global_rng(gen) as seed2:
        b = torch.rand(5)
    assert seed1 != seed2 and not torch.equal(a, b), "successive calls must draw fresh seeds"
    torch.manual_seed(seed1)
    assert torch.equal(torch.rand(5), a), "the yielded seed replays the block"
    with seeded_global_rng(torch.Generator().manual_seed(7)):
        assert torch.equal(torch.rand(5), a), "same generator state, same draws"


@pytest.mark.parametrize("kw, match", [
    ({"greedy": "no"}, "greedy must be a bool"),
    ({"logits_level": "yes"}, "logits_level must be a bool"),
    ({"logits_level": True, "order_of_operations": "temperature"}, "must be a tuple"),
])
def test_capabilities_types_are_checked(kw, match):
    with pytest.raises(TypeError, match=match):
        caps(**kw)


def test_capabilities_scheme_is_validated_and_lossy_is_not_lossless():
    assert caps().scheme == "tokenwise" and caps().lossless
    lossy = caps(scheme="lossy", scheme_params=(("threshold", 0.3),))
    assert not lossy.lossless and lossy.to_dict()["scheme_params"] == {"threshold": 0.3}
    with pytest.raises(ValueError, match="scheme must be one of"):
        caps(scheme="typical")
    with pytest.raises(TypeError, match="scheme_params"):
        caps(scheme_params={"threshold": 0.3})


def test_takes_uniforms_and_its_dtype():
    from specexact.decoders.adapters import takes_uniforms, uniforms_dtype_of

    class Plain:
        def __call__(self, *a):
            return None

    class Takes(Plain):
        uniforms_dtype = torch.float32

        def verify_with_uniforms(self, ids, q, p, u, generator):
            return None

    class BadDtype(Takes):
        uniforms_dtype = torch.int32

    assert not takes_uniforms(Plain()) and takes_uniforms(Takes())
    assert uniforms_dtype_of(Plain()) == torch.float64 and uniforms_dtype_of(Takes()) == torch.float32
    with pytest.raises(TypeError, match="uniforms_dtype"):
        uniforms_dtype_of(BadDtype())


def test_protocol_and_tree_drafting_are_declared():
    from specexact.decoders.adapters import PROTOCOLS, protocol_of
    from specexact.decoders.adapters.protocol import TREE_DRAFTING, tree_drafting_of
    from specexact.decoders.tree import DRAFTING

    assert PROTOCOLS == ("chain", "tree") and TREE_DRAFTING == DRAFTING
    assert protocol_of(lambda *a: None) == "chain" and tree_drafting_of(lambda *a: None) == DRAFTING

    class Tree:
        capabilities = caps(protocol="tree", tree_drafting=("top_k",))

    assert protocol_of(Tree()) == "tree" and tree_drafting_of(Tree()) == ("top_k",)
    assert Tree.capabilities.to_dict()["tree_drafting"] == ["top_k"]
    with pytest.raises(TypeError, match="tree_drafting must be a tuple"):
        caps(protocol="tree", tree_drafting=["iid"])


def test_supplied_uniforms_are_checked_for_shape_and_range():
    import pytest as _pytest
    import torch as _torch

    from specexact.decoders.adapters.protocol import check_supplied_uniforms

    check_supplied_uniforms(_torch.tensor([[0.0, 0.5]]), 1, 2)
    with _pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        check_supplied_uniforms(_torch.zeros(1, 2), 2, 2)
    with _pytest.raises(ValueError, match=r"\[0, 1\)"):
        check_supplied_uniforms(_torch.tensor([[0.0, 1.0]]), 1, 2)
