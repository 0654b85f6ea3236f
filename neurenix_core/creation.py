"""Array-API creation functions: they place data on a device through its backend."""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.device import DeviceLike
from neurenix_core.dtypes import as_dtype
from neurenix_core.errors import UnsupportedDTypeError
from neurenix_core.tensor import Tensor, default_backend, wrap

__all__ = [
    "asarray", "zeros", "ones", "empty", "full", "arange", "linspace", "eye",
    "zeros_like", "ones_like", "empty_like", "full_like", "from_numpy",
]


def _host_default(array: np.ndarray, dtype: Any, obj: Any) -> np.ndarray:
    # Python data (lists, scalars) gets the library defaults: float32 for reals, int64 for ints;
    # an explicit dtype or a typed array keeps its dtype.
    if dtype is not None:
        return array.astype(as_dtype(dtype), copy=False)
    if not isinstance(obj, (np.ndarray, np.generic)) and array.dtype == np.float64:
        return array.astype(np.float32)
    if not isinstance(obj, (np.ndarray, np.generic)) and array.dtype == np.complex128:
        return array.astype(np.complex64)
    return array


def _place(array: np.ndarray, device: DeviceLike | None) -> Tensor:
    be, dev, index = default_backend(device)
    dt = as_dtype(array.dtype)
    if not be.supports_dtype(dt):
        raise UnsupportedDTypeError(
            f"{dev} (backend {be.name}) does not support dtype {dt}; cast first, e.g. nx.asarray(x, dtype=nx.float32)"
        )
    be.memory.check(index, int(array.nbytes))
    return wrap(be._from_host(np.ascontiguousarray(array), index), be, dev, index)


def asarray(obj: Any, /, *, dtype: Any = None, device: DeviceLike | None = None, copy: bool | None = None) -> Tensor:
    """A tensor from Python data, a NumPy array, a Tensor, or anything with ``__dlpack__``."""
    if isinstance(obj, Tensor):
        out = obj if device is None else obj.to(device)
        if dtype is not None and as_dtype(dtype) != out.dtype:
            from neurenix_core.ops import astype

            return astype(out, as_dtype(dtype))
        if copy and out is obj:
            return obj.to(obj.device)
        return out
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        from neurenix_core.transfer import from_dlpack

        return asarray(from_dlpack(obj, device=device), dtype=dtype)
    if copy is False and not isinstance(obj, np.ndarray):
        raise ValueError("asarray(copy=False) needs a NumPy array or a Tensor to share memory with")
    array = np.asarray(obj)
    return _place(_host_default(array, dtype, obj), device)


def from_numpy(array: np.ndarray, *, device: DeviceLike | None = None) -> Tensor:
    return _place(array, device)


def _default_float(dtype: Any) -> np.dtype[Any]:
    return np.dtype(np.float32) if dtype is None else as_dtype(dtype)


def zeros(shape: int | tuple[int, ...], *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    return _place(np.zeros(shape, _default_float(dtype)), device)


def ones(shape: int | tuple[int, ...], *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    return _place(np.ones(shape, _default_float(dtype)), device)


def empty(shape: int | tuple[int, ...], *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    # Zero-filled on purpose: reading "empty" memory must not leak another tensor's bytes.
    return _place(np.zeros(shape, _default_float(dtype)), device)


def full(shape: int | tuple[int, ...], fill_value: Any, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    host = np.full(shape, fill_value)
    return _place(_host_default(host, dtype, fill_value), device)


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    host = np.arange(start, stop, step) if stop is not None else np.arange(start, step=step)
    return _place(_host_default(host, dtype, [start]), device)


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
