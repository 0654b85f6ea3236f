"""The array API ``linalg`` extension, where a backend has it (else the fallback policy applies)."""

from __future__ import annotations

from neurenix_core.plugins.backend import LINALG_FUNCTIONS
from neurenix_core.tensor.ops import make_dispatched

__all__ = list(LINALG_FUNCTIONS)

for _name in LINALG_FUNCTIONS:
    globals()[_name] = make_dispatched(f"linalg.{_name}")
