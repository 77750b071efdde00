"""The public path of :mod:`specexact.audit.core.json_io` (kept when the module moved to its room: the reports' JSON helpers, used by the renderers).

Re-exports its public names; new code imports :mod:`specexact.audit.core.json_io`.
"""

from specexact.audit.core.json_io import *  # noqa: F401,F403
from specexact.audit.core.json_io import __all__  # noqa: F401
