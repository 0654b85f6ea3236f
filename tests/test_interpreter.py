"""The planned CPU interpreter (graph/reference/interpreter.py) and the convolution / pooling kernels it
runs: the same values as the node-by-node opset interpreter, float32 within 1e-5 of the float64
reference, other dtypes through the plain references, plans kept per graph and shape."""

from __future__ import annotations

import math

import numpy as np
import pytest

from neurenix_core.backends import cpu_nn as K
from neurenix_core.errors import ShapeError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.interpreter import plan_for, run_planned
from neurenix_core.graph.reference.run import run_graph

torch = pytest.importorskip("torch")


def _node_by_node(graph: Graph, *xs: np.ndarray) -> object:
    """The unplanned interpreter in the graph's own dtypes (return_values takes that path)."""
    values = run_graph(graph, *xs, float_dtype=None, return_values=True)
    outs = tuple(values[o] for o in graph.outputs)
    return outs[0] if len(outs) == 1 else outs


def _conv_bn_relu(dtype: str = "float32", groups: int = 1, stride: int = 1) -> Graph:
    rng = np.random.default_rng(1)
    c, o = 8, 8
    np_dtype = np.dtype(dtype)
    w = rng.standard_normal((o, c // groups, 3, 3)).astype(np_dtype)
    bn = {"running_mean": rng.standard_normal(o).astype(np_dtype), "running_var": rng.uniform(0.5, 2, o).astype(np_dtype),
          "weight": rng.standard_normal(o).astype(np_dtype), "bias": rng.standard_normal(o).astype(np_dtype)}
    nodes = (
        Node("conv", "conv2d", ("x",), "c", {"stride": (stride, stride), "padding": (1, 1), "groups": groups}, {"weight": w}),
        Node("bn", "batch_norm2d", ("c",), "b", {"eps": 1e-5}, bn),
        Node("relu", "relu", ("b",), "r"),
        Node("pool", "max_pool2d", ("r",), "p", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}),
        Node("fc_in", "flatten", ("p",), "f"),
        Node("fc", "linear", ("f",), "y", {}, {"weight": rng.standard_normal((5, o * 16 // stride ** 2)).astype(np_dtype),
                                               "bias": rng.standard_normal(5).astype(np_dtype)}),
    )
    return Graph((TensorSpec("x", (2, c, 8, 8), dtype),), nodes, ("y",))


@pytest.mark.parametrize("groups,stride", [(1, 1), (2, 1), (8, 2)])
def test_fused_float32_matches_float64_reference(groups: int, stride: int) -> None:
    graph = _conv_bn_relu(groups=groups, stride=stride)
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 8)).astype(np.float32)
    got = run_graph(graph, x, float_dtype=None)
    assert got.dtype == np.float32
    # conv, batch norm and relu ran as one step: their values never exist
    assert [len(s.nodes) for s in plan_for(graph, [x]).steps] == [3, 1, 1, 1]
    np.testing.assert_allclose(got, run_graph(graph, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, _node_by_node(graph, x), rtol=1e-5, atol=1e-5)


def test_other_float_dtypes_run_the_plain_references() -> None:
    graph = _conv_bn_relu("float64")
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 8))
    got = run_graph(graph, x, float_dtype=None)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, _node_by_node(graph, x))


def test_intermediate_graph_outputs_are_not_fused_away() -> None:
    g = _conv_bn_relu()
    graph = Graph(g.inputs, g.nodes, ("c", "y"))
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 8)).astype(np.float32)
    conv, y = run_graph(graph, x, float_dtype=None)
    ref_conv, ref_y = _node_by_node(graph, x)
    np.testing.assert_allclose(conv, ref_conv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    assert len(plan_for(graph, [x]).steps[0].nodes) == 1  # "c" is returned: the conv stands alone


def test_plans_are_kept_per_graph() -> None:
    graph = _conv_bn_relu()
    x = np.zeros((2, 8, 8, 8), np.float32)
    assert plan_for(graph, [x]) is plan_for(graph, [x])


def test_shape_error_names_the_layer() -> None:
    graph = _conv_bn_relu()
    with pytest.raises(ShapeError, match="'conv'"):
        run_graph(graph, np.zeros((2, 3, 8, 8), np.float32), float_dtype=None)


def test_gelu_float32_keeps_the_tails() -> None:
    x = np.linspace(-9, 9, 2001).astype(np.float32)
    graph = Graph((TensorSpec("x", x.shape),), (Node("g", "gelu", ("x",), "y"),), ("y",))
    got, ref = run_graph(graph, x, float_dtype=None), run_graph(graph, x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
    # Relative to the exact value down to gelu(-9) ~ -1e-18 (where 1 + erf cancels, even in float64).
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=0)


def test_elementwise_chain_keeps_values() -> None:
    n = 50
    nodes = tuple(Node(f"n{i}", ("add", "mul", "sub")[i % 3], (f"v{i}", "x"), f"v{i + 1}") for i in range(n))
    graph = Graph((TensorSpec("x", (4,)), TensorSpec("v0", (4,))), nodes, (f"v{n}",))
    x, v = np.full(4, 1.0001, np.float32), np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_graph(graph, x, v, float_dtype=None), _node_by_node(graph, x, v))


