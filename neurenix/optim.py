"""``neurenix.optim``: the optimizers and schedulers of ``neurenix_core.optim`` under the seed's name."""

from __future__ import annotations

from neurenix_core.optim import *
from neurenix_core.optim import __all__ as __all__  # noqa: PLC0414
