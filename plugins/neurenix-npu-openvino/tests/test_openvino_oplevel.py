"""The op-level lowering: every op the manifest declares (``graph_ops``), lowered to opset16,
compiled by the real OpenVINO runtime in fp32 and compared with the core's float64 reference
(``neurenix_core.graph.reference.run.run_graph``); attention through OpenVINO's SDPA with bool and
additive masks; int8 through FakeQuantize, checked in the compiled model's runtime precisions."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.compiled import compile_graph
from neurenix_npu_openvino.lowering import LOWERED_OPS, lower_graph
from neurenix_npu_openvino.plugin import _GRAPH_DTYPES, _GRAPH_OPS

from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.testing.host import int8_dot_product

#: On an AVX2-only host the emulated npu's int8 models (OpenVINO's CPU int8 kernels) were measured
#: to differ from the core's integer reference by up to 12 quantization steps, not the same way on
#: every run: the silent int8 error of issue #25. Expected to fail there until it is fixed; on CPUs
#: with VNNI or AMX these tests must pass.
NPU_INT8_XFAIL = pytest.mark.xfail(not int8_dot_product(), strict=False, reason=(
    "emulated npu int8 on a CPU without VNNI/AMX differs from the integer reference (issue #25)"))


#: float32 against the float64 reference: a few ulps of the largest value, per element.
FP32_RTOL, FP32_ATOL = 2e-5, 2e-5

RNG = np.random.default_rng(11)


def _f(*shape: int, low: float | None = None) -> np.ndarray:
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(x) + np.float32(low) if low is not None else x


def _i(*shape: int, high: int = 5, low: int | None = None) -> np.ndarray:
    return RNG.integers(-high if low is None else low, high, shape).astype(np.int64)


def _b(*shape: int) -> np.ndarray:
    return RNG.random(shape) > 0.4


def _graph(nodes: list[tuple[str, list[str], dict[str, Any], dict[str, Any]]], inputs: list[np.ndarray]) -> Graph:
    """Nodes (op, input names, attrs, params) in order, reading graph inputs x0, x1, ... and
    earlier outputs n0, n1, ...; the last node's output is the graph output."""
    specs = tuple(TensorSpec(f"x{i}", tuple(a.shape), "bool" if a.dtype == np.bool_ else str(a.dtype)) for i, a in enumerate(inputs))
    built = tuple(Node(f"n{j}", op, tuple(ins), f"n{j}", attrs, params) for j, (op, ins, attrs, params) in enumerate(nodes))
    return Graph(specs, built, (built[-1].output,))


def _one(op: str, *inputs: np.ndarray, attrs: dict[str, Any] | None = None, params: dict[str, Any] | None = None) -> tuple[Graph, list[np.ndarray]]:
    return _graph([(op, [f"x{i}" for i in range(len(inputs))], attrs or {}, params or {})], list(inputs)), list(inputs)


def _conv_w(o: int, c: int, *k: int) -> dict[str, np.ndarray]:
    return {"weight": _f(o, c, *k) * np.float32(0.3), "bias": _f(o)}


def _mha_params(e: int) -> dict[str, np.ndarray]:
    s = np.float32(1.0 / np.sqrt(e))
    return {"in_proj_weight": _f(3 * e, e) * s, "in_proj_bias": _f(3 * e) * np.float32(0.1), "out_proj_weight": _f(e, e) * s,
            "out_proj_bias": _f(e) * np.float32(0.1)}


