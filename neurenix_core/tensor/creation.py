"""Array-API creation functions: they place host data on a device through its backend.

Every function checks, before anything is allocated, that the device supports the dtype
(``Capabilities.dtypes`` and the runtime) and that the bytes fit under the device's memory
limit, so a refused request leaves nothing behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.device import DeviceLike
from neurenix_core.tensor.dtypes import as_dtype, contiguous, dtype_table
from neurenix_core.errors import ShapeError, TransferError, UnsupportedDTypeError
from neurenix_core.tensor.tensor import Tensor, adopt, placement_for

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Placement

__all__ = [
    "asarray", "zeros", "ones", "empty", "full", "arange", "linspace", "eye",
    "zeros_like", "ones_like", "empty_like", "full_like", "from_numpy",
]


def _host_default(array: np.ndarray, dtype: Any, obj: Any) -> np.ndarray:
    # Python data (lists, scalars) gets the library defaults: float32 for reals, complex64 for
    # complex, int64 for ints; an explicit dtype or a typed array keeps its dtype.
    if dtype is not None:
        return array.astype(as_dtype(dtype), copy=False)
    if not isinstance(obj, (np.ndarray, np.generic)):
        if array.dtype == np.float64:
            return array.astype(np.float32)
        if array.dtype == np.complex128:
            return array.astype(np.complex64)
    return array


def check_dtype(p: Placement, dt: np.dtype[Any]) -> None:
    """UnsupportedDTypeError naming the device, the dtype and what the device does support."""
    be = p.backend
    if not be.supports_dtype(dt):
        have = [n for n, d in dtype_table().items() if be.supports_dtype(d)]
        raise UnsupportedDTypeError(
            f"{p.device} (backend {be.name}) does not support dtype {dt}; it supports {', '.join(have)}. "
            f"Cast first, e.g. nx.asarray(x, dtype=nx.float32), or use device='cpu'"
        )


def _place(array: np.ndarray, device: DeviceLike | None) -> Tensor:
    p = placement_for(device)
    dt = as_dtype(array.dtype)
    check_dtype(p, dt)
    nbytes = int(array.nbytes)
    if p.mem.in_use + nbytes > p.mem.limit:
        raise p.mem.refuse(nbytes)
    return adopt(p.backend._from_host(contiguous(array), p.index), p)


def _shape(shape: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise ShapeError(f"a shape is a tuple of non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


def asarray(obj: Any, /, *, dtype: Any = None, device: DeviceLike | None = None, copy: bool | None = None) -> Tensor:
    """A tensor from Python data, a NumPy array, a Tensor, or anything with ``__dlpack__``.

    ``copy=False`` shares memory (a NumPy array or DLPack producer on a host-memory device, or a
    Tensor already on ``device`` with ``dtype``) or raises TransferError; it never copies silently.
    """
    if isinstance(obj, Tensor):
        return _from_tensor(obj, dtype, device, copy)
    if copy is False or (hasattr(obj, "__dlpack__") and not isinstance(obj, (np.ndarray, np.generic))):
        from neurenix_core.tensor.transfer import from_dlpack

        if not hasattr(obj, "__dlpack__"):
            raise TransferError(f"asarray(copy=False) needs a NumPy array, a Tensor or a DLPack producer to share memory with, got {type(obj).__name__}")
        out = from_dlpack(obj, device=device, copy=copy)
        return out if dtype is None else _from_tensor(out, dtype, None, copy)
    array = np.asarray(obj)
    return _place(_host_default(array, dtype, obj), device)


def _from_tensor(obj: Tensor, dtype: Any, device: DeviceLike | None, copy: bool | None) -> Tensor:
    from neurenix_core.device import as_device
    from neurenix_core.tensor.ops import astype

    moved = device is not None and as_device(device) != obj.device
    if moved and copy is False:
        raise TransferError(f"asarray(copy=False) cannot share memory between {obj.device} and {device}; use .to({str(device)!r})")
    out = obj.to(device) if moved else obj
    if dtype is not None and as_dtype(dtype) != out.dtype:
        if copy is False:
            raise TransferError(f"asarray(copy=False) cannot change dtype {out.dtype} to {as_dtype(dtype)} without a copy")
        return astype(out, as_dtype(dtype))
    if copy and out is obj:
        return obj.to(obj.device)
    return out


def from_numpy(array: np.ndarray, *, device: DeviceLike | None = None) -> Tensor:
    """A copy of a NumPy array on ``device`` (for sharing memory use ``nx.from_dlpack``)."""
    return _place(np.asarray(array), device)


def _default_float(dtype: Any) -> np.dtype[Any]:
    return np.dtype(np.float32) if dtype is None else as_dtype(dtype)


def zeros(shape: int | tuple[int, ...], *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    return _place(np.zeros(_shape(shape), _default_float(dtype)), device)


def ones(shape: int | tuple[int, ...], *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    return _place(np.ones(_shape(shape), _default_float(dtype)), device)


def empty(shape: int | tuple[int, ...], *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    # Zero-filled on purpose: reading "empty" memory must not leak another tensor's bytes.
    return _place(np.zeros(_shape(shape), _default_float(dtype)), device)


def full(shape: int | tuple[int, ...], fill_value: Any, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    host = np.full(_shape(shape), fill_value)
    return _place(_host_default(host, dtype, fill_value), device)


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    host = np.arange(start, stop, step) if stop is not None else np.arange(start, step=step)
    return _place(_host_default(host, dtype, [start, stop, step]), device)


def linspace(start: Any, stop: Any, /, num: int, *, dtype: Any = None, device: DeviceLike | None = None, endpoint: bool = True) -> Tensor:
    return _place(np.linspace(start, stop, num, endpoint=endpoint).astype(_default_float(dtype)), device)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    return _place(np.eye(n_rows, n_cols, k=k, dtype=_default_float(dtype)), device)


def _like(x: Tensor, dtype: Any, device: DeviceLike | None) -> tuple[tuple[int, ...], Any, DeviceLike]:
    return x.shape, x.dtype if dtype is None else as_dtype(dtype), x.device if device is None else device


def zeros_like(x: Tensor, /, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    shape, dt, dev = _like(x, dtype, device)
    return zeros(shape, dtype=dt, device=dev)


def ones_like(x: Tensor, /, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    shape, dt, dev = _like(x, dtype, device)
    return ones(shape, dtype=dt, device=dev)


def empty_like(x: Tensor, /, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    shape, dt, dev = _like(x, dtype, device)
    return empty(shape, dtype=dt, device=dev)


def full_like(x: Tensor, /, fill_value: Any, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    shape, dt, dev = _like(x, dtype, device)
    return full(shape, fill_value, dtype=dt, device=dev)
