"""The catalogue of namespace functions: every row of the array API signature table
(``neurenix_core.tensor.signatures.SIGNATURES``: the main namespace, ``linalg`` and ``fft``) and
the Tensor's own indexing, each with a hypothesis example generator over the dtypes it takes and
its float64 reference (``array_api_compat.numpy``, computed on the same values in float64).

``test_catalogue_covers_the_signature_table`` (test_namespace.py) fails when a function is added
to the table without a row here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import array_api_compat.numpy as xp
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import neurenix_core as nx
from neurenix_core.autograd.tape import differentiable_ops
from neurenix_core.testing.suite.test_elementwise import BINARY as KIT_BINARY
from neurenix_core.testing.suite.test_elementwise import UNARY as KIT_UNARY

from .gen import BOOL, COMPLEX, FLOAT, INT, UINT, arr, axis_of, shape, values
from .harness import Arr, Example, Mismatch, compare, magnitude

__all__ = ["CATALOGUE", "Op", "resolve"]

Draw = Callable[[st.DataObject, str], Example]


@dataclass(frozen=True)
class Op:
    """One function under test.

    ``draw(data, dtype)`` makes an example whose tensors have ``dtype`` (one of ``dtypes`` the
    device declares); ``call`` runs it in neurenix (default: the namespace function of that name)
    and ``ref`` in float64 (default: array_api_compat.numpy's). ``scale`` widens the tolerance's
    atol as the kit does; ``check`` replaces the elementwise comparison where the standard leaves
    the result's form open (decompositions' signs, the order of unique values). ``grad``: the op
    has a vjp rule (default: the autograd RULES table says)."""

    name: str
    dtypes: tuple[str, ...]
    draw: Draw
    call: Callable[..., Any] | None = None
    ref: Callable[..., Any] | None = None
    scale: Callable[[Example, Any], float] | None = None
    check: Callable[[list[Any], list[np.ndarray], Example, nx.Device, str], None] | None = None
    grad: bool | None = None
    #: kwargs that are dtypes (names): passed to neurenix as its dtype, to NumPy as NumPy's
    dtype_kwargs: tuple[str, ...] = ()
    #: the result's dtype when the reference cannot tell it (creation functions' defaults)
    result_dtype: Callable[[Example, nx.Device], Any] | None = None
    #: the values are not defined (empty, empty_like): shape, dtype and fields only
    undefined_values: bool = False
    #: a creation function: no tensor argument, given ``device=`` the device under test
    creates: bool = False
    #: whether a result of tensors requiring grad is on the autograd tape: True for ops, False
    #: for results that do not depend on the values (``zeros_like``: PyTorch's rule too), None for
    #: the constructors that may return their argument itself (``asarray``, ``from_dlpack``)
    tape: bool | None = True

    @property
    def differentiable(self) -> bool:
        return self.grad if self.grad is not None else self.name in differentiable_ops()

    def nx_fn(self) -> Callable[..., Any]:
        return self.call if self.call is not None else resolve(nx, self.name)

    def ref_fn(self) -> Callable[..., Any]:
        return self.ref if self.ref is not None else resolve(xp, self.name)


def resolve(namespace: Any, qualname: str) -> Callable[..., Any]:
    obj = namespace
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def _one(a: Arr, **kwargs: Any) -> Example:
    return Example((a,), kwargs)


# --------------------------------------------------------------------------- families
def unary(low: float, high: float, *, specials: bool = False, min_side: int = 0) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        lo, hi = (low, high) if dtype not in INT + UINT else (max(math.ceil(low), -8), min(math.floor(high), 8))
        return _one(arr(data, shape(data, min_side=min_side), dtype, lo, hi, specials=specials))

    return draw


def binary(low: float, high: float, *, ints: tuple[float, float] = (-8, 8), int_rhs: tuple[float, float] | None = None) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4), label="shapes")
        lo, hi = ints if dtype in INT + UINT else (low, high)
        rlo, rhi = int_rhs if int_rhs is not None and dtype in INT + UINT else (lo, hi)
        return Example((arr(data, shapes.input_shapes[0], dtype, lo, hi), arr(data, shapes.input_shapes[1], dtype, rlo, rhi)), {})

    return draw


def _ties(draw: Draw) -> Draw:
    """Values on a coarse grid so comparisons and sorts meet equal elements."""
    def wrapped(data: st.DataObject, dtype: str) -> Example:
        ex = draw(data, dtype)
        return Example(tuple(Arr(np.round(a.values), a.dtype) if isinstance(a, Arr) and a.dtype not in BOOL else a for a in ex.args), ex.kwargs)

    return wrapped


def reduction(low: float = -4, high: float = 4, *, tuples: bool = True, keepdims: bool = True, min_side: int = 1, **extra: Callable[[st.DataObject], Any]) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        shp = shape(data, min_dims=1, min_side=min_side)
        kwargs: dict[str, Any] = {"axis": axis_of(data, len(shp), tuples=tuples)}
        if keepdims:
            kwargs["keepdims"] = data.draw(st.booleans(), label="keepdims")
        for name, strategy in extra.items():
            kwargs[name] = strategy(data)
        return _one(arr(data, shp, dtype, low, high), **kwargs)

    return draw


def _terms(ex: Example, want: Any) -> float:
    """A reduction's scale: largest |input| times the number of terms reduced (the kit's rule)."""
    a = ex.args[0].values
    axis = ex.kwargs.get("axis")
    n = a.size if axis is None else math.prod(a.shape[i] for i in ((axis,) if isinstance(axis, int) else axis))
    return magnitude(a) * max(n, 1) if a.size else 1.0


def _product_scale(ex: Example, want: Any) -> float:
    return max(magnitude(want), 1.0) * max(ex.args[0].values.size, 1)


# --------------------------------------------------------------------------- elementwise
_NUMERIC_UNARY = {"abs", "negative", "positive", "sign", "square", "ceil", "floor", "round", "trunc"}
_REF: dict[str, Callable[..., Any]] = {"reciprocal": lambda x: 1.0 / x}


def _elementwise() -> list[Op]:
    ops = [Op(name, FLOAT + (INT if name in _NUMERIC_UNARY else ()), unary(*KIT_UNARY[name]), ref=_REF.get(name)) for name in KIT_UNARY]
    ops += [Op(name, FLOAT, unary(-4, 4, specials=True)) for name in ("isfinite", "isinf", "isnan", "signbit")]
    ops += [Op("logical_not", BOOL, unary(0, 1)), Op("bitwise_invert", INT + UINT + BOOL, unary(-8, 8))]
    ops += [Op(name, COMPLEX, unary(-4, 4)) for name in ("conj", "real", "imag")]
    int_binary = {"add", "subtract", "multiply", "maximum", "minimum", "floor_divide", "remainder", "pow"}
    for name, (low, high) in KIT_BINARY.items():
        dtypes = FLOAT + (INT if name in int_binary else ())
        if name in ("floor_divide", "remainder"):
            ops.append(Op(name, dtypes, binary(low, high, ints=(-8, 8), int_rhs=(1, 5)), check=_near_integer_quotients))
        elif name == "pow":
            ops.append(Op(name, dtypes, binary(low, high, ints=(-3, 3), int_rhs=(0, 3))))
        else:
            ops.append(Op(name, dtypes, binary(low, high)))
    ops += [Op(name, FLOAT + INT, _ties(binary(-3, 3))) for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")]
    ops += [Op(name, BOOL, binary(0, 1)) for name in ("logical_and", "logical_or", "logical_xor")]
    ops += [Op(name, INT + UINT + BOOL, binary(-8, 8)) for name in ("bitwise_and", "bitwise_or", "bitwise_xor")]
    ops += [Op(name, INT + UINT, binary(0, 8, ints=(0, 16), int_rhs=(0, 3))) for name in ("bitwise_left_shift", "bitwise_right_shift")]
    ops.append(Op("nextafter", ("float32", "float64"), binary(-4, 4)))
    ops.append(Op("clip", FLOAT + INT, _clip, ref=_clip_ref))
    return ops


def _near_integer_quotients(outs: list[Any], wants: list[np.ndarray], ex: Example, device: nx.Device, where: str) -> None:
    """floor_divide / remainder: where a / b is within rounding of an integer, a low-precision
    device may land on either side (the kit compares where the quotient is unambiguous)."""
    a, b = (np.broadcast_to(x.reference(), wants[0].shape) for x in ex.args)
    if ex.args[0].dtype in INT:
        compare(outs[0], wants[0], device, where)
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        q = a / b
    keep = np.abs(q - np.round(q)) > 0.05
    got = outs[0].numpy()  # in its dtype: its tolerance applies
    if got.shape != wants[0].shape:
        raise Mismatch("shape", f"{where}: shape {got.shape}, the reference gives {wants[0].shape}")
    compare(nx.asarray(got[keep], device=device), wants[0][keep], device, where, scale=magnitude(wants[0]))


def _clip(data: st.DataObject, dtype: str) -> Example:
    x = arr(data, shape(data), dtype)
    form = data.draw(st.sampled_from(["scalars", "min", "max", "tensors"]), label="clip bounds")
    if form == "tensors":
        lo = arr(data, x.values.shape[-1:] if x.values.ndim else (), dtype, -4, -1)
        hi = arr(data, x.values.shape[-1:] if x.values.ndim else (), dtype, 1, 4)
        return Example((x,), {"min": lo, "max": hi})
    kwargs: dict[str, Any] = {}
    if form in ("scalars", "min"):
        kwargs["min"] = -2 if dtype in INT else -1.5
    if form in ("scalars", "max"):
        kwargs["max"] = 2 if dtype in INT else 1.25
    return Example((x,), kwargs)


def _clip_ref(x: np.ndarray, min: Any = None, max: Any = None) -> np.ndarray:  # min/max: the standard's parameter names
    return xp.clip(x, min, max)


# --------------------------------------------------------------------------- linear algebra
def _matmul(data: st.DataObject, dtype: str) -> Example:
    m, k, n = (data.draw(st.integers(1, 4), label=d) for d in "mkn")
    form = data.draw(st.sampled_from(["2d", "batched", "vector-left", "vector-right", "broadcast"]), label="matmul form")
    shapes = {"2d": ((m, k), (k, n)), "batched": ((2, m, k), (2, k, n)), "vector-left": ((k,), (k, n)),
              "vector-right": ((m, k), (k,)), "broadcast": ((3, 1, m, k), (2, k, n))}[form]
    lo, hi = (-3, 3) if dtype in INT else (-2, 2)
    return Example((arr(data, shapes[0], dtype, lo, hi), arr(data, shapes[1], dtype, lo, hi)), {})


def _matmul_scale(ex: Example, want: Any) -> float:
    a, b = (x.values for x in ex.args)
    return magnitude(a) * magnitude(b) * a.shape[-1]


def _square(data: st.DataObject, dtype: str, *, batch: bool = True, spd: bool = False) -> np.ndarray:
    n = data.draw(st.integers(1, 4), label="n")
    b = data.draw(st.sampled_from([(), (2,)]), label="batch") if batch else ()
    a = values(data, (*b, n, n), "float64", -1, 1)
    # Well conditioned on purpose: the reference and the device then agree to the dtype's precision.
    a = a @ np.swapaxes(a, -1, -2) + n * np.eye(n) if spd else a + 2 * n * np.eye(n) * np.sign(values(data, (n,), "float64", -1, 1) + 0.5)
    from neurenix_core.testing.reference import rounded

    return rounded(a, dtype)


def _matrix(spd: bool = False, batch: bool = True) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        return _one(Arr(_square(data, dtype, batch=batch, spd=spd), dtype))

    return draw


def _rect(data: st.DataObject, dtype: str) -> Example:
    m, n = data.draw(st.integers(1, 4), label="m"), data.draw(st.integers(1, 4), label="n")
    return _one(arr(data, (*data.draw(st.sampled_from([(), (2,)]), label="batch"), m, n), dtype, -2, 2))


def _decomposition_check(kind: str) -> Callable[[list[Any], list[np.ndarray], Example, nx.Device, str], None]:
    """qr / svd / eigh: compare what the factors must satisfy (reconstruction, orthonormality,
    the sorted spectrum), not the factors, whose signs the standard leaves open."""

    def check(outs: list[Any], wants: list[np.ndarray], ex: Example, device: nx.Device, where: str) -> None:
        a = ex.args[0].reference()
        got = [o.numpy().astype(np.float64) for o in outs]
        dt = outs[0].dtype

        def on_device(v: np.ndarray) -> Any:
            # In the results' dtype: its tolerance is the one that applies.
            return nx.asarray(v.astype(dt), device=device)

        for o, w in zip(outs, wants):
            if tuple(o.shape) != w.shape:
                raise Mismatch("shape", f"{where}: factor shape {tuple(o.shape)}, the reference gives {w.shape}")
        scale = magnitude(a) * a.shape[-1]
        if kind == "qr":
            q, r = got
            compare(on_device(q @ r), a, device, f"{where}: q @ r", scale=scale)
            eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2)
            compare(on_device(np.swapaxes(q, -1, -2) @ q), eye, device, f"{where}: q^T q", scale=q.shape[-1])
        elif kind == "svd":
            u, s, vh = got
            k = s.shape[-1]
            recon = (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :]
            compare(on_device(recon), a, device, f"{where}: u s vh", scale=scale)
            compare(outs[1], wants[1], device, f"{where}: singular values", scale=scale)
        elif kind == "eigh":
            w, v = got
            compare(on_device(a @ v), v * w[..., None, :], device, f"{where}: a v = v w", scale=scale)
            compare(outs[0], wants[0], device, f"{where}: eigenvalues", scale=scale)

    return check


def _cross(data: st.DataObject, dtype: str) -> Example:
    b = data.draw(st.sampled_from([(), (2,), (2, 1)]), label="batch")
    return Example((arr(data, (*b, 3), dtype, -2, 2), arr(data, (3,), dtype, -2, 2)), {})


def _pair_same(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    return Example((arr(data, shp, dtype, -2, 2), arr(data, shp[-1:], dtype, -2, 2)), {})


def _outer(data: st.DataObject, dtype: str) -> Example:
    return Example((arr(data, shape(data, 1, 1), dtype, -2, 2), arr(data, shape(data, 1, 1), dtype, -2, 2)), {})


def _tensordot(data: st.DataObject, dtype: str) -> Example:
    k = data.draw(st.integers(0, 2), label="contracted axes")
    shared = shape(data, min_dims=k, max_dims=k)
    a = (*shape(data, 0, 2), *shared)
    b = (*shared, *shape(data, 0, 2))
    return Example((arr(data, a, dtype, -2, 2), arr(data, b, dtype, -2, 2)), {"axes": k})


def _vecdot(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    return Example((arr(data, shp, dtype, -2, 2), arr(data, shp, dtype, -2, 2)), {"axis": data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")})


def _solve(data: st.DataObject, dtype: str) -> Example:
    a = _square(data, dtype)
    return Example((Arr(a, dtype), arr(data, (*a.shape[:-1], data.draw(st.integers(1, 3), label="rhs")), dtype, -2, 2)), {})


def _matrix_power(data: st.DataObject, dtype: str) -> Example:
    n = data.draw(st.integers(1, 3), label="n")
    return Example((arr(data, (n, n), dtype, -1, 1), data.draw(st.integers(0, 3), label="power")), {})


def _norm(kind: str) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        if kind == "matrix":
            ex = _rect(data, dtype)
            return Example(ex.args, {"ord": data.draw(st.sampled_from(["fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]), label="ord"),
                                     "keepdims": data.draw(st.booleans(), label="keepdims")})
        shp = shape(data, min_dims=1)
        return Example((arr(data, shp, dtype, -2, 2),), {"axis": axis_of(data, len(shp), tuples=True),
                                                          "ord": data.draw(st.sampled_from([2, 1, np.inf, -np.inf, 0, 3]), label="ord"),
                                                          "keepdims": data.draw(st.booleans(), label="keepdims")})

    return draw


def _linalg() -> list[Op]:
    lf = ("float32", "float64")
    return [
        Op("matmul", FLOAT + INT, _matmul, scale=_matmul_scale),
        Op("linalg.matmul", FLOAT, _matmul, scale=_matmul_scale),
        Op("matrix_transpose", FLOAT + INT + BOOL, unary_nd(2)),
        Op("linalg.matrix_transpose", FLOAT, unary_nd(2)),
        Op("tensordot", FLOAT, _tensordot, scale=lambda ex, w: 16 * max(ex.args[0].values.size, 1)),
        Op("linalg.tensordot", FLOAT, _tensordot, scale=lambda ex, w: 16 * max(ex.args[0].values.size, 1)),
        Op("vecdot", FLOAT, _vecdot, scale=lambda ex, w: 4 * max(ex.args[0].values.shape[ex.kwargs["axis"]], 1)),
        Op("linalg.vecdot", FLOAT, _vecdot, scale=lambda ex, w: 4 * max(ex.args[0].values.shape[ex.kwargs["axis"]], 1)),
        Op("linalg.cholesky", lf, _matrix(spd=True), scale=lambda ex, w: magnitude(ex.args[0].values)),
        Op("linalg.cross", FLOAT, _cross, scale=lambda ex, w: 8),
        Op("linalg.det", lf, _matrix(), scale=lambda ex, w: magnitude(w) * 16),
        Op("linalg.diagonal", FLOAT + INT, unary_nd(2)),
        Op("linalg.eigh", lf, _matrix(spd=True), check=_decomposition_check("eigh")),
        Op("linalg.eigvalsh", lf, _matrix(spd=True), scale=lambda ex, w: magnitude(w) * 4),
        Op("linalg.inv", lf, _matrix(), scale=lambda ex, w: magnitude(w) * 4),
        Op("linalg.matrix_norm", lf, _norm("matrix"), scale=lambda ex, w: magnitude(w) * 4),
        Op("linalg.matrix_power", lf, _matrix_power, scale=lambda ex, w: magnitude(w) * 4),
        Op("linalg.matrix_rank", lf, _rect),
        Op("linalg.outer", FLOAT, _outer),
        Op("linalg.pinv", lf, _rect, scale=lambda ex, w: magnitude(w) * 64),
        Op("linalg.qr", lf, _rect, check=_decomposition_check("qr")),
        Op("linalg.slogdet", lf, _matrix(), scale=lambda ex, w: 16),
        Op("linalg.solve", lf, _solve, scale=lambda ex, w: magnitude(w) * 4),
        Op("linalg.svd", lf, _rect, check=_decomposition_check("svd")),
        Op("linalg.svdvals", lf, _rect, scale=lambda ex, w: magnitude(w) * 4),
        Op("linalg.trace", FLOAT + INT, _trace, scale=lambda ex, w: 16),
        Op("linalg.vector_norm", lf, _norm("vector"), scale=_terms),
    ]


def unary_nd(min_dims: int, low: float = -4, high: float = 4) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        return _one(arr(data, shape(data, min_dims=min_dims, max_dims=max(min_dims, 3)), dtype, low, high))

    return draw


def _trace(data: st.DataObject, dtype: str) -> Example:
    ex = unary_nd(2)(data, dtype)
    return Example(ex.args, {"offset": data.draw(st.integers(-2, 2), label="offset")})


# --------------------------------------------------------------------------- manipulation
def _with(draw_kwargs: Callable[[st.DataObject, tuple[int, ...]], dict[str, Any]], *, min_dims: int = 0, positional: bool = False,
          low: float = -4, high: float = 4) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        shp = shape(data, min_dims=min_dims)
        kwargs = draw_kwargs(data, shp)
        x = arr(data, shp, dtype, low, high)
        if positional:
            return Example((x, *kwargs.values()), {})
        return Example((x,), kwargs)

    return draw


def _reshape(data: st.DataObject, shp: tuple[int, ...]) -> dict[str, Any]:
    n = math.prod(shp)
    dims = [d for d in range(1, n + 1) if n % d == 0]
    first = data.draw(st.sampled_from(dims), label="first dim")
    new: tuple[int, ...] = (first, n // first) if data.draw(st.booleans(), label="2d") else (n,)
    if data.draw(st.booleans(), label="infer") and new:
        new = (-1, *new[1:])
    return {"shape": new}


def _broadcast_to(data: st.DataObject, shp: tuple[int, ...]) -> dict[str, Any]:
    lead = shape(data, 0, 2)
    return {"shape": (*lead, *(data.draw(st.integers(1, 3), label="grow") if d == 1 else d for d in shp))}


def _axes_perm(data: st.DataObject, shp: tuple[int, ...]) -> dict[str, Any]:
    return {"axes": tuple(data.draw(st.permutations(range(len(shp))), label="axes"))}


def _moveaxis(data: st.DataObject, shp: tuple[int, ...]) -> dict[str, Any]:
    n = len(shp)
    return {"source": data.draw(st.integers(-n, n - 1), label="source"), "destination": data.draw(st.integers(-n, n - 1), label="destination")}


def _squeeze(data: st.DataObject, dtype: str) -> Example:
    shp = list(shape(data, min_dims=0, max_dims=2))
    at = data.draw(st.integers(0, len(shp)), label="unit axis")
    shp.insert(at, 1)
    return Example((arr(data, tuple(shp), dtype),), {"axis": at - len(shp) if data.draw(st.booleans(), label="negative") else at})


def _indices(data: st.DataObject, n: int, size: tuple[int, ...]) -> Arr:
    return Arr(np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="index seed")).integers(0, n, size).astype(np.int64), "int64")


def _take(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    axis = data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")
    return Example((arr(data, shp, dtype), _indices(data, shp[axis], (data.draw(st.integers(1, 5), label="count"),))), {"axis": axis})


def _take_along(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    axis = data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")
    idx = list(shp)
    idx[axis] = data.draw(st.integers(1, 4), label="count")
    return Example((arr(data, shp, dtype), _indices(data, shp[axis], tuple(idx))), {"axis": axis})


def _arrays(count: tuple[int, int], same: bool) -> Callable[[st.DataObject, str], tuple[list[Arr], int, tuple[int, ...]]]:
    def draw(data: st.DataObject, dtype: str) -> tuple[list[Arr], int, tuple[int, ...]]:
        shp = shape(data, min_dims=1)
        axis = data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")
        arrays = []
        for _ in range(data.draw(st.integers(*count), label="count")):
            s = list(shp)
            if not same:
                s[axis] = data.draw(st.integers(0, 3), label="extent")
            arrays.append(arr(data, tuple(s), dtype))
        return arrays, axis, shp

    return draw


def _concat(data: st.DataObject, dtype: str) -> Example:
    arrays, axis, _ = _arrays((1, 3), False)(data, dtype)
    return Example((arrays,), {"axis": axis})


def _stack(data: st.DataObject, dtype: str) -> Example:
    arrays, _, shp = _arrays((1, 3), True)(data, dtype)
    return Example((arrays,), {"axis": data.draw(st.integers(-len(shp) - 1, len(shp)), label="axis")})


def _broadcast_arrays(data: st.DataObject, dtype: str) -> Example:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=data.draw(st.integers(1, 3), label="count"), max_side=3), label="shapes")
    return Example(tuple(arr(data, s, dtype) for s in shapes.input_shapes), {})


def _meshgrid(data: st.DataObject, dtype: str) -> Example:
    arrays = tuple(arr(data, (data.draw(st.integers(1, 3), label="n"),), dtype) for _ in range(data.draw(st.integers(1, 3), label="count")))
    return Example(arrays, {"indexing": data.draw(st.sampled_from(["xy", "ij"]), label="indexing")})


def _repeat(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shp), len(shp) - 1)), label="axis")
    if data.draw(st.booleans(), label="tensor repeats") and axis is not None:
        reps: Any = Arr(np.random.default_rng(0).integers(0, 3, shp[axis]).astype(np.int64), "int64")
    else:
        reps = data.draw(st.integers(0, 3), label="repeats")
    return Example((arr(data, shp, dtype), reps), {"axis": axis})


def _unstack(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    return Example((arr(data, shp, dtype),), {"axis": data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")})


def _manipulation() -> list[Op]:
    every = FLOAT + INT + BOOL
    return [
        Op("broadcast_to", every, _with(_broadcast_to)),
        Op("expand_dims", every, _with(lambda d, s: {"axis": d.draw(st.integers(-len(s) - 1, len(s)), label="axis")})),
        Op("flip", every, _with(lambda d, s: {"axis": axis_of(d, len(s), tuples=True)})),
        Op("moveaxis", every, _with(_moveaxis, min_dims=1, positional=True)),
        Op("permute_dims", every, _with(_axes_perm)),
        Op("repeat", every, _repeat),
        Op("reshape", every, _with(_reshape)),
        Op("roll", every, _with(lambda d, s: {"shift": d.draw(st.integers(-5, 5), label="shift"), "axis": axis_of(d, len(s))})),
        Op("squeeze", every, _squeeze),
        Op("tile", every, _with(lambda d, s: {"repetitions": tuple(d.draw(st.lists(st.integers(0, 3), max_size=3), label="reps"))}, positional=True)),
        Op("unstack", every, _unstack),
        Op("concat", every, _concat),
        Op("stack", every, _stack),
        Op("broadcast_arrays", every, _broadcast_arrays, ref=lambda *a: xp.broadcast_arrays(*a)),
        Op("meshgrid", FLOAT + INT, _meshgrid),
        Op("take", every, _take),
        Op("take_along_axis", every, _take_along),
        Op("tril", every, _with(lambda d, s: {"k": d.draw(st.integers(-2, 2), label="k")}, min_dims=2)),
        Op("triu", every, _with(lambda d, s: {"k": d.draw(st.integers(-2, 2), label="k")}, min_dims=2)),
    ]


# --------------------------------------------------------------------------- searching, sorting, sets
def _searchsorted(data: st.DataObject, dtype: str) -> Example:
    x1 = arr(data, (data.draw(st.integers(1, 6), label="n"),), dtype)
    x1 = Arr(np.sort(x1.values), dtype)
    x2 = arr(data, shape(data), dtype)
    if data.draw(st.booleans(), label="hit"):  # exact hits make side= matter
        x2 = Arr(np.resize(x1.values, x2.values.shape), dtype)
    return Example((x1, x2), {"side": data.draw(st.sampled_from(["left", "right"]), label="side")})


def _sort(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    x = arr(data, shp, dtype, -3, 3)
    if data.draw(st.booleans(), label="ties"):
        x = Arr(np.round(x.values), dtype) if dtype not in BOOL else x
    return Example((x,), {"axis": data.draw(st.integers(-len(shp), len(shp) - 1), label="axis"),
                          "descending": data.draw(st.booleans(), label="descending"), "stable": True})


def _nonzero(data: st.DataObject, dtype: str) -> Example:
    x = arr(data, shape(data, min_dims=1), dtype, -1, 1)
    return _one(Arr(np.round(x.values), dtype) if dtype not in BOOL else x)


def _unique(data: st.DataObject, dtype: str) -> Example:
    x = arr(data, shape(data, min_dims=1), dtype, -3, 3)
    return _one(Arr(np.round(x.values), dtype) if dtype not in BOOL else x)


def _unique_check(kind: str) -> Callable[[list[Any], list[np.ndarray], Example, nx.Device, str], None]:
    """The standard leaves the order of unique values open: compare as sets with their counts,
    and check that indices and inverse indices reconstruct what they must."""

    def check(outs: list[Any], wants: list[np.ndarray], ex: Example, device: nx.Device, where: str) -> None:
        x = ex.args[0].reference()
        got = [o.numpy() for o in outs]
        values_ = got[0]
        order = np.argsort(values_, kind="stable")
        compare(nx.asarray(values_[order].astype(np.float64), device=device), np.sort(wants[0]).astype(np.float64), device, f"{where}: values")
        if kind == "all":
            _, indices, inverse, counts = got
            compare(nx.asarray(x.ravel()[indices].astype(np.float64), device=device), values_.astype(np.float64), device, f"{where}: x[indices]")
        if kind in ("all", "inverse"):
            inverse = got[2] if kind == "all" else got[1]
            compare(nx.asarray(values_[inverse].astype(np.float64), device=device), x.astype(np.float64), device, f"{where}: values[inverse]")
        if kind in ("all", "counts"):
            counts = got[-1]
            want_counts = np.array([np.sum(x == v) for v in values_], dtype=np.int64)
            compare(nx.asarray(counts.astype(np.int64), device=device), want_counts, device, f"{where}: counts")
        for o, w in zip(outs, wants):
            if o.dtype != np.dtype(w.dtype) and o.dtype.kind in "iu":
                raise Mismatch("dtype", f"{where}: index dtype {o.dtype}, the standard's default indexing dtype is {w.dtype}")

    return check


def _searching() -> list[Op]:
    every = FLOAT + INT + BOOL
    return [
        Op("argmax", FLOAT + INT, reduction(tuples=False, min_side=1, keepdims=True), ref=lambda x, axis=None, keepdims=False: xp.argmax(x, axis=axis, keepdims=keepdims)),
        Op("argmin", FLOAT + INT, reduction(tuples=False, min_side=1, keepdims=True), ref=lambda x, axis=None, keepdims=False: xp.argmin(x, axis=axis, keepdims=keepdims)),
        Op("count_nonzero", every, _ties(reduction(-1, 1))),
        Op("nonzero", every, _nonzero),
        Op("searchsorted", FLOAT + INT, _searchsorted),
        Op("where", every, _where),
        Op("argsort", FLOAT + INT, _sort),
        Op("sort", FLOAT + INT, _sort),
        Op("unique_all", FLOAT + INT, _unique, check=_unique_check("all")),
        Op("unique_counts", FLOAT + INT, _unique, check=_unique_check("counts")),
        Op("unique_inverse", FLOAT + INT, _unique, check=_unique_check("inverse")),
        Op("unique_values", FLOAT + INT, _unique, check=_unique_check("values")),
    ]


def _where(data: st.DataObject, dtype: str) -> Example:
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_side=3), label="shapes")
    cond = Arr(values(data, shapes.input_shapes[0], "bool"), "bool")
    return Example((cond, arr(data, shapes.input_shapes[1], dtype), arr(data, shapes.input_shapes[2], dtype)), {})


# --------------------------------------------------------------------------- statistics
def _statistics() -> list[Op]:
    correction = {"correction": lambda d: d.draw(st.sampled_from([0.0, 1.0]), label="correction")}
    cum = {"include_initial": lambda d: d.draw(st.booleans(), label="include_initial")}
    return [
        Op("sum", FLOAT + INT, reduction(), scale=_terms),
        Op("prod", FLOAT + INT, reduction(-1.5, 1.5), scale=_product_scale),
        Op("mean", FLOAT, reduction(), scale=_terms),
        Op("max", FLOAT + INT, reduction(min_side=1)),
        Op("min", FLOAT + INT, reduction(min_side=1)),
        Op("std", FLOAT, reduction(min_side=2, **correction), scale=_terms),
        Op("var", FLOAT, reduction(min_side=2, **correction), scale=_terms),
        Op("all", FLOAT + INT + BOOL, _ties(reduction(-1, 1))),
        Op("any", FLOAT + INT + BOOL, _ties(reduction(-1, 1))),
        Op("cumulative_sum", FLOAT + INT, _cumulative(cum), scale=_terms),
        Op("cumulative_prod", FLOAT + INT, _cumulative(cum, low=-1.5, high=1.5), scale=_product_scale),
        Op("diff", FLOAT + INT, _diff),
    ]


def _cumulative(extra: dict[str, Callable[[st.DataObject], Any]], low: float = -4, high: float = 4) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        shp = shape(data, min_dims=1)
        kwargs = {k: f(data) for k, f in extra.items()}
        # axis may be omitted only for 1-D input (the standard)
        kwargs["axis"] = None if len(shp) == 1 and data.draw(st.booleans(), label="no axis") else data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")
        return _one(arr(data, shp, dtype, low, high), **kwargs)

    return draw


def _diff(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    axis = data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")
    kwargs: dict[str, Any] = {"axis": axis, "n": data.draw(st.integers(1, 2), label="n")}
    if data.draw(st.booleans(), label="append"):
        side = list(shp)
        side[axis] = 1
        kwargs["append"] = arr(data, tuple(side), dtype)
    return _one(arr(data, shp, dtype), **kwargs)


# --------------------------------------------------------------------------- fft
def _fft() -> list[Op]:
    out: list[Op] = []
    fl = ("float32", "float64")
    for name in ("fft", "ifft"):
        out.append(Op(f"fft.{name}", COMPLEX + fl, _fft1d(), scale=_fft_scale))
    for name in ("rfft", "ihfft"):
        out.append(Op(f"fft.{name}", fl, _fft1d(), scale=_fft_scale))
    for name in ("irfft", "hfft"):
        out.append(Op(f"fft.{name}", COMPLEX, _fft1d(min_side=2), scale=_fft_scale))
    for name in ("fftn", "ifftn"):
        out.append(Op(f"fft.{name}", COMPLEX + fl, _fftnd(), scale=_fft_scale))
    out.append(Op("fft.rfftn", fl, _fftnd(), scale=_fft_scale))
    out.append(Op("fft.irfftn", COMPLEX, _fftnd(min_side=2), scale=_fft_scale))
    out.append(Op("fft.fftshift", FLOAT + INT, _with(lambda d, s: {"axes": axis_of(d, len(s), tuples=True)}, min_dims=1)))
    out.append(Op("fft.ifftshift", FLOAT + INT, _with(lambda d, s: {"axes": axis_of(d, len(s), tuples=True)}, min_dims=1)))
    out.append(Op("fft.fftfreq", fl, _freq, ref=_freq_ref(xp.fft.fftfreq), dtype_kwargs=("dtype",), creates=True))
    out.append(Op("fft.rfftfreq", fl, _freq, ref=_freq_ref(xp.fft.rfftfreq), dtype_kwargs=("dtype",), creates=True))
    return out


def _fft_scale(ex: Example, want: Any) -> float:
    return magnitude(ex.args[0].values) * max(ex.args[0].values.size, 1)


def _fft1d(min_side: int = 1) -> Draw:
    """``min_side`` 2 for the inverse real transforms, whose default length 2 (m - 1) is 0 at m = 1."""

    def draw(data: st.DataObject, dtype: str) -> Example:
        shp = shape(data, min_dims=1, min_side=min_side)
        axis = data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")
        kwargs: dict[str, Any] = {"axis": axis, "norm": data.draw(st.sampled_from(["backward", "ortho", "forward"]), label="norm")}
        if data.draw(st.booleans(), label="n"):
            kwargs["n"] = data.draw(st.integers(1, 6), label="n value")
        return _one(arr(data, shp, dtype, -2, 2), **kwargs)

    return draw


def _fftnd(min_side: int = 1) -> Draw:
    def draw(data: st.DataObject, dtype: str) -> Example:
        shp = shape(data, min_dims=1, min_side=min_side)
        axes = tuple(data.draw(st.lists(st.integers(0, len(shp) - 1), min_size=1, max_size=len(shp), unique=True), label="axes"))
        kwargs: dict[str, Any] = {"axes": axes, "norm": data.draw(st.sampled_from(["backward", "ortho", "forward"]), label="norm")}
        if data.draw(st.booleans(), label="s"):
            kwargs["s"] = tuple(data.draw(st.integers(1, 5), label="s value") for _ in axes)
        return _one(arr(data, shp, dtype, -2, 2), **kwargs)

    return draw


def _freq(data: st.DataObject, dtype: str) -> Example:
    return Example((data.draw(st.integers(1, 8), label="n"),), {"d": data.draw(st.sampled_from([1.0, 0.5, 2.0]), label="d"), "dtype": dtype})


def _freq_ref(fn: Callable[..., Any]) -> Callable[..., Any]:
    def ref(n: int, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
        return fn(n, d=d, dtype=np.float64)

    return ref


# --------------------------------------------------------------------------- creation and data types
def _creation() -> list[Op]:
    every = FLOAT + INT + BOOL
    return [
        Op("arange", FLOAT + INT, _arange, ref=_arange_ref, dtype_kwargs=("dtype",), creates=True),
        Op("empty", every, _shaped, undefined_values=True, dtype_kwargs=("dtype",), creates=True),
        Op("zeros", every, _shaped, dtype_kwargs=("dtype",), creates=True),
        Op("ones", every, _shaped, dtype_kwargs=("dtype",), creates=True),
        Op("full", FLOAT + INT, _full, dtype_kwargs=("dtype",), creates=True),
        Op("eye", every, _eye, dtype_kwargs=("dtype",), creates=True),
        Op("linspace", FLOAT, _linspace, ref=_linspace_ref, dtype_kwargs=("dtype",), creates=True),
        Op("empty_like", every, _like, tape=False, undefined_values=True, dtype_kwargs=("dtype",)),
        Op("zeros_like", every, _like, tape=False, dtype_kwargs=("dtype",)),
        Op("ones_like", every, _like, tape=False, dtype_kwargs=("dtype",)),
        Op("full_like", FLOAT + INT, _full_like, tape=False, dtype_kwargs=("dtype",)),
        Op("asarray", every, _asarray, tape=None, call=_asarray_nx, ref=lambda x, copy=None: np.array(x, copy=True)),
        Op("from_dlpack", every, lambda d, t: _one(arr(d, shape(d), t)), tape=None, call=lambda x: nx.from_dlpack(x), ref=lambda x: np.array(x, copy=True)),
        Op("astype", every, _astype, dtype_kwargs=("dtype",), call=_astype_nx, ref=_astype_ref),
        Op("can_cast", every, _dtype_pair, call=lambda a, b: _scalar_result(nx.can_cast(a, b)), ref=lambda a, b: np.asarray(xp.can_cast(a, b)), dtype_kwargs=("a", "b")),
        Op("result_type", FLOAT + INT, _dtype_pair_same_kind, call=lambda a, b: _dtype_result(nx.result_type(a, b)), ref=lambda a, b: _dtype_result(xp.result_type(a, b)), dtype_kwargs=("a", "b")),
        Op("finfo", FLOAT, _dtype_only, call=lambda a: _info(nx.finfo(a)), ref=lambda a: _info(np.finfo(a)), dtype_kwargs=("a",)),
        Op("iinfo", INT + UINT, _dtype_only, call=lambda a: _info(nx.iinfo(a)), ref=lambda a: _info(np.iinfo(a)), dtype_kwargs=("a",)),
        Op("isdtype", every, _isdtype, call=lambda a, kind: _scalar_result(nx.isdtype(a, kind)), ref=_isdtype_ref, dtype_kwargs=("a",)),
    ]


#: Results of the data-type functions are Python values, compared on the host.
HOST_RESULT = ("can_cast", "result_type", "finfo", "iinfo", "isdtype")


def _scalar_result(v: Any) -> np.ndarray:
    return np.asarray(v)


def _dtype_result(dt: Any) -> np.ndarray:
    return np.asarray(str(np.dtype(dt)) if not hasattr(dt, "name") else dt.name)


def _info(info: Any) -> np.ndarray:
    fields = [f for f in ("bits", "max", "min", "eps", "smallest_normal") if hasattr(info, f)]
    return np.asarray([float(getattr(info, f)) for f in fields])


def _dtype_only(data: st.DataObject, dtype: str) -> Example:
    return Example((), {"a": dtype})


def _dtype_pair(data: st.DataObject, dtype: str) -> Example:
    return Example((), {"a": dtype, "b": data.draw(st.sampled_from(FLOAT[:2] + INT + BOOL), label="to")})


def _dtype_pair_same_kind(data: st.DataObject, dtype: str) -> Example:
    kind = FLOAT[:3] if dtype in FLOAT else INT
    return Example((), {"a": dtype if dtype in kind else kind[0], "b": data.draw(st.sampled_from(kind), label="other")})


def _isdtype(data: st.DataObject, dtype: str) -> Example:
    kind = data.draw(st.sampled_from(["bool", "signed integer", "unsigned integer", "integral", "real floating", "complex floating", "numeric"]), label="kind")
    return Example((), {"a": dtype, "kind": kind})


def _isdtype_ref(a: Any, kind: str) -> np.ndarray:
    # NumPy does not know bfloat16; float16 is of the same kinds.
    return np.asarray(xp.isdtype(np.dtype(np.float16) if np.dtype(a).name == "bfloat16" else a, kind))


def _arange(data: st.DataObject, dtype: str) -> Example:
    start = data.draw(st.integers(-5, 5), label="start")
    stop = start + data.draw(st.integers(0, 8), label="length")
    step = data.draw(st.sampled_from([1, 2, 3] if dtype in INT else [1, 2, 0.5]), label="step")
    return Example((start, stop, step), {"dtype": dtype})


def _arange_ref(start: Any, stop: Any, step: Any, dtype: Any = None, device: Any = None) -> np.ndarray:
    return np.arange(start, stop, step, dtype=np.float64)


def _shaped(data: st.DataObject, dtype: str) -> Example:
    return Example((shape(data, min_side=0),), {"dtype": dtype})


def _full(data: st.DataObject, dtype: str) -> Example:
    return Example((shape(data, min_side=0), -3 if dtype in INT else 2.5), {"dtype": dtype})


def _eye(data: st.DataObject, dtype: str) -> Example:
    return Example((data.draw(st.integers(0, 4), label="rows"), data.draw(st.integers(0, 4), label="cols")),
                   {"k": data.draw(st.integers(-2, 2), label="k"), "dtype": dtype})


def _linspace(data: st.DataObject, dtype: str) -> Example:
    return Example((data.draw(st.integers(-4, 4), label="start"), data.draw(st.integers(-4, 4), label="stop"), data.draw(st.integers(0, 6), label="num")),
                   {"endpoint": data.draw(st.booleans(), label="endpoint"), "dtype": dtype})


def _linspace_ref(start: Any, stop: Any, num: int, endpoint: bool = True, dtype: Any = None) -> np.ndarray:
    return np.linspace(start, stop, num, endpoint=endpoint, dtype=np.float64)


def _like(data: st.DataObject, dtype: str) -> Example:
    kwargs = {"dtype": data.draw(st.sampled_from([None, dtype]), label="dtype")}
    return _one(arr(data, shape(data, min_side=0), dtype), **kwargs)


def _full_like(data: st.DataObject, dtype: str) -> Example:
    return Example((arr(data, shape(data, min_side=0), dtype), -3 if dtype in INT else 1.5), {})


def _asarray(data: st.DataObject, dtype: str) -> Example:
    return _one(arr(data, shape(data), dtype), copy=data.draw(st.sampled_from([None, True, False]), label="copy"))


def _asarray_nx(x: Any, copy: Any = None) -> Any:
    return nx.asarray(x, copy=copy)


def _astype(data: st.DataObject, dtype: str) -> Example:
    target = data.draw(st.sampled_from([dtype, "float32", "int32", "float64", "bool"]), label="to")
    x = arr(data, shape(data), dtype, -4, 4)
    if target in INT and dtype not in INT + BOOL:
        x = Arr(np.trunc(x.values), dtype)  # float -> int casts are defined for in-range values only
    return _one(x, dtype=target, copy=data.draw(st.booleans(), label="copy"))


def _astype_nx(x: Any, dtype: Any, copy: bool = True) -> Any:
    return nx.astype(x, dtype, copy=copy)


def _astype_ref(x: np.ndarray, dtype: Any, copy: bool = True) -> np.ndarray:
    return np.asarray(x).astype(np.float64 if np.dtype(dtype).kind in "fV" else dtype)


# --------------------------------------------------------------------------- indexing
def _getitem(data: st.DataObject, dtype: str) -> Example:
    shp = shape(data, min_dims=1)
    form = data.draw(st.sampled_from(["int", "slice", "tuple", "ellipsis", "none", "bool mask", "int tensor"]), label="key form")
    n = shp[0]
    key: Any
    if form == "int":
        key = data.draw(st.integers(-n, n - 1), label="index")
    elif form == "slice":
        key = slice(data.draw(st.one_of(st.none(), st.integers(-n, n)), label="start"), data.draw(st.one_of(st.none(), st.integers(-n, n)), label="stop"),
                    data.draw(st.sampled_from([None, 1, 2, -1]), label="step"))
    elif form == "tuple":
        key = tuple(data.draw(st.integers(-s, s - 1), label="index") if data.draw(st.booleans(), label="int") else slice(None, None, 2) for s in shp)
    elif form == "ellipsis":
        key = (Ellipsis, 0) if shp[-1] > 0 else Ellipsis
    elif form == "none":
        key = (None, slice(None))
    elif form == "bool mask":
        key = Arr(values(data, shp, "bool"), "bool")
    else:
        key = _indices(data, n, (data.draw(st.integers(1, 4), label="count"),))
    return Example((arr(data, shp, dtype), key), {})


def _getitem_nx(x: Any, key: Any) -> Any:
    return x[key]


def _getitem_ref(x: np.ndarray, key: Any) -> np.ndarray:
    return np.asarray(x[key])


# --------------------------------------------------------------------------- the catalogue
def _catalogue() -> dict[str, Op]:
    ops = [*_elementwise(), *_linalg(), *_manipulation(), *_searching(), *_statistics(), *_fft(), *_creation(),
           Op("Tensor.__getitem__", FLOAT + INT + BOOL, _getitem, call=_getitem_nx, ref=_getitem_ref, grad="__getitem__" in differentiable_ops())]
    out: dict[str, Op] = {}
    for op in ops:
        if op.name in out:
            raise ValueError(f"{op.name} is twice in the differential catalogue")
        out[op.name] = op
    return out


CATALOGUE: dict[str, Op] = _catalogue()

