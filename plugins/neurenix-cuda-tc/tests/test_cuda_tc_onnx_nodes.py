"""One-node ONNX models on the (emulated) cuda device that once raised raw PyTorch errors or
gave the wrong dtype.

Each case is built with ``onnx.helper``, imported with ``nx.nn.from_onnx`` and compiled with
``nx.compile(device="cuda", precision="fp32")``; results are compared with NumPy (exact dtype
and shape). What PyTorch cannot compute is refused by name before torch runs it (the core then
runs the node on cpu:0), or refused with a typed error.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from neurenix_cuda_tc.lowering import lower_graph
from onnx import TensorProto, helper

import neurenix_core as nx
from neurenix_core.errors import NeurenixError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


def _model(op: str, inputs: dict[str, np.ndarray], out_dtype: Any, opset: int = 13, **attrs: Any) -> Any:
    ins = [helper.make_tensor_value_info(n, _ELEM[a.dtype], a.shape) for n, a in inputs.items()]
    out = helper.make_tensor_value_info("y", _ELEM[np.dtype(out_dtype)], None)
    graph = helper.make_graph([helper.make_node(op, list(inputs), ["y"], **attrs)], f"one_{op}", ins, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: Any, *inputs: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the partitioned-placement line
        compiled = nx.compile(nx.nn.from_onnx(model), device="cuda", precision="fp32", outputs="host", progress=False)
        return np.asarray(compiled(*inputs))


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _pool(x: np.ndarray, k: int, pad: int, kind: str, include: bool = False) -> np.ndarray:
    """NumPy pooling with stride 1 and ``pad`` on every side (max: padding never wins)."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=np.nan)
    out = np.empty((n, c, h + 2 * pad - k + 1, w + 2 * pad - k + 1), np.float32)
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            win = xp[:, :, i:i + k, j:j + k].reshape(n, c, -1)
            if kind == "max":
                out[:, :, i, j] = np.nanmax(win, axis=-1)
            else:
                out[:, :, i, j] = np.nansum(win, axis=-1) / (k * k if include else np.sum(~np.isnan(win), axis=-1))
    return out


X = np.random.default_rng(3).normal(size=(1, 2, 6, 6)).astype(np.float32)


@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_with_padding_beyond_half_the_window(include: int) -> None:
    # torch's avg_pool2d takes pad <= kernel / 2; the lowering pads explicitly for more.
    model = _model("AveragePool", {"x": X}, np.float32, kernel_shape=[3, 3], pads=[2, 2, 2, 2], count_include_pad=include)
    _same(_run(model, X), _pool(X, 3, 2, "avg", bool(include)))


def test_max_pool_with_padding_beyond_half_the_window() -> None:
    model = _model("MaxPool", {"x": X}, np.float32, kernel_shape=[3, 3], pads=[2, 2, 2, 2])
    _same(_run(model, X), _pool(X, 3, 2, "max"))


def test_pool_padding_as_wide_as_the_window_is_refused_by_name() -> None:
    node = Node("p", "max_pool2d", ("x",), "y", {"kernel_size": (2, 2), "stride": (1, 1), "padding": (2, 2)})
    with pytest.raises(UnsupportedOperationError, match="'p'"):
        lower_graph(Graph((TensorSpec("x", (1, 1, 4, 4)),), (node,), ("y",)))


@pytest.mark.parametrize(("op", "fill"), [("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_reduce_max_min_of_an_empty_axis(op: str, fill: float) -> None:
    # torch.amax/amin raise on an empty axis: refused at lowering, the node runs on cpu:0.
    x = np.zeros((2, 0, 4), np.float32)
    _same(_run(_model(op, {"x": x}, np.float32, axes=[1], keepdims=1), x), np.full((2, 1, 4), fill, np.float32))


def test_reduce_of_an_empty_axis_is_refused_by_name() -> None:
    node = Node("r", "reduce_max", ("x",), "y", {"axes": (1,), "keepdims": True})
    with pytest.raises(UnsupportedOperationError, match="'r'.*empty"):
        lower_graph(Graph((TensorSpec("x", (2, 0, 4)),), (node,), ("y",)))


def test_pow_keeps_the_integer_base_dtype() -> None:
    # torch.pow(int64, float32) is float32; ONNX Pow has the base's dtype.
    base, exp = np.array([1, 2, 3], np.int64), np.array([2.0, 0.5, 3.0], np.float32)
    _same(_run(_model("Pow", {"x": base, "e": exp}, np.int64), base, exp), np.power(base.astype(np.float64), exp).astype(np.int64))


def test_pow_integer_base_with_negative_integer_exponent() -> None:
    # torch.pow refuses negative integer powers of integers at run time; ONNX truncates 2 ** -1 to 0.
    base, exp = np.array([2, 3, 1], np.int64), np.array([-1, 2, -2], np.int64)
    _same(_run(_model("Pow", {"x": base, "e": exp}, np.int64), base, exp), np.array([0, 9, 1], np.int64))


def test_float8_values_cross_to_the_device_by_their_bits() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    backend = nx.backend("cuda:0")
    for name in ("float8_e4m3fn", "float8_e5m2"):
        host = np.array([0.5, -2.0, 448.0 if name == "float8_e4m3fn" else 57344.0], getattr(ml_dtypes, name))
        back = backend._to_host(backend._from_host(host, 0))
        assert back.dtype == host.dtype and np.array_equal(back.view(np.uint8), host.view(np.uint8))


def test_int4_values_are_refused_with_a_typed_error() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(NeurenixError, match="int4"):
        nx.backend("cuda:0")._from_host(np.array([1, -2], ml_dtypes.int4), 0)
