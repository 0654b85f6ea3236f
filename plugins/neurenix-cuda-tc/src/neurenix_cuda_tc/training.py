"""The cuda training step: PyTorch's autograd differentiates the neurenix model.

On this backend every neurenix op is a torch call, so marking the parameters' torch tensors
``requires_grad`` for one forward makes torch record it; ``loss.backward()`` then runs torch's
C++ autograd instead of the neurenix tape. The optimizer's update runs as usual afterwards (the
flags are off again, so its in-place writes are allowed).
"""

from __future__ import annotations

from typing import Any

from neurenix_core.contract import Tensor, adopt, no_grad, replace_data, trainable_state

__all__ = ["TorchTrainStep"]


class TorchTrainStep:
    engine = "torch.autograd"

    def __init__(self, loss_fn: Any, model: Any, optimizer: Any) -> None:
        self.loss_fn, self.model, self.optimizer = loss_fn, model, optimizer
        self.params, _ = trainable_state(model)
        self.placement = self.params[0]._p

    def __call__(self, *batch: Tensor) -> Tensor:
        self.optimizer.zero_grad()
        natives = [p._data for p in self.params]
        for n in natives:
            n.requires_grad_(True)
        try:
            with no_grad():  # torch records; the neurenix tape stays off
                loss = self.loss_fn(self.model, *batch)
            loss._data.backward()
        finally:
            for n in natives:
                n.requires_grad_(False)
        for param, n in zip(self.params, natives):
            if n.grad is not None:
                param.grad = adopt(n.grad, self.placement)
                n.grad = None
        # Buffers updated in the forward (BatchNorm statistics) must not keep torch's graph alive.
        for b in self.model.buffers():
            if b._data.grad_fn is not None:
                replace_data(b, b._data.detach())
        self.optimizer.step()
        return adopt(loss._data.detach(), self.placement)
