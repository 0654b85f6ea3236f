"""The op-level lowering: every declared op against the core's float64 reference, attention masks,
NHWC layout tracking, bf16 default vs fp32 at Precision.HIGHEST.

Tolerances: fp32 (``Precision.HIGHEST``, float32 arithmetic) within 2e-5 relative + 2e-5 absolute
of the float64 reference on unit-scale inputs; bf16 (8 mantissa bits, float32 accumulation)
within 5e-2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_tpu.compiled import compile_graph
from neurenix_tpu.lowering import INLINE_CONSTANT_MAX
from neurenix_tpu.plugin import EXTRA_GRAPH_OPS, GRAPH_DTYPES, GRAPH_OPS, neurenix_manifest

import neurenix_core as nx
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.plugins.opnames import OPSET_NAMES

FP32_RTOL = FP32_ATOL = 2e-5
BF16_TOL = 5e-2

RNG = np.random.default_rng(11)


def _f(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _pos(*shape: int) -> np.ndarray:
    return (np.abs(RNG.standard_normal(shape)) + 0.5).astype(np.float32)


def _bool(*shape: int) -> np.ndarray:
    return RNG.random(shape) > 0.5


def _ids(*shape: int, high: int = 10) -> np.ndarray:
    return RNG.integers(0, high, shape).astype(np.int64)


Case = tuple[str, list[np.ndarray], dict[str, Any], dict[str, np.ndarray]]

X = _f(3, 4, 5)
CONV_ATTRS = {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "dilation": (1, 1), "groups": 2}
MHA_PARAMS = {"in_proj_weight": _f(24, 8, scale=0.3), "in_proj_bias": _f(24), "out_proj_weight": _f(8, 8, scale=0.3), "out_proj_bias": _f(8)}

#: (op, inputs, attrs, params): at least one case per op of the opset; more where an op has modes.
CASES: list[Case] = [
    *[(op, [X, _f(4, 5)], {}, {}) for op in ("add", "sub", "mul", "maximum", "minimum")],
    ("div", [X, _pos(4, 5)], {}, {}),
    ("div", [np.array([-7, 7, -8, 9], np.int64), np.array([2, -2, 3, 4], np.int64)], {}, {}),  # truncates toward zero
    ("pow", [_pos(3, 4), _f(3, 4)], {}, {}),
    *[(op, [_ids(3, 4, high=3), _ids(4, high=3)], {}, {}) for op in ("equal", "not_equal")],
    *[(op, [X, _f(5)], {}, {}) for op in ("less", "less_equal", "greater", "greater_equal")],
    *[(op, [_bool(3, 4), _bool(4)], {}, {}) for op in ("logical_and", "logical_or")],
    ("logical_not", [_bool(3, 4)], {}, {}),
    *[(op, [X], {}, {}) for op in ("exp", "sin", "cos", "erf", "tanh", "sigmoid", "neg", "abs", "sign", "relu", "identity", "silu")],
    *[(op, [_pos(3, 4, 5)], {}, {}) for op in ("log", "sqrt", "rsqrt", "reciprocal")],
    *[(op, [_f(3, 4, 5, scale=3.0)], {}, {}) for op in ("floor", "ceil", "hardswish")],
    ("dropout", [X], {"p": 0.3}, {}),
    ("clip", [X], {"min": -0.5, "max": 0.7}, {}),
    ("clip", [_ids(3, 4)], {"min": 2, "max": None}, {}),
    ("leaky_relu", [X], {"alpha": 0.1}, {}),
    ("hardsigmoid", [_f(3, 4, 5, scale=4.0)], {}, {}),
    ("gelu", [X], {"approximate": "none"}, {}),
    ("gelu", [X], {"approximate": "tanh"}, {}),
    ("softmax", [X], {"axis": 1}, {}),
    ("log_softmax", [X], {"axis": 0}, {}),
    ("matmul", [_f(2, 1, 3, 4), _f(5, 4, 2)], {}, {}),
    ("matmul", [_f(4), _f(3, 4, 2)], {}, {}),
    ("gemm", [_f(3, 4), _f(5, 4), _f(5)], {"trans_b": True, "alpha": 0.5, "beta": 2.0}, {}),
    ("gemm", [_f(4, 3), _f(4, 5)], {"trans_a": True}, {}),
    ("linear", [_f(2, 3, 8)], {"in_features": 8, "out_features": 5}, {"weight": _f(5, 8), "bias": _f(5)}),
    ("conv2d", [_f(2, 4, 9, 9)], CONV_ATTRS, {"weight": _f(6, 2, 3, 3), "bias": _f(6)}),
    ("conv2d", [_f(1, 3, 8, 8)], {**CONV_ATTRS, "stride": (1, 1), "dilation": (2, 2), "groups": 1}, {"weight": _f(4, 3, 3, 3)}),
    ("conv1d", [_f(2, 4, 11)], {"stride": (2,), "padding": (1,), "dilation": (1,), "groups": 2}, {"weight": _f(6, 2, 3), "bias": _f(6)}),
    ("max_pool2d", [_f(2, 3, 9, 8)], {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}, {}),
    ("avg_pool2d", [_f(2, 3, 9, 8)], {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "count_include_pad": False}, {}),
    ("avg_pool2d", [_f(2, 3, 8, 8)], {"kernel_size": (2, 2)}, {}),
    ("adaptive_avg_pool2d", [_f(1, 2, 7, 5)], {"output_size": (3, 2)}, {}),
    ("adaptive_max_pool2d", [_f(1, 2, 7, 5)], {"output_size": (3, 2)}, {}),
    ("adaptive_max_pool2d", [_f(1, 2, 8, 6)], {"output_size": (2, 3)}, {}),
    ("global_avg_pool", [_f(2, 3, 5, 4)], {}, {}),
    ("global_max_pool", [_f(2, 3, 5, 4)], {}, {}),
    *[(op, [X], {"axes": (-1, 0), "keepdims": False}, {}) for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")],
    ("reduce_prod", [(1 + 0.1 * _f(3, 4, 5))], {"axes": (1,), "keepdims": True}, {}),
    ("reduce_sum", [_ids(3, 4)], {"axes": None, "keepdims": True}, {}),
    ("argmax", [X], {"axis": 1, "keepdims": False}, {}),
    ("argmin", [X], {"axis": -1, "keepdims": True}, {}),
    ("reshape", [X], {"shape": (0, -1)}, {}),
    ("flatten", [_f(2, 3, 4, 5)], {"start_dim": 1, "end_dim": 2}, {}),
    ("transpose", [X], {"perm": (2, 0, 1)}, {}),
    ("transpose", [X], {}, {}),
    ("squeeze", [_f(2, 1, 3, 1)], {"axes": (1,)}, {}),
    ("squeeze", [_f(2, 1, 3, 1)], {}, {}),
    ("unsqueeze", [_f(2, 3)], {"axes": (0, -1)}, {}),
    ("expand", [_f(3, 1)], {"shape": (2, 3, 4)}, {}),
    ("concat", [_f(2, 3), _f(2, 5), _f(2, 1)], {"axis": -1}, {}),
    ("split", [_f(2, 7)], {"axis": 1, "sizes": (3, 4), "index": 1}, {}),
    ("slice", [_f(6, 5)], {"starts": (1, 0), "ends": (2**62, -1), "axes": (0, 1), "steps": (2, 1)}, {}),
    ("slice", [_f(6, 5)], {"starts": (-1,), "ends": (-(2**62),), "axes": (1,), "steps": (-2,)}, {}),
    ("gather", [_f(4, 5), np.array([[0, -1], [2, 3]], np.int64)], {"axis": 1}, {}),
    ("gather", [_f(4, 5), np.array([1, 3], np.int32)], {"axis": 0}, {}),
    ("gather_elements", [_f(3, 4), np.array([[0, 3], [-1, 1], [2, 2]], np.int64)], {"axis": 1}, {}),
    ("gather_nd", [_f(3, 4, 2), np.array([[0, 1], [2, -1], [1, 3]], np.int64)], {}, {}),
    ("isnan", [np.array([[0.0, np.nan, 1.0]], np.float32)], {}, {}),
    ("conv_transpose2d", [_f(2, 4, 5, 5)], {"stride": (2, 1), "padding": (1, 0), "output_padding": (1, 0), "dilation": (1, 2), "groups": 2},
     {"weight": _f(4, 3, 3, 3), "bias": _f(6)}),
    # Beyond the portable opset, declared by name: weight and bias as inputs (test_tpu_conv_inputs.py has more).
    ("conv", [_f(2, 4, 9, 8), _f(6, 2, 3, 3), _f(6)], {"strides": (2, 1), "pads": (1, 0, 2, 1), "group": 2}, {}),
    ("conv_transpose", [_f(2, 4, 5), _f(4, 3, 3)], {"strides": (2,), "pads": (0, 1), "output_padding": (1,), "group": 2}, {}),
    # declared for the transformers sweep (issue #41); edge cases in test_tpu_segment_ops.py
    ("cumsum", [X], {"axis": -1, "exclusive": True}, {}),
    ("mod", [_ids(3, 4, high=20) - 10, np.array([3, -3, 4, -4], np.int64)], {}, {}),
    ("scatter_elements", [_f(3, 4), np.array([[1, 0, 2, 1]], np.int64), _f(1, 4)], {"axis": 0, "reduction": "add"}, {}),
    ("scatter_nd", [_f(4, 3), np.array([[2], [0]], np.int64), _f(2, 3)], {}, {}),
    ("softplus", [X], {}, {}),
    ("topk", [X], {"k": 2, "axis": 1}, {}),
    ("trilu", [X], {"k": 1}, {}),
    ("embedding", [_ids(2, 5)], {}, {"weight": _f(10, 6)}),
    ("where", [_bool(3, 1), _f(3, 4), _f(4)], {}, {}),
    ("pad", [_f(1, 2, 3, 3)], {"pads": ((0, 0), (0, 0), (1, 2), (2, 1)), "mode": "reflect"}, {}),
    ("pad", [_f(2, 3)], {"pads": ((1, 0), (0, 2)), "mode": "constant", "value": 1.5}, {}),
    ("pad", [_f(2, 3)], {"pads": ((1, 1), (2, 2)), "mode": "edge"}, {}),
    ("pad", [_f(2, 3)], {"pads": ((1, 1), (2, 2)), "mode": "wrap"}, {}),
    ("cast", [_f(3, 4, scale=10.0)], {"to": "int64"}, {}),
    ("cast", [_ids(3, 4)], {"to": "float32"}, {}),
    ("cast", [_ids(3, 4, high=2)], {"to": "bool"}, {}),
    ("batch_norm2d", [_f(2, 3, 4, 4)], {"num_features": 3, "eps": 1e-5},
     {"running_mean": _f(3), "running_var": _pos(3), "weight": _f(3), "bias": _f(3)}),
    ("layer_norm", [_f(2, 5, 8)], {"normalized_shape": (8,), "eps": 1e-5}, {"weight": _f(8), "bias": _f(8)}),
    ("scaled_dot_product_attention", [_f(2, 3, 5, 4), _f(2, 3, 6, 4), _f(2, 3, 6, 3)], {}, {}),
    ("scaled_dot_product_attention", [_f(2, 3, 5, 4), _f(2, 3, 6, 4), _f(2, 3, 6, 3), _bool(5, 6) | np.eye(5, 6, dtype=bool)], {}, {}),
    ("scaled_dot_product_attention", [_f(2, 3, 5, 4), _f(2, 3, 6, 4), _f(2, 3, 6, 3), _f(2, 1, 5, 6)], {"scale": 0.3}, {}),
    ("scaled_dot_product_attention", [_f(2, 5, 4), _f(2, 5, 4), _f(2, 5, 4)], {"is_causal": True}, {}),
    ("multihead_attention", [_f(5, 2, 8)] * 3, {"embed_dim": 8, "num_heads": 2, "batch_first": False}, MHA_PARAMS),
    ("multihead_attention", [_f(2, 5, 8), _f(2, 6, 8), _f(2, 6, 8), _bool(2, 1, 1, 6) | np.eye(1, 6, dtype=bool)],
     {"embed_dim": 8, "num_heads": 2, "batch_first": True}, MHA_PARAMS),
]


def _graph(op: str, xs: list[np.ndarray], attrs: dict[str, Any], params: dict[str, np.ndarray]) -> Graph:
    names = tuple(f"x{i}" for i in range(len(xs)))
    specs = tuple(TensorSpec(n, x.shape, "bool" if x.dtype == np.bool_ else str(x.dtype)) for n, x in zip(names, xs))
    return Graph(specs, (Node("n", op, names, "y", attrs, params),), ("y",))


def _compile(tpu: Any, graph: Graph, precision: str | None = "fp32", **extra: Any) -> Any:
    return compile_graph(tpu, graph, CompileOptions(device=nx.Device("tpu", 0), precision=precision, extra=extra))


def _run(model: Any, *xs: np.ndarray) -> Any:
    out = model(*[nx.asarray(x, device="tpu:0").native for x in xs])
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)


def _check(got: np.ndarray, want: np.ndarray, rtol: float = FP32_RTOL, atol: float = FP32_ATOL) -> None:
    assert got.shape == want.shape
    if want.dtype.kind == "f":
        assert got.dtype == np.float32, "float results come back as the graph's float32"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        assert got.dtype == want.dtype, f"{got.dtype} != {want.dtype}"
        np.testing.assert_array_equal(got, want)


def test_manifest_declares_exactly_what_the_table_lowers() -> None:
    from neurenix_tpu.optable import LOWERINGS

    caps = neurenix_manifest().capabilities
    # The portable opset and the ops declared by name; ops added to the core's table later run on
    # cpu:0 through the partitioner.
    assert caps.graph_ops == GRAPH_OPS and set(GRAPH_OPS) == set(LOWERINGS) == set(OPSET_NAMES) | set(EXTRA_GRAPH_OPS)
    assert caps.graph_dtypes == GRAPH_DTYPES and set(GRAPH_DTYPES) == {"float32", "int32", "int64", "bool"}


def test_every_declared_op_has_a_case() -> None:
    assert {c[0] for c in CASES} == set(GRAPH_OPS) - {"constant"}  # constant: tested below, inside graphs


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_op_matches_the_reference_in_fp32(tpu: Any, case: Case) -> None:
    op, xs, attrs, params = case
    graph = _graph(op, xs, attrs, params)
    want = run_graph(graph, *xs)
    model = _compile(tpu, graph)
    _check(_run(model, *xs), want)


@pytest.mark.parametrize("size", [1, INLINE_CONSTANT_MAX + 1])
def test_constants_inlined_or_device_resident(tpu: Any, size: int) -> None:
    value = _f(size)
    nodes = (Node("c", "constant", (), "c", {}, {"value": value}), Node("n", "add", ("x", "c"), "y"))
    graph = Graph((TensorSpec("x", (2, size)),), nodes, ("y",))
    model = _compile(tpu, graph)
    x = _f(2, size)
    _check(_run(model, x), run_graph(graph, x))
    # Small constants become XLA literals; large ones are parameters held on the device.
    assert ("c" in model.program.params) == (size > INLINE_CONSTANT_MAX)


def test_int64_stays_int64(tpu: Any) -> None:
    big = np.array([2**40 + 3, -(2**35)], np.int64)
    graph = _graph("add", [big, np.array([1, 1], np.int64)], {}, {})
    got = _run(_compile(tpu, graph), big, np.array([1, 1], np.int64))
    assert got.dtype == np.int64 and got.tolist() == [2**40 + 4, -(2**35) + 1]


def _nhwc_chain() -> tuple[Graph, list[np.ndarray]]:
    """conv -> ops that keep or map the NHWC layout (SE scale, keepdims reductions, softmax over
    channels, channel concat, argmax, transpose, an NCHW operand, a reduction dropping the channel
    axis) -> outputs compared in the logical NCHW layout."""
    conv = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    nodes = (
        Node("conv", "conv2d", ("x",), "c", conv, {"weight": _f(6, 3, 3, 3, scale=0.3), "bias": _f(6)}),
        Node("scale.c", "constant", (), "s", {}, {"value": _f(6, 1, 1)}),
        Node("scale", "mul", ("c", "s"), "cs"),
        Node("se", "reduce_mean", ("cs",), "m", {"axes": (2, 3), "keepdims": True}),
        Node("gate", "hardsigmoid", ("m",), "g"),
        Node("apply", "mul", ("cs", "g"), "a"),
        Node("conv2", "conv2d", ("a",), "c2", conv, {"weight": _f(6, 6, 3, 3, scale=0.2)}),
        Node("cat", "concat", ("a", "c2"), "cat", {"axis": 1}),
        Node("soft", "softmax", ("cat",), "sm", {"axis": 1}),
        Node("best", "argmax", ("cat",), "am", {"axis": 1, "keepdims": True}),
        Node("gmax", "global_max_pool", ("sm",), "gm"),
        Node("perm", "transpose", ("c2",), "t", {"perm": (0, 2, 3, 1)}),
        Node("mask", "greater", ("cs", "c2"), "k"),
        Node("pick", "where", ("k", "cs", "c2"), "w"),
        Node("mix", "add", ("c2", "z"), "mz"),  # NHWC value + an NCHW graph input
        Node("chan", "reduce_sum", ("mz",), "rs", {"axes": (1,), "keepdims": False}),
    )
    graph = Graph((TensorSpec("x", (2, 3, 7, 6)), TensorSpec("z", (2, 6, 7, 6))), nodes, ("sm", "am", "gm", "t", "w", "rs"))
    return graph, [_f(2, 3, 7, 6), _f(2, 6, 7, 6)]


def test_nhwc_layout_chain_matches_the_reference(tpu: Any) -> None:
    graph, xs = _nhwc_chain()
    model = _compile(tpu, graph)
    got = _run(model, *xs)
    assert len(got) == 6
    for g, want in zip(got, run_graph(graph, *xs)):
        _check(g, want)


def test_attention_bool_mask_keeps_true_and_float_mask_adds(tpu: Any) -> None:
    q, k, v = _f(1, 2, 4, 3), _f(1, 2, 4, 3), _f(1, 2, 4, 3)
    keep_first = np.zeros((4, 4), bool)
    keep_first[:, 0] = True
    got = _run(_compile(tpu, _graph("scaled_dot_product_attention", [q, k, v, keep_first], {}, {})), q, k, v, keep_first)
    np.testing.assert_allclose(got, np.broadcast_to(v[:, :, :1], got.shape), rtol=1e-6)  # only key 0 is visible
    additive = np.where(keep_first, 0.0, -1e9).astype(np.float32)
    got_add = _run(_compile(tpu, _graph("scaled_dot_product_attention", [q, k, v, additive], {}, {})), q, k, v, additive)
    np.testing.assert_allclose(got_add, got, rtol=1e-6, atol=1e-7)


def _attention_model() -> tuple[Graph, list[np.ndarray]]:
    xs = [_f(2, 6, 8), _f(2, 6, 8), _f(2, 6, 8)]
    nodes = (
        Node("mha", "multihead_attention", ("q", "k", "v"), "h", {"embed_dim": 8, "num_heads": 2, "batch_first": True}, MHA_PARAMS),
        Node("fc", "linear", ("h",), "y", {"in_features": 8, "out_features": 4}, {"weight": _f(4, 8), "bias": _f(4)}),
    )
    return Graph(tuple(TensorSpec(n, (2, 6, 8)) for n in "qkv"), nodes, ("y",)), xs


def test_bf16_default_vs_fp32_highest(tpu: Any) -> None:
    graph, xs = _attention_model()
    want = run_graph(graph, *xs)
    fp32, bf16 = _compile(tpu, graph, "fp32"), _compile(tpu, graph, None)
    got32, got16 = _run(fp32, *xs), _run(bf16, *xs)
    np.testing.assert_allclose(got32, want, rtol=FP32_RTOL, atol=FP32_ATOL)
    np.testing.assert_allclose(got16, want, rtol=BF16_TOL, atol=BF16_TOL)
    assert np.abs(got16 - want).max() > 1e-4, "bf16 must really compute in bfloat16"
    assert bf16.precision == "bf16" and fp32.precision == "fp32"

    def hlo(model: Any) -> str:
        natives = [nx.asarray(x, device="tpu:0").native for x in xs]
        return str(model.program.jitted.lower(model.program.leaves, *natives).as_text())

    text32, text16 = hlo(fp32), hlo(bf16)
    # fp32: every dot asks for HIGHEST on float32 operands; bf16: bfloat16 operands, default precision.
    assert "HIGHEST" in text32 and "bf16" not in text32
    assert "HIGHEST" not in text16 and "bf16" in text16
    assert str(bf16.program.params["mha"]["in_proj_weight"].dtype) == "bfloat16"
    assert str(bf16.program.params["mha"]["in_proj_bias"].dtype) == "float32"
