"""The public path of :mod:`specexact.audit.verdict.decisions_replay` (kept when the module moved to its room: reports' Python replays import replay_event from here).

Re-exports its public names; new code imports :mod:`specexact.audit.verdict.decisions_replay`.
"""

from specexact.audit.verdict.decisions_replay import *  # noqa: F401,F403
from specexact.audit.verdict.decisions_replay import __all__  # noqa: F401
