"""Reductions over axes and arg-reductions (ONNX's reduction family).

Every reduction keeps its input dtype (an int32 sum is int32, as ONNX's reference accumulates
in the input dtype), gives a 0-d value when every axis is reduced without ``keepdims``, and
reduces an empty set to the operation's identity: 0 for sums, 1 for a product, the dtype's
lowest / highest value (-inf / +inf for floats) for max / min, -inf for the log-sums.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neurenix_core.graph.opset.schema import (
    Arrays,
    Attrs,
    Params,
    Ref,
    Shape,
    _axes,
    _axis,
    _def,
    _is_float,
    _numel,
)

__all__: list[str] = []


def _reduce_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    axes = _axes(a["axes"], len(x))
    if a["keepdims"]:
        return tuple(1 if i in axes else n for i, n in enumerate(x)), d[0]
    return tuple(n for i, n in enumerate(x) if i not in axes), d[0]


def _float_reduce_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not _is_float(d[0]):
        raise ValueError(f"takes a floating-point input (log / exp of {d[0]} is not defined in ONNX)")
    return _reduce_rule(a, s, d, p)


def _lowest(dtype: np.dtype) -> object:
    if dtype == np.bool_:
        return False
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _highest(dtype: np.dtype) -> object:
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).max if dtype.kind in "iu" else np.inf


Reducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    # Shift by the finite maximum so exp cannot overflow; infinities pass through the sum.
    finite = np.where(np.isinf(x), -np.inf, x)
    top = np.max(finite, axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0).astype(x.dtype)
    out = np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True, dtype=x.dtype)) + top
    return out if keep else np.squeeze(out, axis=axes)


#: name -> (computation on a non-empty input, identity of an empty reduction given the dtype, float only)
_REDUCERS: dict[str, tuple[Reducer, Callable[[np.dtype], object], bool]] = {
    "reduce_sum": (lambda x, ax, k: np.sum(x, axis=ax, keepdims=k, dtype=x.dtype), lambda t: 0, False),
    "reduce_mean": (lambda x, ax, k: np.mean(x, axis=ax, keepdims=k, dtype=x.dtype), lambda t: np.nan, False),
    "reduce_max": (lambda x, ax, k: np.max(x, axis=ax, keepdims=k), _lowest, False),
    "reduce_min": (lambda x, ax, k: np.min(x, axis=ax, keepdims=k), _highest, False),
    "reduce_prod": (lambda x, ax, k: np.prod(x, axis=ax, keepdims=k, dtype=x.dtype), lambda t: 1, False),
    "reduce_l1": (lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k), lambda t: 0, False),
    "reduce_l2": (lambda x, ax, k: np.sqrt(np.sum(np.square(x), axis=ax, keepdims=k)), lambda t: 0, False),
    "reduce_sum_square": (lambda x, ax, k: np.sum(np.square(x), axis=ax, keepdims=k), lambda t: 0, False),
    "reduce_log_sum": (lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k)), lambda t: -np.inf, True),
    "reduce_log_sum_exp": (_log_sum_exp, lambda t: -np.inf, True),
}


def _reduce_ref(name: str) -> Callable[[Attrs, Arrays, Params], np.ndarray]:
    fn, identity, _ = _REDUCERS[name]

    def ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
        v = x[0]
        axes = _axes(a["axes"], v.ndim)
        if v.size == 0:
            shape, _ = _reduce_rule(a, [v.shape], [""], p)
            return np.full(shape, identity(v.dtype), dtype=v.dtype)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # log(0) = -inf as ONNX gives
            out = fn(v, axes, bool(a["keepdims"]))
        return np.asarray(out).astype(v.dtype, copy=False)

    return ref


for _name, (_fn, _identity, _float) in _REDUCERS.items():
    _def(_name, "reduction", f"{_name[7:].replace('_', ' ')} over axes (None = all), keepdims as ONNX; an empty set gives the identity",
         ("x",), _float_reduce_rule if _float else _reduce_rule, _reduce_ref(_name),
         attrs={"axes": None, "keepdims": True}, flops=lambda a, s, o, p: _numel(s[0]))


def _arg_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if s[0] and s[0][_axis(a["axis"], len(s[0]))] == 0:
        raise ValueError(f"cannot take an arg-reduction over axis {a['axis']} of size 0 (shape {s[0]})")
    shape, _ = _reduce_rule({"axes": (a["axis"],), "keepdims": a["keepdims"]}, s, d, p)
    return shape, "int64"


def _arg_ref(fn: Callable[..., np.ndarray]) -> Ref:
    return lambda a, x, p: np.asarray(fn(x[0], axis=_axis(a["axis"], x[0].ndim), keepdims=a["keepdims"])).astype(np.int64)


_ARG_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {"argmax": np.argmax, "argmin": np.argmin}
for _name, _arg in _ARG_FUNCTIONS.items():
    _def(_name, "reduction", f"index of the {_name[3:]} along axis (int64), first on ties (ONNX's select_last_index: the importer flips the axis)",
         ("x",), _arg_rule, _arg_ref(_arg), attrs={"axis": 0, "keepdims": True})
