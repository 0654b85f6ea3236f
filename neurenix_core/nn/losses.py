"""Loss modules: thin wrappers over the functional losses (PyTorch's names and arguments)."""

from __future__ import annotations

from neurenix_core.nn import functional as F
from neurenix_core.nn.module import Module
from neurenix_core.tensor.tensor import Tensor

__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "MSELoss", "NLLLoss"]


class MSELoss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, self.reduction)


class CrossEntropyLoss(Module):
    def __init__(self, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.reduction, self.label_smoothing = reduction, float(label_smoothing)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(input, target, self.reduction, self.label_smoothing)


class NLLLoss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, self.reduction)


class BCEWithLogitsLoss(Module):
    def __init__(self, reduction: str = "mean", pos_weight: Tensor | None = None) -> None:
        super().__init__()
        self.reduction = reduction
        # A buffer, as in PyTorch: a constant (not trained) that .to(device) moves with the module
        # (held as a plain attribute it stayed on cpu:0, and the loss on any other device raised
        # DeviceMismatchError; found by tests/differential).
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(input, target, self.reduction, self.pos_weight)
