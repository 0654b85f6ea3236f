"""``neurenix.nn``: the layers of ``neurenix_core.nn`` under the name the seeds use."""

from __future__ import annotations

from neurenix_core.nn import *
from neurenix_core.nn import __all__ as __all__  # noqa: PLC0414
from neurenix_core.nn import functional, init  # noqa: F401
