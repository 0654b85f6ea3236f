"""The op-level graph through the TFLite writer and the real LiteRT interpreter (emulated edgetpu).

fp32: each declared op against ``neurenix_core.graph.reference.run.run_graph`` (float64), within
float32 rounding (rtol 2e-5 of the output's magnitude). int8: each op the quantized CNNs use,
after a conv so the value is a real int8 activation, against the core's integer reference
``run_quantized`` with LiteRT's reference kernels: data movement bit-exact, arithmetic within
one output step (TFLite's fixed-point LOGISTIC/HARD_SWISH/MEAN against the reference's float
evaluation). Partitioning: an op the plugin does not declare runs on cpu:0 and the placement
report names it.
"""

from __future__ import annotations

import numpy as np
import pytest
from neurenix_edgetpu.compiled import compile_graph
from neurenix_edgetpu.lowering import lower
from neurenix_edgetpu.plugin import GRAPH_OPS

from neurenix_core.device import Device
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.quantization import calibrate
from neurenix_core.graph.reference import run as reference

DEV = Device("edgetpu", 0)
FP32_RTOL = 2e-5
RNG = np.random.default_rng(11)
X = (2, 3, 8, 8)
CONV = Node("c", "conv2d", ("x",), "a", {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1},
            {"weight": RNG.normal(0, 0.4, (6, 3, 3, 3)).astype(np.float32), "bias": RNG.normal(0, 0.1, 6).astype(np.float32)})


def _compile(backend, graph, precision="fp32", plan=None, **extra):
    return compile_graph(backend, graph, CompileOptions(device=DEV, precision=precision, quantization=plan, extra=extra))


def _image(*nodes: Node, out: str = "y") -> Graph:
    """conv2d (so the value is an NHWC image inside the model) followed by ``nodes``."""
    return Graph((TensorSpec("x", X),), (CONV, *nodes), (out,))


def _const(name: str, value: np.ndarray) -> Node:
    return Node(name, "constant", (), name, {}, {"value": np.asarray(value)})


def _n(op: str, inputs: tuple[str, ...], out: str = "y", **attrs) -> Node:
    return Node(f"{op}_{out}", op, inputs, out, attrs)


