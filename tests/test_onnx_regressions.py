"""One-node reproductions of the silent wrong answers issue #24 reported, on every device.

Each model is built with ``onnx.helper`` and run through ``from_onnx`` + ``nx.compile`` in fp32;
the expectation is computed here with NumPy from ONNX's definition, and the result must match it
in value, shape and dtype (or the device must refuse with a typed error, never answer wrongly).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

import neurenix_core as nx
from neurenix_core.errors import NeurenixError, UnsupportedOperationError

DEVICES = [str(d) for d in nx.devices() if d.index == 0]
RNG = np.random.default_rng(24)


def _model(node: Any, inputs: Sequence[tuple[str, int, Sequence[int]]], outputs: Sequence[tuple[str, int]],
           opset: int = 21) -> Any:
    graph = helper.make_graph([node], "regression", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: Any, device: str, *xs: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """The outputs as host arrays, or None where the device refused with a typed error."""
    try:
        out = nx.compile(nx.nn.from_onnx(model), device=device, precision="fp32", outputs="host")(*xs)
    except NeurenixError:
        return None
    return out if isinstance(out, tuple) else (out,)


def _same(got: np.ndarray, want: np.ndarray, tol: float = 1e-6) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_without_strides_steps_by_one(op: str, device: str) -> None:
    x = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[2, 2])
    out = _run(_model(node, [("x", TensorProto.FLOAT, x.shape)], [("y", TensorProto.FLOAT)]), device, x)
    windows = np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3))
    want = windows.max(axis=(-1, -2)) if op == "MaxPool" else windows.mean(axis=(-1, -2))
    assert out is not None, f"{device} refused {op}"
    _same(out[0], want.astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_flatten_with_a_negative_axis(device: str) -> None:
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("Flatten", ["x"], ["y"], axis=-1)
    out = _run(_model(node, [("x", TensorProto.FLOAT, x.shape)], [("y", TensorProto.FLOAT)]), device, x)
    assert out is not None
    _same(out[0], x.reshape(24, 5))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduction_select_last_index(op: str, device: str) -> None:
    x = np.array([[2.0, 7.0, 7.0, 1.0], [1.0, 1.0, 5.0, 5.0]], np.float32)
    node = helper.make_node(op, ["x"], ["y"], axis=1, keepdims=0, select_last_index=1)
    out = _run(_model(node, [("x", TensorProto.FLOAT, x.shape)], [("y", TensorProto.INT64)]), device, x)
    want = np.array([2, 3] if op == "ArgMax" else [3, 1], np.int64)
    if out is not None:
        _same(out[0], want)


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_of_two_vectors_is_a_scalar(device: str) -> None:
    a, b = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    out = _run(_model(node, [("a", TensorProto.FLOAT, [4]), ("b", TensorProto.FLOAT, [4])], [("y", TensorProto.FLOAT)]), device, a, b)
    assert out is not None
    _same(out[0], np.asarray(a @ b, np.float32), 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_reduce_mean_over_every_axis_without_keepdims_is_a_scalar(device: str) -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    node = helper.make_node("ReduceMean", ["x"], ["y"], keepdims=0)
    out = _run(_model(node, [("x", TensorProto.FLOAT, x.shape)], [("y", TensorProto.FLOAT)], opset=18), device, x)
    assert out is not None
    _same(out[0], np.asarray(x.mean(), np.float32), 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_pow_keeps_the_base_dtype(device: str) -> None:
    x, y = np.array([1, 2, 3], np.int32), np.array([2.0, 2.0, 2.0], np.float32)
    node = helper.make_node("Pow", ["x", "y"], ["z"])
    out = _run(_model(node, [("x", TensorProto.INT32, [3]), ("y", TensorProto.FLOAT, [3])], [("z", TensorProto.INT32)]), device, x, y)
    if out is not None:
        _same(out[0], np.array([1, 4, 9], np.int32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_a_float64_or_float16_model_computes_and_returns_its_dtype(dtype: type, device: str) -> None:
    x = RNG.standard_normal((2, 3)).astype(dtype)
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    out = _run(_model(node, [("x", onnx_type, x.shape)], [("y", onnx_type)]), device, x)
    if out is None:
        return  # a device without the dtype refuses it (typed), never converts it silently
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    _same(out[0], (e / e.sum(axis=-1, keepdims=True)).astype(dtype), 1e-3 if dtype == np.float16 else 1e-12)


def test_training_mode_dropout_is_refused_and_inference_dropout_has_an_all_true_mask() -> None:
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    ins = [("x", TensorProto.FLOAT, x.shape)]
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])
    graph = helper.make_graph([node], "dropout", [helper.make_tensor_value_info(*i) for i in ins],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None), helper.make_tensor_value_info("mask", TensorProto.BOOL, None)],
                              [helper.make_tensor("r", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("t", TensorProto.BOOL, [], [True])])
    with pytest.raises(UnsupportedOperationError, match="training mode"):
        nx.nn.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    node = helper.make_node("Dropout", ["x"], ["y", "mask"])
    model = _model(node, ins, [("y", TensorProto.FLOAT), ("mask", TensorProto.BOOL)], opset=13)
    y, mask = nx.compile(nx.nn.from_onnx(model), device="cpu", outputs="host")(x)
    _same(y, x)
    assert mask.dtype == np.bool_ and mask.shape == x.shape and mask.all()


def test_value_inputs_build_one_graph_per_value() -> None:
    """A Reshape whose target shape is a graph input: each call's value is honoured and cached."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    model = _model(node, [("x", TensorProto.FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT)])
    imported = nx.nn.from_onnx(model)
    assert imported.value_inputs == ("shape",)
    compiled = nx.compile(imported, device="cpu", outputs="host")
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    _same(compiled(x, np.array([3, 4])), x.reshape(3, 4))
    _same(compiled(x, np.array([4, -1])), x.reshape(4, 3))
    _same(compiled(x, np.array([3, 4])), x.reshape(3, 4))
    assert len(compiled.compiled_shapes) == 2
