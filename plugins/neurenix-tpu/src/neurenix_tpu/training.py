"""The TPU's compiled training step: ``jax.jit(jax.value_and_grad(forward + loss))``.

The neurenix model itself is traced: its parameters' and buffers' JAX arrays are swapped for
JAX tracers while ``loss_fn(model, *batch)`` runs (every op dispatches to ``jax.numpy``), so the
program XLA compiles is exactly the eager model, differentiated by JAX. Buffer updates (BatchNorm
running statistics) come out of the program as auxiliary results. The optimizer's update then
runs with the optimizer's own arithmetic on the JAX arrays.
"""

from __future__ import annotations

from typing import Any

from neurenix_core.autograd.grad import no_grad
from neurenix_core.tensor.tensor import Tensor, adopt
from neurenix_core.training.step import refuse_random_layers, replace_data, swapped, trainable_state

__all__ = ["JaxTrainStep"]


class JaxTrainStep:
    engine = "jax.value_and_grad + jax.jit"

    def __init__(self, jax: Any, loss_fn: Any, model: Any, optimizer: Any) -> None:
        refuse_random_layers(model, self.engine)
        self.loss_fn, self.model, self.optimizer = loss_fn, model, optimizer
        self.params, self.buffer_slots = trainable_state(model)
        self.placement = self.params[0]._p
        self._step = jax.jit(jax.value_and_grad(self._loss, has_aux=True))

    def _loss(self, params: tuple[Any, ...], buffers: tuple[Any, ...], batch: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        owners = [mod._buffers[attr] for mod, attr in self.buffer_slots]
        p = self.placement
        try:
            with swapped(self.params, params), swapped(owners, buffers), no_grad():
                loss = self.loss_fn(self.model, *(adopt(b, p) for b in batch))
                # A layer may have rebound a buffer to a new Tensor (BatchNorm's running statistics).
                new_buffers = tuple(mod._buffers[attr]._data for mod, attr in self.buffer_slots)
        finally:
            for (mod, attr), owner in zip(self.buffer_slots, owners):
                mod._buffers[attr] = owner
        return loss._data, new_buffers

    def __call__(self, *batch: Tensor) -> Tensor:
        owners = [mod._buffers[attr] for mod, attr in self.buffer_slots]
        (loss, new_buffers), grads = self._step(
            tuple(t._data for t in self.params), tuple(b._data for b in owners), tuple(b._data for b in batch)
        )
        for owner, value in zip(owners, new_buffers):
            replace_data(owner, value)
        for param, g in zip(self.params, grads):
            param.grad = adopt(g, self.placement)
        self.optimizer.step()
        return adopt(loss, self.placement)
