"""One-node ONNX models on the (emulated) tpu that the JAX lowering once refused.

Built with ``onnx.helper``, imported with ``nx.nn.from_onnx``, compiled with
``nx.compile(device="tpu", precision="fp32")`` and compared with NumPy (exact dtype and shape).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

import neurenix_core as nx

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}


def _reduce(op: str, x: np.ndarray, keepdims: int) -> Any:
    node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=keepdims)
    graph = helper.make_graph([node], f"one_{op}", [helper.make_tensor_value_info("x", _ELEM[x.dtype], x.shape)],
                              [helper.make_tensor_value_info("y", _ELEM[x.dtype], None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: Any, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(nx.compile(nx.nn.from_onnx(model), device="tpu", precision="fp32", outputs="host", progress=False)(x))


@pytest.mark.parametrize(("op", "dtype", "fill"), [
    ("ReduceMax", np.float32, -np.inf), ("ReduceMin", np.float32, np.inf),
    ("ReduceMax", np.int64, np.iinfo(np.int64).min), ("ReduceMin", np.int64, np.iinfo(np.int64).max),
    ("ReduceMax", np.bool_, False), ("ReduceMin", np.bool_, True),
])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_max_min_of_an_empty_axis_is_the_identity(op: str, dtype: Any, fill: Any, keepdims: int) -> None:
    # jnp.max/min raise on an empty reduction; ONNX gives the dtype's lowest/highest value.
    x = np.zeros((2, 0, 4), dtype)
    got = _run(_reduce(op, x, keepdims), x)
    want = np.full((2, 1, 4) if keepdims else (2, 4), fill, dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
