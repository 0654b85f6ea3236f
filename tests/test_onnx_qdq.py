"""Pre-quantized ONNX (QDQ from onnxruntime.quantization.quantize_static): from_onnx folds the
Q/DQ nodes into a float graph plus the file's own int8 plan, and nx.compile runs that plan in
int8 on cpu, npu (OpenVINO) and edgetpu (LiteRT), agreeing with onnxruntime on the same file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from quantized_models import dataset as _data  # tests/support: shared with test_pt2e.py
from quantized_models import trained as _trained

import neurenix as nx
from neurenix_core.errors import QuantizationError
from neurenix_core.graph.importers.onnx_qdq import METHOD
from neurenix_core.graph.reference.run import run_quantized

N_CALIB, N_EVAL = 64, 300
DEVICES = ("cpu", "npu", "edgetpu")


class _Reader(CalibrationDataReader):  # type: ignore[misc]
    def __init__(self, data: np.ndarray) -> None:
        self._it = iter([{"x": data[i:i + 1]} for i in range(len(data))])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def _files(tmp: Path, kind: str) -> tuple[Path, np.ndarray]:
    """The trained float model exported with a dynamic batch, and the calibration inputs."""
    model = _trained(kind)
    calib, _ = _data(kind, N_CALIB, seed=0)
    path = tmp / f"{kind}.onnx"
    torch.onnx.export(model, (torch.from_numpy(calib[:1]),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17, dynamo=False)
    return path, calib


def _quantize(src: Path, calib: np.ndarray, per_channel: bool, activations: QuantType = QuantType.QUInt8,
              weights: QuantType = QuantType.QInt8) -> Path:
    """``quantize_static`` in QDQ format, as a user would run it."""
    out = src.with_name(f"{src.stem}_{'pc' if per_channel else 'pt'}_{activations.name}_{weights.name}.onnx")
    quantize_static(str(src), str(out), _Reader(calib), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=activations, weight_type=weights)
    return out


def _eval_inputs(kind: str) -> np.ndarray:
    return _data(kind, N_EVAL, seed=1)[0]


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": x})[0])


@pytest.fixture(scope="module")
def float_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("qdq")
    return {kind: _files(tmp, kind) for kind in ("cnn", "mlp")}


@pytest.fixture(scope="module")
def qdq_files(float_files: dict[str, tuple[Path, np.ndarray]]) -> dict[tuple[str, bool], Path]:
    return {(kind, pc): _quantize(*float_files[kind], pc) for kind in ("cnn", "mlp") for pc in (False, True)}


def _file_activations(path: Path) -> dict[str, tuple[float, int]]:
    """Each activation QuantizeLinear's input -> (scale, zero point mapped to int8)."""
    proto = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    out = {}
    for n in proto.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits:
            zp = inits[n.input[2]]
            out[n.input[0]] = (float(inits[n.input[1]]), int(zp) - (128 if zp.dtype == np.uint8 else 0))
    return out


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_plan_holds_the_files_scales(qdq_files: dict[tuple[str, bool], Path], kind: str, per_channel: bool) -> None:
    path = qdq_files[(kind, per_channel)]
    model = nx.nn.from_onnx(path)
    plan = model.quantization_plan
    assert plan is not None and plan.bits == 8 and plan.method == METHOD and not plan.dynamic
    graph = model.to_graph()
    want = _file_activations(path)
    # the input keeps its name; every file scale / zero point appears in the plan unchanged
    assert (float(plan.activations["x"].scale[0]), int(plan.activations["x"].zero_point[0])) == want["x"]
    held = {(float(q.scale[0]), int(q.zero_point[0])) for q in plan.activations.values()}
    assert set(want.values()) <= held
    proto = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    weight_scales = sorted(inits[n.input[1]].size for n in proto.graph.node
                           if n.op_type == "DequantizeLinear" and inits.get(n.input[0], np.zeros(0)).dtype == np.int8)
    layers = [n for n in graph.nodes if n.op in ("linear", "conv2d")]
    assert len(plan.weights) == len(layers) == len(weight_scales)
    for node in layers:
        qp = plan.weights[node.name]
        channels = node.params["weight"].shape[0]
        assert qp.axis == 0 and qp.scale.shape == (channels,) and not qp.zero_point.any()
        assert (len(set(qp.scale.tolist())) > 1) == per_channel  # per-tensor scales broadcast to every channel


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_compiled_int8_agrees_with_onnxruntime(qdq_files: dict[tuple[str, bool], Path], kind: str, per_channel: bool,
                                               device: str) -> None:
    path = qdq_files[(kind, per_channel)]
    x = _eval_inputs(kind)
    want = _ort(path, x)
    assert len(np.unique(want.argmax(1))) >= 3, "the test model should predict several classes"
    model = nx.nn.from_onnx(path)
    compiled = nx.compile(model, device=device, outputs="host")
    assert compiled.precision == "int8"
    assert compiled.plan is model.quantization_plan  # the file's scales, not a calibration
    got = np.asarray(compiled(x))
    agree = float((got.argmax(1) == want.argmax(1)).mean())
    assert agree >= 0.99, f"{device}: top-1 agreement {agree:.3f}"
    step = float(model.quantization_plan.activations[model.output_names[0]].scale[0])
    # rounding (ONNX: half to even, the core: half away from zero) differs by one step now and then
    assert np.abs(got - want).max() <= 3 * step + 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_calibration_batches_verify_the_files_plan_without_recalibrating(qdq_files: dict[tuple[str, bool], Path], device: str) -> None:
    """``calibration=`` with a pre-quantized model only verifies the compile (graph.verify): the
    plan stays the file's, and the agreement is in the summary."""
    model = nx.nn.from_onnx(qdq_files[("cnn", True)])
    x = _eval_inputs("cnn")
    compiled = nx.compile(model, device=device, calibration=[x[:32], x[32:64]], progress=False)
    assert compiled.plan is model.quantization_plan
    v = compiled.verification
    assert v is not None and v.batches == 2 and v.device_relative <= v.device_bound and v.plan_relative < 0.3
    assert "verified on 2 calibration batches" in compiled.summary


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_integer_reference_agrees_with_onnxruntime(qdq_files: dict[tuple[str, bool], Path], kind: str, per_channel: bool) -> None:
    path = qdq_files[(kind, per_channel)]
    x = _eval_inputs(kind)[:100]
    want = _ort(path, x)
    model = nx.nn.from_onnx(path)
    plan = model.quantization_plan
    got = np.asarray(run_quantized(model.to_graph(x.shape), plan, x))
    steps = np.abs(got - want) / float(plan.activations[model.output_names[0]].scale[0])
    # ONNX rounds half to even in float, the core half away from zero in TFLite fixed point:
    # one-step differences in a layer carry into the next. Measured over these 100 inputs: at
    # most 2 steps (cnn), 1 (mlp); within 1 step >= 99.6%; exact: cnn ~74%, mlp ~98%.
    assert steps.max() <= 2 + 1e-3
    assert (steps <= 1 + 1e-3).mean() >= 0.99
    assert (steps < 1e-3).mean() >= (0.7 if kind == "cnn" else 0.95)


