"""Vector-Jacobian products, one rule per differentiable op: ``RULES[op](node, g)``.

A rule receives the recorded node (its ``args``/``kwargs`` as the op got them, its result
``node.out``, ``node.needs``) and the gradient ``g`` of the result, and returns one gradient per
tensor argument, in the order the tensors appear in the arguments (``None``: no gradient).
Rules are written with the core's own ops, so a gradient runs on the backend of its tensors:
NumPy on cpu, JAX on tpu, PyTorch on cuda. The engine sums a gradient that came back with a
broadcast shape and casts it to its input's dtype, so rules need not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.backends.cpu_nn import adaptive_bounds
from neurenix_core.backends.cpu_nn import avg_pool2d as host_avg_pool2d
from neurenix_core.errors import NotDifferentiableError
from neurenix_core.tensor import creation
from neurenix_core.tensor import ops as xp
from neurenix_core.tensor.tensor import Tensor, _call

if TYPE_CHECKING:
    from neurenix_core.autograd.node import Node

__all__ = ["RULES", "Rule", "unbroadcast"]

Grads = Sequence[Tensor | None]
Rule = Callable[["Node", Tensor], Grads]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


# ----------------------------------------------------------------------------- helpers
def arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    """Argument ``index`` (positional) or ``name`` (keyword) of the recorded call."""
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, default)


def per_tensor(node: Node, grads: dict[Any, Tensor | None]) -> list[Tensor | None]:
    """Gradients keyed by argument slot (position, (position, item) or keyword), in the order
    the tape collected the tensors."""
    out: list[Tensor | None] = []
    for i, a in enumerate(node.args):
        if type(a) is Tensor:
            out.append(grads.get(i))
        elif isinstance(a, (list, tuple)):
            out.extend(grads.get((i, j)) for j, v in enumerate(a) if type(v) is Tensor)
    for k, v in node.kwargs.items():
        if type(v) is Tensor:
            out.append(grads.get(k))
    return out


def zeros(like: Tensor, shape: tuple[int, ...] | None = None) -> Tensor:
    return creation.zeros(like.shape if shape is None else shape, dtype=like.dtype, device=like.device)


def unbroadcast(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``g`` down to ``shape`` (the reverse of broadcasting)."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if lead < 0:
        return xp.reshape(g, shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    if axes:
        g = xp.sum(g, axis=axes)
    return xp.reshape(g, shape)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        return (axis % ndim,) if ndim else ()
    return tuple(int(a) % ndim for a in axis)


def expand_reduced(g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    """A reduction's gradient broadcast back over the reduced axes of ``x``."""
    if not keepdims:
        axes = set(_axes(axis, x.ndim))
        g = xp.reshape(g, tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return xp.broadcast_to(g, x.shape)


def _where0(cond: Tensor, g: Tensor) -> Tensor:
    return xp.where(cond, g, zeros(g, g.shape))


# ----------------------------------------------------------------------------- elementwise, one input
def _unary(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Rule:
    def vjp(node: Node, g: Tensor) -> Grads:
        return [fn(node.args[0], node.out, g)]

    return vjp


_LN2, _LN10 = math.log(2.0), math.log(10.0)
_UNARY: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "negative": lambda x, y, g: -g,
    "positive": lambda x, y, g: g,
    "abs": lambda x, y, g: g * xp.sign(x),
    "exp": lambda x, y, g: g * y,
    "expm1": lambda x, y, g: g * (y + 1.0),
    "log": lambda x, y, g: g / x,
    "log1p": lambda x, y, g: g / (x + 1.0),
    "log2": lambda x, y, g: g / (x * _LN2),
    "log10": lambda x, y, g: g / (x * _LN10),
    "sqrt": lambda x, y, g: g / (y * 2.0),
    "square": lambda x, y, g: g * x * 2.0,
    "reciprocal": lambda x, y, g: -g * y * y,
    "sin": lambda x, y, g: g * xp.cos(x),
    "cos": lambda x, y, g: -g * xp.sin(x),
    "tan": lambda x, y, g: g * (y * y + 1.0),
    "sinh": lambda x, y, g: g * xp.cosh(x),
    "cosh": lambda x, y, g: g * xp.sinh(x),
    "tanh": lambda x, y, g: g * (1.0 - y * y),
    "nn.tanh": lambda x, y, g: g * (1.0 - y * y),
    "asin": lambda x, y, g: g / xp.sqrt(1.0 - x * x),
    "acos": lambda x, y, g: -g / xp.sqrt(1.0 - x * x),
    "atan": lambda x, y, g: g / (x * x + 1.0),
    "asinh": lambda x, y, g: g / xp.sqrt(x * x + 1.0),
    "acosh": lambda x, y, g: g / xp.sqrt(x * x - 1.0),
    "atanh": lambda x, y, g: g / (1.0 - x * x),
    "nn.sigmoid": lambda x, y, g: g * y * (1.0 - y),
    "nn.relu": lambda x, y, g: _where0(x > 0, g),
    "conj": lambda x, y, g: xp.conj(g),
    "real": lambda x, y, g: g,
}
for _name, _fn in _UNARY.items():
    RULES[_name] = _unary(_fn)


@rule("ceil", "floor", "round", "trunc", "sign")
def _piecewise_constant(node: Node, g: Tensor) -> Grads:
    # Zero almost everywhere (PyTorch's convention; the jumps have no derivative).
    return [zeros(g, node.args[0].shape)]


@rule("astype")
def _astype(node: Node, g: Tensor) -> Grads:
    return [xp.astype(g, node.args[0].dtype)]


@rule("clip")
def _clip(node: Node, g: Tensor) -> Grads:
    x, lo, hi = node.args[0], arg(node, 1, "min"), arg(node, 2, "max")
    inside = x == x  # noqa: PLR0124 - an all-True mask of x's shape (False at NaN, where clip's gradient is not defined)
    grads: dict[Any, Tensor | None] = {}
    if lo is not None:
        inside = xp.logical_and(inside, x >= lo)
        if type(lo) is Tensor:
            grads[1 if len(node.args) > 1 else "min"] = _where0(x < lo, g)
    if hi is not None:
        inside = xp.logical_and(inside, x <= hi)
        if type(hi) is Tensor:
            grads[2 if len(node.args) > 2 else "max"] = _where0(x > hi, g)
    grads[0] = _where0(inside, g)
    return per_tensor(node, grads)


# ----------------------------------------------------------------------------- elementwise, two inputs
def _binary(fa: Callable[[Any, Any, Tensor, Tensor], Tensor | None], fb: Callable[[Any, Any, Tensor, Tensor], Tensor | None]) -> Rule:
    def vjp(node: Node, g: Tensor) -> Grads:
        a, b = node.args[0], node.args[1]
        y = node.out
        out: list[Tensor | None] = []
        needs = iter(node.needs)
        if type(a) is Tensor:
            out.append(fa(a, b, y, g) if next(needs) else None)
        if type(b) is Tensor:
            out.append(fb(a, b, y, g) if next(needs) else None)
        return out

    return vjp


def _pow_exponent(a: Any, b: Any, y: Tensor, g: Tensor) -> Tensor:
    base = a if type(a) is Tensor else creation.full_like(g, a)
    positive = base > 0
    safe = xp.where(positive, base, creation.ones_like(base))
    return _where0(positive, g * y * xp.log(safe))


def _max_share(a: Any, b: Any, g: Tensor, first: bool, larger: bool) -> Tensor:
    mine, other = (a, b) if first else (b, a)
    wins = (mine > other) if larger else (mine < other)
    ties = mine == other
    return xp.where(wins, g, xp.where(ties, g * 0.5, zeros(g, g.shape)))


_BINARY: dict[str, tuple[Callable[..., Tensor | None], Callable[..., Tensor | None]]] = {
    "add": (lambda a, b, y, g: g, lambda a, b, y, g: g),
    "subtract": (lambda a, b, y, g: g, lambda a, b, y, g: -g),
    "multiply": (lambda a, b, y, g: g * b, lambda a, b, y, g: g * a),
    "divide": (lambda a, b, y, g: g / b, lambda a, b, y, g: -g * y / b),
    "pow": (lambda a, b, y, g: g * b * a ** (b - 1), _pow_exponent),
    "maximum": (lambda a, b, y, g: _max_share(a, b, g, True, True), lambda a, b, y, g: _max_share(a, b, g, False, True)),
    "minimum": (lambda a, b, y, g: _max_share(a, b, g, True, False), lambda a, b, y, g: _max_share(a, b, g, False, False)),
    "atan2": (lambda a, b, y, g: g * b / (a * a + b * b), lambda a, b, y, g: -g * a / (a * a + b * b)),
    "hypot": (lambda a, b, y, g: g * a / y, lambda a, b, y, g: g * b / y),
    "logaddexp": (lambda a, b, y, g: g * xp.exp(a - y), lambda a, b, y, g: g * xp.exp(b - y)),
    "remainder": (lambda a, b, y, g: g, lambda a, b, y, g: -g * xp.floor_divide(a, b)),
    "floor_divide": (lambda a, b, y, g: zeros(g, g.shape), lambda a, b, y, g: zeros(g, g.shape)),
    "copysign": (lambda a, b, y, g: g * xp.sign(a) * xp.sign(y), lambda a, b, y, g: zeros(g, g.shape)),
}
for _name, (_fa, _fb) in _BINARY.items():
    RULES[_name] = _binary(_fa, _fb)


@rule("where")
def _where(node: Node, g: Tensor) -> Grads:
    cond = node.args[0]
    z = zeros(g, g.shape)
    return per_tensor(node, {1: xp.where(cond, g, z), 2: xp.where(cond, z, g)})


# ----------------------------------------------------------------------------- reductions
@rule("sum")
def _sum(node: Node, g: Tensor) -> Grads:
    x = node.args[0]
    return [expand_reduced(g, x, arg(node, 1, "axis"), bool(arg(node, 3, "keepdims", False)))]


@rule("mean")
def _mean(node: Node, g: Tensor) -> Grads:
    x = node.args[0]
    axis = arg(node, 1, "axis")
    count = math.prod(x.shape[i] for i in _axes(axis, x.ndim))
    return [expand_reduced(g, x, axis, bool(arg(node, 2, "keepdims", False))) / float(max(count, 1))]


@rule("max", "min")
def _extremum(node: Node, g: Tensor) -> Grads:
    # Ties share the gradient equally (PyTorch's amax/amin convention).
    x = node.args[0]
    axis, keep = arg(node, 1, "axis"), bool(arg(node, 2, "keepdims", False))
    hit = xp.astype(x == expand_reduced(node.out, x, axis, keep), g.dtype)
    share = hit / xp.sum(hit, axis=axis, keepdims=True)
    return [share * expand_reduced(g, x, axis, keep)]


@rule("var", "std")
def _var(node: Node, g: Tensor) -> Grads:
    x = node.args[0]
    axis, correction, keep = arg(node, 1, "axis"), arg(node, 2, "correction", 0.0), bool(arg(node, 3, "keepdims", False))
    count = math.prod(x.shape[i] for i in _axes(axis, x.ndim))
    centered = x - xp.mean(x, axis=axis, keepdims=True)
    dvar = expand_reduced(g, x, axis, keep) * centered * (2.0 / max(count - float(correction), 1e-300))
    if node.op == "std":
        dvar = dvar / (expand_reduced(node.out, x, axis, keep) * 2.0)
    return [dvar]


@rule("prod")
def _prod(node: Node, g: Tensor) -> Grads:
    # d prod / dx_i = the product of the others: exclusive products from both ends, so zeros
    # in x need no division.
    x = node.args[0]
    axis, keep = arg(node, 1, "axis"), bool(arg(node, 3, "keepdims", False))
    axes = _axes(axis, x.ndim)
    rest = tuple(i for i in range(x.ndim) if i not in axes)
    perm = rest + axes
    moved = xp.permute_dims(x, perm)
    flat = xp.reshape(moved, tuple(x.shape[i] for i in rest) + (math.prod(x.shape[i] for i in axes),))
    left = xp.cumulative_prod(flat, axis=-1, include_initial=True)[..., :-1]
    right = xp.flip(xp.cumulative_prod(xp.flip(flat, axis=-1), axis=-1, include_initial=True)[..., :-1], axis=-1)
    others = xp.permute_dims(xp.reshape(left * right, moved.shape), tuple(int(i) for i in np.argsort(perm)))
    return [others * expand_reduced(g, x, axis, keep)]


@rule("cumulative_sum")
def _cumsum(node: Node, g: Tensor) -> Grads:
    x = node.args[0]
    axis = arg(node, 1, "axis")
    axis = 0 if axis is None else int(axis) % x.ndim
    if arg(node, 3, "include_initial", False):
        g = g[(slice(None),) * axis + (slice(1, None), ...)]
    return [xp.flip(xp.cumulative_sum(xp.flip(g, axis=axis), axis=axis), axis=axis)]


# ----------------------------------------------------------------------------- linear algebra
@rule("matmul", "linalg.matmul")
def _matmul(node: Node, g: Tensor) -> Grads:
    a, b = node.args[0], node.args[1]
    a2 = xp.reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = xp.reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = xp.expand_dims(g2, axis=-2 if b.ndim > 1 else 0)
    if b.ndim == 1:
        g2 = xp.expand_dims(g2, axis=-1)
    needs = node.needs
    ga = xp.matmul(g2, xp.matrix_transpose(b2)) if needs[0] else None
    gb = xp.matmul(xp.matrix_transpose(a2), g2) if needs[1] else None
    if ga is not None and a.ndim == 1:
        ga = xp.reshape(unbroadcast(ga, (1, a.shape[0])), a.shape)
    if gb is not None and b.ndim == 1:
        gb = xp.reshape(unbroadcast(gb, (b.shape[0], 1)), b.shape)
    return [ga, gb]


@rule("matrix_transpose")
def _matrix_transpose(node: Node, g: Tensor) -> Grads:
    return [xp.matrix_transpose(g)]


@rule("vecdot", "linalg.vecdot")
def _vecdot(node: Node, g: Tensor) -> Grads:
    a, b = node.args[0], node.args[1]
    ge = xp.expand_dims(g, axis=int(arg(node, 2, "axis", -1)))
    return [ge * b, ge * a]


@rule("tensordot")
def _tensordot(node: Node, g: Tensor) -> Grads:
    a, b = node.args[0], node.args[1]
    axes = arg(node, 2, "axes", 2)
    if isinstance(axes, int):
        ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        ax_a, ax_b = [int(i) % a.ndim for i in axes[0]], [int(i) % b.ndim for i in axes[1]]
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    na = len(free_a)
    ga = xp.tensordot(g, b, axes=(list(range(na, g.ndim)), free_b))
    order_a = free_a + [ax_a[ax_b.index(i)] for i in sorted(ax_b)]
    gb = xp.tensordot(a, g, axes=(free_a, list(range(na))))
    order_b = [ax_b[ax_a.index(i)] for i in sorted(ax_a)] + free_b
    return [xp.permute_dims(ga, tuple(int(i) for i in np.argsort(order_a))), xp.permute_dims(gb, tuple(int(i) for i in np.argsort(order_b)))]


# ----------------------------------------------------------------------------- shapes and indexing
@rule("reshape", "expand_dims", "squeeze", "broadcast_to")
def _reshape(node: Node, g: Tensor) -> Grads:
    # broadcast_to: the engine sums g back to the input's shape.
    x = node.args[0]
    return [g if node.op == "broadcast_to" else xp.reshape(g, x.shape)]


@rule("permute_dims")
def _permute(node: Node, g: Tensor) -> Grads:
    perm = arg(node, 1, "axes")
    return [xp.permute_dims(g, tuple(int(i) for i in np.argsort(perm)))]


@rule("moveaxis")
def _moveaxis(node: Node, g: Tensor) -> Grads:
    return [xp.moveaxis(g, arg(node, 2, "destination"), arg(node, 1, "source"))]


@rule("flip")
def _flip(node: Node, g: Tensor) -> Grads:
    return [xp.flip(g, axis=arg(node, 1, "axis"))]


@rule("roll")
def _roll(node: Node, g: Tensor) -> Grads:
    shift = arg(node, 1, "shift")
    back = -shift if isinstance(shift, int) else tuple(-int(s) for s in shift)
    return [xp.roll(g, shift=back, axis=arg(node, 2, "axis"))]


@rule("tril", "triu")
def _triangle(node: Node, g: Tensor) -> Grads:
    return [getattr(xp, node.op)(g, k=int(arg(node, 1, "k", 0)))]


@rule("concat")
def _concat(node: Node, g: Tensor) -> Grads:
    arrays = node.args[0]
    axis = arg(node, 1, "axis", 0)
    grads: dict[Any, Tensor | None] = {}
    start = 0
    for j, t in enumerate(arrays):
        if axis is None:
            grads[(0, j)] = xp.reshape(g[start : start + t.size], t.shape)
            start += t.size
        else:
            ax = int(axis) % t.ndim
            grads[(0, j)] = g[(slice(None),) * ax + (slice(start, start + t.shape[ax]), ...)]
            start += t.shape[ax]
    return per_tensor(node, grads)


@rule("stack")
def _stack(node: Node, g: Tensor) -> Grads:
    arrays = node.args[0]
    ax = int(arg(node, 1, "axis", 0)) % g.ndim
    return per_tensor(node, {(0, j): g[(slice(None),) * ax + (j, ...)] for j in range(len(arrays))})


@rule("tile")
def _tile(node: Node, g: Tensor) -> Grads:
    x = node.args[0]
    reps = tuple(int(r) for r in arg(node, 1, "repetitions"))
    n = max(len(reps), x.ndim)
    reps = (1,) * (n - len(reps)) + reps
    shape = (1,) * (n - x.ndim) + tuple(x.shape)
    split = tuple(v for r, s in zip(reps, shape) for v in (r, s))
    return [xp.reshape(xp.sum(xp.reshape(g, split), axis=tuple(range(0, 2 * n, 2))), x.shape)]


@rule("repeat")
def _repeat(node: Node, g: Tensor) -> Grads:
    x = node.args[0]
    repeats, axis = arg(node, 1, "repeats"), arg(node, 2, "axis")
    if type(repeats) is Tensor:
        raise NotDifferentiableError(f"backward through repeat on {x.device}: only an integer repeats is differentiable, not a tensor of counts")
    flat = x if axis is not None else xp.reshape(x, (x.size,))
    ax = 0 if axis is None else int(axis) % x.ndim
    shape = flat.shape[: ax + 1] + (int(repeats),) + flat.shape[ax + 1 :]
    return [xp.reshape(xp.sum(xp.reshape(g, shape), axis=ax + 1), x.shape)]


def _one_hot_take(g: Tensor, indices: Tensor, axis: int, size: int) -> Tensor:
    """Gradient of take along ``axis``: a one-hot matmul, so repeated indices add up."""
    hot = xp.astype(xp.expand_dims(indices, axis=-1) == creation.arange(size, dtype=indices.dtype, device=g.device), g.dtype)
    moved = xp.moveaxis(g, axis, -1)
    return xp.moveaxis(xp.matmul(moved, hot), -1, axis)


@rule("take")
def _take(node: Node, g: Tensor) -> Grads:
    x, indices = node.args[0], node.args[1]
    axis = arg(node, 2, "axis")
    ax = 0 if axis is None else int(axis) % x.ndim
    return [_one_hot_take(g, indices, ax, x.shape[ax])]


def _basic(key: Any) -> bool:
    parts = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (int, slice)) for k in parts)


