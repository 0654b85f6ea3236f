"""The TPU's compiled training step: forward, loss, ``jax.value_and_grad`` and the optimizer's
update in one ``jax.jit`` program.

The neurenix model itself is traced: its parameters' and buffers' JAX arrays are swapped for
JAX tracers while ``loss_fn(model, *batch)`` runs (every op dispatches to ``jax.numpy``), so the
program XLA compiles is exactly the eager model, differentiated by JAX. The optimizer's own
update (its neurenix arithmetic) is traced the same way over its state, so one step is one
dispatch. The first step runs the update eagerly (it creates the optimizer's state); buffer
updates (BatchNorm running statistics) come out of the program as results.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.contract import Tensor, adopt, no_grad, refuse_random_layers, replace_data, swapped, trainable_state

__all__ = ["JaxTrainStep"]


class JaxTrainStep:
    engine = "jax.value_and_grad + jax.jit"

    def __init__(self, jax: Any, loss_fn: Any, model: Any, optimizer: Any) -> None:
        refuse_random_layers(model, self.engine)
        self.jax = jax
        self.loss_fn, self.model, self.optimizer = loss_fn, model, optimizer
        self.params, self.buffer_slots = trainable_state(model)
        self.placement = self.params[0]._p
        slots = {id(s.tensor): i for i, s in enumerate(optimizer.slots())}
        missing = [i for i, p in enumerate(self.params) if id(p) not in slots]
        if missing:
            from neurenix_core.errors import ConfigurationError

            raise ConfigurationError(f"compile_step: {len(missing)} model parameter(s) are not in the optimizer; pass model.parameters() to it")
        self.slot_index = [slots[id(p)] for p in self.params]
        self._jit: Any = jax.jit
        self._grads = jax.jit(jax.value_and_grad(self._loss, has_aux=True))
        self._fused: dict[Any, Any] = {}

    def distribute(self, jit: Any) -> None:
        """Compile the step's programs with ``jit`` instead of ``jax.jit``: nx.distributed's
        data-parallel jit (the batch, the last argument, sharded over the job's processes; the
        rest replicated), so XLA averages the gradients inside the program."""
        self._jit = jit
        self._grads = jit(self.jax.value_and_grad(self._loss, has_aux=True))
        self._fused.clear()

    # ------------------------------------------------------------------ traced pieces
    def _loss(self, params: tuple[Any, ...], buffers: tuple[Any, ...], batch: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        owners = [mod._buffers[attr] for mod, attr in self.buffer_slots]
        try:
            with swapped(self.params, params), swapped(owners, buffers), no_grad():
                loss = self.loss_fn(self.model, *(adopt(b, self.placement) for b in batch))
                # A layer may have rebound a buffer to a new Tensor (BatchNorm's running statistics).
                new_buffers = tuple(mod._buffers[attr]._data for mod, attr in self.buffer_slots)
        finally:
            for (mod, attr), owner in zip(self.buffer_slots, owners):
                mod._buffers[attr] = owner
        return loss._data, new_buffers

    def _update(self, params: tuple[Any, ...], grads: tuple[Any, ...], states: tuple[dict[str, Any], ...]) -> tuple[Any, Any]:
        opt, p = self.optimizer, self.placement
        groups = _groups_by_slot(opt)
        new_params, new_states = [], []
        with no_grad():
            for k, (param, g, state) in enumerate(zip(params, grads, states)):
                t = adopt(param, p)
                live = {name: adopt(v, p) for name, v in state.items()}  # "step" too: a 0-d tensor in the program
                opt._update(t, adopt(g, p), live, groups[self.slot_index[k]])
                new_params.append(t._data)
                new_states.append({name: v._data if type(v) is Tensor else v for name, v in live.items()})
        return tuple(new_params), tuple(new_states)

    def _program(self, params: Any, buffers: Any, states: Any, batch: Any) -> Any:
        (loss, new_buffers), grads = self.jax.value_and_grad(self._loss, has_aux=True)(params, buffers, batch)
        new_params, new_states = self._update(params, grads, states)
        return loss, new_buffers, new_params, new_states

    # ------------------------------------------------------------------ the step
    def __call__(self, *batch: Tensor) -> Tensor:
        owners = [mod._buffers[attr] for mod, attr in self.buffer_slots]
        params = tuple(t._data for t in self.params)
        buffers = tuple(b._data for b in owners)
        natives = tuple(b._data for b in batch)
        opt = self.optimizer
        states = [opt.state.get(i) for i in self.slot_index]
        if any(s is None or not s for s in states):  # first step: the update creates the state
            (loss, new_buffers), grads = self._grads(params, buffers, natives)
            for param, g in zip(self.params, grads):
                param.grad = adopt(g, self.placement)
            opt.step()
        else:
            key = tuple(tuple(sorted((k, v) for k, v in g.items() if k not in ("params", "initial_lr"))) for g in opt.param_groups)
            fused = self._fused.get(key)
            if fused is None:  # hyperparameters are constants of the program: a scheduler's new lr compiles once more
                fused = self._fused[key] = self._jit(self._program)
            # The step count enters as float32 data (Adam's bias correction), so the program is reused.
            traced_states = tuple({k: (v._data if type(v) is Tensor else np.float32(v)) for k, v in s.items()} for s in states)
            loss, new_buffers, new_params, new_states = fused(params, buffers, traced_states, natives)
            for param, value, i, state in zip(self.params, new_params, self.slot_index, new_states):
                replace_data(param, value)
                param.grad = None
                step = opt.state[i].get("step")
                opt.state[i] = {k: (v if k == "step" else adopt(v, self.placement)) for k, v in state.items()}
                if step is not None:
                    opt.state[i]["step"] = step + 1  # counted on the host: the program got it as data
        for owner, value in zip(owners, new_buffers):
            replace_data(owner, value)
        return adopt(loss, self.placement)


def _groups_by_slot(optimizer: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for group in optimizer.param_groups:
        out.extend(group for _ in group["params"])
    return out
