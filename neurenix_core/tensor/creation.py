"""Array-API creation functions: they place host data on a device through its backend.

Every function checks, before anything is allocated, that the device supports the dtype
(``Capabilities.dtypes`` and the runtime) and that the bytes fit under the device's memory
limit, so a refused request leaves nothing behind.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.device import DeviceLike
from neurenix_core.errors import ShapeError
from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.tensor.placement import host_default, host_to_native, placement_for
from neurenix_core.tensor.tensor import Tensor, adopt, asarray

__all__ = [
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "from_numpy",
    "full",
    "full_like",
    "linspace",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
]


def _place(array: np.ndarray, device: DeviceLike | None) -> Tensor:
    p = placement_for(device)
    return adopt(host_to_native(array, p), p)


def _shape(shape: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise ShapeError(f"a shape is a tuple of non-negative ints, got {shape!r}")
    return tuple(int(d) for d in dims)


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
    return _place(host_default(host, dtype, fill_value), device)


def arange(start: Any, /, stop: Any = None, step: Any = 1, *, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    host = np.arange(start, stop, step) if stop is not None else np.arange(start, step=step)
    return _place(host_default(host, dtype, [start, stop, step]), device)


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