def test_float_graph_keeps_the_removed_relus(qdq_files: dict[tuple[str, bool], Path],
                                             float_files: dict[str, tuple[Path, np.ndarray]]) -> None:
    """onnxruntime drops a ReLU whose output range starts at 0; the float graph restores it,
    so running the imported model in fp32 is the float model, not one with ReLUs missing."""
    model = nx.nn.from_onnx(qdq_files[("cnn", True)])
    assert sum(n.op == "relu" for n in model.to_graph().nodes) == 3
    x = _eval_inputs("cnn")[:64]
    want = _ort(float_files["cnn"][0], x)
    got = np.asarray(nx.compile(model, device="cpu", precision="fp32", outputs="host")(x))
    assert float((got.argmax(1) == want.argmax(1)).mean()) >= 0.9
    assert np.abs(got - want).max() < 0.25 * np.abs(want).max()


def test_qdq_ops_mode_imports_fake_quantization(qdq_files: dict[tuple[str, bool], Path]) -> None:
    path = qdq_files[("mlp", False)]
    model = nx.nn.from_onnx(path, qdq="ops")
    assert model.quantization_plan is None
    assert any(n.op == "quantize_linear" for n in model.to_graph().nodes)
    x = _eval_inputs("mlp")[:50]
    got = np.asarray(nx.compile(model, device="cpu", outputs="host")(x))
    assert np.allclose(got, _ort(path, x), atol=1e-5)
    with pytest.raises(QuantizationError, match="qdq="):
        nx.nn.from_onnx(path, qdq="int4")


def test_asymmetric_weights_are_refused(float_files: dict[str, tuple[Path, np.ndarray]]) -> None:
    path = _quantize(*float_files["mlp"], False, weights=QuantType.QUInt8)
    with pytest.raises(QuantizationError, match=r"(?s)node '/0/Gemm'.*asymmetric.*QInt8.*qdq='ops'"):
        nx.nn.from_onnx(path)
    assert nx.nn.from_onnx(path, qdq="ops").quantization_plan is None  # the remedy works


def test_16_bit_activations_are_refused(float_files: dict[str, tuple[Path, np.ndarray]]) -> None:
    path = _quantize(*float_files["mlp"], False, activations=QuantType.QInt16)
    with pytest.raises(QuantizationError, match=r"(?s)(int16|16-bit).*qdq='ops'"):
        nx.nn.from_onnx(path)
