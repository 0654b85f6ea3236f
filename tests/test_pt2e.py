"""PyTorch PT2E pre-quantized models (torchao prepare_pt2e / convert_pt2e, XNNPACK quantizer):
nx.nn.from_torch reads the model's own scales into an int8 plan (graph/importers/torch_pt2e.py),
and nx.compile runs that plan in int8 on cpu, npu (OpenVINO) and edgetpu (LiteRT), agreeing with
the PT2E model run by PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript", reason="the PT2E import exports to ONNX in memory (torch.onnx.export needs onnxscript)")
pytest.importorskip("torchao", reason="PT2E quantization lives in torchao (pip install -c constraints.txt torchao)")
from quantized_models import dataset, trained  # tests/support: shared with test_onnx_qdq.py
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

import neurenix as nx
from neurenix_core.errors import NeurenixWarning, QuantizationError
from neurenix_core.graph.importers.torch_pt2e import METHOD
from neurenix_core.graph.ir import qmath as Q

N_CALIB, N_EVAL = 64, 300
DEVICES = ("cpu", "npu", "edgetpu")
KINDS = ("cnn", "mlp")
_qd = torch.ops.quantized_decomposed


def _pt2e(model: Any, kind: str, per_channel: bool, dynamic: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """The user's PT2E flow: export with a dynamic batch, prepare with XNNPACKQuantizer,
    calibrate, convert. Returns the converted model and the example inputs."""
    calib, _ = dataset(kind, N_CALIB, seed=0)
    example = (torch.from_numpy(calib[:2]),)
    exported = torch.export.export(model, example, dynamic_shapes=({0: torch.export.Dim("n")},)).module()
    config = get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic)
    prepared = prepare_pt2e(exported, XNNPACKQuantizer().set_global(config))
    prepared(torch.from_numpy(calib))
    return convert_pt2e(prepared), example


@pytest.fixture(scope="module")
def floats() -> dict[str, Any]:
    return {kind: trained(kind) for kind in KINDS}


@pytest.fixture(scope="module")
def converted(floats: dict[str, Any]) -> dict[tuple[str, bool], tuple[Any, tuple[Any, ...]]]:
    return {(kind, pc): _pt2e(floats[kind], kind, pc) for kind in KINDS for pc in (False, True)}


@pytest.fixture(scope="module")
def imported(converted: dict[tuple[str, bool], tuple[Any, tuple[Any, ...]]]) -> dict[tuple[str, bool], Any]:
    return {key: nx.nn.from_torch(module, example) for key, (module, example) in converted.items()}


def _activations(module: Any) -> dict[str, tuple[float, int]]:
    """Each activation quantize_per_tensor's input (fx name) -> (float32 scale, zero point)."""
    return {n.args[0].name: (float(np.float32(n.args[1])), int(n.args[2])) for n in module.graph.nodes
            if n.op == "call_function" and n.target == _qd.quantize_per_tensor.default}


