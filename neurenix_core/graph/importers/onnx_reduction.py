"""ONNX import handlers: Reductions (ONNX's reduction family).

``Reduce*`` takes its axes from the attribute (ReduceSum before opset 13, the others before 18)
or from the optional ``axes`` input, which must be static. No axes means every axis, unless
``noop_with_empty_axes`` makes the node an identity. ``ArgMax`` / ``ArgMin`` keep
``select_last_index``.
"""

from __future__ import annotations

import numpy as np

from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, const, fail, ints
from neurenix_core.graph.ir.symbolic import NotSymbolicError

__all__ = ["HANDLERS"]

_REDUCE_OPS = {
    "ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max", "ReduceMin": "reduce_min",
    "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1", "ReduceL2": "reduce_l2", "ReduceSumSquare": "reduce_sum_square",
    "ReduceLogSum": "reduce_log_sum", "ReduceLogSumExp": "reduce_log_sum_exp",
}


def _reduce(op: str) -> Handler:
    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        axes = n.attrs.get("axes")
        if axes is None and n.input(1) is not None:
            axes = ints(const(b, n, 1, "axes"))
        x = n.inputs[0]
        if not axes and n.attrs.get("noop_with_empty_axes", 0):
            return b.emit(n.name, "identity", [x])  # type: ignore[list-item]
        attrs = {"axes": tuple(int(a) for a in axes) if axes else None, "keepdims": bool(n.attrs.get("keepdims", 1))}
        return b.emit(n.name, op, [x], attrs)  # type: ignore[list-item]

    return run


def _arg(op: str) -> Handler:
    """ArgMax / ArgMin; ``select_last_index`` (the last of equal extremes) is the first one in
    the reversed axis, counted back from the end: (n - 1) - arg(x[::-1]), with ops every
    backend lowers, so no backend can drop the attribute."""

    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        x = n.inputs[0]
        axis, keep = int(n.attrs.get("axis", 0)), bool(n.attrs.get("keepdims", 1))
        if not n.attrs.get("select_last_index", 0):
            return b.emit(n.name, op, [x], {"axis": axis, "keepdims": keep})  # type: ignore[list-item]
        shape = b.spec(x).shape  # type: ignore[arg-type]
        if not -len(shape) <= axis < len(shape):
            raise fail(b, n, f"has axis {axis} out of range for a rank-{len(shape)} input")
        size = shape[axis]
        if any(s.dynamic for s in b.inputs) and not isinstance(x, Const):
            sym = getattr(b, "onnx_sym_shapes", {}).get(n.proto.input[0])
            if sym is None or not isinstance(sym[axis], int):
                raise NotSymbolicError(f"node {n.name!r} ({n.op}) reverses axis {axis} of {n.proto.input[0]!r}, whose size is dynamic")
        flipped = b.emit(n.name + ".flip", "slice", [x], {"starts": (-1,), "ends": (-(2**62),), "axes": (axis,), "steps": (-1,)})  # type: ignore[list-item]
        arg = b.emit(n.name + ".arg", op, [flipped], {"axis": axis, "keepdims": keep})
        return b.emit(n.name, "sub", [Const(np.asarray(size - 1, np.int64)), arg])

    return run


HANDLERS: dict[str, Handler] = {onnx: _reduce(op) for onnx, op in _REDUCE_OPS.items()}
HANDLERS |= {"ArgMax": _arg("argmax"), "ArgMin": _arg("argmin")}
