"""The "-int8-activations" weight schemes (graph/quantization/activation_groups.py): the weights of
"int8-weights" / "int4-weights", and each planned layer's input rounded to int8 at run time per
row in groups of 32 features.

The core's meaning is the float graph ``weights.dequantized`` builds (the grouped rounding in ops
of the opset); OpenVINO's CPU device computes it natively (``DYNAMIC_QUANTIZATION_GROUP_SIZE=32``)
on cpu:0 and on the emulated npu, and must agree with it to float32 rounding while differing from
the weight-only model by the activations' rounding (so a device that silently kept float
activations fails here)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import CompilationError, QuantizationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.quantization.activation_groups import ACTIVATION_GROUP, quantize_groups
from neurenix_core.graph.quantization.weights import dequantize, dequantized, group_size, scheme_of, weight_codes, weight_plan
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.tensor.fallback import FallbackWarning

SCHEMES = ["int8-weights-int8-activations", "int4-weights-int8-activations"]
FP32_REL = 1e-5  # float32 rounding of the layers' sums, relative to the largest output
# The activations' rounding moves this MLP's outputs by about 1% of the largest (measured 0.7-2%):
# a device with float activations is at least this far from the scheme's meaning.
ROUNDING_REL = 2e-3


def _mlp(seed: int = 0) -> Graph:
    """fc1 (64 -> 96), fc2 (96 -> 40), head (40 -> 16): the head's width is no whole number of
    activation groups, so these schemes leave it in float; the input has a batch and a length."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    nodes = (Node("fc1", "linear", ("x",), "h", {}, {"weight": w(96, 64), "bias": w(96)}),
             Node("act", "gelu", ("h",), "g"),
             Node("fc2", "linear", ("g",), "z", {}, {"weight": w(40, 96)}),
             Node("act2", "relu", ("z",), "r"),
             Node("head", "linear", ("r",), "y", {}, {"weight": w(16, 40)}))
    return Graph((TensorSpec("x", (2, 3, 64)),), nodes, ("y",))


def _x() -> np.ndarray:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((2, 3, 64)) * rng.uniform(0.1, 8.0, 64)).astype(np.float32)  # channels of many sizes


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_plan_names_its_scheme_and_leaves_widths_off_the_group_in_float(scheme: str) -> None:
    graph = _mlp()
    plan = weight_plan(graph, scheme)
    assert plan.method == "weights" and plan.dynamic and scheme_of(plan) == scheme
    assert set(plan.weights) == {"fc1", "fc2"}  # head: 40 is not a multiple of 32
    assert scheme_of(weight_plan(graph, scheme.removesuffix("-int8-activations"))) == scheme.removesuffix("-int8-activations")
    if scheme.startswith("int4"):
        assert plan.weights["fc1"].scale.shape == (96, 2) and plan.weights["fc2"].scale.shape == (40, 3)


def test_int4_groups_are_whole_activation_groups() -> None:
    """OpenVINO's CPU device keeps float activations under weight groups narrower than the
    activation group (measured: 32 wide in groups of 16), so these schemes never choose one."""
    assert group_size(32) == 16 and group_size(32, ACTIVATION_GROUP) == 32
    assert group_size(576, ACTIVATION_GROUP) == 64 and group_size(96, ACTIVATION_GROUP) == 32
    narrow = Graph((TensorSpec("x", (2, 32)),), (Node("fc", "linear", ("x",), "h", {}, {"weight": np.ones((8, 32), np.float32)}),
                                                 Node("head", "linear", ("h",), "y", {}, {"weight": np.ones((4, 8), np.float32)})), ("y",))
    assert weight_plan(narrow, "int4-weights").weights["fc"].scale.shape == (8, 2)
    assert weight_plan(narrow, SCHEMES[1]).weights["fc"].scale.shape == (8, 1)


def test_quantize_groups_rounds_each_group_on_its_own_scale() -> None:
    x = np.concatenate([np.linspace(-1.0, 1.0, ACTIVATION_GROUP), np.linspace(-300.0, 5.0, ACTIVATION_GROUP),
                        np.zeros(ACTIVATION_GROUP)])[None]
    got = quantize_groups(x)
    for k, scale in enumerate((1.0 / 127, 300.0 / 127, None)):
        part, want = got[0, k * 32:(k + 1) * 32], x[0, k * 32:(k + 1) * 32]
        if scale is None:
            assert not part.any()  # a group of zeros stays zeros (no 0 / 0)
            continue
        codes = part / scale
        np.testing.assert_allclose(codes, np.rint(codes), atol=1e-6)  # on the group's int8 grid
        assert np.abs(codes).max() == pytest.approx(127) and np.all(np.abs(part - want) <= scale / 2 + 1e-9)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_cores_meaning_is_grouped_int8_inputs_times_the_dequantized_weights(scheme: str) -> None:
    graph, x = _mlp(), _x()
    plan = weight_plan(graph, scheme)
    params = {n.name: n.params for n in graph.nodes}

    def layer(name: str, v: np.ndarray) -> np.ndarray:
        q = plan.weights.get(name)
        w = params[name]["weight"].astype(np.float64)
        if q is not None:
            v, w = quantize_groups(v), dequantize(weight_codes(w, q), q).astype(np.float64)
        return v @ w.T + params[name].get("bias", 0.0)

    h = layer("fc1", x.astype(np.float64))
    g = 0.5 * h * (1.0 + np.vectorize(__import__("math").erf)(h / np.sqrt(2.0)))
    want = layer("head", np.maximum(layer("fc2", g), 0.0))
    got = run_graph(dequantized(graph, plan), x)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max())


