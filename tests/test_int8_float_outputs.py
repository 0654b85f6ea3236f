"""A linear / conv2d layer whose output a mixed-precision plan keeps in float (issue #44).

Its inputs and weights stay int8; the int32 accumulator is dequantized with ``s_in * s_w[c]``
and the bias added in float, with no output rounding (``qmath.FLOAT_OUTPUT_OPS``): what PyTorch's
X86 PTQ does for the linear layers feeding a layer norm or a residual add. The model here is the
one whose outliers come out of a linear layer (``fc1``: a bias of +-500 on two channels, which the
layer norm scales down): quantizing fc1's output rounds every other channel away, so a device
that rounds that output anyway is far from the integer reference of the mixed plan.

Every device that takes int8 plans either computes that layer as the reference does (cpu:0's
OpenVINO, ONNX Runtime and NumPy runtimes, npu, tpu, cuda, ort: no FakeQuantize / Q-DQ on the
output) or refuses it by name so the core runs it on cpu:0 (edgetpu, whose writer computes
int8 only; cpu:0's LiteRT declines the plan).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx
from neurenix_core.errors import QuantizationError
from neurenix_core.graph import quantization as Q
from neurenix_core.graph.ir import qmath
from neurenix_core.graph.quantization import mixed as M
from neurenix_core.graph.reference.run import run_graph, run_quantized

AVAILABLE = {str(d) for d in nx.devices()}


class _Outliers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.skip = torch.nn.Linear(16, 64), torch.nn.Linear(16, 64)
        self.norm, self.fc2 = torch.nn.LayerNorm(64), torch.nn.Linear(64, 4)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.norm(self.fc1(x) + self.skip(x)))


def _outliers(size: float) -> tuple[Any, Any, list[np.ndarray]]:
    torch.manual_seed(0)
    net = _Outliers().eval()
    with torch.no_grad():
        net.fc1.bias[:2] = torch.tensor([size, -size])
        net.norm.weight[:] = 80.0  # the other channels back to their scale (the outliers set sigma)
        net.norm.weight[:2] = 0.01
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(4)]
    graph = nx.nn.from_torch(net, (torch.from_numpy(calibration[0]),)).to_graph()
    return graph, Q.calibrate(graph, calibration, progress=False), calibration


@pytest.fixture(scope="module")
def outliers() -> tuple[Any, Any, list[np.ndarray]]:
    """(graph, calibrated all-int8 plan, calibration batches) of the model above."""
    return _outliers(500.0)


def _fc1(graph: Any) -> Any:
    """fc1: the linear layer the add reads first (its output holds the outliers)."""
    add = next(n for n in graph.nodes if n.op == "add")
    return next(n for n in graph.nodes if n.output == add.inputs[0])


def _float_fc1(graph: Any, plan: Any) -> Any:
    """The plan with fc1's output and the residual add after it in float (what ``mixed.mix`` chooses)."""
    add = next(n for n in graph.nodes if n.op == "add")
    gone = {_fc1(graph).output, add.output}
    return dataclasses.replace(plan, activations={k: v for k, v in plan.activations.items() if k not in gone})


def test_the_reference_dequantizes_the_accumulator_and_adds_the_float_bias(outliers: tuple[Any, Any, list[np.ndarray]]) -> None:
    graph, plan, calibration = outliers
    mixed = _float_fc1(graph, plan)
    fc1 = _fc1(graph)
    x = calibration[1]
    got = run_quantized(graph, mixed, x, return_values=True)[fc1.output]
    in_qp, w_qp = plan.activations[fc1.inputs[0]], plan.weights[fc1.name]
    xq = qmath.quantize(x, in_qp).astype(np.int64) - int(in_qp.zero_point[0])
    wq = qmath.quantize_weight(np.asarray(fc1.params["weight"]), w_qp).astype(np.int64)
    acc = xq @ wq.T  # int32 accumulation (exact in int64)
    want = acc * (np.float64(in_qp.scale[0]) * w_qp.scale.astype(np.float64)) + np.asarray(fc1.params["bias"], np.float64)
    assert got.dtype == np.float64 and np.allclose(got, want, rtol=1e-12, atol=0)
    # Not on any int8 grid: the all-int8 plan's output of the same layer rounds it to its step.
    step = float(plan.activations[fc1.output].scale[0])
    rounded = run_quantized(graph, plan, x, return_values=True)[fc1.output]
    assert not np.allclose(qmath.dequantize(rounded, plan.activations[fc1.output]), got, atol=step / 4)
    # The float output is what the model needed: the mixed plan is near float, the all-int8 one far.
    exact = run_graph(graph, x)
    assert np.linalg.norm(run_quantized(graph, mixed, x) - exact) < 0.05 * np.linalg.norm(exact)
    assert np.linalg.norm(run_quantized(graph, plan, x) - exact) > 0.5 * np.linalg.norm(exact)