def _cases() -> dict[str, Callable[[], tuple[Graph, list[np.ndarray]]]]:
    c: dict[str, Callable[[], tuple[Graph, list[np.ndarray]]]] = {}
    for op in ("add", "sub", "mul", "maximum", "minimum"):
        c[op] = lambda op=op: _one(op, _f(2, 3, 4), _f(3, 4))
    c["add-int-float"] = lambda: _one("add", _i(2, 3), _f(2, 3))
    c["div"] = lambda: _one("div", _f(2, 3, 4), _f(4, low=0.5))
    c["div-int-truncates"] = lambda: _one("div", _i(3, 5, high=20), np.array([3, -3, 4, -7, 2], np.int64))
    c["pow"] = lambda: _one("pow", _f(2, 5, low=0.1), _f(5))
    for op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        c[op] = lambda op=op: _one(op, _i(3, 4, high=2).astype(np.float32), _i(4, high=2).astype(np.float32))
    c["less-int"] = lambda: _one("less", _i(3, 4), _i(3, 4))
    for op in ("logical_and", "logical_or"):
        c[op] = lambda op=op: _one(op, _b(3, 4), _b(4))
    c["logical_not"] = lambda: _one("logical_not", _b(3, 4))
    for op in ("exp", "sin", "cos", "erf", "tanh", "sigmoid", "floor", "ceil", "neg", "abs", "sign", "relu", "identity", "dropout",
               "silu", "hardswish"):
        c[op] = lambda op=op: _one(op, _f(2, 3, 5) * np.float32(2))
    for op in ("log", "sqrt", "rsqrt", "reciprocal"):
        c[op] = lambda op=op: _one(op, _f(2, 3, 5, low=0.1))
    for op in ("relu", "abs", "neg", "sign"):
        c[f"{op}-int"] = lambda op=op: _one(op, _i(3, 4))
    c["clip"] = lambda: _one("clip", _f(3, 4), attrs={"min": -0.5, "max": 0.7})
    c["clip-min-only"] = lambda: _one("clip", _f(3, 4), attrs={"min": -0.2})
    c["leaky_relu"] = lambda: _one("leaky_relu", _f(3, 4), attrs={"alpha": 0.1})
    c["hardsigmoid"] = lambda: _one("hardsigmoid", _f(3, 4) * np.float32(4))
    c["hardsigmoid-onnx"] = lambda: _one("hardsigmoid", _f(3, 4) * np.float32(4), attrs={"alpha": 0.2, "beta": 0.5})
    c["gelu"] = lambda: _one("gelu", _f(3, 7))
    c["gelu-tanh"] = lambda: _one("gelu", _f(3, 7), attrs={"approximate": "tanh"})
    c["softmax"] = lambda: _one("softmax", _f(2, 3, 5), attrs={"axis": 1})
    c["log_softmax"] = lambda: _one("log_softmax", _f(2, 3, 5), attrs={"axis": -1})
    c["matmul"] = lambda: _one("matmul", _f(2, 3, 4, 5), _f(5, 6))
    c["matmul-vector"] = lambda: _one("matmul", _f(5), _f(2, 5, 6))
    c["matmul-broadcast"] = lambda: _one("matmul", _f(2, 1, 3, 4), _f(3, 4, 2))
    c["gemm"] = lambda: _one("gemm", _f(4, 3), _f(5, 4), _f(3, 5), attrs={"trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 2.0})
    c["gemm-no-c"] = lambda: _one("gemm", _f(3, 4), _f(4, 5))
    c["linear"] = lambda: _one("linear", _f(2, 3, 6), params={"weight": _f(4, 6), "bias": _f(4)})
    c["linear-no-bias"] = lambda: _one("linear", _f(2, 6), params={"weight": _f(4, 6)})
    c["conv2d"] = lambda: _one("conv2d", _f(2, 4, 9, 8), attrs={"stride": (2, 1), "padding": (1, 2), "dilation": (2, 1), "groups": 2},
                               params=_conv_w(6, 2, 3, 3))
    c["conv2d-depthwise"] = lambda: _one("conv2d", _f(1, 4, 6, 6), attrs={"padding": (1, 1), "groups": 4}, params={"weight": _f(4, 1, 3, 3)})
    c["conv1d"] = lambda: _one("conv1d", _f(2, 4, 11), attrs={"stride": (2,), "padding": (2,), "dilation": (2,), "groups": 2},
                               params=_conv_w(6, 2, 3))
    c["max_pool2d"] = lambda: _one("max_pool2d", _f(2, 3, 7, 9), attrs={"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)})
    c["avg_pool2d"] = lambda: _one("avg_pool2d", _f(2, 3, 7, 9), attrs={"kernel_size": (3, 2), "padding": (1, 1)})
    c["avg_pool2d-exclude-pad"] = lambda: _one("avg_pool2d", _f(2, 3, 7, 9), attrs={"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1),
                                                                                  "count_include_pad": False})
    c["adaptive_avg_pool2d"] = lambda: _one("adaptive_avg_pool2d", _f(2, 3, 7, 9), attrs={"output_size": (3, 2)})
    c["adaptive_max_pool2d"] = lambda: _one("adaptive_max_pool2d", _f(2, 3, 7, 9), attrs={"output_size": (3, 4)})
    c["global_avg_pool"] = lambda: _one("global_avg_pool", _f(2, 3, 5, 4))
    c["global_max_pool"] = lambda: _one("global_max_pool", _f(2, 3, 5, 4))
    for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"):
        c[op] = lambda op=op: _one(op, _f(2, 3, 4), attrs={"axes": (1, -1), "keepdims": False})
        c[f"{op}-all"] = lambda op=op: _one(op, _f(2, 3) * np.float32(0.8))
    c["argmax"] = lambda: _one("argmax", np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32), attrs={"axis": 1, "keepdims": False})
    c["argmin"] = lambda: _one("argmin", np.array([[1, 0, 3, 0], [2, 2, 1, 1]], np.float32), attrs={"axis": -1})
    c["reshape"] = lambda: _one("reshape", _f(2, 3, 4), attrs={"shape": (0, -1, 2)})
    c["flatten"] = lambda: _one("flatten", _f(2, 3, 4, 5), attrs={"start_dim": 1, "end_dim": 2})
    c["transpose"] = lambda: _one("transpose", _f(2, 3, 4), attrs={"perm": (1, 2, 0)})
    c["transpose-reverse"] = lambda: _one("transpose", _f(2, 3, 4))
    c["squeeze"] = lambda: _one("squeeze", _f(2, 1, 4, 1), attrs={"axes": (1,)})
    c["squeeze-all"] = lambda: _one("squeeze", _f(2, 1, 4, 1))
    c["unsqueeze"] = lambda: _one("unsqueeze", _f(2, 4), attrs={"axes": (0, -1)})
    c["expand"] = lambda: _one("expand", _f(3, 1), attrs={"shape": (2, 3, 4)})
    c["expand-int"] = lambda: _one("expand", _i(1, 4), attrs={"shape": (3, 1)})
    c["concat"] = lambda: _one("concat", _f(2, 3), _f(2, 1), _f(2, 2), attrs={"axis": -1})
    c["split"] = lambda: _one("split", _f(2, 7), attrs={"axis": 1, "sizes": (2, 4, 1), "index": 1})
    c["slice"] = lambda: _one("slice", _f(5, 6, 4), attrs={"starts": (1, -2), "ends": (2**62, 0), "axes": (0, 1), "steps": (2, -2)})
    c["slice-default-axes"] = lambda: _one("slice", _f(5, 6), attrs={"starts": (-3,), "ends": (5,)})
    c["gather"] = lambda: _one("gather", _f(4, 5, 3), np.array([[0, -1], [2, 4]], np.int64), attrs={"axis": 1})
    c["gather-scalar"] = lambda: _one("gather", _f(4, 5), np.array(2, np.int64), attrs={"axis": 0})
    c["gather_elements"] = lambda: _one("gather_elements", _f(3, 4, 2), _i(3, 4, 2, high=3), attrs={"axis": 1})
    c["gather_elements-cropped-int32"] = lambda: _one("gather_elements", _f(5, 6), _i(3, 4, high=6).astype(np.int32), attrs={"axis": -1})
    c["gather_nd"] = lambda: _one("gather_nd", _f(3, 4, 2), _i(5, 2, high=3))
    c["gather_nd-full-coordinates"] = lambda: _one("gather_nd", _f(3, 4), np.array([[[0, -1]], [[2, 1]]], np.int64))
    c["scatter_elements"] = lambda: _one("scatter_elements", _f(4, 3), np.array([[1, -1, 0], [-4, 2, 3]], np.int64), _f(2, 3))
    c["isnan"] = lambda: _one("isnan", np.array([[np.nan, 1.0, -np.inf], [0.0, np.nan, np.inf]], np.float32))
    c["conv_transpose2d"] = lambda: _one("conv_transpose2d", _f(2, 4, 5, 6), attrs={"stride": (2, 2), "padding": (1, 0), "output_padding": (1, 1)},
                                         params={"weight": _f(4, 3, 3, 2), "bias": _f(3)})
    c["conv_transpose2d-grouped-dilated"] = lambda: _one(
        "conv_transpose2d", _f(2, 4, 5, 5), attrs={"stride": (2, 1), "padding": (1, 0), "output_padding": (1, 0), "dilation": (1, 2), "groups": 2},
        params={"weight": _f(4, 3, 3, 3)})
    c["embedding"] = lambda: _one("embedding", np.array([[0, 3, 9], [1, 1, 2]], np.int64), params={"weight": _f(10, 6)})
    c["where"] = lambda: _one("where", _b(3, 4), _f(3, 4), _f(4))
    c["pad"] = lambda: _one("pad", _f(2, 3, 4), attrs={"pads": ((0, 0), (1, 2), (2, 1)), "value": 0.5})
    for mode in ("reflect", "edge", "wrap"):
        c[f"pad-{mode}"] = lambda mode=mode: _one("pad", _f(2, 3, 4), attrs={"pads": ((0, 0), (1, 2), (2, 1)), "mode": mode})
    c["cast"] = lambda: _one("cast", np.array([-2.7, -0.5, 0.0, 0.4, 3.9], np.float32), attrs={"to": "int64"})
    c["cast-to-bool"] = lambda: _one("cast", np.array([-2.7, 0.0, 0.4], np.float32), attrs={"to": "bool"})
    c["cast-int-to-float"] = lambda: _one("cast", _i(3, 4), attrs={"to": "float32"})
    c["cast-bool-to-float"] = lambda: _one("cast", _b(3, 4), attrs={"to": "float32"})
    c["constant"] = lambda: (_graph([("constant", [], {}, {"value": _f(3, 4)}), ("add", ["x0", "n0"], {}, {})], [x := _f(2, 3, 4)]), [x])
    c["constant-scalar"] = lambda: (_graph([("constant", [], {}, {"value": np.array(2.5)}), ("mul", ["x0", "n0"], {}, {})], [x := _f(3)]), [x])
    c["batch_norm2d"] = lambda: _one("batch_norm2d", _f(2, 3, 4, 5), attrs={"eps": 1e-3},
                                     params={"running_mean": _f(3), "running_var": _f(3, low=0.5), "weight": _f(3), "bias": _f(3)})
    c["layer_norm"] = lambda: _one("layer_norm", _f(2, 3, 8), attrs={"normalized_shape": (8,)}, params={"weight": _f(8), "bias": _f(8)})
    c["scaled_dot_product_attention"] = lambda: _one("scaled_dot_product_attention", _f(2, 3, 5, 8), _f(2, 3, 7, 8), _f(2, 3, 7, 4))
    c["sdpa-bool-mask"] = lambda: _one("scaled_dot_product_attention", _f(2, 3, 5, 8), _f(2, 3, 7, 8), _f(2, 3, 7, 4),
                                       np.tril(np.ones((5, 7), bool), 1), attrs={"scale": 0.3})
    c["sdpa-additive-mask"] = lambda: _one("scaled_dot_product_attention", _f(2, 3, 5, 8), _f(2, 3, 7, 8), _f(2, 3, 7, 4),
                                           np.where(_b(2, 1, 1, 7), 0.0, -1e4).astype(np.float32) + _f(2, 1, 5, 7))
    c["sdpa-causal"] = lambda: _one("scaled_dot_product_attention", _f(2, 5, 8), _f(2, 5, 8), _f(2, 5, 8), attrs={"is_causal": True})
    c["sdpa-causal-and-mask"] = lambda: _one("scaled_dot_product_attention", _f(2, 5, 8), _f(2, 5, 8), _f(2, 5, 8),
                                             np.array([True, True, True, False, True]), attrs={"is_causal": True})
    c["sdpa-rank-2"] = lambda: _one("scaled_dot_product_attention", _f(5, 8), _f(7, 8), _f(7, 3), _b(5, 7) | np.eye(5, 7, dtype=bool))
    c["multihead_attention"] = lambda: _one("multihead_attention", _f(2, 5, 16), _f(2, 7, 16), _f(2, 7, 16),
                                            attrs={"num_heads": 4, "batch_first": True}, params=_mha_params(16))
    c["mha-seq-first-bool-mask"] = lambda: _one("multihead_attention", _f(5, 2, 16), _f(5, 2, 16), _f(5, 2, 16),
                                                np.tril(np.ones((5, 5), bool)), attrs={"num_heads": 2}, params=_mha_params(16))
    return c


CASES = _cases()


def _shared_cases() -> dict[str, Callable[[], tuple[Graph, list[np.ndarray]]]]:
    # The shared table's case for each op added to the opset after this file's own cases were
    # written (tests/support/opset_cases.py), so the plugin runs exactly what other plugins run.
    from opset_cases import CASES as SHARED
    from opset_cases import case_graph

    wanted = {"gather_elements", "gather_nd", "isnan", "conv_transpose2d"}
    return {f"shared-{c[0]}": (lambda c=c: case_graph(c)) for c in SHARED if c[1] in wanted}


CASES |= _shared_cases()


def test_manifest_declares_exactly_what_is_lowered() -> None:
    from neurenix_core.graph.opset import OPSET

    assert set(_GRAPH_OPS) == set(LOWERED_OPS)
    assert len(_GRAPH_OPS) == len(set(_GRAPH_OPS))
    assert set(_GRAPH_OPS) <= set(OPSET)
    assert "float32" in _GRAPH_DTYPES and {"int64", "bool"} <= set(_GRAPH_DTYPES)


def test_every_declared_op_has_a_case_here() -> None:
    covered = {g.nodes[-1].op for g, _ in (make() for make in CASES.values())} | {"constant"}
    assert set(_GRAPH_OPS) <= covered, sorted(set(_GRAPH_OPS) - covered)


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_the_core_reference(npu: Any, case: str) -> None:
    graph, inputs = CASES[case]()
    want = np.asarray(run_graph(graph, *inputs))
    got = compile_graph(npu, graph, CompileOptions(device="npu:0", precision="fp32"))(*inputs)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=FP32_RTOL, atol=FP32_ATOL * max(1.0, float(np.max(np.abs(want)))))
    else:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


def _op_types(model: Any) -> list[str]:
    return [op.get_type_name() for op in model.get_ordered_ops()]


def test_attention_lowers_to_openvinos_sdpa_op() -> None:
    for case in ("scaled_dot_product_attention", "sdpa-bool-mask", "sdpa-additive-mask", "multihead_attention"):
        graph, _ = CASES[case]()
        types = _op_types(lower_graph(graph))
        assert "ScaledDotProductAttention" in types, (case, types)
        assert "Softmax" not in types, (case, types)


def test_bool_and_additive_masks_mean_what_the_core_says(npu: Any) -> None:
    # The same mask as bool (True = attend) and as additive (0 / -inf): one answer, the reference's,
    # and different from no mask at all (so the mask really reaches the kernel).
    q, k, v = _f(1, 2, 4, 8), _f(1, 2, 6, 8), _f(1, 2, 6, 8)
    keep = np.array([[True] * 6, [True, False] * 3, [False] * 5 + [True], [True] * 3 + [False] * 3])
    additive = np.where(keep, 0.0, -np.inf).astype(np.float32)
    options = CompileOptions(device="npu:0", precision="fp32")
    outs = []
    for mask in (keep, additive):
        graph, inputs = _one("scaled_dot_product_attention", q, k, v, mask)
        outs.append(compile_graph(npu, graph, options)(*inputs))
        np.testing.assert_allclose(outs[-1], run_graph(graph, *inputs), rtol=FP32_RTOL, atol=FP32_ATOL)
    np.testing.assert_allclose(outs[0], outs[1], rtol=FP32_RTOL, atol=FP32_ATOL)
    unmasked, inputs = _one("scaled_dot_product_attention", q, k, v)
    assert np.max(np.abs(compile_graph(npu, unmasked, options)(*inputs) - outs[0])) > 1e-2


def test_int8_zoo_cnn_runs_every_conv_and_fc_in_int8(npu: Any) -> None:
    torch = pytest.importorskip("torch")
    import model_zoo as zoo

    import neurenix_core as nx
    from neurenix_core import nn

    model = zoo.build("mobilenetv3_block")  # depthwise conv, hardswish, squeeze-excite
    imported = nn.from_torch(model, torch.zeros(8, 3, 16, 16))
    rng = np.random.default_rng(5)
    calibration = [rng.standard_normal((8, 3, 16, 16)).astype(np.float32) for _ in range(3)]
    compiled = nx.compile(imported, device="npu:0", quantize="int8", calibration=calibration, progress=False)
    compiled(calibration[0])
    match = re.search(r"(\d+)/(\d+) conv/FC layer\(s\) in integer precision", compiled.summary)
    assert match, compiled.summary
    ints, total = int(match.group(1)), int(match.group(2))
    convs = sum(1 for n in imported.to_graph().nodes if n.op in ("conv2d", "linear"))
    assert total >= convs and ints == total, compiled.summary


@NPU_INT8_XFAIL
def test_int8_layer_precisions_read_from_the_runtime_graph(npu: Any) -> None:
    from neurenix_core.graph import quantization as Q

    graph = _graph(
        [("conv2d", ["x0"], {"padding": (1, 1)}, _conv_w(8, 3, 3, 3)), ("relu", ["n0"], {}, {}),
         ("conv1d", ["x1"], {"padding": (1,)}, _conv_w(4, 3, 3)), ("flatten", ["n1"], {}, {}), ("flatten", ["n2"], {}, {}),
         ("concat", ["n3", "n4"], {"axis": 1}, {}), ("constant", [], {}, {"value": _f(8 * 36 + 4 * 6, 5) * np.float32(0.05)}),
         ("matmul", ["n5", "n6"], {}, {})],
        [_f(4, 3, 6, 6), _f(4, 3, 6)],
    )
    calibration = [(_f(4, 3, 6, 6), _f(4, 3, 6)) for _ in range(3)]
    plan = Q.calibrate(graph, calibration, bits=8, progress=False)
    model = compile_graph(npu, graph, CompileOptions(device="npu:0", precision="int8", quantization=plan))
    layers = model.compute_layers()
    assert len(layers) == 3, model.layer_precisions()  # conv2d, conv1d, matmul with a constant weight
    assert all(p.lower() in ("u8", "i8") for p in layers.values()), layers
    x = calibration[0]
    want, got = np.asarray(run_graph(graph, *x)), model(*x)
    assert np.max(np.abs(got - want)) <= 0.05 * np.max(np.abs(want))


@pytest.mark.parametrize("name", ["vit", "bert"])
def test_transformers_run_whole_on_the_device(npu: Any, name: str) -> None:
    torch = pytest.importorskip("torch")
    import model_zoo as zoo

    import neurenix_core as nx
    from neurenix_core import nn

    if name == "vit":
        model = zoo.build("vit")
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32))
        imported, inputs = nn.from_torch(model, x), (x.numpy(),)
    else:
        pytest.importorskip("transformers")
        model = zoo.tiny_bert()
        ids, mask = torch.randint(0, 100, (2, 9)), torch.ones(2, 9, dtype=torch.int64)
        imported, inputs = nn.from_torch(model, {"input_ids": ids, "attention_mask": mask}), (ids.numpy(), mask.numpy())
    with nx.fallback_policy("error"):  # a CPU segment would raise
        compiled = nx.compile(imported, device="npu:0", precision="fp32", progress=False)
        compiled(*inputs)
    placement = compiled.placement
    assert not placement.partitioned and not placement.off_device, placement.line()
    assert set(placement.nodes) == {"npu:0"} and placement.nodes["npu:0"] > 0  # constants are data, not counted