FP32_IMAGE_CASES = {
    "add_image_const": ([_const("k", RNG.normal(size=(6, 1, 1)).astype(np.float32)), _n("add", ("a", "k"))], "ADD"),
    "sub_image_image": ([_n("relu", ("a",), "r"), _n("sub", ("a", "r"))], "SUB"),
    "mul_scalar": ([_const("k", np.float32(0.5)), _n("mul", ("a", "k"))], "MUL"),
    "maximum_image_image": ([_n("relu", ("a",), "r"), _n("sigmoid", ("a",), "s"), _n("maximum", ("r", "s"))], "MAXIMUM"),
    "minimum_const": ([_const("k", RNG.normal(size=(8,)).astype(np.float32)), _n("minimum", ("a", "k"))], "MINIMUM"),
    "clip_relu6": ([_n("mul", ("a", "a"), "sq"), _n("clip", ("sq",), min=0.0, max=6.0)], "RELU6"),
    "clip_n1_1": ([_n("clip", ("a",), min=-1.0, max=1.0)], "RELU_N1_TO_1"),
    "clip_any": ([_n("clip", ("a",), min=-0.3, max=0.7)], "MINIMUM"),
    "clip_low": ([_n("clip", ("a",), min=0.2)], "MAXIMUM"),
    "sigmoid": ([_n("sigmoid", ("a",))], "LOGISTIC"),
    "tanh": ([_n("tanh", ("a",))], "TANH"),
    "hardswish": ([_n("hardswish", ("a",))], "HARD_SWISH"),
    "hardsigmoid": ([_n("hardsigmoid", ("a",))], "ADD"),
    "silu": ([_n("silu", ("a",))], "LOGISTIC"),
    "gelu_erf": ([_n("gelu", ("a",), approximate="none")], "GELU"),
    "gelu_tanh": ([_n("gelu", ("a",), approximate="tanh")], "GELU"),
    "rsqrt": ([_n("mul", ("a", "a"), "sq"), _const("e", np.float32(0.1)), _n("add", ("sq", "e"), "p"), _n("rsqrt", ("p",))], "RSQRT"),
    "softmax_channels": ([_n("softmax", ("a",), axis=1)], "SOFTMAX"),
    "mean_keep": ([_n("reduce_mean", ("a",), axes=(2, 3), keepdims=True)], "MEAN"),
    "mean_flat": ([_n("reduce_mean", ("a",), axes=(2, 3), keepdims=False)], "MEAN"),
    "mean_channels_flat": ([_n("reduce_mean", ("a",), axes=(1,), keepdims=False)], "MEAN"),
    "sum": ([_n("reduce_sum", ("a",), axes=(1, 3), keepdims=True)], "SUM"),
    "max": ([_n("reduce_max", ("a",), axes=(3,), keepdims=False)], "REDUCE_MAX"),
    "min_all": ([_n("reduce_min", ("a",), axes=None, keepdims=False)], "REDUCE_MIN"),
    "flatten_2": ([_n("flatten", ("a",), start_dim=2, end_dim=-1)], "RESHAPE"),
    "reshape": ([_n("reshape", ("a",), shape=(2, -1, 16))], "RESHAPE"),
    "unsqueeze_squeeze": ([_n("unsqueeze", ("a",), "u", axes=(1,)), _n("squeeze", ("u",), axes=(1,))], "RESHAPE"),
    "transpose_to_nhwc": ([_n("transpose", ("a",), perm=(0, 2, 3, 1))], "CONV_2D"),  # the stored tensor itself
    "transpose_any": ([_n("transpose", ("a",), perm=(3, 1, 0, 2))], "TRANSPOSE"),
    "concat_channels": ([_n("relu", ("a",), "r"), _n("concat", ("a", "r"), axis=1)], "CONCATENATION"),
    "concat_const": ([_const("k", RNG.normal(size=(2, 6, 8, 1)).astype(np.float32)), _n("concat", ("a", "k"), axis=-1)], "CONCATENATION"),
    "slice_steps": ([_n("slice", ("a",), starts=(1, -7), ends=(5, 100), axes=(1, 3), steps=(2, 3))], "STRIDED_SLICE"),
    "split": ([_n("split", ("a",), axis=2, sizes=(3, 5), index=1)], "STRIDED_SLICE"),
    "gather_scalar": ([_const("i", np.array(-2)), _n("gather", ("a", "i"), axis=1)], "GATHER"),
    "gather_vector": ([_const("i", np.array([[0, 5], [3, 3]])), _n("gather", ("a", "i"), axis=3)], "GATHER"),
    "gather_nd_const": ([_const("i", np.array([[1, -1], [0, 5], [-2, 3]])), _n("gather_nd", ("a", "i"))], "GATHER_ND"),
    "conv_transpose": ([Node("ct", "conv_transpose2d", ("a",), "y", {"stride": (2, 2), "padding": (1, 0), "output_padding": (1, 1)},
                             {"weight": RNG.normal(0, 0.3, (6, 4, 3, 2)).astype(np.float32), "bias": RNG.normal(size=4).astype(np.float32)})],
                       "TRANSPOSE_CONV"),
    "conv_transpose_grouped_dilated": ([Node("ct", "conv_transpose2d", ("a",), "y", {"stride": (1, 2), "padding": (2, 1), "dilation": (2, 1),
                                                                                  "output_padding": (0, 1), "groups": 3},
                                             {"weight": RNG.normal(0, 0.3, (6, 2, 3, 3)).astype(np.float32)})], "CONCATENATION"),
    "pad_zero": ([_n("pad", ("a",), pads=((0, 0), (1, 0), (2, 1), (0, 3)))], "PAD"),
    "pad_value": ([_n("pad", ("a",), pads=((0, 0), (0, 0), (1, 1), (1, 1)), value=-1.5)], "PADV2"),
    "linear_3d": ([_n("flatten", ("a",), "f", start_dim=2, end_dim=-1),
                   Node("fc", "linear", ("f",), "y", {}, {"weight": RNG.normal(size=(5, 64)).astype(np.float32),
                                                            "bias": RNG.normal(size=5).astype(np.float32)})], "FULLY_CONNECTED"),
    "matmul_const": ([_n("flatten", ("a",), "f", start_dim=2, end_dim=-1), _const("w", RNG.normal(size=(64, 4)).astype(np.float32)),
                      _n("matmul", ("f", "w"))], "FULLY_CONNECTED"),
    "matmul_runtime": ([_n("transpose", ("a",), "t", perm=(0, 1, 3, 2)), _n("matmul", ("a", "t"))], "BATCH_MATMUL"),
}


