"""One place that turns a runtime's native error into the neurenix hierarchy, naming the op, the
device and the operands' shapes and dtypes, and the one message for mixing devices.

Below the Tensor class (it imports nothing of the tensor layer): operands are recognised by their
placement attribute, so the Tensor module, host fallbacks and indexing all share these helpers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from neurenix_core.device import Device
from neurenix_core.errors import DeviceMismatchError, NeurenixError, OperationError, ShapeError, UnsupportedDTypeError

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Placement

__all__ = ["BROADCASTING", "mismatch", "raise_op_error"]

#: Array-API functions whose operands broadcast against each other (shape errors are judged by it).
BROADCASTING = frozenset({
    "add", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift",
    "bitwise_xor", "copysign", "divide", "equal", "floor_divide", "greater", "greater_equal",
    "hypot", "less", "less_equal", "logaddexp", "logical_and", "logical_or", "logical_xor",
    "maximum", "minimum", "multiply", "nextafter", "not_equal", "pow", "remainder", "subtract",
})
_SHAPE_WORDS = ("shape", "broadcast", "dimension", "axis", "size", "mismatch", "align")


def _is_tensor(value: Any) -> bool:
    # A neurenix Tensor is the value with a placement; scalars and keyword values are not operands.
    return hasattr(value, "_p") and hasattr(value, "shape")


def mismatch(op: str, a: Device, b: Device) -> DeviceMismatchError:
    return DeviceMismatchError(
        f"{op}: operands are on different devices ({a} and {b}); neurenix never moves data silently. "
        f"Move one explicitly, e.g. x.to('{a}'), before combining them."
    )


def raise_op_error(name: str, p: Placement, operands: list[Any], exc: BaseException) -> NoReturn:
    """Raise ``exc`` translated into the neurenix hierarchy (with ``exc`` as its cause).

    An error that already is a NeurenixError (a nested op, a fallback refusal) is re-raised as
    it is: chaining it to itself would make ``__cause__`` a cycle.
    """
    if isinstance(exc, NeurenixError):
        raise exc
    raise _op_error(name, p, operands, exc) from exc


def _op_error(name: str, p: Placement, operands: list[Any], exc: BaseException) -> Exception:
    """Translate a backend's native error into the neurenix hierarchy, naming op and device."""
    where = f"{name} on {p.device} (backend {p.backend.name})"
    tensors = [v for v in operands if _is_tensor(v)]
    shapes = [v.shape for v in tensors]
    dtypes = [str(v.dtype) for v in tensors]
    # Shapes first: JAX reports a broadcast failure as a TypeError.
    if _is_shape_problem(name, shapes, "" if isinstance(exc, TypeError) else str(exc)):
        return ShapeError(f"{where}: incompatible shapes {shapes}: {exc}")
    if isinstance(exc, TypeError):
        return UnsupportedDTypeError(f"{where} does not accept dtypes {dtypes}: {exc}. Cast with nx.astype first.")
    return OperationError(f"{where} failed for shapes {shapes}, dtypes {dtypes}: {type(exc).__name__}: {exc}")


def _is_shape_problem(name: str, shapes: list[tuple[int, ...]], message: str) -> bool:
    if name in BROADCASTING and len(shapes) >= 2:
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            return True
        return False
    if name == "matmul" and len(shapes) == 2:
        a, b = shapes
        if not a or not b:
            return True
        inner_a = a[-1]
        inner_b = b[-2] if len(b) >= 2 else b[0]
        return inner_a != inner_b or _batch_mismatch(a, b)
    low = message.lower()
    return any(word in low for word in _SHAPE_WORDS)


def _batch_mismatch(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a[:-2], b[:-2])
    except ValueError:
        return True
    return False
