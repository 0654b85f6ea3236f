"""In-place assignment, kept apart because not every backend's arrays are mutable (JAX).

A backend whose arrays are immutable puts a functional ``"__setitem__"(native, key, value) ->
new native`` in its op table; the tensor then points at the new array (same size, so the memory
accounting does not change). Works on native arrays: ``Tensor.__setitem__`` checks the operands'
devices and hands in natives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.errors import NeurenixError, ShapeError
from neurenix_core.tensor.op_errors import raise_op_error

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Placement

__all__ = ["set_native"]


def set_native(native: Any, p: Placement, key: Any, value: Any, operands: list[Any]) -> Any:
    """``native[key] = value`` on ``p``: the array to keep (``native`` itself when it was mutated)."""
    setter = p.ops.get("__setitem__")
    try:
        if setter is None:
            native[key] = value
            return native
        new = setter(native, key, value)  # functional backends return a new array
    except NeurenixError:
        raise
    except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
        raise_op_error("__setitem__", p, operands, exc)
    if p.backend._shape_of(new) != p.backend._shape_of(native):
        raise ShapeError(f"__setitem__ on {p.device}: backend {p.backend.name} returned a different shape; this is a backend bug")
    return new
