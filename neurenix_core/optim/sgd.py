"""Stochastic gradient descent with momentum, Nesterov momentum and weight decay (PyTorch's SGD)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from neurenix_core.errors import ConfigurationError
from neurenix_core.optim.optimizer import Optimizer, assign
from neurenix_core.tensor.tensor import Tensor

__all__ = ["SGD"]


class SGD(Optimizer):
    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ConfigurationError(f"SGD: lr, momentum and weight_decay must be >= 0 (got {lr}, {momentum}, {weight_decay})")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ConfigurationError("SGD: Nesterov momentum needs momentum > 0 and dampening 0")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay, "nesterov": nesterov})

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        momentum = group["momentum"]
        if momentum:
            buf = state.get("momentum_buffer")
            buf = g if buf is None else buf * momentum + g * (1.0 - group["dampening"])
            state["momentum_buffer"] = buf
            g = g + buf * momentum if group["nesterov"] else buf
        assign(p, p - g * group["lr"])
