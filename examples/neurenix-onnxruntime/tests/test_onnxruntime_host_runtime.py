"""ONNX Runtime's CPU provider as a cpu:0 host runtime: a third party offering its runtime (API 1.2)."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.compile import host_select
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.tensor.fallback import FallbackWarning


def _graph() -> Graph:
    rng = np.random.default_rng(0)
    conv = {"in_channels": 3, "out_channels": 8, "kernel_size": (3, 3), "padding": (1, 1)}
    return Graph((TensorSpec("x", (4, 3, 16, 16)),), (
        Node("conv", "conv2d", ("x",), "c", conv, {"weight": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
                                                    "bias": rng.standard_normal(8).astype(np.float32) * 0.1}),
        Node("act", "relu", ("c",), "r"),
        Node("pool", "adaptive_avg_pool2d", ("r",), "p", {"output_size": (1, 1)}),
        Node("flat", "flatten", ("p",), "f", {"start_dim": 1}),
    ), ("f",))


def test_onnxruntime_is_offered_and_matches_the_reference() -> None:
    assert not isinstance(host_select.host_runtimes().get("onnxruntime"), (str, type(None)))
    graph = _graph()
    x = np.random.default_rng(1).standard_normal((4, 3, 16, 16)).astype(np.float32)
    compiled = nx.compile(graph, device="cpu", runtime="onnxruntime", threads=1)
    got = compiled(x).numpy()
    want = run_graph(graph, x)
    assert float(np.abs(got - want).max() / np.abs(want).max()) <= 1e-5
    assert "ONNX Runtime" in compiled.summary and "1 intra-op thread(s)" in compiled.summary
    assert compiled.native().threads == 1


def test_a_graph_onnxruntime_rejects_is_a_typed_error() -> None:
    graph = Graph((TensorSpec("x", (2, 3)),), (Node("s", "reshape", ("x",), "y", {"shape": (4, 2)}),), ("y",))  # 6 elements into 8
    with pytest.raises(nx.NeurenixError):
        nx.compile(graph, device="cpu", runtime="onnxruntime")(np.ones((2, 3), np.float32))


def test_large_weights_reach_the_session_from_memory() -> None:
    """Weights of 1 MiB or more stay out of the serialized model (ONNX Runtime holds one copy of
    each, not the protobuf's and its own two); the results are the interpreter's."""
    from neurenix_onnxruntime.lowering import lower
    from neurenix_onnxruntime.plugin import neurenix_host_runtime

    from neurenix_core.contract import HostOptions

    rng = np.random.default_rng(0)
    big = rng.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB: from memory
    small = rng.standard_normal((8, 512)).astype(np.float32)  # 16 KiB: embedded
    graph = Graph((TensorSpec("x", (4, 1024)),), (Node("a", "linear", ("x",), "h", {}, {"weight": big}),
                                                   Node("b", "linear", ("h",), "y", {}, {"weight": small})), ("y",))
    lowered = lower(graph, "fp32", external_min_bytes=1 << 20)
    assert [a.nbytes for a in lowered.external.values()] == [big.nbytes]
    assert lowered.model.ByteSize() < 100_000  # the 2 MiB weight is not in the protobuf
    runtime = neurenix_host_runtime()
    model = runtime.compile(graph, HostOptions(threads=1))
    x = rng.standard_normal((4, 1024)).astype(np.float32)
    want = run_graph(graph, x, float_dtype=None)
    np.testing.assert_allclose(model(x)[0], want, rtol=1e-5, atol=1e-4 * float(np.abs(want).max()))


def _mlp(batch: int = 3) -> Graph:
    rng = np.random.default_rng(2)
    return Graph((TensorSpec("x", (batch, 5, 128)),), (
        Node("fc1", "linear", ("x",), "h", {}, {"weight": rng.standard_normal((256, 128)).astype(np.float32),
                                                 "bias": rng.standard_normal(256).astype(np.float32)}),
        Node("act", "relu", ("h",), "r"),
        Node("head", "linear", ("r",), "y", {}, {"weight": rng.standard_normal((64, 256)).astype(np.float32)}),
    ), ("y",))


def test_int4_weights_on_cpu_run_on_matmulnbits_with_the_plans_values() -> None:
    """quantize='int4-weights' on cpu:0: ONNX Runtime lists the scheme (HostRuntime.weight_schemes),
    so the plan reaches it (no fallback warning); its int4 layers are MatMulNBits and the model
    computes the dequantized model's values (the head, kept int8 by the plan, as float)."""
    import warnings

    from neurenix_core.graph.quantization.weights import dequantized, weight_plan
    from neurenix_core.graph.reference import interpreter

    graph = _mlp()
    x = np.random.default_rng(3).standard_normal((3, 5, 128)).astype(np.float32)
    cached = set(interpreter._plans)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled = nx.compile(graph, device="cpu", quantize="int4-weights", runtime="onnxruntime", threads=1)
        got = compiled(x).numpy()
    assert set(interpreter._plans) <= cached, "the dequantized copy measured against must not stay in the plan cache"
    want = run_graph(dequantized(graph, weight_plan(graph, "int4-weights")), x)
    assert float(np.abs(got - want).max() / np.abs(want).max()) <= 1e-5
    assert float(np.abs(run_graph(graph, x) - want).max() / np.abs(want).max()) > 1e-3  # the weights really are quantized
    summary = compiled.summary
    assert "for host runtime" in summary and "onnxruntime" in summary.split("for host runtime")[1] and "runtime onnxruntime" in summary
    session = compiled.native().session
    assert session is not None
    from neurenix_onnxruntime.lowering import lower

    lowered = lower(graph, "fp32", weights=weight_plan(graph, "int4-weights"))
    ops = [n.op_type for n in lowered.model.graph.node]
    assert ops.count("MatMulNBits") == 1 and "MatMul" in ops  # fc1 int4; the int8 head as a float matmul


def test_int8_weights_and_a_runtime_without_the_scheme_fall_back_with_a_warning() -> None:
    graph = _mlp()
    with pytest.warns(FallbackWarning, match="dequantized to float"):
        nx.compile(graph, device="cpu", quantize="int8-weights", runtime="onnxruntime")
    with pytest.warns(FallbackWarning, match="dequantized to float"):
        nx.compile(graph, device="cpu", quantize="int4-weights", runtime="numpy")


def test_static_int8_on_cpu_runs_the_qdq_export_within_the_integer_reference() -> None:
    """A static int8 plan for cpu:0 reaches ONNX Runtime as the ort device's QDQ model (API 1.5):
    its fused integer kernels requantize in float, so a value may land one output step from the
    core's fixed-point reference, and the step may carry through one more layer; never further."""
    from neurenix_core.graph.reference.run import run_quantized

    graph = _graph()
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((4, 3, 16, 16)).astype(np.float32) for _ in range(6)]
    compiled = nx.compile(graph, device="cpu", quantize="int8", calibration=batches, runtime="onnxruntime", threads=1, progress=False)
    got = np.asarray(compiled(batches[0]).numpy(), np.float64)
    want = np.asarray(run_quantized(compiled.graph, compiled.plan, batches[0]), np.float64)
    step = float(np.asarray(compiled.plan.activations[compiled.graph.outputs[0]].scale).reshape(-1)[0])
    assert float(np.abs(got - want).max()) <= 2 * step + 1e-9
    assert "int8 with the core's plan (QDQ" in compiled.summary and compiled.verification.within_bound, compiled.summary


def test_static_int8_bert_classifier_runs_where_ort_rejects_its_own_rewrite() -> None:
    """ONNX Runtime's extended optimizer rewrites the classifier's reshaped QDQ Gemm into a node it
    then refuses; the runtime falls back to the basic level (QDQ fusion kept) and says so."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128,
                                  num_labels=4)
    model = transformers.BertForSequenceClassification(cfg).eval()
    graph = nx.nn.from_torch(model, (torch.randint(0, 500, (1, 32)),))
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 500, (1, 32)).astype(np.int64) for _ in range(6)]
    compiled = nx.compile(graph, device="cpu", quantize="int8", calibration=batches, runtime="onnxruntime", progress=False)
    compiled(batches[0])
    assert "int8 with the core's plan (QDQ" in compiled.summary and compiled.verification.within_bound, compiled.summary
    assert "basic graph optimizations: the extended level rejected" in compiled.summary, compiled.summary  # ORT 1.32's behaviour
