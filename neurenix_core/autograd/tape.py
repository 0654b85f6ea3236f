"""The tape: which tensors require grad, and the node each recorded op leaves on its result.

Recording is switched on in tensor.py (``tensor.record``) only while grad mode is on and at
least one leaf tensor that requires grad is alive, so code that never asks for gradients pays
one global load per op. A node keeps its op's arguments (the tensors the vjp rule needs) and a
weak reference to its result: the result owns the node, never the other way round, so a graph
is freed by reference counting as soon as its last tensor goes.
"""

from __future__ import annotations

import weakref
from typing import Any, Final

import numpy as np

from neurenix_core.autograd.node import Leaf, Node
from neurenix_core.autograd.rules import RULES
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.tensor import tensor as _tensor
from neurenix_core.tensor.tensor import Tensor, collect_tensors

__all__ = ["Leaf", "Node", "is_enabled", "leaf_of", "record", "requires_grad", "set_enabled", "set_requires_grad"]


# ----------------------------------------------------------------------------- grad mode
_enabled = True
_live_leaves = 0


def _refresh() -> None:
    _tensor.record = record if (_enabled and _live_leaves > 0) else None


def is_enabled() -> bool:
    return _enabled


def set_enabled(mode: bool) -> bool:
    """Switch grad mode; returns the previous mode."""
    global _enabled
    previous, _enabled = _enabled, bool(mode)
    _refresh()
    return previous


def _leaf_gone() -> None:
    global _live_leaves
    _live_leaves -= 1
    _refresh()


# ----------------------------------------------------------------------------- state per tensor
def requires_grad(t: Tensor) -> bool:
    return getattr(t, "_ag", None) is not None


def leaf_of(t: Tensor) -> Leaf | None:
    ag = getattr(t, "_ag", None)
    return ag if type(ag) is Leaf else None


def set_requires_grad(t: Tensor, value: bool) -> None:
    global _live_leaves
    ag = getattr(t, "_ag", None)
    if type(ag) is Node:
        if not value:
            raise UnsupportedOperationError(
                f"{t.device}: requires_grad can only be switched off on a leaf tensor, not on the result of {ag.op}; use .detach()"
            )
        return
    if value and ag is None:
        backend = t._p.backend
        if not backend.trains:
            raise UnsupportedOperationError(
                f"{t.device} (backend {backend.name}) runs inference only and cannot compute gradients. Train on cpu, tpu "
                f"or cuda, then compile the trained model for it: nx.compile(model, device='{t.device}')"
            )
        if not is_floating(t.dtype):
            raise UnsupportedOperationError(f"{t.device}: only floating tensors can require grad, not {t.dtype}; cast with nx.astype first")
        leaf = Leaf()
        _live_leaves += 1
        leaf.release = weakref.finalize(t, _leaf_gone)
        t._ag = leaf
        _refresh()
    elif not value and ag is not None:
        t._ag = None
        assert ag.release is not None
        ag.release()  # counts the leaf out now; the finalizer never runs twice


# ----------------------------------------------------------------------------- recording
_FLOAT_KINDS: Final = frozenset("fc")


def is_floating(dt: np.dtype[Any]) -> bool:
    # bfloat16 is an ml_dtypes type of kind 'V': recognised by name (ml_dtypes is not imported).
    return dt.kind in _FLOAT_KINDS or dt.name == "bfloat16"


def _differentiable(t: Any) -> bool:
    return type(t) is Tensor and is_floating(t.dtype)


def record(op: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None, out: Any) -> Any:
    """tensor.py's hook: attach a Node to ``out`` when an argument requires grad."""
    inputs: list[Tensor] = []
    collect_tensors(args, inputs)
    if kwargs:
        collect_tensors(tuple(kwargs.values()), inputs)
    parents: list[Any] = []
    tracked = False
    for t in inputs:
        ag = getattr(t, "_ag", None)
        if ag is None:
            parents.append(None)
        else:
            parents.append(t if type(ag) is Leaf else ag)
            tracked = True
    if not tracked:
        return out
    if type(out) is Tensor:
        if _differentiable(out):
            out._ag = Node(op, args, kwargs or {}, inputs, parents, out)
        return out
    # Several results (a tuple or list): each gets a node that refuses backward, naming the op.
    for item in out if isinstance(out, (tuple, list)) else ():
        if _differentiable(item):
            item._ag = Node(f"{op} (an op with several results)", args, kwargs or {}, inputs, parents, item)
    return out


def check_inplace(t: Tensor, value: Any) -> None:
    """In-place writes into a tensor on the tape would silently corrupt its gradients: refused."""
    if requires_grad(t) or (type(value) is Tensor and requires_grad(value)):
        raise UnsupportedOperationError(
            f"{t.device}: in-place assignment into a tensor that requires grad (or of a value that does) cannot be "
            "differentiated; use the out-of-place form (x = x + y, nx.where, nx.concat) or wrap the update in nx.no_grad()"
        )


def differentiable_ops() -> frozenset[str]:
    """The op names that have a vjp rule."""
    return frozenset(RULES)
