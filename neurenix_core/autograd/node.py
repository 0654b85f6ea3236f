"""The records the tape keeps: a :class:`Leaf` (a user tensor that requires grad, with its
accumulated grad) and a :class:`Node` (one recorded op). Their own file so that the gradient
rules, which read nodes, and the tape, which makes them, do not import each other."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from neurenix_core.tensor.tensor import Tensor

__all__ = ["Leaf", "Node"]


class Leaf:
    """Autograd state of a tensor created by the user that requires grad: its accumulated grad."""

    __slots__ = ("grad", "release")

    def __init__(self) -> None:
        self.grad: Tensor | None = None
        self.release: weakref.finalize | None = None


class Node:
    """One recorded op: its rule, arguments, and one parent per tensor argument.

    ``parents[i]`` is the Node of the i-th tensor argument, the leaf Tensor itself (its grad is
    accumulated there), or None when that argument does not require grad.
    """

    __slots__ = ("__weakref__", "_out", "args", "inputs", "kwargs", "op", "parents")

    def __init__(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Tensor], parents: list[Any], out: Tensor) -> None:
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.inputs = inputs
        self.parents = parents
        self._out = weakref.ref(out)

    @property
    def out(self) -> Tensor:
        t = self._out()
        if t is None:  # every node reached by backward is an input of a live consumer
            raise RuntimeError(f"autograd: the result of {self.op} was freed before backward reached it")
        return t

    @property
    def needs(self) -> list[bool]:
        """Which tensor arguments need a gradient (rules skip the others' work)."""
        return [p is not None for p in self.parents]
