"""The adapter protocol: Capabilities, seeding torch's global RNG from a generator, log-probs."""

import pytest
import torch

from specexact.decoders.adapters import (
    Capabilities,
    SamplerAdapter,
    check_auditable,
    probs_to_logits,
    seeded_global_rng,
)


def caps(**kw):
    base = dict(max_batch_size=1, dtypes=(torch.float32,), devices=("cpu",), randomness="global_rng")
    return Capabilities(**{**base, **kw})


def test_capabilities_to_dict_is_json_ready():
    d = caps(notes="x").to_dict()
    assert d == {"max_batch_size": 1, "dtypes": ["float32"], "devices": ["cpu"], "randomness": "global_rng",
                 "logits_level": False, "order_of_operations": [], "notes": "x"}


@pytest.mark.parametrize("kw, match", [
    ({"randomness": "os.urandom"}, "randomness"),
    ({"max_batch_size": 0}, "max_batch_size"),
    ({"dtypes": (torch.int64,)}, "dtypes"),
    ({"dtypes": ()}, "dtypes"),
    ({"devices": ()}, "devices"),
    ({"logits_level": True, "order_of_operations": ("temperature", "nucleus")}, "unknown operations"),
    ({"order_of_operations": ("temperature",)}, "logits-level"),
])
def test_capabilities_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        caps(**kw)


class _LogitsLevel:
    name = "planned"
    capabilities = caps(logits_level=True, order_of_operations=("penalties", "temperature", "top_k", "top_p"))

    def metadata(self):
        return {}

    def __call__(self, ids, dp, tp, generator=None):
        raise AssertionError("never called")


def test_logits_level_adapters_are_refused_and_others_pass():
    adapter = _LogitsLevel()
    assert isinstance(adapter, SamplerAdapter)
    with pytest.raises(NotImplementedError, match="logits-level"):
        check_auditable(adapter)
    check_auditable(lambda *a: None)  # plain callables are probability level


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