def test_the_manifest_declares_exactly_what_the_writer_lowers():
    from neurenix_edgetpu.lowering import _HANDLED

    from neurenix_core.graph.opset import OPSET

    assert set(GRAPH_OPS) == _HANDLED and set(GRAPH_OPS) <= set(OPSET)


@pytest.mark.parametrize("case", sorted(FP32_IMAGE_CASES))
def test_fp32_op_matches_the_reference(edgetpu, case):
    nodes, builtin = FP32_IMAGE_CASES[case]
    graph = _image(*nodes)
    model = _compile(edgetpu, graph)
    assert builtin in model.info.ops, model.info.ops
    if case == "transpose_to_nhwc":
        assert model.info.ops.count("TRANSPOSE") == 1  # the input's; NCHW -> NHWC of the conv output is free
    for seed in range(2):
        x = np.random.default_rng(seed).normal(size=X).astype(np.float32)
        want = reference.run_graph(graph, x)
        got = model(x)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=FP32_RTOL * np.abs(want).max())


def _attention(mask: str) -> tuple[Graph, tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(2, 3, 5, 4)).astype(np.float32) for _ in range(3))
    specs = [TensorSpec("q", q.shape), TensorSpec("k", k.shape), TensorSpec("v", v.shape)]
    inputs: tuple[np.ndarray, ...] = (q, k, v)
    attrs = {"is_causal": mask == "causal", "scale": 0.3 if mask == "float" else None}
    names = ["q", "k", "v"]
    if mask == "bool":
        m = np.ones((2, 1, 5, 5), np.bool_)
        m[1, :, :, 3:] = False  # padding tokens of the second sequence, as BERT's attention mask
        specs.append(TensorSpec("m", m.shape, "bool"))
        inputs += (m,)
        names.append("m")
    elif mask == "float":
        m = rng.normal(size=(5, 5)).astype(np.float32)
        specs.append(TensorSpec("m", m.shape))
        inputs += (m,)
        names.append("m")
    node = Node("att", "scaled_dot_product_attention", tuple(names), "y", attrs)
    return Graph(tuple(specs), (node,), ("y",)), inputs


@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_fp32_attention_is_batch_matmul_and_softmax(edgetpu, mask):
    graph, inputs = _attention(mask)
    model = _compile(edgetpu, graph)
    ops = model.info.ops
    assert ops.count("BATCH_MATMUL") == 2 and "SOFTMAX" in ops
    assert ("SELECT_V2" in ops) == (mask in ("bool", "causal"))
    want = reference.run_graph(graph, *inputs)
    np.testing.assert_allclose(model(*inputs), want, rtol=0, atol=FP32_RTOL * np.abs(want).max())


@pytest.mark.parametrize("op", ["gather_nd", "conv_transpose2d"])
def test_fp32_shared_opset_case(edgetpu, op):
    """The shared per-op case (tests/support/opset_cases.py) of the ops added to the opset later:
    graph inputs straight into the op (runtime gather_nd coordinates, grouped dilated kernel)."""
    from opset_cases import CASES, case_graph

    graph, inputs = case_graph(next(c for c in CASES if c[1] == op))
    model = _compile(edgetpu, graph)
    assert {"gather_nd": "GATHER_ND", "conv_transpose2d": "TRANSPOSE_CONV"}[op] in model.info.ops, model.info.ops
    want = reference.run_graph(graph, *inputs)
    np.testing.assert_allclose(model(*inputs), want, rtol=0, atol=FP32_RTOL * np.abs(want).max())


def test_gather_nd_runtime_coordinates_count_negatives_from_the_end(edgetpu):
    data = RNG.normal(size=(3, 4, 2)).astype(np.float32)
    graph = Graph((TensorSpec("d", data.shape), TensorSpec("i", (2, 2), "int64")), (Node("g", "gather_nd", ("d", "i"), "y", {}),), ("y",))
    model = _compile(edgetpu, graph)
    idx = np.array([[-1, -4], [2, 3]], np.int64)
    np.testing.assert_array_equal(model(data, idx), reference.run_graph(graph, data, idx).astype(np.float32))


