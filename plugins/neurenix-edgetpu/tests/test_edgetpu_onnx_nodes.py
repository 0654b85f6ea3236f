"""One-node ONNX models on the (emulated) edgetpu that once gave LiteRT errors or wrong shapes.

Each case is built with ``onnx.helper``, imported with ``nx.nn.from_onnx`` and compiled with
``nx.compile(device="edgetpu", precision="fp32")``; results are compared with NumPy (exact
dtype and shape). Nodes the TFLite writer cannot express are refused with a typed
UnsupportedOperationError before LiteRT sees them, and the core runs them on cpu:0.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from neurenix_edgetpu.lowering import lower
from onnx import TensorProto, helper

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


def _model(op: str, inputs: dict[str, np.ndarray], out_dtype: Any, out_shape: tuple[int, ...] | None = None,
           opset: int = 13, **attrs: Any) -> Any:
    ins = [helper.make_tensor_value_info(n, _ELEM[a.dtype], a.shape) for n, a in inputs.items()]
    out = helper.make_tensor_value_info("y", _ELEM[np.dtype(out_dtype)], out_shape)
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    graph = helper.make_graph([node], f"one_{op}", ins, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: Any, *inputs: np.ndarray) -> tuple[np.ndarray, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the partitioned-placement line
        compiled = nx.compile(nx.nn.from_onnx(model), device="edgetpu", precision="fp32", outputs="host", progress=False)
        return np.asarray(compiled(*inputs)), compiled


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_gather_negative_runtime_indices_count_from_the_end() -> None:
    # TFLite's GATHER fails at invoke on a negative index; the writer wraps them with FLOOR_MOD.
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    idx = np.array([0, -1, -5, 3], np.int64)
    got, _ = _run(_model("Gather", {"data": data, "idx": idx}, np.float32, axis=0), data, idx)
    _same(got, data[idx])


def test_gather_negative_runtime_indices_on_an_inner_axis() -> None:
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[-1, 0], [2, -3]], np.int64)
    got, _ = _run(_model("Gather", {"data": data, "idx": idx}, np.float32, axis=2), data, idx)
    _same(got, np.take(data, idx, axis=2))


@pytest.mark.parametrize(("op", "fn"), [("ReduceMax", np.max), ("ReduceMin", np.min)])
def test_bool_reduce_max_min_runs_on_cpu(op: str, fn: Any) -> None:
    # LiteRT's REDUCE_MAX/MIN have no bool kernel: refused at write time, run on cpu:0.
    x = np.array([[True, False], [False, False], [True, True]])
    got, compiled = _run(_model(op, {"x": x}, np.bool_, axes=[1], keepdims=1), x)
    _same(got, fn(x, axis=1, keepdims=True))
    assert any(o.op == op.replace("Reduce", "reduce_").lower() for o in compiled.placement.off_device)


def test_bool_reduce_is_refused_by_the_writer_by_name() -> None:
    g = Graph((TensorSpec("x", (3, 2), "bool"),), (Node("r", "reduce_max", ("x",), "y", {"axes": (1,), "keepdims": True}),), ("y",))
    with pytest.raises(UnsupportedOperationError, match="'r'.*bool"):
        lower(g)


def test_reduce_over_an_empty_input_runs_on_cpu() -> None:
    x = np.zeros((2, 0, 4), np.float32)
    got, _ = _run(_model("ReduceMax", {"x": x}, np.float32, axes=[1], keepdims=1), x)
    _same(got, np.full((2, 1, 4), -np.inf, np.float32))


def test_empty_graph_input_is_refused_by_the_writer() -> None:
    g = Graph((TensorSpec("x", (2, 0), "float32"),), (Node("r", "relu", ("x",), "y", {}),), ("y",))
    with pytest.raises(UnsupportedOperationError, match="empty"):
        lower(g)


def test_clip_of_a_scalar_stays_0d() -> None:
    # A (1,) bound would make LiteRT resize MAXIMUM/MINIMUM's output to (1,).
    x = np.array(300.0, np.float32)
    model = _model("Clip", {"x": x}, np.float32, (), opset=6, min=0.0, max=255.0)
    got, _ = _run(model, x)
    _same(got, np.array(255.0, np.float32))


def test_scalar_constant_operand_and_output_stay_0d() -> None:
    # A 0-d graph constant is written as a 0-d TFLite tensor (np.ascontiguousarray made it (1,)).
    x = np.array(3.0, np.float32)
    c = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [], [-2.0]))
    m = helper.make_node("Min", ["x", "c"], ["y"])
    graph = helper.make_graph([c, m], "scalar_min", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    got, _ = _run(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), x)
    _same(got, np.array(-2.0, np.float32))


def test_hardsigmoid_of_a_scalar_stays_0d() -> None:
    x = np.array(1.5, np.float32)
    got, _ = _run(_model("HardSigmoid", {"x": x}, np.float32, (), alpha=1.0 / 6.0, beta=0.5), x)
    _same(got, np.array(min(max(1.5 / 6.0 + 0.5, 0.0), 1.0), np.float32))
