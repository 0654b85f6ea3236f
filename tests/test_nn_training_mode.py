"""nn in training: parameters require grad, train()/eval() switch Dropout and BatchNorm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.nn import functional as F


def test_parameters_require_grad_and_gradients_reach_every_layer() -> None:
    nn.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 3))
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"]
    assert all(p.requires_grad for p in model.parameters()) and not any(b.requires_grad for b in model.buffers())
    x = nx.asarray(np.random.default_rng(0).standard_normal((4, 1, 4, 4)).astype(np.float32))
    nx.mean(model.train()(x) ** 2).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        assert float(nx.sum(nx.abs(p.grad))) > 0, name
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_batch_norm_train_matches_torch_and_updates_running_statistics() -> None:
    x = np.random.default_rng(1).standard_normal((6, 3, 4, 5)).astype(np.float32) * 2 + 1
    ours = nn.BatchNorm2d(3, momentum=0.2).train()
    ref = torch.nn.BatchNorm2d(3, momentum=0.2).train()
    xt = torch.from_numpy(x).requires_grad_()
    out_ref = ref(xt)
    (out_ref * torch.arange(out_ref.numel()).reshape(out_ref.shape).float().sin()).sum().backward()
    xn = nx.asarray(x).requires_grad_()
    out = ours(xn)
    weights = nx.asarray(np.sin(np.arange(out_ref.numel()).reshape(out_ref.shape)).astype(np.float32))
    nx.sum(out * weights).backward()
    np.testing.assert_allclose(out.numpy(), out_ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(ours.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), rtol=1e-5, atol=1e-6)
    before = ours.running_mean.numpy().copy()
    ours.eval()(nx.asarray(x))
    np.testing.assert_array_equal(ours.running_mean.numpy(), before)  # eval mode leaves them alone


def test_dropout_drops_in_train_mode_only() -> None:
    nn.manual_seed(3)
    layer = nn.Dropout(0.25)
    x = nx.ones((200, 50))
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    y = layer.train()(x).numpy()
    kept = y != 0
    assert 0.70 < kept.mean() < 0.80
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)


def test_log_softmax_matches_torch() -> None:
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32) * 30
    np.testing.assert_allclose(F.log_softmax(nx.asarray(x), -1).numpy(), torch.log_softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-5, atol=1e-5)


def test_load_state_dict_keeps_parameters_trainable() -> None:
    model = nn.Linear(3, 2)
    model.load_state_dict({"weight": np.zeros((2, 3), np.float32), "bias": np.ones(2, np.float32)})
    assert model.weight.requires_grad and model.bias.requires_grad
    frozen = nn.Linear(3, 2).requires_grad_(False)
    assert not any(p.requires_grad for p in frozen.parameters())
    with pytest.raises(nx.UnsupportedOperationError, match="floating"):
        nx.arange(3).requires_grad_()
