"""The tiny models' prefix key / value cache: the logits of the uncached forward, fewer columns."""

from __future__ import annotations

import pytest
import torch

from specexact.decoders import SamplingParams, speculative_generate
from specexact.decoders.tiny_models import ModelSpec, TinyCausalLM, load_model, make_model

# Cached and uncached float64 logits differ by rounding only (the products run on other
# shapes): measured max |difference| 3.6e-15 over the call sequence below (logits up to ~6).
# A key or value of the wrong column, a wrong rotary position or a stale cached column moves
# them by > 1e-2.
TOL = 1e-12


@pytest.fixture(scope="module", params=[("llama", False), ("qwen2", True)], ids=["llama", "qwen2-tied"])
def pair(request, model_cache):
    """``(uncached, cached)``: the same float64 model without and with the cache."""
    architecture, tied = request.param
    directory = make_model(ModelSpec(architecture=architecture, tie_word_embeddings=tied, seed=5), None, model_cache)
    return load_model(directory), load_model(directory, kv_cache=True)


def _calls(seed: int):
    """A decoder-like sequence of ``(input_ids, positions)``: prefixes that grow, rewind
    (columns overwritten, as rejected drafts are), pad, lose rows, reorder them, and change
    batch."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (6, 5), generator=g)
    out = [(ids, None)]
    for step in range(40):
        kind = int(torch.randint(0, 6, (), generator=g))
        B, T = ids.shape
        if kind <= 1 and T < 40:  # grow by 1 to 4 columns
            ids = torch.cat([ids, torch.randint(0, 64, (B, int(torch.randint(1, 5, (), generator=g))), generator=g)], 1)
        elif kind == 2 and T > 2:  # rewind: overwrite the columns after a random one in some rows
            c = int(torch.randint(1, T, (), generator=g))
            rows = torch.randint(0, 2, (B,), generator=g).bool()
            ids = ids.clone()
            ids[rows, c:] = torch.randint(0, 64, (int(rows.sum()), T - c), generator=g)
        elif kind == 3 and B > 1:  # a subset of the rows, reordered (finished rows leave)
            keep = torch.randperm(B, generator=g)[: int(torch.randint(1, B, (), generator=g))]
            ids = ids[keep]
        elif kind == 4:  # right padding in some rows (ragged lengths)
            ids = ids.clone()
            ids[0, max(1, T - 2):] = -1
        else:  # another batch altogether
            ids = torch.randint(0, 64, (int(torch.randint(1, 8, (), generator=g)), T), generator=g)
        positions = None
        if step % 3 == 0:
            positions = torch.randint(0, ids.shape[1], (ids.shape[0], 3), generator=g)
        out.append((ids, positions))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_cached_logits_equal_the_uncached_forward(pair, seed):
    plain, cached = pair
    cached.kv_cache.clear()
    worst = 0.0
    for ids, positions in _calls(seed):
        expected = plain(ids, positions)
        got = cached(ids, positions)
        assert got.shape == expected.shape and got.dtype == torch.float64
        worst = max(worst, float((got - expected).abs().max()))
    assert worst < TOL
    assert cached.kv_cache.reused_columns > 0  # the sequence did resume columns


def test_the_cache_computes_only_the_new_columns(pair):
    _, cached = pair
    cache = cached.kv_cache
    cache.clear()
    ids = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(7))

    def columns(call):
        before = cache.computed_columns, cache.reused_columns
        call()
        return cache.computed_columns - before[0], cache.reused_columns - before[1]

    assert columns(lambda: cached(ids[:, :8])) == (4 * 8, 0)  # nothing cached yet
    assert columns(lambda: cached(ids[:, :10])) == (4 * 2, 4 * 8)  # two new columns
    rewound = ids[:, :10].clone()
    rewound[2, 6:] = (rewound[2, 6:] + 1) % 64  # one row's columns 6.. rewritten: that row computes them
    assert columns(lambda: cached(rewound)) == (1 + 1 + 4 + 1, 9 + 9 + 6 + 9)  # at least each row's last
    assert columns(lambda: cached(rewound[[3, 1]])) == (2 * 1, 2 * 9)  # rows left the batch
    # each row computes its columns up to the last position asked of it
    assert columns(lambda: cached(ids[[3, 1]], torch.tensor([[10], [10]]))) == (2 * 1, 2 * 10)
    # rows 1 and 3 resume the 11 cached columns of ids' rows 1 and 3 (row 3 needs 10 only), rows 0 and 2
    # (no longer cached) compute theirs
    assert columns(lambda: cached(ids[:, :12], torch.tensor([[10], [11], [8], [9]]))) == (
        11 + 1 + 9 + 1, 0 + 11 + 0 + 9)
    assert columns(lambda: cached(torch.full((4, 10), 5))) == (4 * 10, 0)  # no row in common


def test_chunked_rows_with_the_cache_equal_the_whole_batch(pair, monkeypatch):
    plain, cached = pair
    cached.kv_cache.clear()
    ids = torch.randint(0, 64, (9, 12), generator=torch.Generator().manual_seed(8))
    cached(ids[:, :8])
    monkeypatch.setattr(TinyCausalLM, "max_elements", 12 * 128 * 2)  # rows computed a few at a time
    assert cached.rows_per_forward(4, 12) < 9
    torch.testing.assert_close(cached(ids), plain(ids), rtol=0, atol=TOL)
    assert cached.kv_cache.reused_columns >= 9 * 8


def test_speculative_decoding_with_the_cache_emits_the_same_tokens(llama_pair, model_cache):
    target, draft = llama_pair
    target_dir, draft_dir = (m for m in _pair_dirs(model_cache))
    c_target, c_draft = load_model(target_dir, kv_cache=True), load_model(draft_dir, kv_cache=True)
    prompts = torch.randint(0, 64, (8, 5), generator=torch.Generator().manual_seed(9))
    params = SamplingParams(temperature=1.0, top_k=20)
    outs = [speculative_generate(t, d, prompts, params, num_draft_tokens=4, max_new_tokens=24,
                                 generator=torch.Generator().manual_seed(10), eos_token_id=1)
            for t, d in ((target, draft), (c_target, c_draft))]
    assert torch.equal(outs[0].tokens, outs[1].tokens)
    assert torch.equal(outs[0].accepted_lengths, outs[1].accepted_lengths)
    # the decoder's calls repeat most columns: each row computes about its verify window (target) or
    # its newest column (draft); without the cache every column is computed (fraction 1)
    fraction = [m.kv_cache.computed_columns / (m.kv_cache.computed_columns + m.kv_cache.reused_columns)
                for m in (c_target, c_draft)]
    assert fraction[0] < 0.35 and fraction[1] < 0.1  # 0.27 and 0.063 measured


def test_an_empty_batch_and_rows_that_end_early(pair):
    plain, cached = pair
    cached.kv_cache.clear()
    ids = torch.randint(0, 64, (3, 9), generator=torch.Generator().manual_seed(11))
    assert cached(ids[:0]).shape == (0, 9, 64)
    ends = torch.tensor([4, 6, 5])
    h = cached.hidden_states(ids, ends)
    assert h.shape == (3, 9, plain.config.hidden_size)
    expected = plain.hidden_states(ids)
    for row, end in enumerate(ends.tolist()):
        torch.testing.assert_close(h[row, :end], expected[row, :end], rtol=0, atol=TOL)
    torch.testing.assert_close(cached(ids), plain(ids), rtol=0, atol=TOL)  # the columns not computed are not reused


def test_to_keeps_the_cache_setting(pair):
    plain, cached = pair
    assert plain.kv_cache is None and plain.to(dtype=torch.float32).kv_cache is None
    copy = cached.to(dtype=torch.float32)
    assert copy.kv_cache is not None and copy.kv_cache is not cached.kv_cache


def _pair_dirs(model_cache):
    from specexact.decoders.tiny_models import CATALOG

    return CATALOG["llama-v64"].make(model_cache)