def test_blocked_float32_steps_keep_the_references_bits() -> None:
    """softmax, layer norm and hardswish run block by block in the plan (arrays larger than a
    block, NaN and infinities included): the same bits as the node-by-node references; gelu (its
    own float32 evaluation) within 1e-5 of the exact value down to 1e-20 in its negative tail."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 70, 200)) * 4).astype(np.float32)
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    w, b = rng.standard_normal(200).astype(np.float32), rng.standard_normal(200).astype(np.float32)
    nodes = (
        Node("ln", "layer_norm", ("x",), "a", {"normalized_shape": (200,), "eps": 1e-12}, {"weight": w, "bias": b}),
        Node("sm", "softmax", ("a",), "s", {"axis": -1}),
        Node("hs", "hardswish", ("x",), "h"),
        Node("ge", "gelu", ("x",), "g"),
    )
    graph = Graph((TensorSpec("x", x.shape),), nodes, ("s", "h", "g"))
    with np.errstate(all="ignore"):
        planned, plain = run_graph(graph, x, float_dtype=None), _node_by_node(graph, x)
    for got, want in zip(planned[:2], plain[:2]):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    finite = np.isfinite(x)
    exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x[finite].astype(np.float64)])
    np.testing.assert_allclose(planned[2][finite], exact, rtol=1e-5, atol=1e-20)  # float32 underflows below ~1e-38


def test_linear_on_a_batch_of_sequences_is_one_gemm_with_the_same_values() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 9, 32)).astype(np.float32)
    node = Node("fc", "linear", ("x",), "y", {}, {"weight": rng.standard_normal((16, 32)).astype(np.float32),
                                                    "bias": rng.standard_normal(16).astype(np.float32)})
    graph = Graph((TensorSpec("x", x.shape),), (node,), ("y",))
    got = run_graph(graph, x, float_dtype=None)
    assert got.shape == (4, 9, 16) and got.dtype == np.float32
    np.testing.assert_allclose(got, run_graph(graph, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_graph(graph, x[:, ::2], float_dtype=None), run_graph(graph, x[:, ::2]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,c,h,w,o,k,s,p,d,g", [
    (2, 4, 9, 8, 6, 3, 1, 1, 1, 1), (1, 6, 10, 11, 6, 5, 2, 2, 1, 6), (2, 6, 7, 7, 12, 3, 1, 1, 2, 6),
    (1, 8, 9, 9, 4, 3, 2, 0, 1, 2), (2, 3, 5, 5, 4, 1, 2, 0, 1, 1), (1, 4, 6, 6, 4, 1, 1, 0, 1, 4), (1, 3, 8, 8, 5, 2, 3, 1, 2, 1),
])
def test_conv2d_kernel_matches_torch(n: int, c: int, h: int, w: int, o: int, k: int, s: int, p: int, d: int, g: int) -> None:
    rng = np.random.default_rng(0)
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c // g, k, k)), rng.standard_normal(o)
    got = K.conv2d(x, wt, b, s, p, d, g)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), s, p, d, g).numpy()
    assert got.flags.c_contiguous and got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    xi, wi = rng.integers(-5, 5, (n, c, h, w)), rng.integers(-5, 5, (o, c // g, k, k))  # the integer reference's path
    gi = K.conv2d(xi, wi, None, s, p, d, g)
    assert gi.dtype == np.int64
    np.testing.assert_array_equal(gi, torch.nn.functional.conv2d(torch.from_numpy(xi).double(), torch.from_numpy(wi).double(), None, s, p, d, g).numpy())


@pytest.mark.parametrize("n,c,h,k,s,p,d", [(3, 64, 9, 3, 1, 1, 1), (2, 96, 11, 5, 2, 2, 1), (1, 128, 10, 3, 2, 2, 2), (40, 72, 5, 3, 1, 1, 1)])
def test_depthwise_float32_channels_last_matches_torch(n: int, c: int, h: int, k: int, s: int, p: int, d: int) -> None:
    """Wide float32 depthwise convolutions take the channels-last tap loop (blocks of samples:
    the (40, 72, 5) case spans several); float64 the stacked matmul. Both agree with torch."""
    rng = np.random.default_rng(2)
    x, wt, b = rng.standard_normal((n, c, h, h + 1)), rng.standard_normal((c, 1, k, k)), rng.standard_normal(c)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), s, p, d, c).numpy()
    got32 = K.conv2d(x.astype(np.float32), wt.astype(np.float32), b.astype(np.float32), s, p, d, c)
    assert got32.dtype == np.float32 and got32.flags.c_contiguous and got32.shape == ref.shape
    np.testing.assert_allclose(got32, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(K.conv2d(x, wt, b, s, p, d, c), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("k,s,p", [(3, 2, 1), (2, 2, 0), (3, 1, 1), (2, 1, 0)])
def test_max_pool2d_kernel_matches_torch(k: int, s: int, p: int) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 8)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan
    np.testing.assert_array_equal(K.max_pool2d(x, k, s, p), torch.nn.functional.max_pool2d(torch.from_numpy(x), k, s, p).numpy())


def test_plans_share_float32_weights_across_shapes() -> None:
    """A dynamic graph's plan per input shape uses the graph's float32 weights as they are: a
    language model decoding at a new shape per step holds one copy of its weights, not one per
    shape kept (tracemalloc sees NumPy's allocations)."""
    import tracemalloc

    w = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)  # 2 MiB
    graph = Graph((TensorSpec("x", (1, 1024), "float32", dynamic=(0,)),),
                  (Node("fc", "linear", ("x",), "y", {}, {"weight": w}),), ("y",))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        # float32 sums of 1024 products: each result within 1e-6 of the sum of their magnitudes
        # (a few float32 ulps of it; the order of the sum is the BLAS's, which differs by CPU)
        exact = np.ones((1, 1024)) @ w.T.astype(np.float64)
        bound = 1e-6 * float(np.abs(w).sum(axis=1).max())
        for batch in range(1, 6):  # five shapes, five plans
            x = np.ones((batch, 1024), np.float32)
            np.testing.assert_allclose(run_planned(graph, [x], 1), np.broadcast_to(exact, (batch, 512)), rtol=0, atol=bound)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < w.nbytes, f"plans of five shapes hold {grown} bytes: the {w.nbytes}-byte weight was copied"