def _forward_steps(key: Any, shape: tuple[int, ...], g: Tensor) -> tuple[Any, Tensor]:
    """A basic ``key`` (no new axes) with every negative-step slice turned into the positive-step
    slice of the same elements, and ``g`` flipped along those axes of the result: the same
    assignment, which runtimes that refuse negative steps in writes (PyTorch) can make. x[::-1]
    read through a host fallback on cuda:0, and its backward raised (found by tests/differential)."""
    parts = list(key) if isinstance(key, tuple) else [key]
    if Ellipsis in parts:
        at = parts.index(Ellipsis)
        parts[at : at + 1] = [slice(None)] * (len(shape) - (len(parts) - 1))
    out: list[Any] = []
    flips: list[int] = []
    axis = 0  # the axis of the result the next slice makes
    for dim, part in zip(shape, parts):
        if isinstance(part, slice) and (part.step or 1) < 0:
            picked = range(dim)[part]
            if len(picked):
                part = slice(picked[-1], picked[0] + 1, -(part.step or 1))
                flips.append(axis)
            else:
                part = slice(0, 0)
        out.append(part)
        axis += isinstance(part, slice)
    if flips:
        g = xp.flip(g, axis=tuple(flips))
    return tuple(out) + tuple(parts[len(shape):]), g