def _weights(module: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each conv/linear fx node -> its weight's int8 integers and float32 scales, as PT2E stores them."""
    out = {}
    for n in module.graph.nodes:
        if n.op != "call_function" or n.target not in (_qd.dequantize_per_channel.default, _qd.dequantize_per_tensor.default):
            continue
        if n.args[0].op != "get_attr":
            continue  # an activation's dequantize
        q = getattr(module, n.args[0].target).numpy()
        scale = n.args[1]
        scale = getattr(module, scale.target).numpy() if hasattr(scale, "target") else np.array([scale])
        (user,) = n.users
        out[user.name] = (q, scale.astype(np.float32))
    return out


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", KINDS)
def test_plan_holds_the_pt2e_models_scales(converted: dict[tuple[str, bool], Any], imported: dict[tuple[str, bool], Any],
                                           kind: str, per_channel: bool) -> None:
    module, _ = converted[(kind, per_channel)]
    plan = imported[(kind, per_channel)].quantization_plan
    assert plan is not None and plan.bits == 8 and plan.method == METHOD and not plan.dynamic
    want = _activations(module)
    (placeholder,) = [n.name for n in module.graph.nodes if n.op == "placeholder"]
    inp = plan.activations[imported[(kind, per_channel)].input_names[0]]  # named after forward's parameter
    assert (float(inp.scale[0]), int(inp.zero_point[0])) == want.pop(placeholder)
    named = {k: v for k, v in want.items() if k in plan.activations}
    assert any(k.startswith("relu") for k in named) and any(k.startswith("linear") for k in plan.weights)  # fx names
    for name, (scale, zp) in named.items():
        qp = plan.activations[name]
        assert (float(qp.scale[0]), int(qp.zero_point[0])) == (scale, zp), name
    held = {(float(q.scale[0]), int(q.zero_point[0])) for q in plan.activations.values()}
    assert set(want.values()) <= held  # a value the export renamed (flatten -> view) keeps its numbers too
    graph = imported[(kind, per_channel)].to_graph()
    nodes = {n.name: n for n in graph.nodes}
    weights = _weights(module)
    assert set(plan.weights) == set(weights) == {n.name for n in graph.nodes if n.op in ("linear", "conv2d")}
    for name, (q, scale) in weights.items():
        qp = plan.weights[name]
        assert np.array_equal(qp.scale, np.broadcast_to(scale, qp.scale.shape)) and not qp.zero_point.any()
        assert (len(set(qp.scale.tolist())) > 1) == per_channel
        # the graph's float weight requantizes with the plan to PT2E's own integers
        assert np.array_equal(Q.quantize_weight(np.asarray(nodes[name].params["weight"]), qp), q), name


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", KINDS)
def test_compiled_int8_agrees_with_pt2e_in_torch(converted: dict[tuple[str, bool], Any], imported: dict[tuple[str, bool], Any],
                                                 kind: str, per_channel: bool, device: str) -> None:
    module, _ = converted[(kind, per_channel)]
    model = imported[(kind, per_channel)]
    x, _ = dataset(kind, N_EVAL, seed=1)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    assert len(np.unique(want.argmax(1))) >= 3, "the test model should predict several classes"
    compiled = nx.compile(model, device=device, outputs="host")
    assert compiled.precision == "int8"
    assert compiled.plan is model.quantization_plan  # the model's scales, not a calibration
    got = np.asarray(compiled(x))
    agree = float((got.argmax(1) == want.argmax(1)).mean())
    assert agree >= 0.99, f"{device}: top-1 agreement {agree:.3f}"  # measured 1.000 everywhere
    step = float(model.quantization_plan.activations[model.output_names[0]].scale[0])
    # Rounding differs (PyTorch: float, half to even; the core / TFLite: fixed point) and one step
    # in a layer carries into the next. Measured max: 1 step (cpu, npu), 5 (edgetpu, CNN).
    assert np.abs(got - want).max() <= 6 * step + 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_calibration_batches_verify_the_pt2e_plan_without_recalibrating(imported: dict[tuple[str, bool], Any], device: str) -> None:
    """``calibration=`` with a PT2E model only verifies the compile (graph.verify): the plan stays
    the model's, and the agreement is in the summary."""
    model = imported[("cnn", True)]
    x, _ = dataset("cnn", 64, seed=1)
    compiled = nx.compile(model, device=device, calibration=[x[:32], x[32:]], progress=False)
    assert compiled.plan is model.quantization_plan
    v = compiled.verification
    assert v is not None and v.batches == 2 and v.device_relative <= v.device_bound and v.plan_relative < 0.3
    assert "verified on 2 calibration batches" in compiled.summary


def test_dynamic_quantization_is_refused_naming_the_node(floats: dict[str, Any]) -> None:
    """Scales PT2E computes at run time have no place in a static int8 plan: refused before export."""
    module, example = _pt2e(floats["mlp"], "mlp", per_channel=False, dynamic=True)
    with pytest.raises(QuantizationError, match=r"from_torch\(PT2E model\): node '.*choose_qparams.*run time.*is_dynamic=False"):
        nx.nn.from_torch(module, example)


def test_an_average_pool_the_model_leaves_unquantized_is_named(converted: dict[tuple[str, bool], Any]) -> None:
    """XNNPACKQuantizer does not annotate avg_pool2d: the model averages in float, the core's
    integer average rounds onto its input's grid. Kept (top-1 above), but never silently."""
    module, example = converted[("cnn", False)]
    with pytest.warns(NeurenixWarning, match=r"from_torch\(PT2E model\): node 'avg_pool2d' .* one rounding step"):
        nx.nn.from_torch(module, example)
