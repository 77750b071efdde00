"""The public path of :mod:`specexact.audit.cases.e2e` (kept when the module moved to its room and became a package: reports' Python replays import e2e_cases from here).

Re-exports its public names; new code imports :mod:`specexact.audit.cases.e2e`.
"""

from specexact.audit.cases.e2e import *  # noqa: F401,F403
from specexact.audit.cases.e2e import __all__  # noqa: F401