@rule("__getitem__")
def _getitem(node: Node, g: Tensor) -> Grads:
    x, key = node.args[0], node.args[1]
    if _basic(key) or (type(key) is Tensor and key.dtype == np.bool_):
        if isinstance(key, tuple) and any(k is None for k in key):
            # New axes are not assignable (the standard allows None in reads only): drop them from
            # the key and the matching length-1 axes from g.
            key = tuple(k for k in key if k is not None)
            g = xp.reshape(g, np.broadcast_to(np.empty((), dtype=np.bool_), x.shape)[key].shape)
        if _basic(key):
            key, g = _forward_steps(key, tuple(x.shape), g)
        dx = zeros(g, x.shape)
        dx[key] = g  # Tensor.__setitem__ turns index tensors into the backend's own
        return [dx]
    parts = key if isinstance(key, tuple) else (key,)
    lead = 0
    while lead < len(parts) and parts[lead] == slice(None):
        lead += 1
    rest = parts[lead + 1 :]
    if lead < len(parts) and type(parts[lead]) is Tensor and parts[lead].ndim == 1 and all(k == slice(None) or k is Ellipsis for k in rest):
        return [_one_hot_take(g, parts[lead], lead, x.shape[lead])]
    raise NotDifferentiableError(
        f"backward through indexing on {x.device}: only slices, integers, boolean masks and one 1-D integer index "
        f"tensor (x[..., idx]) are differentiable, not {key!r}; use nx.take(x, idx, axis=...)"
    )


