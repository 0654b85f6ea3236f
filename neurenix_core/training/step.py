"""``nx.compile_step(loss_fn, model, optimizer)``: one training step, lowered by the device's plugin.

    step = nx.compile_step(lambda m, x, y: F.cross_entropy(m(x), y), model, optimizer)
    for x, y in batches:
        loss = step(x, y)          # zero_grad, forward, backward, optimizer.step()

The model's backend decides how (``Backend._compile_train_step``): on tpu the forward and loss
are differentiated by ``jax.value_and_grad`` under ``jax.jit``; on cuda by PyTorch's autograd;
on cpu (and any backend without its own autodiff) by the neurenix tape. Inference-only devices
(npu, edgetpu) refuse, naming the remedy. Whatever differentiates, the update is the
optimizer's own (the same arithmetic on every device).

The plugins' versions run ``loss_fn`` with the parameters' (and buffers') native arrays swapped
for the framework's traced or autograd-tracked arrays: :func:`swapped` does that, and restores
the originals even when the forward raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from neurenix_core.autograd.grad import enable_grad
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.tensor.tensor import Tensor

__all__ = ["TapeStep", "compile_step", "refuse_random_layers", "swapped", "trainable_state"]

LossFn = Callable[..., Tensor]


class TapeStep:
    """The eager step: the tape differentiates, the optimizer updates."""

    def __init__(self, loss_fn: LossFn, model: Any, optimizer: Any) -> None:
        self.loss_fn, self.model, self.optimizer = loss_fn, model, optimizer
        self.engine = "neurenix tape"

    def __call__(self, *batch: Any) -> Tensor:
        self.optimizer.zero_grad()
        with enable_grad():
            loss = self.loss_fn(self.model, *batch)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


@contextlib.contextmanager
def swapped(tensors: Sequence[Tensor], natives: Sequence[Any]) -> Iterator[None]:
    """Inside the block each tensor holds the given native array instead of its own."""
    saved = [t._data for t in tensors]
    try:
        for t, n in zip(tensors, natives):
            t._data = n
        yield
    finally:
        for t, n in zip(tensors, saved):
            t._data = n


@strict_kwargs("nx.compile_step")
def compile_step(loss_fn: LossFn, model: Any, optimizer: Any, *, data_parallel: bool = False) -> Callable[..., Tensor]:
    """A callable ``step(*batch) -> loss`` that trains ``model`` with ``optimizer`` on its device.

    ``loss_fn(model, *batch)`` returns a scalar loss Tensor. The step's ``engine`` attribute
    says what differentiates ("jax.value_and_grad + jax.jit", "torch.autograd", "neurenix tape").

    ``data_parallel=True`` (after ``nx.distributed.init()``): every rank calls the step with its
    shard of the global batch (``nx.distributed.shard``); rank 0's parameters are broadcast first
    and the gradients are averaged over the ranks before each update (inside the jitted program on
    tpu, a bucketed all-reduce elsewhere), so the ranks stay identical. docs/distributed.md.
    """
    params = list(model.parameters())
    if not params:
        raise UnsupportedOperationError(f"compile_step: {type(model).__name__} has no parameters to train")
    device = params[0].device
    backend = params[0]._p.backend
    if not backend.trains:
        raise UnsupportedOperationError(
            f"compile_step: {device} (backend {backend.name}) runs inference only and cannot train. "
            f"Train on cpu, tpu or cuda, save the weights, then compile for it: nx.compile(model, device='{device}')"
        )
    if data_parallel:
        return _data_parallel_step(loss_fn, model, optimizer, device, backend)
    lowered = backend._compile_train_step(loss_fn, model, optimizer)
    return lowered if lowered is not None else TapeStep(loss_fn, model, optimizer)


def _data_parallel_step(loss_fn: LossFn, model: Any, optimizer: Any, device: Any, backend: Any) -> Callable[..., Tensor]:
    from neurenix_core.distributed.engine import current

    engine = current("compile_step(data_parallel=True)")
    if device.type != engine.device.type:
        from neurenix_core.errors import DistributedError

        raise DistributedError(
            f"compile_step(data_parallel=True): the model is on {device} but nx.distributed.init() started "
            f"{engine.name} for {engine.device}; move the model with model.to(nx.distributed.device())"
        )
    engine.broadcast_parameters(model)

    def lower(opt: Any) -> Any:
        lowered = backend._compile_train_step(loss_fn, model, opt)
        return lowered if lowered is not None else TapeStep(loss_fn, model, opt)

    step = engine.lower_step(lower, optimizer)
    step.data_parallel = engine.name  # what keeps the ranks together, next to .engine
    return step


def trainable_state(model: Any) -> tuple[list[Tensor], list[tuple[Any, str]]]:
    """The model's parameters and (owner module, attribute) of each of its buffers."""
    buffers = [(mod, attr) for _, mod in model.named_modules() for attr, b in mod._buffers.items() if b is not None]
    return list(model.parameters()), buffers


def refuse_random_layers(model: Any, engine: str) -> None:
    """A traced step would freeze one dropout mask into the program: refuse instead."""
    for name, mod in model.named_modules():
        if type(mod).__name__ == "Dropout" and mod.training and getattr(mod, "p", 0.0) > 0.0:
            raise UnsupportedOperationError(
                f"compile_step ({engine}): Dropout layer {name!r} is in training mode, and a traced step would reuse one "
                "random mask for every step. Use the eager tape (a plain loss.backward() loop) or set its p to 0 for this model"
            )
