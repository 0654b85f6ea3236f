"""int8 through FakeQuantize: the core's calibration, lowered by this plugin, run by OpenVINO's
int8 kernels (checked in the compiled runtime graph)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.compiled import compile_graph

import neurenix_core as nx
from neurenix_core.errors import QuantizationError
from neurenix_core.graph.ir import CompileOptions
from neurenix_core.testing.host import int8_dot_product

#: On an AVX2-only host the emulated npu's int8 models (OpenVINO's CPU int8 kernels) were measured
#: to differ from the core's integer reference by up to 12 quantization steps, not the same way on
#: every run: the silent int8 error of issue #25. Expected to fail there until it is fixed; on CPUs
#: with VNNI or AMX these tests must pass.
NPU_INT8_XFAIL = pytest.mark.xfail(not int8_dot_product(), strict=False, reason=(
    "emulated npu int8 on a CPU without VNNI/AMX differs from the integer reference (issue #25)"))


Q = pytest.importorskip("neurenix_core.graph.quantization", reason="needs neurenix_core.graph.quantization (issue 4)")


def _data(seed: int, n: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def _int8(npu: Any, graph: Any, calibration: list[np.ndarray]) -> tuple[Any, Any]:
    folded = Q.fold_batch_norm(graph)
    plan = Q.calibrate(folded, calibration, bits=8, progress=False)
    return folded, compile_graph(npu, folded, CompileOptions(device="npu:0", precision="int8", quantization=plan))


def test_int8_cnn_keeps_top1_and_runs_conv_and_fc_in_int8(npu: Any, kit: Any) -> None:
    n = 256
    graph = kit.cnn(batch=n)
    calibration = [_data(100 + i, 32, (3, 32, 32)) for i in range(4)]
    _folded, model = _int8(npu, graph, [c for c in calibration])
    x = _data(7, n, (3, 32, 32))
    want = kit.reference(graph, x).argmax(axis=1)
    got = model(x).argmax(axis=1)
    agreement = float((got == want).mean())
    assert agreement >= 0.99, f"int8 top-1 agreement {agreement:.3f}"
    layers = model.compute_layers()
    assert len(layers) == 4, layers  # conv1 (BN folded), conv2, conv3, fc
    assert all(p.lower() in ("u8", "i8") for p in layers.values()), layers
    assert "4/4 conv/FC layer(s) in integer precision" in model.summary


@NPU_INT8_XFAIL
def test_int8_mlp_matches_the_fake_quantized_reference(npu: Any, kit: Any) -> None:
    from neurenix_core.graph.reference.run import run_graph

    graph = kit.mlp(batch=64)
    calibration = [_data(200 + i, 64, (32,)) for i in range(4)]
    folded, model = _int8(npu, graph, calibration)
    plan = Q.calibrate(folded, calibration, bits=8, progress=False)
    x = _data(9, 64, (32,))
    fq = np.asarray(run_graph(folded, x, plan=plan))
    # Same quantization grid; OpenVINO rounds intermediate requantization in its own way, so
    # allow one output quantization step.
    step = float(np.asarray(plan.activations[folded.outputs[0]].scale).ravel()[0])
    assert np.max(np.abs(model(x) - fq)) <= 1.5 * step
    # The backend's job is to run the plan as the core defines it: top-1 against the core's
    # fake-quantized reference (float top-1 is checked on the CNN above).
    assert float((model(x).argmax(1) == fq.argmax(1)).mean()) >= 0.99


def test_int8_through_nx_compile_reports_integer_layers(npu: Any, kit: Any) -> None:
    graph = kit.cnn(batch=8)
    calibration = [_data(300 + i, 8, (3, 32, 32)) for i in range(2)]
    compiled = nx.compile(graph, device="npu:0", quantize=True, calibration=calibration, progress=False)
    out = compiled(_data(11, 8, (3, 32, 32)))
    assert out.device == nx.Device("npu:0") and out.shape == (8, 10)
    assert "4/4 conv/FC layer(s) in integer precision" in compiled.summary


def test_dynamic_plan_runs_linear_with_int8_weights(npu: Any, kit: Any) -> None:
    graph = kit.mlp(batch=16)
    plan = Q.dynamic_plan(graph)
    model = compile_graph(npu, graph, CompileOptions(device="npu:0", precision="int8", quantization=plan))
    x = _data(12, 16, (32,))
    want = kit.reference(graph, x)
    assert np.max(np.abs(model(x) - want)) / np.max(np.abs(want)) < 0.05
    assert any(p.lower() == "i8" for p in model.compute_layers().values()), model.compute_layers()


def test_int8_without_a_plan_and_mismatched_plans_are_refused(npu: Any, kit: Any) -> None:
    graph = kit.mlp(batch=2)
    with pytest.raises(QuantizationError, match="needs quantization parameters from calibration"):
        compile_graph(npu, graph, CompileOptions(device="npu:0", precision="int8"))
    plan8 = Q.calibrate(graph, [_data(1, 2, (32,))], bits=8, progress=False)
    with pytest.raises(QuantizationError, match="use precision='int8'"):
        compile_graph(npu, graph, CompileOptions(device="npu:0", precision="fp32", quantization=plan8))


def test_int16_through_nx_compile_is_refused_naming_the_device(npu: Any, kit: Any) -> None:
    graph = kit.mlp(batch=2)
    with pytest.raises(QuantizationError, match=r"npu:0 cannot run int16"):
        nx.compile(graph, device="npu:0", quantize="int16", calibration=[_data(1, 2, (32,))], progress=False)(_data(2, 2, (32,)))