# ----------------------------------------------------------------------------- nn extension ops
@rule("nn.linear")
def _linear(node: Node, g: Tensor) -> Grads:
    x, w, b = node.args[0], node.args[1], node.args[2]
    needs = iter(node.needs)
    gx = xp.matmul(g, w) if next(needs) else None
    g2 = xp.reshape(g, (-1, g.shape[-1]))
    gw = xp.matmul(xp.matrix_transpose(g2), xp.reshape(x, (-1, x.shape[-1]))) if next(needs) else None
    out = [gx, gw]
    if type(b) is Tensor:
        out.append(xp.sum(g2, axis=0) if next(needs) else None)
    return out


def _pad_hw(t: Tensor, top: int, bottom: int, left: int, right: int) -> Tensor:
    """Zero padding on the last two axes (a negative amount crops)."""
    n, c, h, w = t.shape
    if top < 0 or bottom < 0:
        t = t[:, :, max(-top, 0) : h - max(-bottom, 0), :]
        top, bottom = max(top, 0), max(bottom, 0)
    if left < 0 or right < 0:
        t = t[:, :, :, max(-left, 0) : w - max(-right, 0)]
        left, right = max(left, 0), max(right, 0)
    n, c, h, w = t.shape
    if top or bottom:
        t = xp.concat([p for p in (zeros(t, (n, c, top, w)) if top else None, t, zeros(t, (n, c, bottom, w)) if bottom else None) if p is not None], axis=2)
    h = t.shape[2]
    if left or right:
        t = xp.concat([p for p in (zeros(t, (n, c, h, left)) if left else None, t, zeros(t, (n, c, h, right)) if right else None) if p is not None], axis=3)
    return t


