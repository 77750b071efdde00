"""The public path of :mod:`specexact.audit.cases.catalog` (kept when the module moved to its room: reports' Python replays import all_cases from here).

Re-exports its public names; new code imports :mod:`specexact.audit.cases.catalog`.
"""

from specexact.audit.cases.catalog import *  # noqa: F401,F403
from specexact.audit.cases.catalog import __all__  # noqa: F401