def test_int8_transposed_convolution_is_refused_by_name(edgetpu):
    from neurenix_core.errors import UnsupportedOperationError

    nodes, _ = FP32_IMAGE_CASES["conv_transpose"]
    graph = _image(*nodes)
    plan = calibrate(graph, [RNG.normal(size=X).astype(np.float32)], progress=False)
    with pytest.raises(UnsupportedOperationError, match="'ct' \\(conv_transpose2d\\).*precision='fp32'"):
        lower(graph, "int8", plan)


def test_int64_token_ids_gather_an_embedding(edgetpu):
    table = np.random.default_rng(2).normal(size=(20, 6)).astype(np.float32)
    graph = Graph((TensorSpec("ids", (2, 5), "int64"),),
                  (_const("table", table), Node("g", "gather", ("table", "ids"), "y", {"axis": 0})), ("y",))
    ids = np.array([[0, 3, 19, 7, 7], [1, 2, 3, 4, 5]], np.int64)
    model = _compile(edgetpu, graph)
    assert model.inputs[0].dtype == np.int64
    np.testing.assert_array_equal(model(ids), table[ids])


# ---------------------------------------------------------------------- int8
INT8_CASES = {
    # op the quantized CNNs use -> (nodes after the conv, largest difference in output steps)
    "hardswish": ([_n("hardswish", ("a",))], 1),
    "relu6": ([_n("clip", ("a",), min=0.0, max=6.0)], 1),
    "clip": ([_n("clip", ("a",), min=-0.3, max=0.7)], 1),
    "maximum": ([_n("relu", ("a",), "r"), _n("sigmoid", ("a",), "s"), _n("maximum", ("r", "s"))], 1),
    "hardsigmoid": ([_n("hardsigmoid", ("a",))], 1),
    "silu": ([_n("silu", ("a",))], 1),
    "sigmoid": ([_n("sigmoid", ("a",))], 1),
    "tanh": ([_n("tanh", ("a",))], 1),
    "gelu": ([_n("gelu", ("a",))], 1),
    "global_mean": ([_n("reduce_mean", ("a",), axes=(2, 3), keepdims=True)], 1),
    "mean_flat": ([_n("reduce_mean", ("a",), axes=(2, 3), keepdims=False)], 1),
    "squeeze_excite": ([_n("reduce_mean", ("a",), "s", axes=(2, 3), keepdims=True), _n("sigmoid", ("s",), "t"), _n("mul", ("a", "t"))], 1),
    "sub": ([_n("reduce_mean", ("a",), "s", axes=(2, 3), keepdims=True), _n("sub", ("a", "s"))], 1),
    "add_relu": ([_n("relu", ("a",), "r"), _n("add", ("a", "r"))], 1),
    "concat": ([_n("relu", ("a",), "r"), _n("concat", ("a", "r"), axis=1)], 0),
    "transpose": ([_n("transpose", ("a",), perm=(0, 2, 1, 3))], 0),
    "reshape": ([_n("reshape", ("a",), shape=(2, 6, 64))], 0),
    "slice": ([_n("slice", ("a",), starts=(1,), ends=(7,), axes=(2,), steps=(2,))], 0),
    "pad": ([_n("pad", ("a",), pads=((0, 0), (0, 0), (1, 2), (2, 1)))], 0),
    "reduce_max": ([_n("reduce_max", ("a",), axes=(1,), keepdims=True)], 0),
    "softmax": ([_n("softmax", ("a",), axis=1)], 0),
    "matmul": ([_n("transpose", ("a",), "t", perm=(0, 1, 3, 2)), _n("matmul", ("a", "t"))], 1),
    "matmul_const": ([_const("w", RNG.normal(size=(8, 3)).astype(np.float32)), _n("matmul", ("a", "w"))], 1),
}


@pytest.mark.parametrize("case", sorted(INT8_CASES))
def test_int8_op_against_the_integer_reference(edgetpu, case):
    nodes, steps = INT8_CASES[case]
    graph = _image(*nodes)
    rng = np.random.default_rng(21)
    batches = [rng.normal(size=X).astype(np.float32) for _ in range(4)]
    plan = calibrate(graph, batches, progress=False)
    model = _compile(edgetpu, graph, "int8", plan, kernels="reference")
    assert model.config["kernels"] == "reference"
    step = float(plan.activations["y"].scale[0])
    worst = max(np.abs(model(x) - reference.run_quantized(graph, plan, x)).max() for x in batches) / step
    assert worst <= steps + 1e-3, f"{case}: {worst:.2f} output steps from the integer reference"