def _dilate(t: Tensor, stride: tuple[int, int]) -> Tensor:
    """Insert ``stride - 1`` zeros between neighbours on the last two axes."""
    n, c, h, w = t.shape
    sh, sw = stride
    if sh > 1:
        t = xp.reshape(xp.stack([t] + [zeros(t)] * (sh - 1), axis=3), (n, c, h * sh, w))[:, :, : (h - 1) * sh + 1, :]
    h = t.shape[2]
    if sw > 1:
        t = xp.reshape(xp.stack([t] + [zeros(t)] * (sw - 1), axis=4), (n, c, h, w * sw))[:, :, :, : (w - 1) * sw + 1]
    return t


def _place(c: Tensor, i: int, j: int, stride: tuple[int, int], size: tuple[int, int]) -> Tensor:
    """(N, C, OH, OW) values put at rows i + s*y, columns j + s*x of a zero (N, C, H, W) tensor."""
    d = _dilate(c, stride)
    return _pad_hw(d, i, size[0] - i - d.shape[2], j, size[1] - j - d.shape[3])


def _window(xpad: Tensor, i: int, j: int, stride: tuple[int, int], out_hw: tuple[int, int]) -> Tensor:
    """Element (i, j) of every pooling window: an (N, C, OH, OW) strided slice."""
    (sh, sw), (oh, ow) = stride, out_hw
    return xpad[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]


