"""In-place assignment, kept apart because not every backend's arrays are mutable (JAX)."""

from __future__ import annotations

from typing import Any

from neurenix_core.tensor import Tensor, mismatch

__all__ = ["setitem"]


def setitem(t: Tensor, key: Any, value: Any) -> None:
    if type(value) is Tensor:
        if value._device != t._device:
            raise mismatch("__setitem__", t._device, value._device)
        value = value._data
    setter = t._backend.ops.get("__setitem__")
    nbytes_before = t._nbytes
    if setter is not None:
        t._data = setter(t._data, key, value)  # functional backends return a new array
    else:
        t._data[key] = value
    assert t._backend._nbytes_of(t._data) == nbytes_before, "setitem must not change a tensor's size"