@pytest.mark.parametrize("rank", [2, 3])
def test_int8_matmul_with_a_constant_is_fully_connected_with_the_plans_per_channel_weights(edgetpu, rank):
    """A matmul against a 2-D float constant is a linear layer: the core's plan holds per-channel
    int8 weights for it (axis 1 of the stored (K, N) constant) and run_quantized multiplies it as
    FULLY_CONNECTED. Columns of very different magnitudes make per-tensor weights miss by many steps."""
    import tflite

    rng = np.random.default_rng(3)
    w8 = (rng.normal(size=(12, 5)) * np.array([0.01, 0.1, 1.0, 5.0, 0.3])).astype(np.float32)
    shape = (4, 12) if rank == 2 else (2, 3, 12)
    graph = Graph((TensorSpec("x", shape),), (_const("w", w8), _n("matmul", ("x", "w"))), ("y",))
    batches = [rng.normal(size=shape).astype(np.float32) for _ in range(4)]
    plan = calibrate(graph, batches, progress=False)
    wq = plan.weights["matmul_y"]
    assert wq.axis == 1 and np.asarray(wq.scale).shape == (5,)
    written = lower(graph, "int8", plan)
    assert written.op_counts.get("FULLY_CONNECTED") == 1 and "BATCH_MATMUL" not in written.op_counts, written.op_counts
    m = tflite.Model.GetRootAsModel(written.data, 0)
    sg = m.Subgraphs(0)
    fc = next(sg.Operators(i) for i in range(sg.OperatorsLength())
              if m.OperatorCodes(sg.Operators(i).OpcodeIndex()).BuiltinCode() == tflite.BuiltinOperator.FULLY_CONNECTED)
    q = sg.Tensors(fc.Inputs(1)).Quantization()
    assert q.QuantizedDimension() == 0 and q.ScaleLength() == 5
    np.testing.assert_array_equal(np.float32([q.Scale(i) for i in range(5)]), np.asarray(wq.scale, np.float32))
    model = _compile(edgetpu, graph, "int8", plan, kernels="reference")
    step = float(plan.activations["y"].scale[0])
    worst = max(np.abs(model(x) - reference.run_quantized(graph, plan, x)).max() for x in batches) / step
    assert worst <= 1 + 1e-3, f"{worst:.2f} output steps from the integer reference"


def test_int8_mean_takes_the_plans_parameters_for_its_output(edgetpu):
    """A global average pool's output has its own observed range; the MEAN tensor is written
    with the plan's parameters for that value, not its input's."""
    import tflite

    graph = _image(_n("reduce_mean", ("a",), axes=(2, 3), keepdims=True))
    rng = np.random.default_rng(8)
    plan = calibrate(graph, [rng.normal(size=X).astype(np.float32) for _ in range(3)], progress=False)
    ins, out = plan.activations["a"], plan.activations["y"]
    assert not np.isclose(float(ins.scale[0]), float(out.scale[0]))  # the case this test is about
    m = tflite.Model.GetRootAsModel(lower(graph, "int8", plan).data, 0)
    sg = m.Subgraphs(0)
    mean_out = [sg.Operators(i).Outputs(0) for i in range(sg.OperatorsLength())
                if m.OperatorCodes(sg.Operators(i).OpcodeIndex()).BuiltinCode() == tflite.BuiltinOperator.MEAN]
    q = sg.Tensors(mean_out[0]).Quantization()
    assert np.float32(q.Scale(0)) == np.float32(out.scale[0]) and q.ZeroPoint(0) == int(out.zero_point[0])


@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_int8_attention_is_float_between_dequantize_and_quantize(edgetpu, mask):
    """The plan has no parameters for the scores and probabilities inside an attention node, and
    the core's integer reference runs it in float between a dequantize and a quantize: the int8
    model does the same (DEQUANTIZE, float BATCH_MATMUL/SOFTMAX, QUANTIZE) within one output step."""
    graph, inputs = _attention(mask)
    rng = np.random.default_rng(6)
    batches = [inputs] + [tuple(rng.normal(size=a.shape).astype(np.float32) if a.dtype == np.float32 else a for a in inputs) for _ in range(2)]
    plan = calibrate(graph, batches, progress=False)
    model = _compile(edgetpu, graph, "int8", plan, kernels="reference")
    ops = model.info.ops
    assert ops.count("BATCH_MATMUL") == 2 and "SOFTMAX" in ops and "DEQUANTIZE" in ops
    step = float(plan.activations["y"].scale[0])
    worst = max(np.abs(model(*b) - reference.run_quantized(graph, plan, *b)).max() for b in batches) / step
    assert worst <= 1 + 1e-3, f"{worst:.2f} output steps from the integer reference"