def test_a_dynamic_graph_keeps_its_dynamic_axes() -> None:
    """The rewrite's reshapes copy the leading axes (0), so one graph serves every batch and length."""
    graph = _mlp()
    dynamic = Graph((TensorSpec("x", (2, 3, 64), dynamic=(0, 1)),), graph.nodes, graph.outputs)
    meaning = dequantized(dynamic, weight_plan(dynamic, SCHEMES[0]))
    x = np.random.default_rng(2).standard_normal((5, 7, 64)).astype(np.float32)
    static = Graph((TensorSpec("x", (5, 7, 64)),), graph.nodes, graph.outputs)
    np.testing.assert_allclose(run_graph(meaning, x), run_graph(dequantized(static, weight_plan(static, SCHEMES[0])), x), rtol=0, atol=0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cpu_without_a_runtime_for_it_computes_the_meaning_and_says_so(scheme: str) -> None:
    graph, x = _mlp(), _x()
    with pytest.warns(FallbackWarning, match="dequantized to float"):
        compiled = nx.compile(graph, "cpu:0", quantize=scheme, progress=False, runtime="numpy")
    want = run_graph(dequantized(graph, weight_plan(graph, scheme)), x)
    np.testing.assert_allclose(compiled(x).numpy(), want, rtol=0, atol=FP32_REL * np.abs(want).max())


def test_no_layer_of_a_whole_number_of_groups_is_refused() -> None:
    narrow = Graph((TensorSpec("x", (2, 40)),), (Node("fc", "linear", ("x",), "y", {}, {"weight": np.ones((8, 40), np.float32)}),), ("y",))
    with pytest.raises(QuantizationError, match="input width is a multiple of 32"):
        nx.compile(narrow, "cpu:0", quantize=SCHEMES[0], progress=False)


def _openvino(bits: int | None = None) -> Any:
    """The plugin; with ``bits``, skipped where its probe saw this CPU keep float activations."""
    plugin = pytest.importorskip("neurenix_npu_openvino")
    if bits is not None:
        import openvino as ov
        from neurenix_npu_openvino.activation_probe import _probe

        why = _probe(ov.Core(), bits)
        if why is not None:
            pytest.skip(f"OpenVINO's CPU device keeps float activations for int{bits} weights on this CPU ({why})")
    return plugin


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("where", ["cpu:0 openvino", "npu:0"])
def test_openvino_quantizes_the_activations_as_the_core_means(scheme: str, where: str) -> None:
    _openvino(8 if scheme.startswith("int8") else 4)
    if where == "npu:0" and "npu:0" not in [str(d) for d in nx.devices()]:
        pytest.skip("npu:0 is not available here (run with NEURENIX_EMULATE=npu)")
    graph, x = _mlp(), _x()
    device, options = (("cpu:0", {"runtime": "openvino"}) if where.startswith("cpu") else ("npu:0", {"precision": "fp32"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled = nx.compile(graph, device, quantize=scheme, progress=False, outputs="host", **options)
    got = np.asarray(compiled(x))
    want = run_graph(dequantized(graph, weight_plan(graph, scheme)), x)
    weight_only = scheme.removesuffix("-int8-activations")
    floats = run_graph(dequantized(graph, weight_plan(graph, weight_only)), x)
    size = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) <= FP32_REL * size
    assert float(np.abs(floats - want).max()) >= ROUNDING_REL * size  # so agreeing with want is not agreeing with float
    assert "int8 activations quantized at run time in groups of 32" in compiled.summary, compiled.summary


def test_a_cpu_that_keeps_float_activations_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the probe saw the CPU device compute float activations, the scheme is refused with the
    weight-only scheme as the remedy, not compiled under its name."""
    _openvino()
    from neurenix_npu_openvino import activation_probe

    monkeypatch.setattr(activation_probe, "_results", {8: "a probe layer was 1.0e-02 from the grouped int8 activations"})
    compiled = nx.compile(_mlp(), "cpu:0", quantize=SCHEMES[0], progress=False, runtime="openvino")
    with pytest.raises(CompilationError, match=r"does not quantize activations at run time on this CPU .*quantize='int8-weights'"):
        compiled(_x())  # compiled at its first input shape


def test_the_probe_tells_float_activations_from_grouped_ones() -> None:
    """The probe's own check can fail: the same layer compiled with the CPU device's run-time
    quantization off (float activations) is named as such."""
    _openvino()
    import openvino as ov
    from neurenix_npu_openvino.activation_probe import _probe

    why = _probe(ov.Core(), 8, group=0)
    assert why is not None and "from float activations" in why
