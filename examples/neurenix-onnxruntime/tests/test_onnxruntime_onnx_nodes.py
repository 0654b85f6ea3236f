"""One-node ONNX models on ort:0 that ONNX Runtime itself fails on are refused at export (the
core runs the node on cpu:0) instead of raising ONNX Runtime's exception."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from neurenix_onnxruntime.onnx_export import export
from onnx import TensorProto, helper

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec


@pytest.mark.parametrize(("op", "fill"), [("ReduceMax", False), ("ReduceMin", True)])
def test_bool_reduce_of_an_empty_axis_runs_on_cpu(op: str, fill: bool) -> None:
    x = np.zeros((2, 0, 4), np.bool_)
    node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=1)
    graph = helper.make_graph([node], "empty_bool", [helper.make_tensor_value_info("x", TensorProto.BOOL, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.asarray(nx.compile(nx.nn.from_onnx(model), device="ort", precision="fp32", outputs="host", progress=False)(x))
    assert got.dtype == np.bool_ and got.shape == (2, 1, 4)
    assert (got == fill).all()


def test_bool_reduce_of_an_empty_axis_is_refused_by_name() -> None:
    graph = Graph((TensorSpec("x", (2, 0), "bool"),), (Node("r", "reduce_max", ("x",), "y", {"axes": (1,), "keepdims": True}),), ("y",))
    with pytest.raises(UnsupportedOperationError, match="'r'"):
        export(graph)
