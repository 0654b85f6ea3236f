"""Learning-rate schedules: StepLR and CosineAnnealingLR, in closed form per epoch (PyTorch's values)."""

from __future__ import annotations

import math
from typing import Any

from neurenix_core.optim.optimizer import Optimizer

__all__ = ["CosineAnnealingLR", "LRScheduler", "StepLR"]


class LRScheduler:
    """Sets every group's ``lr`` to :meth:`lr_at` (epoch) on each :meth:`step`."""

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = 0
        self._apply()

    def lr_at(self, base_lr: float, epoch: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} must define lr_at")

    def _apply(self) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(base, self.last_epoch)

    def step(self) -> None:
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "optimizer"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._apply()


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1) -> None:
        self.step_size, self.gamma = int(step_size), float(gamma)
        super().__init__(optimizer)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0) -> None:  # PyTorch's name
        self.T_max, self.eta_min = int(T_max), float(eta_min)
        super().__init__(optimizer)

    def lr_at(self, base_lr: float, epoch: int) -> float:
        return self.eta_min + (base_lr - self.eta_min) * (1.0 + math.cos(math.pi * epoch / self.T_max)) / 2.0
