"""The op table: array-API and ``nn.*`` names -> ONNX operators run by :mod:`eager`.

Each kernel first decides whether ONNX Runtime computes exactly what the array API asks for the
given dtypes (ONNX ``Div`` truncates integers, ``ReduceSum`` keeps int32 where NumPy widens, ...);
when it does not, it raises ``Rejected`` and the op runs on the host under the fallback policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_onnxruntime.eager import Rejected, guarded

if TYPE_CHECKING:
    from neurenix_onnxruntime.backend import ORTBackend

__all__ = ["build_op_table"]

_SCALARS = (bool, int, float)

# array-API name -> (ONNX op, allowed dtype kind letters, output is bool)
_BINARY: dict[str, tuple[str, str, bool]] = {
    "add": ("Add", "iuf", False),
    "subtract": ("Sub", "iuf", False),
    "multiply": ("Mul", "iuf", False),
    "divide": ("Div", "f", False),  # ONNX Div truncates integers; the array API divides truly
    "maximum": ("Max", "iuf", False),
    "minimum": ("Min", "iuf", False),
    "pow": ("Pow", "f", False),
    "equal": ("Equal", "biuf", True),
    "not_equal": ("Equal", "biuf", True),  # negated below
    "less": ("Less", "iuf", True),
    "less_equal": ("LessOrEqual", "iuf", True),
    "greater": ("Greater", "iuf", True),
    "greater_equal": ("GreaterOrEqual", "iuf", True),
    "logical_and": ("And", "b", True),
    "logical_or": ("Or", "b", True),
    "logical_xor": ("Xor", "b", True),
}

_UNARY: dict[str, tuple[str, str]] = {
    "abs": ("Abs", "if"),
    "negative": ("Neg", "if"),
    "exp": ("Exp", "f"),
    "log": ("Log", "f"),
    "sqrt": ("Sqrt", "f"),
    "sin": ("Sin", "f"),
    "cos": ("Cos", "f"),
    "tanh": ("Tanh", "f"),
    "floor": ("Floor", "f"),
    "ceil": ("Ceil", "f"),
    "reciprocal": ("Reciprocal", "f"),
    "logical_not": ("Not", "b"),
    "nn.relu": ("Relu", "f"),
    "nn.sigmoid": ("Sigmoid", "f"),
    "nn.tanh": ("Tanh", "f"),
}

_REDUCE: dict[str, str] = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin"}


def _require(name: str, kinds: str, *arrays: np.ndarray) -> None:
    for a in arrays:
        if a.dtype.kind not in kinds:
            raise Rejected(f"{name} is only lowered to ONNX Runtime for dtype kinds {kinds!r}, not {a.dtype}")


def _operands(name: str, x1: Any, x2: Any) -> tuple[np.ndarray, np.ndarray]:
    # NumPy 2 (NEP 50) promotion: Python scalars take the array's dtype, as the array API says.
    if isinstance(x1, _SCALARS) or isinstance(x2, _SCALARS):
        if isinstance(x1, _SCALARS) and isinstance(x2, _SCALARS):
            raise Rejected(f"{name} with two Python scalars")
        arr = x2 if isinstance(x1, _SCALARS) else x1
        scalar = x1 if isinstance(x1, _SCALARS) else x2
        if (isinstance(scalar, float) and arr.dtype.kind != "f") or isinstance(scalar, bool) != (arr.dtype.kind == "b"):
            raise Rejected(f"{name} mixes a {type(scalar).__name__} scalar with {arr.dtype}")
        try:
            s = np.asarray(scalar, dtype=arr.dtype)
        except OverflowError as exc:
            raise Rejected(f"{name}: scalar {scalar!r} does not fit {arr.dtype}") from exc
        return (s, arr) if arr is x2 else (arr, s)
    rt = np.result_type(x1, x2)
    return np.asarray(x1, dtype=rt), np.asarray(x2, dtype=rt)


def _binary(be: ORTBackend, name: str) -> Callable[..., Any]:
    op_type, kinds, is_bool = _BINARY[name]

    def kernel(x1: Any, x2: Any, /) -> np.ndarray:
        a, b = _operands(name, x1, x2)
        _require(name, kinds, a)
        out = be.kernels.run(name, op_type, (a, b), out_dtype=np.dtype(bool) if is_bool else None)
        return np.logical_not(out) if name == "not_equal" else out

    return guarded(be, name, kernel)


def _unary(be: ORTBackend, name: str) -> Callable[..., Any]:
    op_type, kinds = _UNARY[name]

    def kernel(x: np.ndarray, /) -> np.ndarray:
        _require(name, kinds, x)
        if name == "abs" and x.dtype.kind == "i":
            raise Rejected("abs of the most negative integer differs between ONNX Runtime and NumPy")
        return be.kernels.run(name, op_type, (x,))

    return guarded(be, name, kernel)


def _reduce(be: ORTBackend, name: str) -> Callable[..., Any]:
    op_type = _REDUCE[name]

    def kernel(x: np.ndarray, /, *, axis: Any = None, keepdims: bool = False, dtype: Any = None, correction: Any = None) -> np.ndarray:
        _require(name, "f", x)
        if dtype is not None or correction is not None or x.size == 0 or x.ndim == 0:
            raise Rejected(f"{name} with dtype=/empty/0-d input")
        axes = list(range(x.ndim)) if axis is None else [axis] if isinstance(axis, int) else list(axis)
        axes_arr = np.asarray([a % x.ndim for a in axes], dtype=np.int64)
        return be.kernels.run(name, op_type, (x, axes_arr), {"keepdims": int(bool(keepdims))})

    return guarded(be, name, kernel)


def _matmul(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x1: np.ndarray, x2: np.ndarray, /) -> np.ndarray:
        a, b = _operands("matmul", x1, x2)
        _require("matmul", "f", a)
        if a.ndim == 0 or b.ndim == 0:
            raise Rejected("matmul of a 0-d array")
        return be.kernels.run("matmul", "MatMul", (a, b))

    return guarded(be, "matmul", kernel)


def _permute_dims(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, /, axes: tuple[int, ...]) -> np.ndarray:
        perm = [int(a) % max(x.ndim, 1) for a in axes]
        if sorted(perm) != list(range(x.ndim)):
            raise ValueError(f"permute_dims: axes {tuple(axes)} are not a permutation of {x.ndim} dims")
        if x.ndim == 0:
            # ONNX Transpose cannot type an empty perm ("Could not infer attribute `perm` type from
            # empty iterator"): a 0-d array is its own transpose, left to NumPy (found by tests/differential).
            raise Rejected("permute_dims of a 0-d array")
        return be.kernels.run("permute_dims", "Transpose", (x,), {"perm": perm})

    return guarded(be, "permute_dims", kernel)


def _reshape(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, /, shape: Any, *, copy: bool | None = None) -> np.ndarray:
        target = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        if copy is False or x.size == 0 or x.ndim == 0 or not target:
            raise Rejected("reshape with copy=False or of an empty/0-d array")
        if int(np.prod([s for s in target if s != -1])) == 0:
            raise Rejected("reshape to an empty shape")
        return be.kernels.run("reshape", "Reshape", (x, np.asarray(target, dtype=np.int64)), {"allowzero": 1})

    return guarded(be, "reshape", kernel)


def _where(be: ORTBackend) -> Callable[..., Any]:
    def kernel(condition: np.ndarray, x1: Any, x2: Any, /) -> np.ndarray:
        a, b = _operands("where", x1, x2)
        if getattr(condition, "dtype", None) != np.dtype(bool):
            raise Rejected("where with a non-bool condition")
        return be.kernels.run("where", "Where", (condition, a, b))

    return guarded(be, "where", kernel)


def build_op_table(be: ORTBackend) -> dict[str, Callable[..., Any]]:
    from neurenix_onnxruntime.nn_kernels import nn_table

    table: dict[str, Callable[..., Any]] = {}
    table.update({n: _binary(be, n) for n in _BINARY})
    table.update({n: _unary(be, n) for n in _UNARY})
    table.update({n: _reduce(be, n) for n in _REDUCE})
    table["matmul"] = _matmul(be)
    table["permute_dims"] = _permute_dims(be)
    table["reshape"] = _reshape(be)
    table["where"] = _where(be)
    table.update(nn_table(be))
    return table
