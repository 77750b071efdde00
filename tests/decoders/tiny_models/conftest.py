"""Fixtures of the tiny-model tests: one model cache per test session (a temporary folder)."""

from __future__ import annotations

import pytest

from specexact.decoders.tiny_models import CATALOG, load_model


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory):
    """A fresh cache folder shared by the session's tiny-model tests."""
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def llama_pair(model_cache):
    """``(target, draft)`` of ``llama-v64``, float64 :class:`TinyCausalLM`."""
    target_dir, draft_dir = CATALOG["llama-v64"].make(model_cache)
    return load_model(target_dir), load_model(draft_dir)