def test_a_conv_output_in_float_matches_the_integer_arithmetic() -> None:
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, stride=2), torch.nn.Sigmoid()).eval()
    rng = np.random.default_rng(1)
    calibration = [rng.standard_normal((2, 3, 9, 9)).astype(np.float32) for _ in range(2)]
    graph = nx.nn.from_torch(net, (torch.from_numpy(calibration[0]),)).to_graph()
    plan = Q.calibrate(graph, calibration, progress=False)
    conv = next(n for n in graph.nodes if n.op == "conv2d")
    mixed = dataclasses.replace(plan, activations={k: v for k, v in plan.activations.items() if k != conv.output})
    got = run_quantized(graph, mixed, calibration[0], return_values=True)[conv.output]
    in_qp, w_qp = plan.activations[conv.inputs[0]], plan.weights[conv.name]
    xq = torch.from_numpy(qmath.quantize(calibration[0], in_qp).astype(np.float64) - float(in_qp.zero_point[0]))
    wq = torch.from_numpy(qmath.quantize_weight(np.asarray(conv.params["weight"]), w_qp).astype(np.float64))
    acc = torch.nn.functional.conv2d(xq, wq, stride=2, padding=1).numpy()  # integers, exact in float64
    scale = (np.float64(in_qp.scale[0]) * w_qp.scale.astype(np.float64)).reshape(1, -1, 1, 1)
    want = acc * scale + np.asarray(conv.params["bias"], np.float64).reshape(1, -1, 1, 1)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)


def test_check_plan_lets_a_layer_output_go_to_float_but_not_its_input(outliers: tuple[Any, Any, list[np.ndarray]]) -> None:
    graph, plan, _ = outliers
    qmath.check_plan(graph, _float_fc1(graph, plan))  # accepted
    fc1 = _fc1(graph)
    no_input = dataclasses.replace(plan, activations={k: v for k, v in plan.activations.items() if k != fc1.inputs[0]})
    with pytest.raises(QuantizationError, match=rf"no parameters for value\(s\) \['{fc1.inputs[0]}'"):
        qmath.check_plan(graph, no_input)
    # What an integer kernel reads stays fixed: a linear output read by a ReLU, pooling or another linear.
    relu_net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).eval()
    relu_graph = nx.nn.from_torch(relu_net, (torch.zeros(2, 4),)).to_graph()
    first = next(n for n in relu_graph.nodes if n.op == "linear")
    assert first.output in M.fixed_values(relu_graph)
    assert fc1.output not in M.fixed_values(graph) and fc1.output in M.fixed_values(graph, float_outputs=False)


def test_mixing_keeps_the_linear_output_in_float_and_without_it_refuses(outliers: tuple[Any, Any, list[np.ndarray]]) -> None:
    """The outliers come out of fc1: keeping only the residual add in float cannot help (the
    refusal that was every such model's answer before float outputs); fc1's output in float does."""
    graph, plan, calibration = outliers
    with pytest.raises(nx.CompilationError, match=r"no mix of int8 and float layers meets that bound: with add_\d+ in float it is "
                                                  r"still .*amplify their rounding \(a layer norm\): layer_norm \(layer_norm\)"):
        M.mix(graph, plan, calibration, device="cpu:0", float_outputs=False, progress=False)
    mixed = M.mix(graph, plan, calibration, device="cpu:0", progress=False)
    assert mixed is not None and mixed.error <= M.MIXED_TARGET
    assert _fc1(graph).output in {v for f in mixed.float_layers for v in f.values}
    assert any(f.op == "linear" for f in mixed.float_layers), mixed.line()


def test_a_transformer_over_5_percent_is_mixed_except_where_float_layers_run_on_the_host() -> None:
    """``nx.compile``'s trigger (``mixed.mix_for_device``): a model with a layer norm whose plan
    is between 5% and the verification's 30% is mixed on a device that computes float in place,
    and kept all-int8 where each float layer is a hop to cpu:0 (edgetpu declares so)."""
    graph, plan, calibration = _outliers(40.0)
    assert M.MIXED_TRIGGER < M.plan_error(graph, plan, calibration) <= M.CONSERVATIVE_TRIGGER
    mixed = M.mix_for_device(graph, plan, calibration, device="cpu:0", host=False, progress=False)
    assert mixed is not None and mixed.error <= M.MIXED_TARGET, mixed
    assert M.mix_for_device(graph, plan, calibration, device="edgetpu:0", host=True, progress=False) is None
    assert M.mix(graph, plan, calibration, device="cpu:0", progress=False) is None  # mix's own default: conservative
    compiled = nx.compile(graph, device="cpu", quantize="int8", calibration=calibration, progress=False,
                          calibration_method="minmax")  # the fixture's plan
    assert {f.node for f in compiled.float_layers} == {f.node for f in mixed.float_layers}, compiled.summary
    from neurenix_core.plugins.state import registry
    from neurenix_core.tensor.placement import default_backend

    assert not M.float_layers_on_host(registry().plugin_for(default_backend("cpu")[1]))
    if "edgetpu:0" in AVAILABLE:
        assert M.float_layers_on_host(registry().plugin_for(default_backend("edgetpu")[1]))


