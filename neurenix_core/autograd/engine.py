"""Backward: walk the tape from a result to its leaves, applying each node's vjp rule.

Installed into tensor.py as ``tensor.autograd`` (Tensor.backward, .grad, .requires_grad and
.detach delegate here). Gradients are computed with grad mode off (no graph of the backward
itself) and accumulate into ``leaf.grad`` as PyTorch does.
"""

from __future__ import annotations

import sys
from typing import Any

from neurenix_core.autograd import tape
from neurenix_core.autograd.rules import RULES, unbroadcast
from neurenix_core.autograd.tape import Leaf, Node
from neurenix_core.errors import DeviceMismatchError, NotDifferentiableError, ShapeError, UnsupportedOperationError
from neurenix_core.tensor import creation
from neurenix_core.tensor import ops as xp
from neurenix_core.tensor import tensor as _tensor
from neurenix_core.tensor.tensor import Tensor, adopt

__all__ = ["backward", "check_inplace", "detach", "grad_of", "is_leaf", "requires_grad", "set_grad", "set_requires_grad"]

requires_grad = tape.requires_grad
set_requires_grad = tape.set_requires_grad
check_inplace = tape.check_inplace


def grad_of(t: Tensor) -> Tensor | None:
    leaf = tape.leaf_of(t)
    return None if leaf is None else leaf.grad


def set_grad(t: Tensor, value: Tensor | None) -> None:
    leaf = tape.leaf_of(t)
    if value is None:
        if leaf is not None:
            leaf.grad = None
        return
    if leaf is None:
        raise UnsupportedOperationError(f"{t.device}: .grad can only be set on a leaf tensor that requires grad")
    if type(value) is not Tensor or value.shape != t.shape or value.device != t.device:
        raise ShapeError(f"{t.device}: .grad must be a Tensor of shape {t.shape} on {t.device}, got {getattr(value, 'shape', type(value).__name__)}")
    leaf.grad = value


def is_leaf(t: Tensor) -> bool:
    return type(getattr(t, "_ag", None)) is not Node


def detach(t: Tensor) -> Tensor:
    # A view of the same buffer (charged nothing), with no autograd state.
    return adopt(t._data, t._p, (t,))


def _seed(root: Tensor, gradient: Tensor | None) -> Tensor:
    if gradient is None:
        if root.size != 1:
            raise ShapeError(
                f"{root.device}: backward() without a gradient needs a tensor with one element, got shape {root.shape}; "
                "reduce it first (loss.sum(), nx.mean(loss)) or pass gradient=nx.ones_like(result)"
            )
        return creation.ones_like(root)
    if type(gradient) is not Tensor or gradient.shape != root.shape:
        raise ShapeError(f"{root.device}: backward(gradient) needs a Tensor of shape {root.shape}, got {getattr(gradient, 'shape', type(gradient).__name__)}")
    if gradient.device != root.device:
        raise DeviceMismatchError(f"backward: the gradient is on {gradient.device}, the result on {root.device}; move it with .to('{root.device}')")
    return gradient


def _conform(g: Any, like: Tensor, op: str) -> Tensor:
    if type(g) is not Tensor:
        raise TypeError(f"autograd rule of {op} returned {type(g).__name__}, not a Tensor (a bug in neurenix_core/autograd/rules.py)")
    if g.shape != like.shape:
        g = unbroadcast(g, like.shape)
    if g.dtype != like.dtype:
        g = xp.astype(g, like.dtype)
    return g


def _topological(root: Node) -> list[Node]:
    """Nodes in reverse topological order (a node before every node it depends on)."""
    order: list[Node] = []
    seen: set[int] = {id(root)}
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, i = stack.pop()
        parents = node.parents
        while i < len(parents):
            p = parents[i]
            i += 1
            if type(p) is Node and id(p) not in seen:
                seen.add(id(p))
                stack.append((node, i))
                stack.append((p, 0))
                break
        else:
            order.append(node)
    order.reverse()
    return order


def _accumulate(leaf_tensor: Tensor, g: Tensor) -> None:
    leaf = tape.leaf_of(leaf_tensor)
    if leaf is None:  # requires_grad was switched off since the forward
        return
    g = _conform(g, leaf_tensor, "accumulation")
    leaf.grad = g if leaf.grad is None else leaf.grad + g


def _not_differentiable(node: Node) -> NotDifferentiableError:
    where = node.inputs[0].device if node.inputs else "?"
    return NotDifferentiableError(
        f"backward through {node.op} on {where}: {node.op} has no gradient rule in neurenix. Keep it out of the "
        "differentiated path: compute it on .detach()ed tensors or under nx.no_grad()"
    )


def backward(root: Tensor, gradient: Tensor | None = None) -> None:
    ag = getattr(root, "_ag", None)
    if ag is None:
        # Computed by a framework's own autograd (a module from TensorCoresBackend.optimize_model):
        # that framework differentiates it.
        if root._p.backend._native_backward(root._data, None if gradient is None else gradient._data):
            return
        raise UnsupportedOperationError(
            f"{root.device}: backward() on a tensor that does not require grad: nothing it was computed from requires grad "
            "(set requires_grad=True on the inputs, or call it outside nx.no_grad())"
        )
    g = _seed(root, gradient)
    if type(ag) is Leaf:
        _accumulate(root, g)
        return
    previous = tape.set_enabled(False)
    try:
        _run(ag, g)
    finally:
        tape.set_enabled(previous)


def _run(root: Node, g: Tensor) -> None:
    pending: dict[int, Tensor] = {id(root): g}
    for node in _topological(root):
        g_out = pending.pop(id(node), None)
        if g_out is None:
            continue
        vjp = RULES.get(node.op)
        if vjp is None:
            raise _not_differentiable(node)
        for parent, inp, gi in zip(node.parents, node.inputs, vjp(node, g_out)):
            if parent is None or gi is None:
                continue
            gi = _conform(gi, inp, node.op)
            if type(parent) is Tensor:
                _accumulate(parent, gi)
            else:
                key = id(parent)
                prev = pending.get(key)
                pending[key] = gi if prev is None else prev + gi


# The Tensor methods delegate to this module (tensor.py never imports it: no cycle).
_tensor.autograd = sys.modules[__name__]
