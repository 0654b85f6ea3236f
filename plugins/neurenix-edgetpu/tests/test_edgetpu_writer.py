"""The TFLite writer through the real LiteRT interpreter (emulated edgetpu, no delegate)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tflite
from edgetpu_helpers import calibrate as helper_calibrate
from edgetpu_helpers import clusters, cnn_graph, fit_head, forward, mlp_graph
from neurenix_edgetpu.compiled import compile_graph
from neurenix_edgetpu.lowering import lower

from neurenix_core.device import Device
from neurenix_core.errors import QuantizationError, ShapeError, UnsupportedOperationError
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec

DEV = Device("edgetpu", 0)


def _calibrate(graph: Graph, batches: list[np.ndarray]):
    try:
        from neurenix_core.graph.quantization import calibrate
    except ImportError:  # the core's calibration (issue 4) not installed: the same min/max recipe
        return helper_calibrate(graph, *batches)
    return calibrate(graph, batches, progress=False)


def _compile(backend, graph, precision, plan=None, **extra):
    return compile_graph(backend, graph, CompileOptions(device=DEV, precision=precision, quantization=plan, extra=extra))


@pytest.mark.parametrize("make, shape", [(mlp_graph, (1, 16)), (cnn_graph, (1, 3, 16, 16)), (lambda: cnn_graph(softmax=True), (1, 3, 16, 16))])
def test_float32_matches_numpy_reference(edgetpu, make, shape):
    graph = make()
    model = _compile(edgetpu, graph, "fp32")
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.normal(size=shape).astype(np.float32)
        ref = forward(graph, x)[graph.outputs[0]]
        out = model(x)
        assert out.shape == ref.shape and out.dtype == np.float32
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert "emulated" in model.summary and "float32" in model.summary


def _ops_and_tensors(data: bytes):
    m = tflite.Model.GetRootAsModel(data, 0)
    assert m.Version() == 3 and m.SubgraphsLength() == 1
    sg = m.Subgraphs(0)
    codes = [max(m.OperatorCodes(i).BuiltinCode(), m.OperatorCodes(i).DeprecatedBuiltinCode()) for i in range(m.OperatorCodesLength())]
    ops = [codes[sg.Operators(i).OpcodeIndex()] for i in range(sg.OperatorsLength())]
    tensors = {sg.Tensors(i).Name().decode(): sg.Tensors(i) for i in range(sg.TensorsLength())}
    return m, sg, ops, tensors


def test_written_int8_file_parses_with_the_tflite_schema(edgetpu):
    graph = cnn_graph()
    rng = np.random.default_rng(0)
    plan = _calibrate(graph, [rng.normal(size=(1, 3, 16, 16)).astype(np.float32) for _ in range(4)])
    data = lower(graph, "int8", plan).data
    assert data[4:8] == b"TFL3"
    m, sg, ops, tensors = _ops_and_tensors(data)
    B = tflite.BuiltinOperator
    assert ops.count(B.CONV_2D) == 2 and ops.count(B.DEPTHWISE_CONV_2D) == 1 and B.RELU not in ops  # ReLU fused
    # float32 NCHW edges; QUANTIZE + TRANSPOSE in, TRANSPOSE-free flat output + DEQUANTIZE out
    inp, out = sg.Tensors(sg.Inputs(0)), sg.Tensors(sg.Outputs(0))
    assert inp.Type() == tflite.TensorType.FLOAT32 and out.Type() == tflite.TensorType.FLOAT32
    assert list(inp.ShapeAsNumpy()) == [1, 3, 16, 16]
    assert ops[:2] == [B.QUANTIZE, B.TRANSPOSE] and ops[-1] == B.DEQUANTIZE
    assert list(tensors["x/nhwc"].ShapeAsNumpy()) == [1, 16, 16, 3] and tensors["x/nhwc"].Type() == tflite.TensorType.INT8
    w, b = tensors["c1/weight"], tensors["c1/bias"]
    assert w.Type() == tflite.TensorType.INT8 and w.Quantization().ScaleLength() == 8 and w.Quantization().QuantizedDimension() == 0
    assert np.all(w.Quantization().ZeroPointAsNumpy() == 0)  # symmetric: XNNPACK's QS8 kernels and the Edge TPU need it
    assert b.Type() == tflite.TensorType.INT32
    x_scale = tensors["x/int8"].Quantization().Scale(0)
    np.testing.assert_allclose(b.Quantization().ScaleAsNumpy(), np.float32(x_scale) * w.Quantization().ScaleAsNumpy(), rtol=1e-6)
    dw = tensors["dw/weight"]
    assert list(dw.ShapeAsNumpy()) == [1, 3, 3, 8] and dw.Quantization().QuantizedDimension() == 3
    assert np.all(np.abs(m.Buffers(w.Buffer()).DataAsNumpy().view(np.int8)) <= 127)
    sig = m.SignatureDefs(0)
    assert sig.SignatureKey() == b"serving_default" and sig.Inputs(0).Name() == b"x" and sig.Outputs(0).Name() == b"k"


def test_int8_io_writes_integer_edges_for_the_edge_tpu_compiler(edgetpu):
    graph = cnn_graph()
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    plan = _calibrate(graph, batches)
    _, sg, ops, _ = _ops_and_tensors(lower(graph, "int8", plan, io="int8").data)
    inp, out = sg.Tensors(sg.Inputs(0)), sg.Tensors(sg.Outputs(0))
    assert inp.Type() == tflite.TensorType.INT8 and out.Type() == tflite.TensorType.INT8
    assert list(inp.ShapeAsNumpy()) == [1, 16, 16, 3]  # NHWC: the host transposes
    B = tflite.BuiltinOperator
    assert B.QUANTIZE not in ops and B.DEQUANTIZE not in ops and B.TRANSPOSE not in ops
    # same numbers as the float-edged model, through the host's quantize/transpose
    a, b = _compile(edgetpu, graph, "int8", plan, io="int8", kernels="reference"), _compile(edgetpu, graph, "int8", plan, kernels="reference")
    np.testing.assert_array_equal(a(batches[0]), b(batches[0]))


@pytest.mark.parametrize("make, shape", [(mlp_graph, (1, 16)), (cnn_graph, (1, 3, 16, 16)), (lambda: cnn_graph(residual=False), (1, 3, 16, 16))])
def test_int8_bit_exact_against_core_integer_reference(edgetpu, make, shape):
    """TFLite's reference kernels (OpResolverType.BUILTIN_REF) against the core's integer
    reference: the same integers on every element. The default XNNPACK kernels requantize in
    float and may differ by one step; that run is checked separately below."""
    from neurenix_core.graph.reference import run as reference
    graph = make()
    rng = np.random.default_rng(5)
    batches = [rng.normal(size=shape).astype(np.float32) for _ in range(16)]
    plan = _calibrate(graph, batches)
    model = _compile(edgetpu, graph, "int8", plan, kernels="reference")
    assert model.config["kernels"] == "reference" and model.config["delegated_ops"].startswith("0/")
    out = plan.activations[graph.outputs[0]]
    scale, zp = np.float32(out.scale[0]), int(out.zero_point[0])
    for x in batches:
        want = reference.run_quantized(graph, plan, x, dequantize=False)
        got = model(x)
        # the model dequantizes in its DEQUANTIZE op: (q - zp) * scale is exact in float32, so
        # rounding back recovers the integers the kernels produced
        ints = np.rint(got / scale).astype(np.int64) + zp
        np.testing.assert_array_equal(ints, want)
        np.testing.assert_array_equal(got, ((want.astype(np.float32) - np.float32(zp)) * scale).astype(np.float32))


@pytest.mark.parametrize("make, shape", [(mlp_graph, (1, 16)), (cnn_graph, (1, 3, 16, 16))])
def test_int8_default_kernels_are_xnnpack_qs8_within_one_step(edgetpu, make, shape):
    graph = make()
    rng = np.random.default_rng(6)
    batches = [rng.normal(size=shape).astype(np.float32) for _ in range(8)]
    plan = _calibrate(graph, batches)
    model = _compile(edgetpu, graph, "int8", plan)
    cfg = model.config
    done, total = map(int, cfg["delegated_ops"].split("/"))
    assert cfg["kernels"] == "xnnpack"
    # every conv/FC and the edges run in XNNPACK; int8 AVERAGE_POOL_2D has no XNNPACK kernel
    assert set(cfg["cpu_kernel_ops"].split(",")) <= {"-", "AVERAGE_POOL_2D"} and done >= total - 1, cfg
    from neurenix_core.graph.reference import run as reference
    step = float(plan.activations[graph.outputs[0]].scale[0])
    for x in batches:
        np.testing.assert_allclose(model(x), reference.run_quantized(graph, plan, x), rtol=0, atol=1.01 * step)


def test_delegation_reads_the_partition_back(edgetpu):
    from neurenix_edgetpu.runtime import delegation

    graph = cnn_graph()
    fp32 = _compile(edgetpu, graph, "fp32")
    ref = _compile(edgetpu, graph, "fp32", kernels="reference")
    assert all(d for _, d in delegation(fp32.runner.interpreter))
    assert not any(d for _, d in delegation(ref.runner.interpreter))
    assert [op for op, _ in delegation(fp32.runner.interpreter)] == list(fp32.info.ops)


@pytest.mark.parametrize("make, shape", [(mlp_graph, (1, 16)), (cnn_graph, (1, 3, 16, 16))])
def test_int8_top1_agrees_with_fp32(edgetpu, make, shape):
    train, labels = clusters(shape, 300, seed=1)
    graph = fit_head(make(), train, labels)
    plan = _calibrate(graph, list(train[:64]))
    q, f = _compile(edgetpu, graph, "int8", plan), _compile(edgetpu, graph, "fp32")
    test, test_labels = clusters(shape, 300, seed=2)
    pred_f = np.array([np.argmax(f(x)) for x in test])
    pred_q = np.array([np.argmax(q(x)) for x in test])
    assert (pred_f == test_labels).mean() > 0.9  # the fp32 model really classifies
    assert (pred_q == pred_f).mean() >= 0.99, f"top-1 agreement {(pred_q == pred_f).sum()}/{len(test)}"


def test_flatten_without_linear_keeps_core_order(edgetpu):
    graph = Graph((TensorSpec("x", (1, 2, 3, 3)),), (Node("f", "flatten", ("x",), "y", {"start_dim": 1, "end_dim": -1}),), ("y",))
    x = np.arange(18, dtype=np.float32).reshape(1, 2, 3, 3)
    np.testing.assert_array_equal(_compile(edgetpu, graph, "fp32")(x), x.reshape(1, -1))


def test_explicit_padding_becomes_pad_and_mean_pool(edgetpu):
    rng = np.random.default_rng(2)
    w = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    graph = Graph(
        (TensorSpec("x", (1, 3, 8, 8)),),
        (
            Node("c", "conv2d", ("x",), "a", {"stride": (2, 2), "padding": (2, 2), "dilation": (1, 1), "groups": 1}, {"weight": w}),
            Node("g", "adaptive_avg_pool2d", ("a",), "b", {"output_size": (1, 1)}),
            Node("m", "mul", ("b", "b"), "c"),
        ),
        ("c",),
    )
    x = rng.normal(size=(1, 3, 8, 8)).astype(np.float32)
    model = _compile(edgetpu, graph, "fp32")
    assert {"PAD", "MEAN", "MUL"} <= set(model.info.ops)
    ref = forward(graph, x)["c"]
    np.testing.assert_allclose(model(x), ref, rtol=1e-5, atol=1e-6)


def test_layer_the_writer_cannot_express(edgetpu):
    from neurenix_core.graph.quantization import calibrate

    rng = np.random.default_rng(0)
    graph = Graph(
        (TensorSpec("x", (1, 4)),),
        (Node("norm", "layer_norm", ("x",), "y", {"normalized_shape": (4,), "eps": 1e-5}, {"weight": np.ones(4, np.float32), "bias": np.zeros(4, np.float32)}),),
        ("y",),
    )
    with pytest.raises(UnsupportedOperationError, match="'norm' \\(layer_norm\\)"):
        lower(graph, "fp32")
    grouped = Graph(
        (TensorSpec("x", (1, 4, 5, 5)),),
        (Node("g", "conv2d", ("x",), "y", {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 2}, {"weight": rng.normal(size=(4, 2, 3, 3)).astype(np.float32)}),),
        ("y",),
    )
    with pytest.raises(UnsupportedOperationError, match="groups=2"):
        lower(grouped, "fp32")
    sig = Graph((TensorSpec("x", (1, 4)),), (Node("s", "sigmoid", ("x",), "y"),), ("y",))
    lower(sig, "fp32")  # float32 and int8 have LOGISTIC
    lower(sig, "int8", _calibrate(sig, [np.ones((1, 4), np.float32)]))
    att = Graph((TensorSpec("q", (1, 2, 4)), TensorSpec("k", (1, 3, 4)), TensorSpec("v", (1, 3, 4))),
                (Node("a", "scaled_dot_product_attention", ("q", "k", "v"), "z"),), ("z",))
    lower(att, "fp32")  # BATCH_MATMUL, SOFTMAX
    ones = tuple(np.ones(s.shape, np.float32) for s in att.inputs)
    # int8 attention: float32 between DEQUANTIZE and QUANTIZE (test_edgetpu_graph_ops.py checks the numbers)
    assert lower(att, "int8", calibrate(att, [ones], progress=False)).op_counts["DEQUANTIZE"] >= 3
    bn = Graph((TensorSpec("x", (1, 2, 3, 3)),), (Node("b", "batch_norm2d", ("x",), "y", {"eps": 1e-5},
               {"running_mean": np.zeros(2, np.float32), "running_var": np.ones(2, np.float32), "weight": np.ones(2, np.float32),
                "bias": np.zeros(2, np.float32)}),), ("y",))
    with pytest.raises(UnsupportedOperationError, match="'b' \\(batch_norm2d\\).*precision='fp32'"):
        lower(bn, "int8", calibrate(bn, [np.ones((1, 2, 3, 3), np.float32)], progress=False))


def test_dynamic_shapes_and_missing_calibration_are_refused(edgetpu):
    graph = mlp_graph()
    dynamic = dataclasses.replace(graph, inputs=(TensorSpec("x", (-1, 16)),))
    with pytest.raises(ShapeError, match="static shapes"):
        lower(dynamic, "fp32")
    with pytest.raises(QuantizationError, match="calibration"):
        lower(graph, "int8", None)
    model = _compile(edgetpu, graph, "fp32")
    with pytest.raises(ShapeError, match=r"compiled for \(1, 16\)"):
        model(np.zeros((2, 16), np.float32))
