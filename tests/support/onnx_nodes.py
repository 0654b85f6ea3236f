"""One-node ONNX models for the ONNX family tests: build one with ``onnx.helper``, run it on
cpu:0 through ``from_onnx`` + ``nx.compile``, and compare with an exact dtype and shape."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import neurenix_core as nx
from neurenix_core import nn

__all__ = ["check", "one_node_model", "run_node"]


def one_node_model(op: str, inputs: dict[str, np.ndarray], outputs: list[str], attrs: dict[str, Any] | None = None,
                   consts: dict[str, np.ndarray] | None = None, order: list[str] | None = None, opset: int = 24) -> Any:
    """A model of one ``op`` node: ``inputs`` are graph inputs, ``consts`` initializers, ``order``
    the node's input names when they differ from inputs then consts ("" for a left-out one)."""
    consts = consts or {}
    node = helper.make_node(op, order or list(inputs) + list(consts), outputs, **(attrs or {}))
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_node(op: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **kw: Any) -> list[np.ndarray]:
    """The node's outputs on cpu:0 as host arrays (``kw`` goes to :func:`one_node_model`)."""
    imported = nn.from_onnx(one_node_model(op, inputs, outputs or ["y"], **kw))
    compiled = nx.compile(imported, device="cpu:0", precision="fp32", outputs="host", progress=False)
    got = compiled(*inputs.values())
    return [np.asarray(g) for g in (got if isinstance(got, (list, tuple)) else [got])]


def check(got: np.ndarray, want: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Same dtype and shape; integers and bools equal, floats within the tolerance."""
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