@rule("nn.conv2d")
def _conv2d(node: Node, g: Tensor) -> Grads:
    x, w, b = node.args[0], node.args[1], node.args[2]
    stride, padding, dilation = (tuple(node.args[i]) for i in range(3, 6))
    groups = int(node.args[6])
    needs = iter(node.needs)
    out: list[Tensor | None] = [
        _conv_input_grad(g, x, w, stride, padding, dilation, groups) if next(needs) else None,
        _conv_weight_grad(g, x, w, stride, padding, dilation, groups) if next(needs) else None,
    ]
    if type(b) is Tensor:
        out.append(xp.sum(g, axis=(0, 2, 3)) if next(needs) else None)
    return out


def _conv_input_grad(g: Tensor, x: Tensor, w: Tensor, stride: Any, padding: Any, dilation: Any, groups: int) -> Tensor:
    # The transposed convolution: g dilated by the stride, fully padded, correlated with the
    # flipped kernel whose in/out channels are swapped per group.
    o, cg, kh, kw = w.shape
    wt = xp.reshape(xp.permute_dims(xp.reshape(w, (groups, o // groups, cg, kh, kw)), (0, 2, 1, 3, 4)), (groups * cg, o // groups, kh, kw))
    wt = xp.flip(wt, axis=(2, 3))
    full = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
    dx = _call("nn.conv2d", (_dilate(g, stride), wt, None, (1, 1), full, dilation, groups))
    hp, wp = x.shape[2] + 2 * padding[0], x.shape[3] + 2 * padding[1]
    dx = _pad_hw(dx, 0, hp - dx.shape[2], 0, wp - dx.shape[3])  # rows the strided windows never reached
    return dx[:, :, padding[0] : padding[0] + x.shape[2], padding[1] : padding[1] + x.shape[3]]


def _conv_weight_grad(g: Tensor, x: Tensor, w: Tensor, stride: Any, padding: Any, dilation: Any, groups: int) -> Tensor:
    # dW[o, c] is the correlation of the input channel c with the output gradient o: a
    # convolution with the batch as channels, g as kernel (dilated by the stride), stride = dilation.
    o, cg, kh, kw = w.shape
    xpad = _pad_hw(x, padding[0], padding[0], padding[1], padding[1])
    og = o // groups
    parts = []
    for k in range(groups):
        xs = xpad[:, k * cg : (k + 1) * cg, :, :] if groups > 1 else xpad
        gs = g[:, k * og : (k + 1) * og, :, :] if groups > 1 else g
        dw = _call("nn.conv2d", (xp.permute_dims(xs, (1, 0, 2, 3)), xp.permute_dims(gs, (1, 0, 2, 3)), None, dilation, (0, 0), stride, 1))
        parts.append(xp.permute_dims(dw[:, :, :kh, :kw], (1, 0, 2, 3)))
    return parts[0] if groups == 1 else xp.concat(parts, axis=0)


@rule("nn.max_pool2d")
def _max_pool2d(node: Node, g: Tensor) -> Grads:
    x, y = node.args[0], node.out
    (kh, kw), stride, (ph, pw) = (tuple(node.args[i]) for i in (1, 2, 3))
    low = creation.full((), -math.inf, dtype=x.dtype, device=x.device)
    xpad = x if (ph, pw) == (0, 0) else _pad_hw(x, ph, ph, pw, pw) + xp.where(_pad_hw(creation.ones_like(x), ph, ph, pw, pw) > 0, zeros(low), low)
    size = (xpad.shape[2], xpad.shape[3])
    out_hw = (y.shape[2], y.shape[3])
    taken = None
    dx = None
    for i in range(kh):
        for j in range(kw):
            hit = _window(xpad, i, j, stride, out_hw) == y
            # The first maximum of a window gets the gradient (PyTorch's choice on ties).
            hit = hit if taken is None else xp.logical_and(hit, xp.logical_not(taken))
            taken = hit if taken is None else xp.logical_or(taken, hit)
            part = _place(_where0(hit, g), i, j, stride, size)
            dx = part if dx is None else dx + part
    assert dx is not None
    return [dx[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]]


@rule("nn.avg_pool2d")
def _avg_pool2d(node: Node, g: Tensor) -> Grads:
    x = node.args[0]
    (kh, kw), stride, (ph, pw) = (tuple(node.args[i]) for i in (1, 2, 3))
    include_pad = bool(node.args[4]) if len(node.args) > 4 else True
    if include_pad or (ph, pw) == (0, 0):
        share = g / float(kh * kw)
    else:
        # Each window divides by the input cells it covers (padding excluded): counted on the host.
        ones = np.ones((1, 1) + tuple(x.shape[2:]), dtype=np.float64)
        cells = host_avg_pool2d(ones, (kh, kw), stride, (ph, pw), count_include_pad=True) * (kh * kw)
        share = g / creation.asarray(cells, dtype=g.dtype, device=g.device)
    size = (x.shape[2] + 2 * ph, x.shape[3] + 2 * pw)
    dx = None
    for i in range(kh):
        for j in range(kw):
            part = _place(share, i, j, stride, size)
            dx = part if dx is None else dx + part
    assert dx is not None
    return [dx[:, :, ph : ph + x.shape[2], pw : pw + x.shape[3]]]


def _adaptive_matrix(size: int, out: int, like: Tensor) -> Tensor:
    start, end = adaptive_bounds(size, out)
    m = np.zeros((out, size), dtype=np.float64)
    for i, (s, e) in enumerate(zip(start, end)):
        m[i, s:e] = 1.0 / (e - s)
    return creation.asarray(m, dtype=like.dtype, device=like.device)


@rule("nn.adaptive_avg_pool2d")
def _adaptive_avg_pool2d(node: Node, g: Tensor) -> Grads:
    # Adaptive average pooling is separable: y = Ph x Pw^T per channel, so dx = Ph^T g Pw.
    x = node.args[0]
    ph = _adaptive_matrix(x.shape[2], g.shape[2], g)
    pw = _adaptive_matrix(x.shape[3], g.shape[3], g)
    return [xp.matmul(xp.matmul(xp.matrix_transpose(ph), g), pw)]


_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@rule("nn.gelu")
def _gelu(node: Node, g: Tensor) -> Grads:
    x, y = node.args[0], node.out
    approximate = arg(node, 1, "approximate", "none")
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        inner = (x + x * x * x * 0.044715) * c
        t = xp.tanh(inner)
        return [g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 0.134145 * x * x))]
    # d/dx x*Phi(x) = Phi(x) + x*phi(x). Phi is read off the backend's own gelu (y / x), so the
    # gradient matches the forward the backend computed; near 0 its Taylor series takes over.
    phi = xp.exp(x * x * -0.5) * _INV_SQRT_2PI
    small = xp.abs(x) < 1e-3
    safe = xp.where(small, creation.ones_like(x), x)
    cdf = xp.where(small, x * _INV_SQRT_2PI + 0.5, y / safe)
    return [g * (cdf + x * phi)]


@rule("nn.softmax")
def _softmax(node: Node, g: Tensor) -> Grads:
    y = node.out
    axis = int(arg(node, 1, "axis", -1))
    return [y * (g - xp.sum(g * y, axis=axis, keepdims=True))]


@rule("nn.batch_norm")
def _batch_norm(node: Node, g: Tensor) -> Grads:
    # y = (x - m) * r * w + b with r = 1/sqrt(v + eps): every argument is differentiable, so a
    # batch-statistics forward (training mode passes the batch mean and var) is exact too.
    x, m, v, w, b, eps = node.args
    shape = (1, -1) + (1,) * (x.ndim - 2)
    axes = (0,) + tuple(range(2, x.ndim))
    r = 1.0 / xp.sqrt(v + float(eps))
    scale = r if w is None else r * w
    xc = x - xp.reshape(m, shape)
    grads: dict[Any, Tensor | None] = {0: g * xp.reshape(scale, shape)}
    needs = dict(zip([i for i, a in enumerate(node.args) if type(a) is Tensor], node.needs))
    if needs.get(1):
        grads[1] = -xp.sum(g, axis=axes) * scale
    if needs.get(2):
        grads[2] = xp.sum(g * xc, axis=axes) * (-0.5) * r * r * scale
    if w is not None and needs.get(3):
        grads[3] = xp.sum(g * xc * xp.reshape(r, shape), axis=axes)
    if b is not None and needs.get(4):
        grads[4] = xp.sum(g, axis=axes)
    return per_tensor(node, grads)


@rule("nn.layer_norm")
def _layer_norm(node: Node, g: Tensor) -> Grads:
    x, dims, w, b, eps = node.args
    axes = tuple(range(x.ndim - len(dims), x.ndim))
    n = float(math.prod(dims))
    mean = xp.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    r = 1.0 / xp.sqrt(xp.mean(xc * xc, axis=axes, keepdims=True) + float(eps))
    xhat = xc * r
    gy = g if w is None else g * w
    gx = r * (gy - xp.sum(gy, axis=axes, keepdims=True) / n - xhat * xp.sum(gy * xhat, axis=axes, keepdims=True) / n)
    lead = tuple(range(x.ndim - len(dims)))
    grads: dict[Any, Tensor | None] = {0: gx}
    if w is not None:
        grads[2] = xp.sum(g * xhat, axis=lead) if lead else g * xhat
    if b is not None:
        grads[3] = xp.sum(g, axis=lead) if lead else g
    return per_tensor(node, grads)
