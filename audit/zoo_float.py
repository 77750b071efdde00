"""The public path of :mod:`specexact.audit.zoo.floats` (kept when the zoo moved to its room): ``--sampler specexact.audit.zoo_float:NAME``
strings name a planted sampler or engine, or a table of them, through it.

Every name of the module is here (planted samplers need not be in its ``__all__``); new code
imports :mod:`specexact.audit.zoo.floats`.
"""

import specexact.audit.zoo.floats as _module

globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})
__all__ = list(getattr(_module, "__all__", ()))
