"""The optimizer base: parameter groups, per-parameter state, zero_grad, state_dict.

Updates run under ``no_grad`` with the core's ops, so they execute on the parameters' own
backend (NumPy, JAX, PyTorch ...); a parameter is written in place through the backend's
assignment (``setitem``), so every reference to it sees the new values.

Parameters may also be a framework's own (the ``torch.nn.Parameter`` of a module returned by
``TensorCoresBackend.optimize_model``): the backend whose native arrays they are binds each one
as a Tensor sharing its storage, and its gradient is the one the framework's autograd left in
``.grad``. The same update arithmetic then runs on that backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from neurenix_core.autograd.grad import enable_grad, no_grad
from neurenix_core.errors import ConfigurationError, ShapeError, UnsupportedOperationError
from neurenix_core.plugins.state import registry
from neurenix_core.tensor.creation import asarray
from neurenix_core.tensor.ops import astype
from neurenix_core.tensor.tensor import Tensor, adopt

__all__ = ["Optimizer", "Slot", "assign"]


def assign(p: Tensor, value: Tensor) -> None:
    """Write ``value`` into parameter ``p`` (same shape; cast to p's dtype)."""
    if value.dtype != p.dtype:
        value = astype(value, p.dtype)
    p[...] = value  # the backend's own assignment: in place, or a new array for JAX


class Slot:
    """One parameter as the optimizer sees it: a Tensor, and where its gradient lives."""

    __slots__ = ("native", "tensor")

    def __init__(self, tensor: Tensor, native: Any = None) -> None:
        self.tensor = tensor
        self.native = native  # the framework's parameter when bound, else None

    @property
    def grad(self) -> Tensor | None:
        if self.native is None:
            return self.tensor.grad
        g = self.native.grad
        return None if g is None else adopt(g, self.tensor._p)

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if self.native is None:
            self.tensor.grad = value
        else:
            self.native.grad = None if value is None else value._data


def _bind(native: Any) -> Slot:
    """A framework parameter as a Tensor sharing its storage, on the started backend that owns it."""
    for record in registry().records:
        backend = record.backend
        index = None if backend is None else backend._index_of_native(native)
        if index is not None:
            assert backend is not None
            return Slot(adopt(native.detach(), backend.placement(index)), native)
    raise TypeError(
        f"optimizers take neurenix Tensors (model.parameters()) or the parameters of a module a started backend "
        f"produced (TensorCoresBackend.optimize_model), not {type(native).__name__}"
    )


class Optimizer:
    """Base class: ``step()`` applies :meth:`_update` to every parameter that has a gradient."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        items = list(params)
        if not items:
            raise ConfigurationError(f"{type(self).__name__}: got an empty parameter list (model.parameters() of a model without weights?)")
        groups = items if isinstance(items[0], Mapping) else [{"params": items}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self._slots: list[Slot] = []
        for group in groups:
            self.add_param_group(dict(group))
        self.state: dict[int, dict[str, Any]] = {}

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = list(group["params"])
        self._slots.extend(self._slot(p) for p in params)
        self.param_groups.append({**self.defaults, **group, "params": params})

    def _slot(self, p: Any) -> Slot:
        if type(p) is not Tensor:
            return _bind(p)
        backend = p._p.backend
        if not backend.trains:
            raise UnsupportedOperationError(
                f"{type(self).__name__}: {p.device} (backend {backend.name}) runs inference only and cannot train. Train on cpu, "
                f"tpu or cuda, then compile the trained model for it: nx.compile(model, device='{p.device}')"
            )
        if not p.requires_grad or not p.is_leaf:
            raise ConfigurationError(f"{type(self).__name__}: a parameter on {p.device} of shape {p.shape} is not a leaf that requires grad")
        return Slot(p)

    def slots(self) -> list[Slot]:
        """Every parameter, in order (GradScaler reads and rewrites their gradients through these)."""
        return self._slots

    def _params(self) -> Iterable[tuple[int, dict[str, Any], Slot]]:
        i = 0
        for group in self.param_groups:
            for _ in group["params"]:
                yield i, group, self._slots[i]
                i += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        for slot in self._slots:
            g = slot.grad
            if g is not None:
                slot.grad = None if set_to_none else g * 0.0

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns ``closure()`` if given."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for i, group, slot in self._params():
                g = slot.grad
                if g is not None:
                    self._update(slot.tensor, g, self.state.setdefault(i, {}), group)
        return loss

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define _update")

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Host copies of the state (NumPy arrays) and the hyperparameters; parameters by index."""
        state = {i: {k: (v.numpy() if type(v) is Tensor else v) for k, v in s.items()} for i, s in self.state.items()}
        groups, start = [], 0
        for group in self.param_groups:
            n = len(group["params"])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": list(range(start, start + n))})
            start += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ShapeError(f"{type(self).__name__}.load_state_dict: the saved parameter groups do not match this optimizer's")
        params = {i: slot.tensor for i, _, slot in self._params()}
        for mine, saved in zip(self.param_groups, groups):
            mine.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for key, entries in state_dict["state"].items():
            p = params[int(key)]
            self.state[int(key)] = {
                k: asarray(np.asarray(v), dtype=p.dtype, device=p.device) if isinstance(v, np.ndarray) else v for k, v in entries.items()
            }

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={v}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({hyper})"
