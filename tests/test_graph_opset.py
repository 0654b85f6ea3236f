"""The opset table: every composite's decomposition equals the composite; rules agree with semantics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from neurenix_core.errors import ShapeError
from neurenix_core.graph import opset
from neurenix_core.graph.ir import OPS, Graph, Node, TensorSpec
from neurenix_core.graph.ir.decompose import decompose_node, legalize
from neurenix_core.graph.ir.shapes import infer_values
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.plugins.opnames import OPSET_NAMES, PORTABLE_ATTRS

RNG = np.random.default_rng(7)


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# op -> (input specs, attrs, params) for one node of each composite
CASES: dict[str, tuple[list[tuple[tuple[int, ...], str]], dict[str, Any], dict[str, np.ndarray]]] = {
    "linear": ([((2, 3, 8), "float32")], {"in_features": 8, "out_features": 5}, {"weight": _w(5, 8), "bias": _w(5)}),
    "gelu": ([((4, 9), "float32")], {"approximate": "none"}, {}),
    "silu": ([((4, 9), "float32")], {}, {}),
    "hardswish": ([((4, 9), "float32")], {}, {}),
    "conv1d": ([((2, 4, 11), "float32")], {"stride": (2,), "padding": (1,), "dilation": (1,), "groups": 2}, {"weight": _w(6, 2, 3), "bias": _w(6)}),
    "global_avg_pool": ([((2, 3, 5, 4), "float32")], {}, {}),
    "global_max_pool": ([((2, 3, 5, 4), "float32")], {}, {}),
    "embedding": ([((2, 5), "int64")], {}, {"weight": _w(10, 6)}),
    "batch_norm2d": ([((2, 3, 4, 4), "float32")], {"num_features": 3, "eps": 1e-5},
                     {"running_mean": _w(3), "running_var": np.abs(_w(3)) + 0.5, "weight": _w(3), "bias": _w(3)}),
    "layer_norm": ([((2, 5, 8), "float32")], {"normalized_shape": (8,), "eps": 1e-5}, {"weight": _w(8), "bias": _w(8)}),
    "multihead_attention": ([((5, 2, 8), "float32")] * 3, {"embed_dim": 8, "num_heads": 2, "batch_first": False},
                            {"in_proj_weight": _w(24, 8), "in_proj_bias": _w(24), "out_proj_weight": _w(8, 8), "out_proj_bias": _w(8)}),
}


def _inputs(specs: list[tuple[tuple[int, ...], str]]) -> list[np.ndarray]:
    return [RNG.integers(0, 10, s) if d == "int64" else RNG.standard_normal(s) for s, d in specs]


def test_the_names_only_tuple_is_the_portable_opset() -> None:
    """Plugins declare ``graph_ops=OPSET_NAMES`` without importing the opset: the portable ops,
    sorted, once each, every one in the opset with every attribute it had then."""
    assert OPSET_NAMES == tuple(sorted(set(OPSET_NAMES))) == tuple(sorted(PORTABLE_ATTRS))
    assert set(OPSET_NAMES) <= set(opset.OPSET)
    for op, attrs in PORTABLE_ATTRS.items():
        assert set(attrs) <= set(opset.OPSET[op].attrs), op


def test_every_composite_has_a_case() -> None:
    assert set(CASES) == set(opset.COMPOSITES)


@pytest.mark.parametrize("op", sorted(CASES))
def test_decomposition_equals_the_composite(op: str) -> None:
    specs, attrs, params = CASES[op]
    names = [f"x{i}" for i in range(len(specs))]
    node = Node("n", op, tuple(names), "n", attrs, params)
    graph = Graph(tuple(TensorSpec(n, s, d) for n, (s, d) in zip(names, specs)), (node,), ("n",))
    xs = _inputs(specs)
    composite = run_graph(graph, *xs)
    prims = legalize(graph, keep=lambda n: False)
    assert all(not opset.OPSET[n.op].composite for n in prims.nodes) and [n.op for n in prims.nodes] != [op]
    assert infer_values(prims)["n"] == infer_values(graph)["n"]
    decomposed = run_graph(prims, *xs)
    np.testing.assert_allclose(decomposed, composite, rtol=1e-6, atol=1e-6)


def test_gelu_tanh_decomposition() -> None:
    node = Node("g", "gelu", ("x",), "g", {"approximate": "tanh"})
    graph = Graph((TensorSpec("x", (50,)),), (node,), ("g",))
    x = np.linspace(-6, 6, 50)
    np.testing.assert_allclose(run_graph(legalize(graph, lambda n: False), x), run_graph(graph, x), rtol=1e-6, atol=1e-7)


def test_multihead_attention_decomposes_into_primitives_recursively() -> None:
    _specs, attrs, params = CASES["multihead_attention"]
    ops = [n.op for n in decompose_node(Node("m", "multihead_attention", ("q", "k", "v"), "m", attrs, params))]
    assert ops.count("linear") == 4 and "scaled_dot_product_attention" in ops


def test_legacy_ops_are_in_the_opset_with_their_attributes() -> None:
    assert OPS <= set(opset.OPSET) and len(OPS) == 17
    assert set(opset.OPSET["conv2d"].attrs) >= {"in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups"}


def test_unknown_attribute_and_bad_shape_are_named() -> None:
    bad = Graph((TensorSpec("x", (2, 3)),), (Node("r", "reshape", ("x",), "r", {"shape": (4, 2)}),), ("r",))
    with pytest.raises(ShapeError, match=r"layer 'r' \(reshape\)"):
        infer_values(bad)
    with pytest.raises(ValueError, match="no attribute"):
        opset.attrs_of("relu", {"alpha": 1})


PRIMITIVE_CASES: list[tuple[str, list[np.ndarray], dict[str, Any]]] = [
    ("gather", [RNG.standard_normal((4, 5)), np.array([[0, -1], [2, 3]])], {"axis": 1}),
    ("slice", [RNG.standard_normal((6, 5))], {"starts": (1, 0), "ends": (2**62, -1), "axes": (0, 1), "steps": (2, 1)}),
    ("pad", [RNG.standard_normal((1, 2, 3, 3))], {"pads": ((0, 0), (0, 0), (1, 2), (2, 1)), "mode": "reflect"}),
    ("split", [RNG.standard_normal((2, 7))], {"axis": 1, "sizes": (3, 4), "index": 1}),
    ("expand", [RNG.standard_normal((3, 1))], {"shape": (2, 3, 4)}),
    ("reduce_mean", [RNG.standard_normal((2, 3, 4))], {"axes": (-1, 0), "keepdims": False}),
    ("argmax", [RNG.standard_normal((2, 3, 4))], {"axis": 1, "keepdims": False}),
    ("unsqueeze", [RNG.standard_normal((2, 3))], {"axes": (0, -1)}),
    ("squeeze", [RNG.standard_normal((2, 1, 3, 1))], {"axes": (1,)}),
    ("transpose", [RNG.standard_normal((2, 3, 4))], {"perm": (2, 0, 1)}),
    ("gemm", [RNG.standard_normal((3, 4)), RNG.standard_normal((5, 4)), RNG.standard_normal((5,))], {"trans_b": True, "alpha": 0.5}),
    ("matmul", [RNG.standard_normal((2, 1, 3, 4)), RNG.standard_normal((5, 4, 2))], {}),
    ("scaled_dot_product_attention", [RNG.standard_normal((2, 3, 5, 4))] * 3 + [RNG.random((5, 5)) > 0.3], {}),
    ("adaptive_max_pool2d", [RNG.standard_normal((1, 2, 7, 5))], {"output_size": (3, 2)}),
    ("where", [RNG.random((3, 1)) > 0.5, RNG.standard_normal((3, 4)), RNG.standard_normal((4,))], {}),
    ("concat", [RNG.standard_normal((2, 3)), RNG.standard_normal((2, 5))], {"axis": -1}),
    ("cast", [RNG.standard_normal((3,)) * 10], {"to": "int64"}),
    ("log_softmax", [RNG.standard_normal((3, 4))], {"axis": -1}),
    ("gather_elements", [np.arange(12.0).reshape(3, 4), np.array([[0, 3], [-1, 1]])], {"axis": 1}),
    ("gather_nd", [np.arange(24.0).reshape(2, 3, 4), np.array([[0, 1], [1, -1]])], {}),
    ("isnan", [np.array([0.0, np.nan, 1.0])], {}),
]


def test_gather_elements_and_gather_nd_follow_onnx() -> None:
    data = np.arange(12.0).reshape(3, 4)
    # torch.gather / ONNX GatherElements: out[i][j] = data[i][idx[i][j]] (axis 1), indices shorter than data on axis 0
    got = opset.evaluate("gather_elements", {"axis": 1}, [data, np.array([[0, 3], [-1, 1]])], {})
    np.testing.assert_array_equal(got, [[0.0, 3.0], [7.0, 5.0]])
    got = opset.evaluate("gather_elements", {"axis": 0}, [data, np.array([[2, 0, 1, 0]])], {})
    np.testing.assert_array_equal(got, [[8.0, 1.0, 6.0, 3.0]])
    cube = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(opset.evaluate("gather_nd", {}, [cube, np.array([[0, 1], [1, -1]])], {}), [cube[0, 1], cube[1, 2]])
    np.testing.assert_array_equal(opset.evaluate("gather_nd", {}, [cube, np.array([[1, 2, 3]])], {}), [23.0])
    with pytest.raises(ValueError, match="out of range"):
        opset.evaluate("gather_elements", {"axis": 1}, [data, np.array([[4]])], {})
    with pytest.raises(ValueError, match="batch_dims=0"):
        opset.infer("gather_nd", {"batch_dims": 1}, [(2, 3), (2, 1)], ["float32", "int64"], {})


@pytest.mark.parametrize("op,xs,attrs", PRIMITIVE_CASES, ids=[c[0] for c in PRIMITIVE_CASES])
def test_shape_and_dtype_rules_match_the_reference(op: str, xs: list[np.ndarray], attrs: dict[str, Any]) -> None:
    dtypes = ["bool" if x.dtype == np.bool_ else str(x.dtype) for x in xs]
    shape, dtype = opset.infer(op, attrs, [x.shape for x in xs], dtypes, {})
    out = opset.evaluate(op, attrs, xs, {})
    assert out.shape == shape
    assert (out.dtype.kind == "f") == dtype.startswith("float") and (dtype != "bool" or out.dtype == np.bool_)


def test_sdpa_bool_mask_and_causal() -> None:
    q = RNG.standard_normal((1, 4, 3))
    causal = opset.evaluate("scaled_dot_product_attention", {"is_causal": True}, [q, q, q], {})
    masked = opset.evaluate("scaled_dot_product_attention", {}, [q, q, q, np.tril(np.ones((4, 4), bool))], {})
    np.testing.assert_allclose(causal, masked)
    np.testing.assert_allclose(causal[0, 0], q[0, 0])  # the first query sees only the first key


def test_markdown_table_lists_every_op() -> None:
    table = opset.markdown_table()
    assert all(f"| `{op}` |" in table for op in opset.OPSET)
