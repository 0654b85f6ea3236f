"""Adam (Kingma & Ba) with L2 weight decay, and AdamW (decoupled weight decay, Loshchilov & Hutter).

The same arithmetic as PyTorch's single-tensor implementation, so a model trained with either
follows the same trajectory up to floating-point rounding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from neurenix_core.errors import ConfigurationError
from neurenix_core.optim.optimizer import Optimizer, assign
from neurenix_core.tensor import ops as xp
from neurenix_core.tensor.tensor import Tensor

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ConfigurationError(f"{type(self).__name__}: invalid hyperparameters lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad})

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if wd:
            if self._decoupled:
                assign(p, p * (1.0 - lr * wd))
            else:
                g = g + p * wd
        t = state.get("step", 0) + 1
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        m = g * (1.0 - b1) if m is None else m * b1 + g * (1.0 - b1)
        v = g * g * (1.0 - b2) if v is None else v * b2 + g * g * (1.0 - b2)
        state.update(step=t, exp_avg=m, exp_avg_sq=v)
        if group["amsgrad"]:
            peak = state.get("max_exp_avg_sq")
            v = v if peak is None else xp.maximum(peak, v)
            state["max_exp_avg_sq"] = v
        # ``** 0.5``, not math.sqrt: t may be a traced scalar inside a compiled step (tpu).
        step_size = lr / (1.0 - b1**t)
        denom = xp.sqrt(v) / (1.0 - b2**t) ** 0.5 + eps
        assign(p, p - m / denom * step_size)


class AdamW(Adam):
    """Adam with decoupled weight decay (default 0.01, as in PyTorch)."""

    _decoupled = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
