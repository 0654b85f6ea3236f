"""Optimizers, schedulers and losses follow PyTorch's numbers (the same model, data and steps)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import neurenix as nx
from neurenix.optim import SGD, Adam, AdamW, CosineAnnealingLR, StepLR
from neurenix_core.nn import functional as F

RNG = np.random.default_rng(0)
W0 = RNG.standard_normal((3, 4)).astype(np.float32)
B0 = RNG.standard_normal(3).astype(np.float32)
X = RNG.standard_normal((16, 4)).astype(np.float32)
Y = RNG.standard_normal((16, 3)).astype(np.float32)


def _ours(make: Any, steps: int) -> list[np.ndarray]:
    model = nx.nn.Linear(4, 3)
    model.load_state_dict({"weight": W0, "bias": B0})
    opt = make(model.parameters())
    x, y = nx.asarray(X), nx.asarray(Y)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return [model.weight.numpy(), model.bias.numpy()]


def _torch(make: Any, steps: int) -> list[np.ndarray]:
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(W0))
        model.bias.copy_(torch.from_numpy(B0))
    opt = make(model.parameters())
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.from_numpy(X)), torch.from_numpy(Y)).backward()
        opt.step()
    return [model.weight.detach().numpy(), model.bias.detach().numpy()]


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda p: SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
        (lambda p: SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
        (lambda p: SGD(p, lr=0.05, momentum=0.9, nesterov=True), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True)),
        (lambda p: SGD(p, lr=0.05, momentum=0.5, dampening=0.3), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5, dampening=0.3)),
        (lambda p: Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
        (lambda p: Adam(p, lr=0.01, weight_decay=0.1, amsgrad=True), lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1, amsgrad=True)),
        (lambda p: AdamW(p, lr=0.01, betas=(0.8, 0.99)), lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.8, 0.99))),
    ],
    ids=["sgd", "sgd-momentum-wd", "sgd-nesterov", "sgd-dampening", "adam", "adam-l2-amsgrad", "adamw"],
)
def test_optimizer_trajectory_matches_torch(ours: Any, theirs: Any) -> None:
    for a, b in zip(_ours(ours, 12), _torch(theirs, 12)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_optimizer_state_dict_round_trip_resumes_identically() -> None:
    model = nx.nn.Linear(4, 3)
    opt = Adam(model.parameters(), lr=0.01)
    x, y = nx.asarray(X), nx.asarray(Y)

    def step(m: Any, o: Any) -> None:
        o.zero_grad()
        F.mse_loss(m(x), y).backward()
        o.step()

    step(model, opt)
    saved_model, saved_opt = model.state_dict(), opt.state_dict()
    assert saved_opt["state"][0]["step"] == 1 and isinstance(saved_opt["state"][0]["exp_avg"], np.ndarray)
    twin = nx.nn.Linear(4, 3)
    twin.load_state_dict(saved_model)
    twin_opt = Adam(twin.parameters(), lr=0.5)
    twin_opt.load_state_dict(saved_opt)
    assert twin_opt.param_groups[0]["lr"] == 0.01
    step(model, opt)
    step(twin, twin_opt)
    np.testing.assert_allclose(model.weight.numpy(), twin.weight.numpy(), rtol=1e-6)


def test_optimizer_rejects_bad_parameters() -> None:
    with pytest.raises(nx.ConfigurationError, match="empty"):
        SGD([], lr=0.1)
    with pytest.raises(nx.ConfigurationError, match="requires grad"):
        SGD([nx.ones(3)], lr=0.1)
    with pytest.raises(nx.ConfigurationError, match="Nesterov"):
        SGD(nx.nn.Linear(2, 2).parameters(), lr=0.1, nesterov=True)


@pytest.mark.parametrize(("ours", "theirs"), [
    (lambda o: StepLR(o, step_size=3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    (lambda o: CosineAnnealingLR(o, T_max=7, eta_min=0.001), lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=0.001)),
], ids=["step", "cosine"])
def test_schedulers_match_torch(ours: Any, theirs: Any) -> None:
    opt = SGD(nx.nn.Linear(2, 2).parameters(), lr=0.1)
    topt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    sched, tsched = ours(opt), theirs(topt)
    for _ in range(10):
        assert sched.get_last_lr()[0] == pytest.approx(tsched.get_last_lr()[0], rel=1e-9)
        topt.step()
        sched.step()
        tsched.step()


LOGITS = RNG.standard_normal((5, 4)).astype(np.float64)
LABELS = np.array([0, 3, 1, 1, 2])


@pytest.mark.parametrize("case", ["mse", "ce", "ce-smooth", "ce-probs", "ce-sum-4d", "nll", "bce", "bce-pos-weight"])
def test_losses_and_their_gradients_match_torch(case: str) -> None:
    probs = np.abs(RNG.standard_normal((5, 4)))
    probs /= probs.sum(1, keepdims=True)
    spatial = RNG.standard_normal((2, 3, 2, 2))
    spatial_labels = RNG.integers(0, 3, (2, 2, 2))
    target01 = (RNG.random((5, 4)) > 0.5).astype(np.float64)
    pw = np.array([0.5, 1.0, 2.0, 3.0])
    cases: dict[str, tuple[np.ndarray, np.ndarray, Any, Any]] = {
        "mse": (LOGITS, probs, lambda a, b: F.mse_loss(a, b), lambda a, b: torch.nn.functional.mse_loss(a, b)),
        "ce": (LOGITS, LABELS, lambda a, b: F.cross_entropy(a, b), lambda a, b: torch.nn.functional.cross_entropy(a, b)),
        "ce-smooth": (LOGITS, LABELS, lambda a, b: F.cross_entropy(a, b, label_smoothing=0.2),
                      lambda a, b: torch.nn.functional.cross_entropy(a, b, label_smoothing=0.2)),
        "ce-probs": (LOGITS, probs, lambda a, b: F.cross_entropy(a, b), lambda a, b: torch.nn.functional.cross_entropy(a, b)),
        "ce-sum-4d": (spatial, spatial_labels, lambda a, b: F.cross_entropy(a, b, reduction="sum"),
                      lambda a, b: torch.nn.functional.cross_entropy(a, b, reduction="sum")),
        "nll": (LOGITS, LABELS, lambda a, b: F.nll_loss(F.log_softmax(a, 1), b),
                lambda a, b: torch.nn.functional.nll_loss(torch.log_softmax(a, 1), b)),
        "bce": (LOGITS * 30, target01, lambda a, b: F.binary_cross_entropy_with_logits(a, b),
                lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(a, b)),
        "bce-pos-weight": (LOGITS, target01, lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=nx.asarray(pw)),
                           lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(a, b, pos_weight=torch.from_numpy(pw))),
    }
    x, t, ours, theirs = cases[case]
    xt = torch.from_numpy(x.copy()).requires_grad_()
    ref = theirs(xt, torch.from_numpy(t))
    ref.backward()
    xn = nx.asarray(x).requires_grad_()
    loss = ours(xn, nx.asarray(t))
    loss.backward()
    assert loss.dtype == nx.float64
    np.testing.assert_allclose(float(loss), ref.item(), rtol=1e-10)
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_loss_input_errors_name_the_problem() -> None:
    with pytest.raises(nx.ShapeError, match=r"class indices of shape \(N, ...\)"):
        F.cross_entropy(nx.asarray(LOGITS), nx.asarray(LABELS[:, None]))
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(nx.asarray(LOGITS), nx.asarray(LOGITS), reduction="avg")
    with pytest.raises(nx.ShapeError, match="differ"):
        F.binary_cross_entropy_with_logits(nx.asarray(LOGITS), nx.asarray(LOGITS[:2]))
