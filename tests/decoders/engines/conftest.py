"""Fixtures of the end-to-end engine tests: the ``llama-v64`` tiny pair, made once per session
in a temporary cache folder, and its float64 target for reference laws."""

from __future__ import annotations

import pytest

from specexact.decoders.tiny_models import CATALOG, load_model


@pytest.fixture(scope="session")
def llama_dirs(tmp_path_factory):
    """``(target_dir, draft_dir)`` of ``llama-v64`` (Hugging Face layout)."""
    return CATALOG["llama-v64"].make(tmp_path_factory.mktemp("engine-models"))


@pytest.fixture(scope="session")
def llama_target(llama_dirs):
    """The target as a float64 :class:`~specexact.decoders.tiny_models.TinyCausalLM`."""
    return load_model(llama_dirs[0])
