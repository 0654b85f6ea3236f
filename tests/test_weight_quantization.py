"""Weight-only quantization (neurenix_core/graph/quantization/weights.py): int8 per channel and
int4 per group, planned once by the core, lowered natively by the npu plugin (OpenVINO compressed
weights) and run as the dequantized float model elsewhere, with a warning. The native lowering
must compute what the plan means (the dequantized model) within float32 rounding."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import QuantizationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.quantization.weights import dequantize, dequantized, group_size, weight_codes, weight_plan
from neurenix_core.tensor.fallback import FallbackWarning

SCHEMES = ["int8-weights", "int4-weights"]
FP32_REL = 1e-5  # a native lowering against the dequantized float model, relative to the largest output


def _mlp(width: int = 192, hidden: int = 96, seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    nodes = (Node("fc1", "linear", ("x",), "h", {}, {"weight": rng.standard_normal((hidden, width)).astype(np.float32),
                                                     "bias": rng.standard_normal(hidden).astype(np.float32)}),
             Node("act", "relu", ("h",), "r"),
             Node("fc2", "linear", ("r",), "y", {}, {"weight": rng.standard_normal((10, hidden)).astype(np.float32)}))
    return Graph((TensorSpec("x", (4, width)),), nodes, ("y",))


def _x(width: int = 192) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((4, width)).astype(np.float32)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_plan_codes_and_steps(scheme: str) -> None:
    graph = _mlp()
    plan = weight_plan(graph, scheme)
    assert plan.method == "weights" and set(plan.weights) == {"fc1", "fc2"}
    for node in graph.nodes[::2]:
        w, q = node.params["weight"], plan.weights[node.name]
        codes = weight_codes(w, q)
        top = 127 if scheme == "int8-weights" or node.name == "fc2" else 7  # int4 keeps the last layer (fc2) int8
        assert codes.dtype == np.int8 and codes.min() >= -top and codes.max() <= top
        assert np.abs(codes).max() == top  # symmetric: the largest weight of a channel (group) is the end of the range
        if scheme == "int4-weights" and node.name == "fc1":
            assert q.scale.shape == (w.shape[0], w.shape[1] // group_size(w.shape[1]))
        else:
            assert q.scale.shape == (w.shape[0],)
        step = q.scale if q.scale.ndim == 1 else np.repeat(q.scale, w.shape[1] // q.scale.shape[1], axis=1)
        err = np.abs(dequantize(codes, q) - w)
        assert np.all(err <= (step[:, None] if step.ndim == 1 else step) * 0.5 + 1e-6)  # within half a step


def test_group_sizes_divide_the_width() -> None:
    assert group_size(576) == 64 and group_size(1536) == 64 and group_size(96) == 32 and group_size(48) == 16
    assert group_size(100) == 100  # no preferred size divides it: one group (per channel)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cpu_runs_the_dequantized_model_and_says_so(scheme: str) -> None:
    graph = _mlp()
    with pytest.warns(FallbackWarning, match="dequantized to float"):  # the interpreter has no integer-weight kernels
        compiled = nx.compile(graph, "cpu:0", quantize=scheme, progress=False, runtime="numpy")
    want = nx.compile(dequantized(graph, weight_plan(graph, scheme)), "cpu:0", progress=False)(_x()).numpy()
    np.testing.assert_allclose(compiled(_x()).numpy(), want, rtol=0, atol=FP32_REL * np.abs(want).max())
    assert "fp32 memory and speed" in compiled.summary


def test_refusals() -> None:
    with pytest.raises(QuantizationError, match="int8-weights, int4-weights"):
        nx.compile(_mlp(), "cpu:0", quantize="int2-weights", progress=False)
    conv_only = Graph((TensorSpec("x", (1, 3, 8, 8)),), (Node("c", "conv2d", ("x",), "y", {}, {"weight": np.ones((2, 3, 3, 3), np.float32)}),), ("y",))
    with pytest.raises(QuantizationError, match="linear layers"):
        nx.compile(conv_only, "cpu:0", quantize="int8-weights", progress=False)


def _npu() -> None:
    if "npu:0" not in [str(d) for d in nx.devices()]:
        pytest.skip("npu:0 is not available here (run with NEURENIX_EMULATE=npu)")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_npu_lowers_compressed_weights_to_the_plans_values(scheme: str) -> None:
    _npu()
    graph = _mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # lowered natively: no fallback
        compiled = nx.compile(graph, "npu:0", quantize=scheme, precision="fp32", progress=False)
    want = nx.compile(dequantized(graph, weight_plan(graph, scheme)), "cpu:0", progress=False)(_x()).numpy()
    got = compiled(_x()).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=FP32_REL * np.abs(want).max())
    assert f"{scheme}" in compiled.summary and "lowered by plugin npu" in compiled.summary


@pytest.mark.parametrize("scheme,kind", [("int8-weights", "i8"), ("int4-weights", "i4")])
def test_npu_lowering_keeps_integer_constants(scheme: str, kind: str) -> None:
    pytest.importorskip("openvino")
    lowering = pytest.importorskip("neurenix_npu_openvino.lowering")
    graph = _mlp()
    model = lowering.lower_graph(graph, weight_plan(graph, scheme))
    types = [str(op.get_output_element_type(0)) for op in model.get_ops() if op.get_type_name() == "Constant"]
    ints = {"i8": "<Type: 'int8_t'>", "i4": "<Type: 'int4_t'>"}[kind]
    # fc1's and fc2's weights stored as integers (int4 keeps the last layer, fc2, in int8); no float copy of them
    assert types.count(ints) == (2 if kind == "i8" else 1) and types.count("<Type: 'int8_t'>") >= 1
    assert not any(op.get_type_name() == "Constant" and tuple(op.get_output_shape(0)) == (96, 192)
                   and str(op.get_output_element_type(0)) == "<Type: 'float'>" for op in model.get_ops())


def _tiny_llama() -> Any:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import hf_zoo as hz

    return hz.build_varied("llama")


def test_generation_with_quantized_weights_npu_equals_the_cores_meaning() -> None:
    """The npu's compressed int4 weights generate the tokens of the core's dequantized model on
    cpu:0; int8 stays close to the float model (the check reports it)."""
    _npu()
    model = _tiny_llama()
    ids = np.random.default_rng(3).integers(3, 120, (1, 6))
    from neurenix_core.generation import CausalLM

    npu = CausalLM(model, "npu:0", quantize="int4-weights", precision="fp32")
    with pytest.warns(FallbackWarning):
        cpu = CausalLM(model, "cpu:0", quantize="int4-weights", options={"runtime": "numpy"})
    np.testing.assert_array_equal(npu.generate(ids, max_new_tokens=16, eos_token_id=[]), cpu.generate(ids, max_new_tokens=16, eos_token_id=[]))
    check = CausalLM(model, "npu:0", quantize="int8-weights", precision="fp32").check_quantization(ids, max_new_tokens=16)
    # int8 linear layers moved this model's first logits by 3.3% of the largest; the int8 embedding
    # table (every scheme quantizes it since it was 113 of the 135M model's 239 MB) by 5.2% in all.
    assert check.tokens == 16 and check.agreement >= 12 and check.logits_error < 0.06, str(check)
    assert "greedy tokens equal" in str(check)


@pytest.mark.parametrize("runtime", ["onnxruntime", "openvino"])
def test_generation_with_int4_weights_on_cpu_uses_a_runtime_with_int4_kernels(runtime: str) -> None:
    """With a host runtime that lists int4-weights (ONNX Runtime's MatMulNBits, OpenVINO's
    compressed-weight FullyConnected), cpu:0 generates with the integer weights, no fallback
    warning, the dequantized model's tokens."""
    pytest.importorskip({"onnxruntime": "neurenix_onnxruntime", "openvino": "neurenix_npu_openvino"}[runtime])
    import warnings

    from neurenix_core.generation import CausalLM

    model = _tiny_llama()
    ids = np.random.default_rng(4).integers(3, 120, (1, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        lm = CausalLM(model, "cpu:0", quantize="int4-weights", options={"runtime": runtime})
        got = lm.generate(ids, max_new_tokens=16, eos_token_id=[])
    summary = str(lm.compiled.summary)
    assert f"runtime {runtime}" in summary and "weights dequantized" not in summary, summary
    with pytest.warns(FallbackWarning):
        ref = CausalLM(model, "cpu:0", quantize="int4-weights", options={"runtime": "numpy"})
    np.testing.assert_array_equal(got, ref.generate(ids, max_new_tokens=16, eos_token_id=[]))


def _embedded(vocab: int = 300, width: int = 64) -> Graph:
    """ids -> an embedding table -> a linear layer -> an output head."""
    rng = np.random.default_rng(5)
    nodes = (Node("embed", "embedding", ("ids",), "e", {}, {"weight": rng.standard_normal((vocab, width)).astype(np.float32)}),
             Node("fc", "linear", ("e",), "h", {}, {"weight": rng.standard_normal((96, width)).astype(np.float32)}),
             Node("head", "linear", ("h",), "y", {}, {"weight": rng.standard_normal((vocab, 96)).astype(np.float32)}))
    return Graph((TensorSpec("ids", (2, 5), "int64"),), nodes, ("y", "e"))


@pytest.mark.parametrize("scheme", [*SCHEMES, "int4-weights-int8-activations"])
def test_an_embedding_table_is_int8_per_row_in_every_scheme(scheme: str) -> None:
    """The table a token's row is gathered from: int8 per row (as NNCF keeps it in int4 modes), its
    gathered rows the dequantized rows exactly; the summary counts it apart from the linear layers."""
    from neurenix_core.graph.reference.run import run_graph

    graph = _embedded()
    plan = weight_plan(graph, scheme)
    table, q = graph.nodes[0].params["weight"], plan.weights["embed"]
    assert q.bits == 8 and q.scale.shape == (300,)
    ids = np.random.default_rng(6).integers(0, 300, (2, 5))
    rows = run_graph(dequantized(graph, plan), ids)[1]
    np.testing.assert_array_equal(rows, dequantize(weight_codes(table, q), q)[ids])
    assert np.abs(rows - table[ids]).max() <= np.abs(table[ids]).max() / 127  # within a step of the float rows
    with pytest.warns(FallbackWarning, match=r"2 linear weights.*1 embedding table\(s\) int8 per row"):
        nx.compile(graph, "cpu:0", quantize=scheme, progress=False, runtime="numpy")


def test_npu_gathers_from_the_int8_table() -> None:
    """OpenVINO keeps the table as int8 rows (no f32 copy of it in the model) and gathers the
    dequantized model's values."""
    pytest.importorskip("openvino")
    lowering = pytest.importorskip("neurenix_npu_openvino.lowering")
    import openvino as ov

    from neurenix_core.graph.reference.run import run_graph

    graph = _embedded()
    plan = weight_plan(graph, "int8-weights")
    model = lowering.lower_graph(graph, plan, device="cpu:0")
    tables = [op for op in model.get_ops() if op.get_type_name() == "Constant" and tuple(op.get_output_shape(0)) == (300, 64)]
    assert [str(op.get_output_element_type(0)) for op in tables] == ["<Type: 'int8_t'>"]
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0})
    ids = np.random.default_rng(7).integers(0, 300, (2, 5))
    got, want = compiled(ids), run_graph(dequantized(graph, plan), ids)
    for k in range(2):
        assert float(np.abs(got[k] - want[k]).max()) <= FP32_REL * float(np.abs(want[k]).max())
