"""Mixed precision (autocast, GradScaler) and nx.compile_step on every device kind."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix as nx
from neurenix import nn
from neurenix.nn import functional as F
from neurenix.optim import SGD, Adam

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_cnn import stripes


# NumPy's bfloat16 matmul (ml_dtypes) returns float32, so bf16 is checked where PyTorch runs it.
@pytest.mark.parametrize("device, precision, dtype", [("cpu:0", "fp16", "float16"), ("cuda:0", "fp16", "float16"), ("cuda:0", "bf16", "bfloat16")])
def test_autocast_runs_layers_low_and_keeps_weights_and_loss_fp32(device: str, precision: str, dtype: str) -> None:
    if device not in [str(d) for d in nx.devices()]:
        pytest.skip(f"{device} not available (NEURENIX_EMULATE)")
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 3)).to(device)
    x = nx.asarray(np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32), device=device)
    with nx.autocast(precision, device=device):
        logits = model(x)
        loss = F.cross_entropy(logits, nx.asarray(np.array([0, 2]), device=device))
        probs = F.softmax(logits, 1)
    assert str(logits.dtype) == dtype and loss.dtype == nx.float32 and probs.dtype == nx.float32
    loss.backward()
    assert all(p.dtype == nx.float32 and p.grad is not None and p.grad.dtype == nx.float32 for p in model.parameters())
    assert model(x).dtype == nx.float32  # outside the block: fp32 again
    with pytest.raises(nx.ConfigurationError, match="fp16' or 'bf16"):
        nx.autocast("int8")


def test_grad_scaler_skips_overflowing_steps_and_adapts_the_scale() -> None:
    w = nn.Linear(2, 1)
    opt = SGD(w.parameters(), lr=0.1)
    scaler = nx.GradScaler(init_scale=8.0, growth_interval=2)
    x = nx.asarray(np.ones((1, 2), np.float32))
    before = w.weight.numpy().copy()
    loss = nx.sum(w(x))
    scaler.scale(loss).backward()
    w.weight.grad = w.weight.grad * float("inf")  # an overflow, as fp16 gradients can have
    assert scaler.step(opt) is None and scaler.skipped_steps == 1
    scaler.update()
    np.testing.assert_array_equal(w.weight.numpy(), before)
    assert scaler.get_scale() == 4.0
    for _ in range(2):  # two clean steps: the scale grows back
        opt.zero_grad()
        scaler.scale(nx.sum(w(x))).backward()
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 8.0
    # The step used the unscaled gradient: d(sum(w x + b))/dw = x = 1, so w moved by lr * 1 per step.
    np.testing.assert_allclose(w.weight.numpy(), before - 0.2, rtol=1e-6)


def _cnn(device: str) -> nn.Module:
    nn.manual_seed(0)
    # No conv bias before BatchNorm: its true gradient is 0, and Adam would turn rounding noise
    # of either engine into full-size steps.
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(256, 2)).to(device).train()


def _loss(m: Any, x: Any, y: Any) -> Any:
    return F.cross_entropy(m(x), y)


@pytest.mark.parametrize("make_opt", [lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: Adam(p, lr=0.01)], ids=["sgd", "adam"])
@pytest.mark.parametrize("device, engine", [("cpu:0", "neurenix tape"), ("tpu:0", "jax.value_and_grad + jax.jit"), ("cuda:0", "torch.autograd")])
def test_compile_step_follows_the_eager_tape(device: str, engine: str, make_opt: Any) -> None:
    if device not in [str(d) for d in nx.devices()]:
        pytest.skip(f"{device} not available (NEURENIX_EMULATE)")
    x, y = stripes(128)
    batches = [(nx.asarray(x[i:i + 32], device=device), nx.asarray(y[i:i + 32], device=device)) for i in range(0, 128, 32)]
    compiled, eager = _cnn(device), _cnn(device)
    step = nx.compile_step(_loss, compiled, make_opt(compiled.parameters()))
    assert step.engine == engine
    opt = make_opt(eager.parameters())
    for xb, yb in batches:
        loss = step(xb, yb)
        opt.zero_grad()
        ref = _loss(eager, xb, yb)
        ref.backward()
        opt.step()
        assert loss.device == nx.Device(device) and not loss.requires_grad
        np.testing.assert_allclose(float(loss), float(ref), rtol=1e-4)
    for (name, a), b in zip(compiled.state_dict().items(), eager.state_dict().values()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4, err_msg=name)


def test_compile_step_refuses_dropout_when_traced() -> None:
    if "tpu:0" not in [str(d) for d in nx.devices()]:
        pytest.skip("tpu:0 not available (NEURENIX_EMULATE)")
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).to("tpu:0").train()
    with pytest.raises(nx.UnsupportedOperationError, match="Dropout layer '1'.*eager tape"):
        nx.compile_step(lambda m, x: nx.sum(m(x)), model, SGD(model.parameters(), lr=0.1))


@pytest.mark.parametrize("device", ["npu:0", "edgetpu:0"])
def test_inference_only_devices_refuse_training_with_the_remedy(device: str) -> None:
    if device not in [str(d) for d in nx.devices()]:
        pytest.skip(f"{device} not available (NEURENIX_EMULATE)")
    model = nn.Linear(2, 2).to(device)
    assert not any(p.requires_grad for p in model.parameters())  # inference works as before
    remedy = rf"{device}.*inference only.*Train on cpu, tpu or cuda.*nx.compile\(model, device='{device}'\)"
    with pytest.raises(nx.UnsupportedOperationError, match=remedy):
        nx.compile_step(_loss, model, None)
    with pytest.raises(nx.UnsupportedOperationError, match=remedy):
        Adam(model.parameters())
