"""The public path of :mod:`specexact.audit.cases.generated` (kept when the module moved to its room: reports' Python replays import generated_case from here).

Re-exports its public names; new code imports :mod:`specexact.audit.cases.generated`.
"""

from specexact.audit.cases.generated import *  # noqa: F401,F403
from specexact.audit.cases.generated import __all__  # noqa: F401
