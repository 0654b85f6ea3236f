"""Reductions over axes and arg-reductions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from neurenix_core.graph.opset.schema import (
    Attrs, Params, Shape, _axes, _def, _numel,
)

def _reduce_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    axes = _axes(a["axes"], len(x))
    if a["keepdims"]:
        return tuple(1 if i in axes else n for i, n in enumerate(x)), d[0]
    return tuple(n for i, n in enumerate(x) if i not in axes), d[0]



_REDUCE: dict[str, Callable[..., np.ndarray]] = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min,
                                                 "reduce_prod": np.prod}
for _name, _fn in _REDUCE.items():
    _def(_name, "reduction", f"{_name[7:]} over axes (None = all), keepdims as ONNX", ("x",), _reduce_rule,
         lambda a, x, p, fn=_fn: np.asarray(fn(x[0], axis=_axes(a["axes"], x[0].ndim), keepdims=a["keepdims"])).astype(x[0].dtype, copy=False),
         attrs={"axes": None, "keepdims": True}, flops=lambda a, s, o, p: _numel(s[0]))


def _arg_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    shape, _ = _reduce_rule({"axes": (a["axis"],), "keepdims": a["keepdims"]}, s, d, p)
    return shape, "int64"


for _name, _fn in {"argmax": np.argmax, "argmin": np.argmin}.items():
    _def(_name, "reduction", f"index of the {_name[3:]} along axis (int64), first on ties", ("x",), _arg_rule,
         lambda a, x, p, fn=_fn: np.asarray(fn(x[0], axis=a["axis"], keepdims=a["keepdims"])).astype(np.int64),
         attrs={"axis": 0, "keepdims": True})


