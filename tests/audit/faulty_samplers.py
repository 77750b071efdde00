"""Samplers that misbehave at the process level, for the isolation and resume tests.

Not a test module (no ``test_`` prefix): the tests put this folder on ``sys.path`` and name
the samplers ``faulty_samplers:NAME``; isolated cases import it again in their own process.
Every sampler is the built-in ``verify`` except where it hangs or kills its process, chosen
by the vocabulary size (8: case v8-plain, 12: case v12-eos-cut).
"""

import os
import signal
import time

from specexact.decoders import verify


def _hang():
    while True:  # an infinite loop that never returns to the caller
        time.sleep(0.05)


def hang_on_v8_segfault_on_v12(ids, draft_probs, target_probs, generator=None):
    vocab = draft_probs.shape[-1]
    if vocab == 8:
        _hang()
    if vocab == 12:
        os.kill(os.getpid(), signal.SIGSEGV)
    return verify(ids, draft_probs, target_probs, generator)


def abort_on_v8(ids, draft_probs, target_probs, generator=None):
    if draft_probs.shape[-1] == 8:
        os.abort()
    return verify(ids, draft_probs, target_probs, generator)


def stall_on_v12_if_asked(ids, draft_probs, target_probs, generator=None):
    """Stalls (as if slow) in case v12-eos-cut while SPECEXACT_TEST_STALL is set, so a test
    can kill the audit there; otherwise exactly the built-in verifier. With
    SPECEXACT_TEST_STALL_MARK (a path) set too, that file is made when the stall begins: the
    test signals the audit while it is in the sampler, whatever the machine's load."""
    if draft_probs.shape[-1] == 12 and os.environ.get("SPECEXACT_TEST_STALL"):
        if mark := os.environ.get("SPECEXACT_TEST_STALL_MARK"):
            open(mark, "w").close()
        _hang()
    return verify(ids, draft_probs, target_probs, generator)


def script_in_message(ids, draft_probs, target_probs, generator=None):
    raise RuntimeError("<script>alert('pwned')</script> & <b>bold</b>")


_slowed = {"done": False}


def slow_once_on_v12(ids, draft_probs, target_probs, generator=None):
    """Sleeps SPECEXACT_TEST_STALL_SECONDS once, in the first call of case v12-eos-cut (so a
    test can act while the audit runs), then is exactly the built-in verifier. With
    SPECEXACT_TEST_STALL_UNTIL (a path) set too, the sleep ends as soon as that file exists:
    the test says when it is done, whatever the machine's load."""
    if draft_probs.shape[-1] == 12 and not _slowed["done"]:
        _slowed["done"] = True
        deadline = time.monotonic() + float(os.environ.get("SPECEXACT_TEST_STALL_SECONDS", "0"))
        until = os.environ.get("SPECEXACT_TEST_STALL_UNTIL")
        while time.monotonic() < deadline and not (until and os.path.exists(until)):
            time.sleep(0.05)
    return verify(ids, draft_probs, target_probs, generator)


def hangs_on_v8(ids, draft_probs, target_probs, generator=None):
    """Never returns on V=8 (in process: only --call-timeout stops the audit waiting)."""
    if draft_probs.shape[-1] == 8:
        _hang()
    return verify(ids, draft_probs, target_probs, generator)