@NPU_INT8_XFAIL
@pytest.mark.parametrize("name", ["vit", "bert"])
def test_int8_transformers_run_their_linear_layers_in_int8_on_the_device(npu: Any, name: str) -> None:
    """int8 TinyViT / tiny BERT through nx.compile: the whole graph on npu:0, every linear (and
    ViT's patch conv) a u8 x i8 FullyConnected / Convolution in the compiled model's runtime graph,
    close to the cpu:0 int8 model (the core's integer reference). Attention (q k^T, softmax, p v)
    has FakeQuantize on q, k, v and on its output but none inside (the plan has no parameters
    for scores and probabilities), so OpenVINO runs it in f32, as the integer reference does."""
    torch = pytest.importorskip("torch")
    import model_zoo as zoo

    import neurenix_core as nx
    from neurenix_core import nn

    rng = np.random.default_rng(3)
    if name == "vit":
        batch = 200
        imported = nn.from_torch(zoo.build("vit"), torch.zeros(batch, 3, 16, 16))
        calibration: list[Any] = [rng.standard_normal((batch, 3, 16, 16)).astype(np.float32) for _ in range(4)]
        inputs: tuple[np.ndarray, ...] = (rng.standard_normal((batch, 3, 16, 16)).astype(np.float32),)
        layers = sum(1 for n in imported.to_graph().nodes if n.op in ("linear", "conv2d"))
    else:
        pytest.importorskip("transformers")
        mask = np.ones((16, 9), np.int64)
        mask[:, 7:] = 0
        ids = rng.integers(0, 100, (16, 9))
        imported = nn.from_torch(zoo.tiny_bert(), {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)})
        calibration = [(rng.integers(0, 100, (16, 9)), mask) for _ in range(3)]
        inputs = (ids, mask)
        layers = sum(1 for n in imported.to_graph().nodes if n.op in ("linear", "matmul", "gemm"))
    with nx.fallback_policy("error"):  # a CPU segment would raise
        compiled = nx.compile(imported, device="npu:0", quantize="int8", calibration=calibration, progress=False, outputs="host")
        got = compiled(*inputs)
    with nx.fallback_policy("allow"):
        want = nx.compile(imported, device="cpu:0", quantize="int8", calibration=calibration, progress=False, outputs="host")(*inputs)
    placement = compiled.placement
    assert not placement.partitioned and not placement.off_device, placement.line()
    match = re.search(r"(\d+)/(\d+) conv/FC layer\(s\) in integer precision", compiled.summary)
    assert match, compiled.summary
    # Every linear/conv is integer; the rest are attention's activation x activation matmuls
    # (q k^T, p v: 2 per layer), which run in f32 as in the integer reference. Before Snippets
    # were turned off for int8 models (config.QUANTIZED_CPU_PROPERTIES) they hid in a fused Subgraph.
    attention = 2 * sum(1 for n in imported.to_graph().nodes if n.op in ("softmax", "scaled_dot_product_attention", "multihead_attention"))
    assert int(match.group(1)) >= layers and int(match.group(2)) - int(match.group(1)) <= attention, (compiled.summary, layers)
    got0 = np.asarray(got[0] if isinstance(got, tuple) else got, np.float64)
    want0 = np.asarray(want[0] if isinstance(want, tuple) else want, np.float64)
    step = float(compiled.plan.activations[imported.to_graph().outputs[0]].scale[0])
    steps = np.abs(got0 - want0) / step
    print(f"\nint8 {name} npu:0 vs cpu:0: median {np.median(steps):.1f} / max {steps.max():.1f} steps; {compiled.summary}")
    if name == "vit":
        # Measured: median 1 step, top-1 agreement 0.95 (top-2 logits lie a median 17 steps apart).
        assert np.median(steps) <= 2 and np.mean(got0.argmax(-1) == want0.argmax(-1)) >= 0.9
    else:
        assert np.median(steps) <= 1 and steps.max() <= 3  # measured: median 0, max 1
