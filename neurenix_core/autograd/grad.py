"""The user-facing switches and the functional form: no_grad, enable_grad, grad, value_and_grad.

    with nx.no_grad():                    # evaluation, optimizer updates: nothing recorded
        ...
    df = nx.grad(f)                       # f(x, ...) -> scalar Tensor; df(x, ...) -> df/dx
    value, grads = nx.value_and_grad(f, argnums=(0, 1))(x, y)

``grad`` differentiates with respect to Tensors or nested lists/tuples/dicts of Tensors (a
model's ``dict(model.named_parameters())``, for instance).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from neurenix_core.autograd import engine, tape
from neurenix_core.errors import ShapeError
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.tensor import creation
from neurenix_core.tensor.tensor import Tensor

__all__ = ["enable_grad", "grad", "is_grad_enabled", "no_grad", "set_grad_enabled", "value_and_grad"]


class _Mode(contextlib.ContextDecorator):
    """Grad mode on or off inside a ``with`` block or a decorated function."""

    def __init__(self, mode: bool) -> None:
        self.mode = mode
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        self._previous.append(tape.set_enabled(self.mode))

    def __exit__(self, *exc: object) -> None:
        tape.set_enabled(self._previous.pop())


def no_grad() -> _Mode:
    """Nothing inside is recorded: evaluation and parameter updates."""
    return _Mode(False)


def enable_grad() -> _Mode:
    return _Mode(True)


@strict_kwargs("nx.set_grad_enabled")
def set_grad_enabled(mode: bool) -> _Mode:
    return _Mode(mode)


def is_grad_enabled() -> bool:
    return tape.is_enabled()


# ----------------------------------------------------------------------------- functional form
def _map(tree: Any, fn: Callable[[Tensor], Any]) -> Any:
    if type(tree) is Tensor:
        return fn(tree)
    if isinstance(tree, dict):
        return {k: _map(v, fn) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map(v, fn) for v in tree)
    raise TypeError(f"grad: differentiate with respect to Tensors (or lists/tuples/dicts of them), not {type(tree).__name__}")


def _leaf(t: Tensor) -> Tensor:
    return engine.detach(t).requires_grad_(True)


def _grad_of(t: Tensor) -> Tensor:
    g = t.grad
    return creation.zeros_like(t) if g is None else g  # f did not depend on it


@contextlib.contextmanager
def _recording() -> Iterator[None]:
    previous = tape.set_enabled(True)
    try:
        yield
    finally:
        tape.set_enabled(previous)


@strict_kwargs("nx.value_and_grad")
def value_and_grad(f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """``f``'s value and its gradient with respect to the arguments at ``argnums``.

    ``f`` returns a Tensor with one element (or ``(value, aux)`` with ``has_aux``). The
    gradient has the structure of the argument (one per entry of a tuple ``argnums``).
    """
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        if max(nums) >= len(args):
            raise TypeError(f"grad: argnums {argnums} but {getattr(f, '__name__', 'f')} got {len(args)} positional argument(s)")
        call = list(args)
        leaves = {i: _map(args[i], _leaf) for i in nums}
        for i, v in leaves.items():
            call[i] = v
        with _recording():
            result = f(*call, **kwargs)
        value, aux = result if has_aux else (result, None)
        if type(value) is not Tensor or value.size != 1:
            raise ShapeError(f"grad: {getattr(f, '__name__', 'f')} must return a Tensor with one element, got {getattr(value, 'shape', type(value).__name__)}")
        if value.requires_grad:
            value.backward()
        grads = tuple(_map(leaves[i], _grad_of) for i in nums)
        out = grads[0] if isinstance(argnums, int) else grads
        value = engine.detach(value)
        return ((value, aux), out) if has_aux else (value, out)

    return run


@strict_kwargs("nx.grad")
def grad(f: Callable[..., Any], argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable[..., Any]:
    """The gradient of scalar-valued ``f`` with respect to the arguments at ``argnums`` (JAX's ``grad``)."""
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        (value_aux, grads) = vg(*args, **kwargs)
        return (grads, value_aux[1]) if has_aux else grads

    return run
