"""A sampler that takes its process down on any fuzz input with two or more tokens (for the
isolated fuzz stage's test; resolved by name in the child process)."""

import os
import signal

from specexact.decoders import verify


def segfault_from_two_tokens(ids, draft_probs, target_probs, generator=None):
    if draft_probs.shape[-1] >= 2:
        os.kill(os.getpid(), signal.SIGSEGV)
    return verify(ids, draft_probs, target_probs, generator)
