"""The opset's slice follows ONNX Slice bounds, checked against onnx's own reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

BIG = 2**62
CASES = [(5, -100, -2), (5, -11, -1), (-1, -11, -1), (0, BIG, 1), (-3, -1, 1), (9, 0, -3), (20, -20, -1), (-20, 5, 2),
         (-20, 5, -1), (-1, -BIG, -1), (3, 3, 1), (7, 2, -2)]


def _onnx_slice(x: np.ndarray, start: int, end: int, step: int) -> np.ndarray:
    inits = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("s", start), ("e", end), ("a", 0), ("p", step))]
    node = helper.make_node("Slice", ["x", "s", "e", "a", "p"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return ReferenceEvaluator(helper.make_model(graph)).run(None, {"x": x})[0]


@pytest.mark.parametrize(("start", "end", "step"), CASES)
def test_slice_matches_onnx(start: int, end: int, step: int) -> None:
    x = np.arange(10, dtype=np.float32)
    graph = Graph((TensorSpec("x", (10,), "float32"),),
                  (Node("s", "slice", ("x",), "y", {"starts": (start,), "ends": (end,), "axes": (0,), "steps": (step,)}),), ("y",))
    np.testing.assert_array_equal(run_graph(graph, x), _onnx_slice(x, start, end, step))
