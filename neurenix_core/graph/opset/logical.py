"""Bitwise and logical ops beyond the comparisons (ONNX's logical family).

The comparisons and ``logical_and`` / ``logical_or`` / ``logical_not`` live in ``math`` with the
other elementwise ops (they came first); this module adds what ONNX's logical family has besides:
``logical_xor``, the bitwise ops on integers and ``bit_shift``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neurenix_core.graph.opset.schema import (
    Arrays,
    Attrs,
    Params,
    Shape,
    _broadcast,
    _compare,
    _const_dtype,
    _def,
    _np_dtype,
    _promote,
)


def _integers(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not all(t.startswith(("int", "uint")) for t in d):
        raise ValueError(f"expects integer inputs, got {', '.join(d)}")
    return _broadcast(s), _promote(d)


def _bitwise_ref(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Attrs, Arrays, Params], np.ndarray]:
    def ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
        dtype = _np_dtype(_promote([_const_dtype(v) for v in x]))
        return np.asarray(fn(x[0].astype(dtype, copy=False), x[1].astype(dtype, copy=False)))

    return ref


_def("logical_xor", "comparison", "a xor b -> bool, broadcasting", ("a", "b"), _compare,
     lambda a, x, p: np.asarray(np.logical_xor(x[0], x[1])))

_BITWISE: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str]] = {
    "bitwise_and": (np.bitwise_and, "a & b"), "bitwise_or": (np.bitwise_or, "a | b"), "bitwise_xor": (np.bitwise_xor, "a ^ b"),
}
for _name, (_fn, _doc) in _BITWISE.items():
    _def(_name, "bitwise", f"{_doc} on integers, broadcasting", ("a", "b"), _integers, _bitwise_ref(_fn))

_def("bitwise_not", "bitwise", "~x on integers (every bit flipped)", ("x",),
     lambda a, s, d, p: (s[0], _integers(a, s, d, p)[1]), lambda a, x, p: np.asarray(np.invert(x[0])))


def _shift_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    """ONNX BitShift on the value's own width: a shift count outside [0, bits) shifts every bit
    out (0; a right shift of a negative signed value fills with its sign, -1), where C and NumPy
    leave it undefined or wrap the count."""
    v, n = np.broadcast_arrays(x[0], x[1].astype(np.int64))
    bits = np.iinfo(v.dtype).bits
    valid = (n >= 0) & (n < bits)
    count = np.where(valid, n, 0)
    unsigned = np.dtype(f"u{v.dtype.itemsize}")
    if a["direction"] == "left":
        # shift the two's-complement bits as unsigned: a signed left shift that overflows wraps
        shifted = np.left_shift(v.view(unsigned), count.astype(unsigned)).view(v.dtype)
        return np.where(valid, shifted, np.zeros((), v.dtype)).astype(v.dtype)
    fill = np.where(v < 0, -1, 0).astype(v.dtype) if v.dtype.kind == "i" else np.zeros(v.shape, v.dtype)
    return np.where(valid, np.right_shift(v, count.astype(v.dtype)), fill).astype(v.dtype)


def _shift_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if a["direction"] not in ("left", "right"):
        raise ValueError(f"direction must be 'left' or 'right', got {a['direction']!r}")
    shape, _ = _integers(a, s, d, p)
    return shape, d[0]


_def("bit_shift", "bitwise", "a << b (direction 'left') or a >> b ('right', arithmetic for signed a), on a's integer type; "
     "a count outside [0, bits) gives 0 (or -1 for a negative a shifted right)", ("a", "b"), _shift_rule, _shift_ref,
     attrs={"direction": "left"})
