"""Fixtures of the run room's tests."""

import pytest
import torch


@pytest.fixture
def restore_threads():
    """Torch's thread count as before the test (the pilot leaves its chosen count set)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)