def _cases() -> list[tuple[str, dict[str, Any]]]:
    """(device, compile options) for every device here that takes int8 plans."""
    cases: list[tuple[str, dict[str, Any]]] = [("cpu:0", {"runtime": "numpy"})]
    from neurenix_core.graph.compile.options import host_runtime_names
    from neurenix_core.plugins.state import registry

    runtimes = host_runtime_names(registry())
    cases += [("cpu:0", {"runtime": r}) for r in ("openvino", "onnxruntime") if r in runtimes]
    return cases + [(d, {}) for d in ("npu:0", "tpu:0", "cuda:0", "ort:0") if d in AVAILABLE]


@pytest.mark.parametrize(("device", "options"), _cases(), ids=lambda v: v if isinstance(v, str) else ",".join(v.values()) or "-")
def test_every_runtime_computes_the_float_output_as_the_reference_does(
        outliers: tuple[Any, Any, list[np.ndarray]], device: str, options: dict[str, Any]) -> None:
    graph, plan, calibration = outliers
    mixed = _float_fc1(graph, plan)
    compiled = nx.compile(graph, device=device, quantize=mixed, calibration=calibration, progress=False, outputs="host", **options)
    x = calibration[2]
    want = run_quantized(graph, mixed, x)
    step = float(plan.activations[graph.outputs[0]].scale[0])
    got = np.asarray(compiled(x))
    assert np.abs(got - want).max() <= 2 * step, compiled.summary  # float arithmetic on the same integers
    # A device that rounded fc1's output to int8 would be as far as the all-int8 plan's reference is.
    assert np.abs(run_quantized(graph, plan, x) - want).max() > 20 * step
    v = compiled.verification
    assert v.device_relative <= v.device_bound and v.plan_relative <= M.MIXED_TARGET, compiled.summary


@pytest.mark.skipif("edgetpu:0" not in AVAILABLE, reason="the edgetpu plugin (NEURENIX_EMULATE=edgetpu) is not here")
def test_the_edge_tpu_refuses_the_float_output_layer_by_name_and_the_core_runs_it_on_cpu0(
        outliers: tuple[Any, Any, list[np.ndarray]]) -> None:
    graph, plan, calibration = outliers
    mixed = _float_fc1(graph, plan)
    fc1 = _fc1(graph)
    with nx.fallback_policy("allow"):
        compiled = nx.compile(graph, device="edgetpu:0", quantize=mixed, calibration=calibration, progress=False, outputs="host")
    off = {o.node: o.reason for o in compiled.placement.off_device}
    assert fc1.name in off and "stays in float in the quantization plan" in off[fc1.name], compiled.placement.line()
    assert {o.op for o in compiled.placement.off_device} <= {"linear", "add", "layer_norm"}, compiled.placement.line()
    x = calibration[2]
    step = float(plan.activations[graph.outputs[0]].scale[0])
    assert np.abs(np.asarray(compiled(x)) - run_quantized(graph, mixed, x)).max() <= 2 * step


@pytest.mark.skipif("edgetpu:0" not in AVAILABLE, reason="LiteRT (the edgetpu plugin's cpu:0 runtime) is not here")
def test_cpu0_litert_declines_a_float_output_layer() -> None:
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4)).eval()
    rng = np.random.default_rng(2)
    calibration = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(2)]
    graph = nx.nn.from_torch(net, (torch.from_numpy(calibration[0]),)).to_graph()
    plan = Q.calibrate(graph, calibration, progress=False)
    first = next(n for n in graph.nodes if n.op == "linear")
    mixed = dataclasses.replace(plan, activations={k: v for k, v in plan.activations.items() if k != first.output})
    with pytest.raises(nx.NeurenixError, match=rf"value '{first.output}' stays in float in the quantization plan"):
        nx.compile(graph, device="cpu", quantize=mixed, calibration=calibration, progress=False, runtime="litert")
    auto = nx.compile(graph, device="cpu", quantize=mixed, calibration=calibration, progress=False, outputs="host")
    chosen = re.search(r"; runtime (\w+) \(", auto.summary)
    assert chosen is not None and chosen.group(1) != "litert", auto.summary  # the core's choice runs it elsewhere
    assert "litert: host runtime litert (plugin edgetpu) cannot write this cpu:0 graph" in auto.summary
    assert np.allclose(np.asarray(auto(calibration[1])), run_quantized(graph, mixed, calibration[1]),
                       atol=2 * float(plan.activations[graph.outputs[0]].scale[0]))
