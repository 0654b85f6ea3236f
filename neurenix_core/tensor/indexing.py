"""In-place assignment, kept apart because not every backend's arrays are mutable (JAX).

A backend whose arrays are immutable puts a functional ``"__setitem__"(native, key, value) ->
new native`` in its op table; the tensor then points at the new array (same size, so the memory
accounting does not change).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.errors import NeurenixError, ShapeError
from neurenix_core.tensor import tensor as _tensor
from neurenix_core.tensor.tensor import Tensor, raise_op_error, mismatch

__all__ = ["setitem"]


def setitem(t: Tensor, key: Any, value: Any) -> None:
    p = t._p
    if _tensor.record is not None:  # autograd is recording: writing into a taped tensor is refused
        _tensor.autograd.check_inplace(t, value)
    if type(value) is Tensor:
        q = value._p
        if q is not p and q.device != p.device:
            raise mismatch("__setitem__", p.device, q.device)
        value = value._data
    elif isinstance(value, np.ndarray):
        raise TypeError(f"__setitem__ on {p.device}: the value must be a Tensor on {p.device} or a Python scalar; convert with nx.asarray(value, device='{p.device}')")
    setter = p.ops.get("__setitem__")
    try:
        if setter is not None:
            new = setter(t._data, key, value)  # functional backends return a new array
        else:
            t._data[key] = value
            return
    except NeurenixError:
        raise
    except Exception as exc:
        raise_op_error("__setitem__", p, [t], exc)
    if p.backend._shape_of(new) != p.backend._shape_of(t._data):
        raise ShapeError(f"__setitem__ on {p.device}: backend {p.backend.name} returned a different shape; this is a backend bug")
    t._data = new
