"""The optimizer base: parameter groups, per-parameter state, zero_grad, state_dict.

Updates run under ``no_grad`` with the core's ops, so they execute on the parameters' own
backend (NumPy, JAX, PyTorch ...); a parameter is written in place through the backend's
assignment (``setitem``), so every reference to it sees the new values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from neurenix_core.autograd.grad import no_grad
from neurenix_core.errors import ConfigurationError, ShapeError
from neurenix_core.tensor.creation import asarray
from neurenix_core.tensor.indexing import setitem
from neurenix_core.tensor.tensor import Tensor

__all__ = ["Optimizer", "assign"]


def assign(p: Tensor, value: Tensor) -> None:
    """Write ``value`` into parameter ``p`` (same shape; cast to p's dtype)."""
    if value.dtype != p.dtype:
        from neurenix_core.tensor.ops import astype

        value = astype(value, p.dtype)
    setitem(p, Ellipsis, value)


class Optimizer:
    """Base class: ``step()`` applies :meth:`_update` to every parameter that has a gradient."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        items = list(params)
        if not items:
            raise ConfigurationError(f"{type(self).__name__}: got an empty parameter list (model.parameters() of a model without weights?)")
        groups = items if isinstance(items[0], Mapping) else [{"params": items}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        for group in groups:
            self.add_param_group(dict(group))
        self.state: dict[int, dict[str, Any]] = {}

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = list(group["params"])
        for p in params:
            self._check_param(p)
        self.param_groups.append({**self.defaults, **group, "params": params})

    def _check_param(self, p: Any) -> None:
        if type(p) is not Tensor:
            raise TypeError(f"{type(self).__name__} optimizes neurenix Tensors (model.parameters()), not {type(p).__name__}")
        if not p.requires_grad or not p.is_leaf:
            raise ConfigurationError(f"{type(self).__name__}: a parameter on {p.device} of shape {p.shape} is not a leaf that requires grad")

    def _params(self) -> Iterable[tuple[int, dict[str, Any], Tensor]]:
        i = 0
        for group in self.param_groups:
            for p in group["params"]:
                yield i, group, p
                i += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, _, p in self._params():
            if p.grad is not None:
                p.grad = None if set_to_none else p.grad * 0.0

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns ``closure()`` if given."""
        loss = None
        if closure is not None:
            from neurenix_core.autograd.grad import enable_grad

            with enable_grad():
                loss = closure()
        with no_grad():
            for i, group, p in self._params():
                if p.grad is not None:
                    self._update(p, p.grad, self.state.setdefault(i, {}), group)
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
        params = {i: p for i, _, p in self._params()}
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
