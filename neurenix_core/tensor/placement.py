"""Where data goes: a device (or the default) resolved to its backend placement, the device's dtype
check, its memory-limit check, and host data put on it as a native array.

The bottom of the tensor layer: it works on native arrays and placements and knows nothing of the
Tensor class, which builds on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.device import Device, DeviceLike, as_device
from neurenix_core.errors import UnsupportedDTypeError
from neurenix_core.plugins import state as _state
from neurenix_core.tensor.dtypes import as_dtype, contiguous, dtype_table

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Backend, Placement

__all__ = ["check_dtype", "default_backend", "host_default", "host_to_native", "placement_for", "reserve"]


def placement_for(device: DeviceLike | None) -> Placement:
    """Resolve ``device`` (or the default device) to its placement, starting the backend if needed."""
    reg = _state.registry()
    if device is None:
        dev = _state.default_device()
        auto = _state.is_auto()
    else:
        dev, auto = as_device(device), False
    be = reg.backend_for(dev, auto=auto)
    if auto and be.device_type != dev.type:  # the automatic choice moved after a failure
        dev = reg.auto_default
    return be.placement(dev.index)


def default_backend(device: DeviceLike | None) -> tuple[Backend, Device, int]:
    """Resolve ``device`` (or the default) to (backend, device, index) for creation functions."""
    p = placement_for(device)
    return p.backend, p.device, p.index


def check_dtype(p: Placement, dt: np.dtype[Any]) -> None:
    """UnsupportedDTypeError naming the device, the dtype and what the device does support."""
    be = p.backend
    if not be.supports_dtype(dt):
        have = [n for n, d in dtype_table().items() if be.supports_dtype(d)]
        raise UnsupportedDTypeError(
            f"{p.device} (backend {be.name}) does not support dtype {dt}; it supports {', '.join(have)}. "
            f"Cast first, e.g. nx.asarray(x, dtype=nx.float32), or use device='cpu'"
        )


def reserve(p: Placement, nbytes: int) -> None:
    """OutOfMemoryError before a copy of ``nbytes`` is made when it would pass the device's limit."""
    if p.mem.in_use + nbytes > p.mem.limit:
        raise p.mem.refuse(nbytes)


def host_to_native(array: np.ndarray, p: Placement) -> Any:
    """A host array copied onto ``p``'s device as the backend's native array (dtype and room checked)."""
    check_dtype(p, as_dtype(array.dtype))
    reserve(p, int(array.nbytes))
    return p.backend._from_host(contiguous(array), p.index)


def host_default(array: np.ndarray, dtype: Any, obj: Any) -> np.ndarray:
    """``array`` in the dtype a new tensor gets: ``dtype`` when given; for Python data (lists,
    scalars) the library defaults float32, complex64 and int64; a typed array keeps its dtype."""
    if dtype is not None:
        return array.astype(as_dtype(dtype), copy=False)
    if not isinstance(obj, (np.ndarray, np.generic)):
        if array.dtype == np.float64:
            return array.astype(np.float32)
        if array.dtype == np.complex128:
            return array.astype(np.complex64)
    return array