# ---------------------------------------------------------------------- partitioning
def test_undeclared_op_runs_on_cpu_and_the_report_names_it(edgetpu):
    import neurenix_core as nx

    assert "exp" not in GRAPH_OPS and "div" not in GRAPH_OPS
    w2 = RNG.normal(0, 0.3, (4, 6, 1, 1)).astype(np.float32)
    graph = _image(_n("exp", ("a",), "e"), _n("div", ("a", "e"), "d"),
                   Node("c2", "conv2d", ("d",), "y", {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}, {"weight": w2}))
    with nx.fallback_policy("allow"):
        compiled = nx.compile(graph, device="edgetpu:0", precision="fp32", progress=False, outputs="host")
        x = np.random.default_rng(1).normal(size=X).astype(np.float32)
        got = compiled(x)
    want = reference.run_graph(graph, x)
    np.testing.assert_allclose(got, want, rtol=0, atol=FP32_RTOL * np.abs(want).max())
    placement = compiled.placement
    off = {o.node: (o.op, o.reason) for o in placement.off_device}
    assert set(off) == {"exp_e", "div_d"}
    assert all("not declared by plugin edgetpu" in reason for _, reason in off.values())
    line = placement.line()
    assert "2 nodes on cpu:0" in line and "exp (" in line and "div (" in line
    assert placement.nodes["edgetpu:0"] == 2  # both convolutions stay on the device
    assert sum(1 for s in placement.segments if s.on_device) == 2


def test_int8_pool_output_with_its_own_plan_parameters_is_requantized(edgetpu):
    """TFLite's int8 pooling keeps its input's parameters; a plan that gives the pooled value its
    own (a calibration that observes pool outputs) gets one int8 -> int8 QUANTIZE after the pool."""
    import dataclasses

    from neurenix_core.graph.ir import QuantParams

    graph = _image(_n("avg_pool2d", ("a",), kernel_size=(2, 2), stride=(2, 2)))
    rng = np.random.default_rng(9)
    batches = [rng.normal(size=X).astype(np.float32) for _ in range(3)]
    plan = calibrate(graph, batches, progress=False)
    own = QuantParams(np.asarray(plan.activations["y"].scale, np.float32) * 0.5, np.asarray(plan.activations["y"].zero_point), 8)
    tied, untied = lower(graph, "int8", plan), lower(graph, "int8", dataclasses.replace(plan, activations={**plan.activations, "y": own}))
    assert untied.op_counts["QUANTIZE"] == tied.op_counts["QUANTIZE"] + 1
    model = _compile(edgetpu, graph, "int8", dataclasses.replace(plan, activations={**plan.activations, "y": own}), kernels="reference")
    step = float(own.scale[0])
    for x in batches:  # the finer output grid: within the input grid's rounding of the fp32 result
        np.testing.assert_allclose(model(x), reference.run_graph(graph, x), rtol=0, atol=float(plan.activations["a"].scale[0]) + step)


def test_a_segment_of_constants_alone_stays_on_the_cpu(edgetpu):
    """A device constant between two CPU nodes forms a segment without inputs: the writer refuses
    it (nothing to run) and the core keeps it on the CPU; the result is unchanged."""
    import neurenix_core as nx

    k = np.arange(4, dtype=np.float32)
    graph = Graph((TensorSpec("x", (2, 4)),), (_n("exp", ("x",), "e"), _const("k", k), _n("log", ("e",), "l"), _n("add", ("l", "k"))), ("y",))
    with nx.fallback_policy("allow"):
        compiled = nx.compile(graph, device="edgetpu:0", precision="fp32", progress=False, outputs="host")
        x = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), reference.run_graph(graph, x), rtol=1e-6)
    placement = compiled.placement
    assert {o.op for o in placement.off_device} == {"exp", "log"} and placement.nodes["edgetpu:0"] == 1
