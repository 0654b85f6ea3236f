"""int8 you can trust (issue #25): no silently wrong quantized model on any int8 device.

* Regression: a Linear -> Tanh -> Linear MLP and a tiny BERT (transformers config) with the zero
  biases Hugging Face initialises, int8 on npu:0, were silently wrong (OpenVINO CPU's fused
  quantized-MLP Snippets kernel); now every int8 device is as close to torch as cpu:0 int8.
* Verification at compile time (``neurenix_core.graph.quantization.verify``): a compile that leaves the
  integer reference, or a plan that does not describe the model, is a CompilationError naming
  the first layer where they diverge; the agreement is in ``.summary`` and the placement report.
* Degenerate ranges (all-zero weight channels, vanishing weights, a dead ReLU) quantize to
  finite, verified models.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx
from neurenix_core.graph.quantization import verify as V

INT8_DEVICES = [d for d in ("cpu", "npu", "edgetpu") if any(str(x) == f"{d}:0" for x in nx.devices())]
RNG_SEED = 0


def _zero_bias_mlp() -> tuple[Any, Any, list[np.ndarray], np.ndarray]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10)).eval()
    for layer in (m[0], m[2]):
        torch.nn.init.zeros_(layer.bias)
    rng = np.random.default_rng(RNG_SEED)
    # Batch 4: OpenVINO 2026.4's fused kernel was wrong at batch 4 and 8, right at 1, 2, 16 and 32.
    calibration = [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(8)]
    x = rng.standard_normal((4, 64)).astype(np.float32)
    return m, nx.nn.from_torch(m, (torch.from_numpy(x),)), calibration, x


def _host(y: Any) -> np.ndarray:
    return np.asarray(y.numpy() if hasattr(y, "numpy") else y, np.float64)


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module")
def mlp() -> tuple[Any, Any, list[np.ndarray], np.ndarray]:
    return _zero_bias_mlp()


@pytest.mark.parametrize("device", INT8_DEVICES)
def test_zero_bias_mlp_int8_is_as_close_to_torch_as_cpu_int8(mlp: Any, device: str) -> None:
    torch_model, model, calibration, x = mlp
    want = torch_model(torch.from_numpy(x)).detach().numpy().astype(np.float64)
    cpu = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False)
    compiled = nx.compile(model, device=device, quantize="int8", calibration=calibration, progress=False)
    got, ref = _host(compiled(x)), _host(cpu(x))
    step = float(compiled.plan.activations[compiled.graph.outputs[0]].scale[0])
    # Measured on an AMX Xeon: cpu, npu and edgetpu 0.062 (npu was 7e4 before the fix).
    assert _relative(got, want) <= _relative(ref, want) + 0.01
    assert np.abs(got - ref).max() <= 1.0 * step + 1e-6  # the integer reference, within one output step
    assert "verified on 2 calibration batches" in compiled.summary, compiled.summary
    assert compiled.verification.device_relative <= compiled.verification.device_bound


@pytest.mark.skipif("npu" not in INT8_DEVICES, reason="the npu plugin (neurenix-npu-openvino) is not installed")
def test_tiny_bert_with_zero_biases_int8_on_npu_matches_cpu_and_is_deterministic() -> None:
    pytest.importorskip("transformers")
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=5,
    )
    bert = BertForSequenceClassification(cfg).eval()
    assert all(float(p.abs().max()) == 0.0 for n, p in bert.named_parameters() if n.endswith(".bias") and "LayerNorm" not in n)

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.bert(input_ids=ids, attention_mask=mask).logits

    rng = np.random.default_rng(1)

    def batch() -> tuple[np.ndarray, np.ndarray]:
        return rng.integers(3, 128, (8, 12)), np.ones((8, 12), np.int64)

    wrapper = Logits().eval()
    model = nx.nn.from_torch(wrapper, tuple(torch.from_numpy(a) for a in batch()))
    calibration = [batch() for _ in range(8)]
    tests = [batch() for _ in range(6)]
    want = np.concatenate([wrapper(*(torch.from_numpy(a) for a in b)).detach().numpy() for b in tests]).astype(np.float64)
    # The core's integer reference itself: cpu:0's fastest runtime may round fewer values (its
    # OpenVINO runtime leaves out roundings inside fused elementwise chains, issue #44).
    cpu = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, runtime="numpy", progress=False)
    ref = np.concatenate([_host(cpu(*b)) for b in tests])
    runs = []
    # The second compile is a real one (another cache key, same effective configuration).
    for props in ({}, {"PERFORMANCE_HINT": "LATENCY"}):
        npu = nx.compile(model, device="npu", quantize="int8", calibration=calibration, progress=False, ov_properties=props)
        runs.append(np.concatenate([_host(npu(*b)) for b in tests]))
    step = float(npu.plan.activations[npu.graph.outputs[0]].scale[0])
    # Measured: npu == cpu to float rounding (was logits ~4000 against torch's 0.06).
    assert _relative(runs[0], want) <= _relative(ref, want) + 0.01
    assert np.abs(runs[0] - ref).max() <= 2 * step
    np.testing.assert_array_equal(runs[0], runs[1])
    assert np.mean(runs[0].argmax(1) == ref.argmax(1)) >= 0.95


def test_a_plan_with_a_wrong_scale_is_refused_naming_its_layer(mlp: Any) -> None:
    _, model, calibration, _ = mlp
    plan = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False).plan
    broken = dict(plan.activations)
    broken["linear"] = dataclasses.replace(broken["linear"], scale=broken["linear"].scale * np.float32(0.02))
    bad = dataclasses.replace(plan, activations=broken)
    for device in INT8_DEVICES:
        with pytest.raises(
            nx.CompilationError, match=r"plan does not describe the model.*first layer over 30%: linear \(linear\)"
        ):
            nx.compile(model, device=device, quantize=bad, calibration=calibration, progress=False)
    # verify=False accepts it as given (the user's call), and nothing is checked or reported.
    accepted = nx.compile(model, device="cpu", quantize=bad, calibration=calibration, progress=False, verify=False)
    accepted(calibration[0])
    assert accepted.verification is None and "verified" not in accepted.summary


def test_layer_errors_show_where_the_plan_loses_the_model(mlp: Any) -> None:
    _, model, calibration, x = mlp
    plan = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False).plan
    rows = V.layer_errors(model.to_graph(), plan, x)
    assert [r.node for r in rows] == ["linear", "tanh", "linear_1"]
    assert all(0 < r.relative < 0.05 and r.steps < 3 for r in rows), rows
    broken = dict(plan.activations)
    broken["tanh"] = dataclasses.replace(broken["tanh"], scale=broken["tanh"].scale * np.float32(0.05))
    rows = V.layer_errors(model.to_graph(), dataclasses.replace(plan, activations=broken), x)
    assert rows[0].relative < 0.05 and rows[1].relative > 0.3  # the first bad row is the broken value


@pytest.mark.skipif("npu" not in INT8_DEVICES, reason="the npu plugin (neurenix-npu-openvino) is not installed")
def test_a_device_that_leaves_the_integer_reference_is_caught_and_the_layer_named(mlp: Any) -> None:
    """OpenVINO's CPU Snippets, turned back on, compute the zero-bias int8 MLP wrongly (the bug
    behind the silent npu error); the verification must catch it and bisect to the layer."""
    _, model, calibration, x = mlp
    snippets = {"SNIPPETS_MODE": "ENABLE"}
    unchecked = nx.compile(
        model, device="npu", quantize="int8", calibration=calibration, progress=False, verify=False, ov_properties=snippets
    )
    cpu = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False)
    if np.abs(_host(unchecked(x)) - _host(cpu(x))).max() < 0.1:
        pytest.skip("this OpenVINO computes the fused quantized MLP correctly: nothing wrong to catch")
    with pytest.raises(
        nx.CompilationError,
        match=r"does not compute what its quantization plan says.*first layer that differs is node 'linear_1'",
    ):
        nx.compile(model, device="npu", quantize="int8", calibration=calibration, progress=False, ov_properties=snippets)


@pytest.mark.parametrize("device", INT8_DEVICES)
def test_degenerate_ranges_quantize_to_finite_verified_models(device: str) -> None:
    """All-zero and vanishing (1e-40) weight channels, a ReLU that is always 0, constant inputs."""
    torch.manual_seed(2)
    m = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)
    ).eval()
    with torch.no_grad():
        m[0].weight[:4] = 0.0
        m[0].weight[4:8] = 1e-40
        m[2].bias[:] = -100.0  # the second ReLU is always 0: an empty range
    rng = np.random.default_rng(3)
    calibration = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(4)]
    calibration[1][:, :3] = 1.0  # constant columns
    model = nx.nn.from_torch(m, (torch.from_numpy(calibration[0]),))
    compiled = nx.compile(model, device=device, quantize="int8", calibration=calibration, progress=False)
    y = _host(compiled(calibration[2]))
    want = m(torch.from_numpy(calibration[2])).detach().numpy()
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, want, atol=2 * float(compiled.plan.activations[compiled.graph.outputs[0]].scale[0]))
    scales = np.concatenate([np.ravel(q.scale) for q in [*compiled.plan.activations.values(), *compiled.plan.weights.values()]])
    assert np.all(scales >= np.finfo(np.float32).tiny)
    assert compiled.verification is not None


def test_calibration_from_a_generator_calibrates_and_verifies(mlp: Any) -> None:
    _, model, calibration, x = mlp
    compiled = nx.compile(model, device="cpu", quantize="int8", calibration=(b for b in calibration), progress=False)
    assert compiled.verification is not None and compiled.verification.batches == V.VERIFY_BATCHES
    assert "verified on" in str(compiled.placement)
    fresh = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False)
    np.testing.assert_array_equal(_host(compiled(x)), _host(fresh(x)))
