"""Gradients of every differentiable op against central finite differences, in float64.

Shapes (and op parameters) come from hypothesis; values from a seeded generator, inside each
op's domain. For a random cotangent ``v`` the test differentiates ``f = sum(op(inputs) * v)``
with the tape (on the device under test) and compares ``<grad_i, u>`` with
``(f(x_i + eps u) - f(x_i - eps u)) / 2 eps`` for random directions ``u`` of every input:
a wrong gradient misses that by far more than the differences' O(eps^2) error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import neurenix_core as nx
from neurenix_core.nn import functional as F
from neurenix_core.testing.reference import require_dtype

EPS = 1e-6
Case = tuple[Callable[..., Any], list[np.ndarray]]
Builder = Callable[[Any, np.random.Generator], Case]
# Two generated cases per op and device by default (JAX compiles every new shape eagerly, so tpu
# dominates the suite's time); NEURENIX_GRADCHECK_EXAMPLES=50 for a thorough run.
SETTINGS = settings(max_examples=int(os.environ.get("NEURENIX_GRADCHECK_EXAMPLES", "2")), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

SMALL = array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
MATRIX_SIDE = st.integers(1, 4)


def _u(rng: np.random.Generator, lo: float, hi: float, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(lo, hi, shape)


def _check(case: Case, device: nx.Device, rng: np.random.Generator) -> None:
    fn, arrays = case
    xs = [nx.asarray(a.astype(np.float64), device=device) for a in arrays]
    out = fn(*xs)
    assert out.device == device
    v = nx.asarray(rng.standard_normal(out.shape), device=device)

    def f(*ts: Any) -> Any:
        return nx.sum(fn(*ts) * v)

    grads = nx.grad(f, argnums=tuple(range(len(xs))))(*xs)
    for i, (x, g) in enumerate(zip(xs, grads)):
        assert g.shape == x.shape and g.device == device and g.dtype == nx.float64, (i, g.shape, g.device, g.dtype)
        u = rng.standard_normal(x.shape)
        ut = nx.asarray(u, device=device)
        plus = [t if j != i else t + ut * EPS for j, t in enumerate(xs)]
        minus = [t if j != i else t - ut * EPS for j, t in enumerate(xs)]
        with nx.no_grad():
            fd = (float(f(*plus)) - float(f(*minus))) / (2 * EPS)
        analytic = float(np.sum(g.numpy() * u))
        scale = 1.0 + abs(analytic) + float(np.sum(np.abs(g.numpy() * u)))
        assert abs(fd - analytic) <= 1e-6 * scale, f"input {i}: finite differences {fd!r}, tape {analytic!r}"


# ----------------------------------------------------------------------------- elementwise
UNARY: dict[str, tuple[float, float]] = {
    "abs": (0.1, 4), "acos": (-0.9, 0.9), "acosh": (1.1, 4), "asin": (-0.9, 0.9), "asinh": (-4, 4),
    "atan": (-4, 4), "atanh": (-0.9, 0.9), "cos": (-3, 3), "cosh": (-3, 3), "exp": (-3, 3), "expm1": (-3, 3),
    "log": (0.1, 8), "log1p": (-0.5, 8), "log2": (0.1, 8), "log10": (0.1, 8), "negative": (-4, 4),
    "positive": (-4, 4), "sin": (-3, 3), "sinh": (-3, 3), "sqrt": (0.1, 8), "square": (-4, 4),
    "tan": (-1.2, 1.2), "tanh": (-3, 3), "reciprocal": (0.5, 4), "ceil": (0.1, 0.9), "floor": (0.1, 0.9),
    "round": (0.1, 0.4), "trunc": (0.1, 0.9), "sign": (0.1, 4),
}
BINARY: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "add": ((-4, 4), (-4, 4)), "subtract": ((-4, 4), (-4, 4)), "multiply": ((-4, 4), (-4, 4)),
    "divide": ((-4, 4), (0.5, 4)), "pow": ((0.5, 2), (-2, 2)), "maximum": ((-4, 4), (-4, 4)),
    "minimum": ((-4, 4), (-4, 4)), "atan2": ((-4, 4), (0.5, 4)), "hypot": ((0.5, 4), (-4, 4)),
    "logaddexp": ((-4, 4), (-4, 4)), "remainder": ((1.1, 1.9), (0.5, 0.9)), "copysign": ((0.5, 4), (0.5, 4)),
    "floor_divide": ((1.1, 1.9), (0.6, 0.9)),
}


def _unary(name: str) -> Builder:
    def build(draw: Any, rng: np.random.Generator) -> Case:
        shape = draw(SMALL)
        return getattr(nx, name), [_u(rng, *UNARY[name], shape)]

    return build


def _binary(name: str) -> Builder:
    def build(draw: Any, rng: np.random.Generator) -> Case:
        shapes = draw(mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
        (la, ha), (lb, hb) = BINARY[name]
        return getattr(nx, name), [_u(rng, la, ha, shapes[0]), _u(rng, lb, hb, shapes[1])]

    return build


def _binary_scalar(draw: Any, rng: np.random.Generator) -> Case:
    c = draw(st.sampled_from([2.0, -0.5, 3]))
    op = draw(st.sampled_from(["radd", "rsub", "rmul", "rdiv", "pow", "rpow"]))
    fns = {"radd": lambda x: c + x, "rsub": lambda x: c - x, "rmul": lambda x: c * x, "rdiv": lambda x: c / x,
           "pow": lambda x: x ** c, "rpow": lambda x: 2.0 ** x}
    return fns[op], [_u(rng, 0.5, 2, draw(SMALL))]


def _where(draw: Any, rng: np.random.Generator) -> Case:
    shapes = draw(mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    cond = rng.random(shapes.result_shape) > 0.5
    return (lambda a, b: nx.where(nx.asarray(cond, device=a.device), a, b)), [_u(rng, -2, 2, shapes.input_shapes[0]), _u(rng, -2, 2, shapes.input_shapes[1])]


def _clip(draw: Any, rng: np.random.Generator) -> Case:
    shape = draw(SMALL)
    if draw(st.booleans()):
        return (lambda x: nx.clip(x, min=-0.5, max=0.5)), [_u(rng, -1, 1, shape)]
    return (lambda x, lo, hi: nx.clip(x, lo, hi)), [_u(rng, -1, 1, shape), _u(rng, -1, -0.2, shape), _u(rng, 0.2, 1, shape)]


# ----------------------------------------------------------------------------- reductions
def _axis(draw: Any, ndim: int) -> Any:
    if ndim == 0:
        return None
    return draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1), st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple)))


def _reduction(name: str) -> Builder:
    def build(draw: Any, rng: np.random.Generator) -> Case:
        shape = draw(array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4))
        axis, keepdims = _axis(draw, len(shape)), draw(st.booleans())
        kwargs: dict[str, Any] = {"axis": axis, "keepdims": keepdims}
        if name in ("var", "std"):
            kwargs["correction"] = draw(st.sampled_from([0.0, 1.0]))
        lo, hi = (0.5, 1.5) if name == "prod" else (-2, 2)
        values = _u(rng, lo, hi, shape)
        if name == "prod" and draw(st.booleans()):
            values.flat[0] = 0.0  # the product of the others is still defined
        return (lambda x: getattr(nx, name)(x, **kwargs)), [values]

    return build


def _cumulative_sum(draw: Any, rng: np.random.Generator) -> Case:
    shape = draw(array_shapes(min_dims=1, max_dims=3, max_side=4))
    axis = draw(st.integers(0, len(shape) - 1))
    initial = draw(st.booleans())
    return (lambda x: nx.cumulative_sum(x, axis=axis, include_initial=initial)), [_u(rng, -2, 2, shape)]


# ----------------------------------------------------------------------------- linear algebra
def _matmul(draw: Any, rng: np.random.Generator) -> Case:
    m, k, n = draw(MATRIX_SIDE), draw(MATRIX_SIDE), draw(MATRIX_SIDE)
    kind = draw(st.sampled_from(["2d", "batched", "broadcast", "vec-mat", "mat-vec", "vec-vec"]))
    shapes = {"2d": ((m, k), (k, n)), "batched": ((2, m, k), (2, k, n)), "broadcast": ((2, 1, m, k), (3, k, n)),
              "vec-mat": ((k,), (2, k, n)), "mat-vec": ((2, m, k), (k,)), "vec-vec": ((k,), (k,))}[kind]
    return nx.matmul, [_u(rng, -2, 2, s) for s in shapes]


def _tensordot(draw: Any, rng: np.random.Generator) -> Case:
    a, b, c = draw(MATRIX_SIDE), draw(MATRIX_SIDE), draw(MATRIX_SIDE)
    if draw(st.booleans()):
        return (lambda x, y: nx.tensordot(x, y, axes=1)), [_u(rng, -2, 2, (2, a, b)), _u(rng, -2, 2, (b, c))]
    return (lambda x, y: nx.tensordot(x, y, axes=([0, 2], [2, 0]))), [_u(rng, -2, 2, (a, 2, b)), _u(rng, -2, 2, (b, c, a))]


def _vecdot(draw: Any, rng: np.random.Generator) -> Case:
    shapes = draw(mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=3))
    k = draw(MATRIX_SIDE)
    return nx.vecdot, [_u(rng, -2, 2, s[:-1] + (k,) if s else (k,)) for s in shapes.input_shapes]


# ----------------------------------------------------------------------------- shapes and indexing
def _manipulation(draw: Any, rng: np.random.Generator) -> Case:
    shape = draw(array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4))
    nd = len(shape)
    which = draw(st.sampled_from(["reshape", "permute_dims", "expand_dims", "squeeze", "broadcast_to", "flip", "roll",
                                  "moveaxis", "tile", "repeat", "matrix_transpose", "tril", "triu"]))
    perm = tuple(draw(st.permutations(range(nd))))
    fns: dict[str, Callable[[Any], Any]] = {
        "reshape": lambda x: nx.reshape(x, (-1,)),
        "permute_dims": lambda x: nx.permute_dims(x, perm),
        "expand_dims": lambda x: nx.expand_dims(x, axis=1),
        "squeeze": lambda x: nx.squeeze(nx.expand_dims(x, axis=0), axis=0),
        "broadcast_to": lambda x: nx.broadcast_to(x, (2,) + shape),
        "flip": lambda x: nx.flip(x, axis=perm[0]),
        "roll": lambda x: nx.roll(x, shift=1, axis=perm[0]),
        "moveaxis": lambda x: nx.moveaxis(x, 0, -1),
        "tile": lambda x: nx.tile(x, (2,) + (1,) * (nd - 1)),
        "repeat": lambda x: nx.repeat(x, 2, axis=perm[0]),
        "matrix_transpose": nx.matrix_transpose,
        "tril": lambda x: nx.tril(x, k=0),
        "triu": lambda x: nx.triu(x, k=1),
    }
    return fns[which], [_u(rng, -2, 2, shape)]


def _join(draw: Any, rng: np.random.Generator) -> Case:
    shape = draw(array_shapes(min_dims=1, max_dims=3, max_side=3))
    axis = draw(st.integers(0, len(shape) - 1))
    if draw(st.booleans()):
        return (lambda a, b: nx.concat([a, b, a], axis=axis)), [_u(rng, -2, 2, shape), _u(rng, -2, 2, shape)]
    return (lambda a, b: nx.stack([a, b], axis=axis)), [_u(rng, -2, 2, shape), _u(rng, -2, 2, shape)]


def _indexing(draw: Any, rng: np.random.Generator) -> Case:
    shape = draw(array_shapes(min_dims=2, max_dims=3, min_side=2, max_side=4))
    kind = draw(st.sampled_from(["slice", "int", "mask", "index", "take"]))
    if kind == "slice":
        return (lambda x: x[1:, ::2, ...]), [_u(rng, -2, 2, shape)]
    if kind == "int":
        return (lambda x: x[-1, None, ...]), [_u(rng, -2, 2, shape)]
    if kind == "mask":
        mask = rng.random(shape) > 0.3
        return (lambda x: x[nx.asarray(mask, device=x.device)]), [_u(rng, -2, 2, shape)]
    idx = np.array([0, 1, 1, 0], dtype=np.int64)  # repeated indices must add up
    # (x[:, idx] mixes a slice with an index array, which the standard leaves out: tests/test_autograd_indexing.py.)
    return (lambda x: nx.take(x, nx.asarray(idx, device=x.device), axis=0 if kind == "take" else 1)), [_u(rng, -2, 2, shape)]


# ----------------------------------------------------------------------------- nn
def _linear(draw: Any, rng: np.random.Generator) -> Case:
    lead = draw(array_shapes(min_dims=1, max_dims=2, max_side=3))
    i, o = draw(MATRIX_SIDE), draw(MATRIX_SIDE)
    if draw(st.booleans()):
        return F.linear, [_u(rng, -2, 2, lead + (i,)), _u(rng, -1, 1, (o, i)), _u(rng, -1, 1, (o,))]
    return (lambda x, w: F.linear(x, w, None)), [_u(rng, -2, 2, lead + (i,)), _u(rng, -1, 1, (o, i))]


def _conv2d(draw: Any, rng: np.random.Generator) -> Case:
    groups = draw(st.sampled_from([1, 1, 2]))
    c, o = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride, dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2))), (draw(st.integers(1, 2)), 1)
    padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    h = dilation[0] * (kh - 1) + 1 + draw(st.integers(0, 3))
    w = kw + draw(st.integers(0, 3))
    n = draw(st.integers(1, 2))
    x, wt, b = _u(rng, -1, 1, (n, c, h, w)), _u(rng, -1, 1, (o, c // groups, kh, kw)), _u(rng, -1, 1, (o,))
    return (lambda x_, w_, b_: F.conv2d(x_, w_, b_, stride, padding, dilation, groups)), [x, wt, b]


def _pool(draw: Any, rng: np.random.Generator) -> Case:
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    p = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), k[0] + draw(st.integers(0, 4)), k[1] + draw(st.integers(0, 4)))
    kind = draw(st.sampled_from(["max", "avg", "avg-no-pad", "adaptive"]))
    x = _u(rng, -2, 2, shape)
    if kind == "max":
        return (lambda t: F.max_pool2d(t, k, s, p)), [x]
    if kind == "adaptive":
        out = (draw(st.integers(1, shape[2])), draw(st.integers(1, shape[3])))
        return (lambda t: F.adaptive_avg_pool2d(t, out)), [x]
    return (lambda t: F.avg_pool2d(t, k, s, p, count_include_pad=kind == "avg")), [x]


def _activation(draw: Any, rng: np.random.Generator) -> Case:
    shape = draw(array_shapes(min_dims=1, max_dims=3, max_side=4))
    which = draw(st.sampled_from(["relu", "gelu", "gelu-tanh", "sigmoid", "tanh", "softmax", "log_softmax"]))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    fns: dict[str, Callable[[Any], Any]] = {
        "relu": F.relu, "gelu": F.gelu, "gelu-tanh": lambda x: F.gelu(x, "tanh"), "sigmoid": F.sigmoid, "tanh": F.tanh,
        "softmax": lambda x: F.softmax(x, axis), "log_softmax": lambda x: F.log_softmax(x, axis),
    }
    return fns[which], [_u(rng, -3, 3, shape)]


def _norm(draw: Any, rng: np.random.Generator) -> Case:
    n, c, h = draw(st.integers(2, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    if draw(st.booleans()):
        args = [_u(rng, -2, 2, (n, c, h, 2)), _u(rng, -1, 1, (c,)), _u(rng, 0.5, 2, (c,)), _u(rng, 0.5, 2, (c,)), _u(rng, -1, 1, (c,))]
        return (lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, 1e-5)), args
    return (lambda x, w, b: F.layer_norm(x, (c, h), w, b, 1e-5)), [_u(rng, -2, 2, (n, c, h)), _u(rng, 0.5, 2, (c, h)), _u(rng, -1, 1, (c, h))]


def _attention(draw: Any, rng: np.random.Generator) -> Case:
    e, heads, length = draw(st.sampled_from([(4, 2), (4, 1), (6, 3)])) + (draw(st.integers(1, 3)),)
    shape = (length, 2, e)

    def fn(q: Any, w_in: Any, b_in: Any, w_out: Any) -> Any:
        return F.multi_head_attention(q, q, q, heads, w_in, b_in, w_out, None)

    return fn, [_u(rng, -1, 1, shape), _u(rng, -0.5, 0.5, (3 * e, e)), _u(rng, -0.5, 0.5, (3 * e,)), _u(rng, -0.5, 0.5, (e, e))]


CASES: dict[str, Builder] = {
    **{f"unary-{n}": _unary(n) for n in UNARY},
    **{f"binary-{n}": _binary(n) for n in BINARY},
    "binary-scalar": _binary_scalar, "where": _where, "clip": _clip,
    **{f"reduce-{n}": _reduction(n) for n in ("sum", "mean", "max", "min", "prod", "var", "std")},
    "cumulative_sum": _cumulative_sum, "matmul": _matmul, "tensordot": _tensordot, "vecdot": _vecdot,
    "manipulation": _manipulation, "concat-stack": _join, "indexing": _indexing,
    "nn-linear": _linear, "nn-conv2d": _conv2d, "nn-pool": _pool, "nn-activation": _activation, "nn-norm": _norm,
    "nn-attention": _attention,
}


def _require_training(device: nx.Device) -> None:
    if not nx.backend(device).trains:
        pytest.skip(f"{device} runs inference only (Backend.trains is False): see test_inference_only_device_refuses_gradients")


def test_inference_only_device_refuses_gradients(nx_device: nx.Device) -> None:
    x = nx.asarray(np.ones(3, dtype=np.float32), device=nx_device)
    if nx.backend(nx_device).trains:
        assert x.requires_grad_().requires_grad
        return
    with pytest.raises(nx.UnsupportedOperationError, match=rf"{nx_device}.*inference only.*nx.compile\(model, device='{nx_device}'\)"):
        x.requires_grad_()


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradient_matches_finite_differences(nx_device: nx.Device, case: str) -> None:
    _require_training(nx_device)
    require_dtype(nx_device, "float64")

    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**16))
    def check(data: Any, seed: int) -> None:
        rng = np.random.default_rng(seed)
        _check(CASES[case](data.draw, rng), nx_device, rng)

    with nx.fallback_policy("allow"):  # graph devices run some ops on the host; gradients follow
        check()


def test_backward_accumulates_and_no_grad_records_nothing(nx_device: nx.Device) -> None:
    _require_training(nx_device)
    x = nx.asarray(np.array([1.0, 2.0, 3.0], dtype=np.float32), device=nx_device).requires_grad_()
    nx.sum(x * x).backward()
    nx.sum(x * 2.0).backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 6.0, 8.0], rtol=1e-6)
    assert x.grad.device == nx_device
    with nx.no_grad():
        y = x * 3.0
    assert not y.requires_grad and x.requires_grad and x.is_leaf


def test_non_differentiable_op_in_the_path_is_named(nx_device: nx.Device) -> None:
    _require_training(nx_device)
    x = nx.asarray(np.array([3.0, 1.0, 2.0], dtype=np.float32), device=nx_device).requires_grad_()
    with nx.fallback_policy("allow"):
        y = nx.sort(x * 2.0)
    with pytest.raises(nx.NotDifferentiableError, match=r"sort on .*no gradient rule"):
        nx.sum(y).backward()
    # Integer and boolean results carry no gradient at all (argmax, comparisons).
    assert not nx.argmax(x).requires_grad and not (x > 1.0).requires_grad


def test_in_place_write_into_taped_tensor_is_refused(nx_device: nx.Device) -> None:
    _require_training(nx_device)
    x = nx.asarray(np.ones(3, dtype=np.float32), device=nx_device).requires_grad_()
    with pytest.raises(nx.UnsupportedOperationError, match="in-place"):
        x[0] = 2.0
    with nx.no_grad():
        x[0] = 2.0  # an optimizer's update
    assert float(x[0]) == 2.0


def test_value_and_grad_over_a_dict_of_tensors(nx_device: nx.Device) -> None:
    _require_training(nx_device)
    params = {"w": nx.asarray(np.array([[1.0, 2.0]]), device=nx_device), "b": nx.asarray(np.array([0.5]), device=nx_device)}
    x = nx.asarray(np.array([[3.0], [4.0]]), device=nx_device)

    def loss(p: dict[str, Any]) -> Any:
        return nx.sum((x @ p["w"] + p["b"]) ** 2)

    value, grads = nx.value_and_grad(loss)(params)
    expected = float(np.sum((np.array([[3.0], [4.0]]) @ np.array([[1.0, 2.0]]) + 0.5) ** 2))
    assert math.isclose(float(value), expected, rel_tol=1e-9)
    assert set(grads) == {"w", "b"} and grads["w"].shape == (1, 2) and grads["w"].device == nx_device
    assert not params["w"].requires_grad  # the caller's tensors are untouched
