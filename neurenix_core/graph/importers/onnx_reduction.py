"""ONNX import handlers: Reductions (ONNX's reduction family).

``Reduce*`` takes its axes from the attribute (ReduceSum before opset 13, the others before 18)
or from the optional ``axes`` input, which must be static. No axes means every axis, unless
``noop_with_empty_axes`` makes the node an identity. ``ArgMax`` / ``ArgMin`` keep
``select_last_index``.
"""

from __future__ import annotations

from neurenix_core.graph.importers.builder import GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, const, ints

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
    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        attrs = {"axis": int(n.attrs.get("axis", 0)), "keepdims": bool(n.attrs.get("keepdims", 1)),
                 "select_last_index": bool(n.attrs.get("select_last_index", 0))}
        return b.emit(n.name, op, [n.inputs[0]], attrs)  # type: ignore[list-item]

    return run


HANDLERS: dict[str, Handler] = {onnx: _reduce(op) for onnx, op in _REDUCE_OPS.items()}
HANDLERS |= {"ArgMax": _arg("argmax"), "ArgMin": _arg("argmin")}
