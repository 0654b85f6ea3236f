"""Linear algebra: factorizations, solves, inverses, decompositions (``torch.linalg``'s family).

No ONNX family holds these (ONNX has only Det, which is ``det`` in ``math``); the importers map
``torch.linalg`` / ATen ops onto them. Every op works on the matrices in the last two axes of its
input, batched over the leading ones, and keeps PyTorch's (LAPACK's) conventions: LU pivots are
1-based int32 row interchanges applied in order, an ``info`` output is int32, 0 where the
factorization succeeded and else the 1-based index of the first zero (LU, LDL) or non-positive
(Cholesky) pivot, Householder reflectors are LAPACK's ``geqrf`` form (``v[0] = 1`` implicit,
``tau``), the LDL factorization is ``sytrf``'s Bunch-Kaufman pivoting with negative pivots for
2x2 blocks.

An op with several results (``svd``: U, S, Vh) has an ``output`` attribute that picks one, as
``topk`` does; the importers emit one node per result they need.

The references compute in float64 (LAPACK through ``np.linalg`` for SVD, eigh and QR; the
factorizations that ``np.linalg`` lacks or raises on (LU with pivots, Cholesky of a matrix
that is not positive definite, LDL, triangular solves, Householder products, the matrix
exponential) are written here with loops over the matrix dimension, vectorized over the batch)
and return the input's dtype. A factorization that fails does not raise: ``info`` says so and
the results hold inf or NaN where LAPACK would divide by the zero pivot, as PyTorch's ``*_ex``
functions return them. Singular and eigenvectors are LAPACK's (``gesdd``, ``syevd``): their
signs are not unique, and a backend computing them differently may flip a vector's sign.
"""

from __future__ import annotations

import math

import numpy as np

from neurenix_core.graph.opset.schema import REQUIRED, Arrays, Attrs, Params, Shape, _broadcast, _def, _is_float

__all__: list[str] = []

#: Bunch-Kaufman's pivoting threshold (1 + sqrt(17)) / 8, as LAPACK's sytf2 uses it.
_BK_ALPHA = (1.0 + math.sqrt(17.0)) / 8.0


# ----------------------------------------------------------------------------- shape helpers
def _matrix(shape: Shape, op: str) -> tuple[Shape, int, int]:
    """(batch shape, rows, columns) of a stack of matrices."""
    if len(shape) < 2:
        raise ValueError(f"{op} takes matrices [..., m, n], got shape {shape}")
    return shape[:-2], shape[-2], shape[-1]


def _square(shape: Shape, op: str) -> tuple[Shape, int]:
    batch, m, n = _matrix(shape, op)
    if m != n:
        raise ValueError(f"{op} takes square matrices [..., n, n], got shape {shape}")
    return batch, n


def _floats(d: list[str], op: str) -> str:
    """The first input's dtype, once every tensor input is floating-point (LAPACK computes in no other)."""
    if not all(_is_float(t) for t in d):
        raise ValueError(f"{op} takes floating-point matrices, got {', '.join(d)}")
    return d[0]


def _pick(a: Attrs, names: tuple[str, ...], op: str) -> int:
    """The ``output`` attribute, checked against the op's results."""
    out = int(a["output"])
    if not 0 <= out < len(names):
        raise ValueError(f"{op} has outputs {', '.join(f'{i} ({n})' for i, n in enumerate(names))}, got {out}")
    return out


# ----------------------------------------------------------------------------- array helpers
def _stack(x: np.ndarray) -> np.ndarray:
    """The matrices of ``x`` as one float64 (B, m, n) copy (B: the batch's size, 0 allowed)."""
    return np.array(x, dtype=np.float64).reshape((math.prod(x.shape[:-2]), *x.shape[-2:]))


def _unstack(y: np.ndarray, batch: Shape, dtype: np.dtype) -> np.ndarray:
    """(B, ...) results back to ``batch + ...`` in ``dtype``."""
    return y.reshape(batch + y.shape[1:]).astype(dtype)


def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _swap_rows(x: np.ndarray, i: int, p: np.ndarray) -> None:
    """Swaps row ``i`` with row ``p[b]`` of every matrix ``x[b]`` in place."""
    rows = np.arange(x.shape[0])
    top = x[rows, i].copy()
    x[rows, i] = x[rows, p]
    x[rows, p] = top


def _lu(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LAPACK getrf on each (m, n) matrix of ``a`` (B, m, n) float64: partial pivoting on the
    first row of largest magnitude (idamax's choice). Returns the packed factors (unit lower L
    below the diagonal, U on and above it), the 1-based pivots (B, min(m, n)) int32 and info (B,)
    int32. A zero pivot leaves its column unscaled (it is all zeros) and sets info, as getrf does."""
    lu = a.copy()
    count, m, n = lu.shape
    k = min(m, n)
    pivots = np.zeros((count, k), np.int32)
    info = np.zeros(count, np.int32)
    for j in range(k):
        p = j + np.argmax(np.abs(lu[:, j:, j]), axis=1)
        pivots[:, j] = p + 1
        _swap_rows(lu, j, p)
        pivot = lu[:, j, j]
        zero = pivot == 0
        info[(info == 0) & zero] = j + 1
        lu[:, j + 1:, j] /= np.where(zero, 1.0, pivot)[:, None]
        lu[:, j + 1:, j + 1:] -= lu[:, j + 1:, j, None] * lu[:, j, None, j + 1:]
    return lu, pivots, info


def _substitute(t: np.ndarray, b: np.ndarray, lower: bool, unit: bool) -> np.ndarray:
    """Solves T X = B for triangular T (B, n, n), reading only its ``lower`` (or upper) triangle
    (and not its diagonal where ``unit``), as LAPACK's trsm; B is (B, n, r). A zero on the
    diagonal gives inf / NaN, as trsm's division does."""
    n = t.shape[-1]
    x = b.copy()
    for i in range(n) if lower else range(n - 1, -1, -1):
        known = slice(0, i) if lower else slice(i + 1, n)
        x[:, i] -= np.einsum("bk,bkr->br", t[:, i, known], x[:, known])
        if not unit:
            x[:, i] /= t[:, i, i, None]
    return x


def _lu_solve(lu: np.ndarray, pivots: np.ndarray, b: np.ndarray) -> np.ndarray:
    """getrs: A X = B from A's getrf factors (B, n, n) and B (B, n, r)."""
    x = b.copy()
    for j in range(pivots.shape[1]):
        _swap_rows(x, j, pivots[:, j] - 1)
    return _substitute(lu, _substitute(lu, x, lower=True, unit=True), lower=False, unit=False)


def _eye(count: int, n: int, cols: int | None = None) -> np.ndarray:
    return np.broadcast_to(np.eye(n, cols), (count, n, n if cols is None else cols)).copy()


def _cholesky(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK potrf (lower) on each matrix of ``a`` (B, n, n) float64, reading its lower triangle:
    (L, info). Where a pivot is not positive (or NaN) info is its 1-based index and L is NaN from
    that column on (LAPACK leaves those entries unspecified)."""
    count, n, _ = a.shape
    low = np.zeros_like(a)
    info = np.zeros(count, np.int32)
    for j in range(n):
        d = a[:, j, j] - np.einsum("bk,bk->b", low[:, j, :j], low[:, j, :j])
        info[(info == 0) & ~(d > 0)] = j + 1
        root = np.sqrt(np.where(d > 0, d, np.nan))
        low[:, j, j] = root
        below = a[:, j + 1:, j] - np.einsum("bik,bk->bi", low[:, j + 1:, :j], low[:, j, :j])
        low[:, j + 1:, j] = below / root[:, None]
    return low, info


def _householder(a: np.ndarray, tau: np.ndarray, cols: int) -> np.ndarray:
    """LAPACK orgqr: the first ``cols`` columns of Q = H(1) H(2) ... H(k) for the reflectors
    H(i) = I - tau[i] v v^T stored below the diagonal of ``a`` (B, m, >= k) (v[i] = 1)."""
    count, m, _ = a.shape
    q = _eye(count, m, cols)
    for i in range(tau.shape[1] - 1, -1, -1):
        v = a[:, i:, i].copy()
        v[:, 0] = 1.0
        w = np.einsum("bi,bij->bj", v, q[:, i:, :])
        q[:, i:, :] -= tau[:, i, None, None] * v[:, :, None] * w[:, None, :]
    return q


# ----------------------------------------------------------------------------- LU
def _lu_factor_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, m, n = _matrix(s[0], "lu_factor")
    out = _pick(a, ("LU", "pivots", "info"), "lu_factor")
    return ((s[0], _floats(d, "lu_factor")), (batch + (min(m, n),), "int32"), (batch, "int32"))[out]


def _lu_factor_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    batch = x[0].shape[:-2]
    lu, pivots, info = _lu(_stack(x[0]))
    return (_unstack(lu, batch, x[0].dtype), _unstack(pivots, batch, np.dtype(np.int32)), _unstack(info, batch, np.dtype(np.int32)))[int(a["output"])]


_def("lu_factor", "linear algebra", "LU factorization with partial pivoting of [..., m, n] (LAPACK getrf, torch.linalg.lu_factor_ex): "
     "output 0 the packed factors (unit lower L below the diagonal, U on and above), 1 the 1-based row interchanges "
     "[..., min(m, n)] int32, 2 info [...] int32 (0, or the 1-based index of the first zero pivot)",
     ("x",), _lu_factor_rule, _lu_factor_ref, attrs={"output": 0})


def _lu_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, m, n = _matrix(s[0], "lu")
    k = min(m, n)
    out = _pick(a, ("P", "L", "U"), "lu")
    return (batch + ((m, m), (m, k), (k, n))[out], _floats(d, "lu"))


def _permutation(pivots: np.ndarray, m: int) -> np.ndarray:
    """P (B, m, m) with A = P L U from getrf's row interchanges (B, k)."""
    order = np.broadcast_to(np.arange(m), (pivots.shape[0], m)).copy()
    for j in range(pivots.shape[1]):
        _swap_rows(order, j, pivots[:, j] - 1)
    perm = np.zeros((pivots.shape[0], m, m))
    np.put_along_axis(perm, order[:, None, :], 1.0, axis=1)  # column i of P has its 1 at row order[i]
    return perm


def _lu_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    batch, (m, n) = x[0].shape[:-2], x[0].shape[-2:]
    lu, pivots, _ = _lu(_stack(x[0]))
    k = min(m, n)
    out = int(a["output"])
    if out == 0:
        result = _permutation(pivots, m)
    elif out == 1:
        result = np.tril(lu[:, :, :k], -1) + np.eye(m, k)
    else:
        result = np.triu(lu[:, :k, :])
    return _unstack(result, batch, x[0].dtype)


_def("lu", "linear algebra", "LU factorization with partial pivoting A = P L U of [..., m, n] (torch.linalg.lu): output 0 P "
     "[..., m, m], 1 unit lower L [..., m, k], 2 upper U [..., k, n] (k = min(m, n))",
     ("x",), _lu_rule, _lu_ref, attrs={"output": 0})


def _slogdet_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, _ = _square(s[0], "slogdet")
    _pick(a, ("sign", "logabsdet"), "slogdet")
    return batch, _floats(d, "slogdet")


def _slogdet_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    batch = x[0].shape[:-2]
    lu, pivots, _ = _lu(_stack(x[0]))
    diag = np.diagonal(lu, axis1=-2, axis2=-1)
    swaps = np.sum(pivots != np.arange(1, pivots.shape[1] + 1), axis=-1)
    if int(a["output"]) == 0:
        return _unstack(np.where(swaps % 2, -1.0, 1.0) * np.prod(np.sign(diag), axis=-1), batch, x[0].dtype)
    with np.errstate(divide="ignore"):  # a singular matrix: log|det| = -inf, as torch gives
        return _unstack(np.sum(np.log(np.abs(diag)), axis=-1), batch, x[0].dtype)


_def("slogdet", "linear algebra", "sign (output 0: -1, 0 or 1) and log of the absolute value (output 1; -inf where singular) of "
     "the determinant of [..., n, n], from its LU factorization (torch.linalg.slogdet)",
     ("x",), _slogdet_rule, _slogdet_ref, attrs={"output": 0})


# ----------------------------------------------------------------------------- inverse and solves
def _inv_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _square(s[0], "inv")
    return s[0], _floats(d, "inv")


def _inv_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    m = _stack(x[0])
    lu, pivots, _ = _lu(m)
    with np.errstate(divide="ignore", invalid="ignore"):  # a singular matrix: inf / NaN, info says so
        return _unstack(_lu_solve(lu, pivots, _eye(m.shape[0], m.shape[1])), x[0].shape[:-2], x[0].dtype)


_def("inv", "linear algebra", "inverse of [..., n, n] through its LU factorization (LAPACK getrf + getrs, torch.linalg.inv_ex); "
     "inf / NaN where singular (lu_factor's info says where)",
     ("x",), _inv_rule, _inv_ref)


def _vector_rhs(a: Shape, b: Shape) -> bool:
    """torch.linalg.solve's rule: B is a vector (or a batch of them) when it is 1-D or has A's shape less its last axis."""
    return len(b) == 1 or (len(b) == len(a) - 1 and b == a[:-1])


def _solve_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, n = _square(s[0], "solve")
    b = s[1]
    if _vector_rhs(s[0], b):
        if b[-1] != n:
            raise ValueError(f"solve: A {s[0]} and the vector B {b} do not match")
        return _broadcast([batch, b[:-1]]) + (n,), _floats(d, "solve")
    rows, cols = _matrix(b, "solve")[1:]
    if (rows if a["left"] else cols) != n:
        raise ValueError(f"solve: A {s[0]} and B {b} do not match (left={a['left']})")
    return _broadcast([batch, b[:-2]]) + b[-2:], _floats(d, "solve")


def _solve_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    mat, rhs = x[0], x[1]
    vector = _vector_rhs(mat.shape, rhs.shape)
    if vector:
        rhs = rhs[..., None]
    if not a["left"]:  # X A = B  <=>  A^T X^T = B^T
        mat, rhs = _t(mat), rhs if vector else _t(rhs)
    batch = _broadcast([mat.shape[:-2], rhs.shape[:-2]])
    mat, rhs = np.broadcast_to(mat, batch + mat.shape[-2:]), np.broadcast_to(rhs, batch + rhs.shape[-2:])
    lu, pivots, _ = _lu(_stack(mat))
    with np.errstate(divide="ignore", invalid="ignore"):  # a singular A: inf / NaN, info says so
        out = _unstack(_lu_solve(lu, pivots, _stack(rhs)), batch, x[0].dtype)
    return out[..., 0] if vector else out if a["left"] else _t(out)


_def("solve", "linear algebra", "X with A X = B (left) or X A = B, A [..., n, n] through its LU factorization (LAPACK gesv, "
     "torch.linalg.solve_ex); B is a vector where it is 1-D or has A's shape less its last axis; batches broadcast",
     ("a", "b"), _solve_rule, _solve_ref, attrs={"left": True})


def _triangular_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, n = _square(s[0], "solve_triangular")
    rows, cols = _matrix(s[1], "solve_triangular")[1:]
    if (rows if a["left"] else cols) != n:
        raise ValueError(f"solve_triangular: A {s[0]} and B {s[1]} do not match (left={a['left']})")
    return _broadcast([batch, s[1][:-2]]) + s[1][-2:], _floats(d, "solve_triangular")


def _triangular_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    mat, rhs, lower = x[0], x[1], not a["upper"]
    if not a["left"]:  # X A = B  <=>  A^T X^T = B^T, and A^T's triangle is the other one
        mat, rhs, lower = _t(mat), _t(rhs), not lower
    batch = _broadcast([mat.shape[:-2], rhs.shape[:-2]])
    mat, rhs = np.broadcast_to(mat, batch + mat.shape[-2:]), np.broadcast_to(rhs, batch + rhs.shape[-2:])
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero on the diagonal: inf / NaN, as trsm
        out = _unstack(_substitute(_stack(mat), _stack(rhs), lower, bool(a["unitriangular"])), batch, x[0].dtype)
    return out if a["left"] else _t(out)


_def("solve_triangular", "linear algebra", "X with A X = B (left) or X A = B for triangular A [..., n, n] (only its upper or "
     "lower triangle is read; unitriangular: its diagonal is taken as ones), B [..., n, k]; batches broadcast (LAPACK trsm, "
     "torch.linalg.solve_triangular)",
     ("a", "b"), _triangular_rule, _triangular_ref, attrs={"upper": REQUIRED, "left": True, "unitriangular": False})


# ----------------------------------------------------------------------------- Cholesky
def _cholesky_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, _ = _square(s[0], "cholesky")
    out = _pick(a, ("L", "info"), "cholesky")
    return (s[0], _floats(d, "cholesky")) if out == 0 else (batch, "int32")


def _lower_of(m: np.ndarray, upper: bool) -> np.ndarray:
    """The symmetric matrix given by the triangle LAPACK reads, as its lower triangle (transposed from the upper one)."""
    return _t(m) if upper else m


def _cholesky_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    batch = x[0].shape[:-2]
    low, info = _cholesky(_stack(_lower_of(x[0], bool(a["upper"]))))
    if int(a["output"]) == 1:
        return _unstack(info, batch, np.dtype(np.int32))
    return _unstack(_t(low) if a["upper"] else low, batch, x[0].dtype)


_def("cholesky", "linear algebra", "Cholesky factor of symmetric positive-definite [..., n, n], reading its lower (or, upper, its "
     "upper) triangle (LAPACK potrf, torch.linalg.cholesky_ex): output 0 L with A = L L^T (upper: U with A = U^T U), 1 info "
     "[...] int32 (0, or the order of the first leading minor that is not positive definite; the factor is NaN from there)",
     ("x",), _cholesky_rule, _cholesky_ref, attrs={"upper": False, "output": 0})


def _cholesky_solve_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, n = _square(s[1], "cholesky_solve")
    if _matrix(s[0], "cholesky_solve")[1] != n:
        raise ValueError(f"cholesky_solve: B {s[0]} and the factor {s[1]} do not match")
    return _broadcast([s[0][:-2], batch]) + s[0][-2:], _floats(d, "cholesky_solve")


def _factor_solve(factor: np.ndarray, rhs: np.ndarray, upper: bool) -> np.ndarray:
    """potrs: X with (L L^T) X = B from the factor's triangle (U^T U where ``upper``), float64 (B, n, n), (B, n, r)."""
    low = _t(factor) if upper else factor
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero on the factor's diagonal: inf / NaN
        return _substitute(_t(low), _substitute(low, rhs, lower=True, unit=False), lower=False, unit=False)


def _cholesky_solve_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    rhs, factor = x[0], x[1]
    batch = _broadcast([rhs.shape[:-2], factor.shape[:-2]])
    rhs, factor = np.broadcast_to(rhs, batch + rhs.shape[-2:]), np.broadcast_to(factor, batch + factor.shape[-2:])
    return _unstack(_factor_solve(_stack(factor), _stack(rhs), bool(a["upper"])), batch, x[0].dtype)


_def("cholesky_solve", "linear algebra", "X with A X = B for B [..., n, k] given A's Cholesky factor [..., n, n] (lower L, A = L L^T; "
     "upper: U, A = U^T U; only that triangle is read); batches broadcast (LAPACK potrs, torch.cholesky_solve)",
     ("b", "factor"), _cholesky_solve_rule, _cholesky_solve_ref, attrs={"upper": False})


def _cholesky_inverse_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    factor = _stack(x[0])
    return _unstack(_factor_solve(factor, _eye(factor.shape[0], factor.shape[1]), bool(a["upper"])), x[0].shape[:-2], x[0].dtype)


def _cholesky_inverse_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _square(s[0], "cholesky_inverse")
    return s[0], _floats(d, "cholesky_inverse")


_def("cholesky_inverse", "linear algebra", "inverse of A from its Cholesky factor [..., n, n] (lower L, A = L L^T; upper: U, "
     "A = U^T U; only that triangle is read) (LAPACK potri, torch.cholesky_inverse)",
     ("factor",), _cholesky_inverse_rule, _cholesky_inverse_ref, attrs={"upper": False})


# ----------------------------------------------------------------------------- LDL (Bunch-Kaufman)
def _bk_pivot(a: np.ndarray, k: int) -> tuple[int, int] | None:
    """sytf2's choice at column ``k`` (0-based): (row to interchange with, 1 or 2 for the block's
    size), or None where the column is zero (or its diagonal NaN): a zero pivot."""
    n = a.shape[0]
    absakk = abs(a[k, k])
    imax = k + 1 + int(np.argmax(np.abs(a[k + 1:, k]))) if k < n - 1 else k
    colmax = abs(a[imax, k]) if k < n - 1 else 0.0
    if max(absakk, colmax) == 0 or np.isnan(absakk):
        return None
    if absakk >= _BK_ALPHA * colmax:
        return k, 1
    rowmax = float(np.max(np.abs(a[imax, k:imax])))  # row imax left of the diagonal (imax > k here)
    if imax < n - 1:
        rowmax = max(rowmax, float(np.max(np.abs(a[imax + 1:, imax]))))  # and column imax below it
    if absakk >= _BK_ALPHA * colmax * (colmax / rowmax):
        return k, 1
    if abs(a[imax, imax]) >= _BK_ALPHA * rowmax:
        return imax, 1
    return imax, 2


def _bk_interchange(a: np.ndarray, k: int, kk: int, kp: int, step: int) -> None:
    """Swaps rows and columns kk and kp of the trailing lower triangle in place (sytf2)."""
    n = a.shape[0]
    if kp < n - 1:
        a[kp + 1:, [kk, kp]] = a[kp + 1:, [kp, kk]]
    between = slice(kk + 1, kp)
    column = a[between, kk].copy()
    a[between, kk] = a[kp, between]
    a[kp, between] = column
    a[kk, kk], a[kp, kp] = a[kp, kp], a[kk, kk]
    if step == 2:
        a[k + 1, k], a[kp, k] = a[kp, k], a[k + 1, k]


def _bk_update(a: np.ndarray, k: int, step: int) -> None:
    """sytf2's rank-1 (1x1 pivot) or rank-2 (2x2 pivot) update of the trailing lower triangle, storing L's columns."""
    if step == 1:
        d11 = 1.0 / a[k, k]
        x = a[k + 1:, k].copy()
        a[k + 1:, k + 1:] -= np.tril(d11 * np.outer(x, x))
        a[k + 1:, k] *= d11
        return
    if k >= a.shape[0] - 2:
        return
    d21 = a[k + 1, k]
    d11, d22 = a[k + 1, k + 1] / d21, a[k, k] / d21
    d21 = 1.0 / (d11 * d22 - 1.0) / d21
    wk = d21 * (d11 * a[k + 2:, k] - a[k + 2:, k + 1])
    wkp1 = d21 * (d22 * a[k + 2:, k + 1] - a[k + 2:, k])
    a[k + 2:, k + 2:] -= np.tril(np.outer(a[k + 2:, k], wk) + np.outer(a[k + 2:, k + 1], wkp1))
    a[k + 2:, k], a[k + 2:, k + 1] = wk, wkp1


def _sytf2(m: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """LAPACK sytf2 (UPLO = 'L') on one symmetric (n, n) float64 matrix, reading its lower
    triangle: (LD with the upper triangle zero, 1-based pivots int32 (negative for a 2x2 block, on
    both of its rows), info)."""
    a = np.tril(m)
    n = a.shape[0]
    pivots = np.zeros(n, np.int32)
    info, k = 0, 0
    while k < n:
        choice = _bk_pivot(a, k)
        if choice is None:
            info = info or k + 1
            kp, step = k, 1
        else:
            kp, step = choice
            kk = k + step - 1
            if kp != kk:
                _bk_interchange(a, k, kk, kp, step)
            _bk_update(a, k, step)
        pivots[k:k + step] = kp + 1 if step == 1 else -(kp + 1)
        k += step
    return a, pivots, info


def _ldl_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, n = _square(s[0], "ldl_factor")
    out = _pick(a, ("LD", "pivots", "info"), "ldl_factor")
    return ((s[0], _floats(d, "ldl_factor")), (batch + (n,), "int32"), (batch, "int32"))[out]


def _ldl_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    batch = x[0].shape[:-2]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero pivot: info says so
        parts = [_sytf2(m) for m in _stack(x[0])]
    n = x[0].shape[-1]
    out = int(a["output"])
    if out == 0:
        return _unstack(np.stack([ld for ld, _, _ in parts]) if parts else np.zeros((0, n, n)), batch, x[0].dtype)
    if out == 1:
        return _unstack(np.stack([piv for _, piv, _ in parts]) if parts else np.zeros((0, n)), batch, np.dtype(np.int32))
    return _unstack(np.asarray([info for _, _, info in parts], np.int32).reshape(len(parts)), batch, np.dtype(np.int32))


_def("ldl_factor", "linear algebra", "LDL^T factorization of symmetric [..., n, n] with Bunch-Kaufman pivoting, reading its lower "
     "triangle (LAPACK sytrf, torch.linalg.ldl_factor_ex): output 0 the compact LD (L's columns below the diagonal, D's 1x1 "
     "and 2x2 blocks on it; upper triangle zero), 1 the 1-based pivots [..., n] int32 (negative on both rows of a 2x2 block), "
     "2 info [...] int32 (0, or the 1-based index of the first zero pivot)",
     ("x",), _ldl_rule, _ldl_ref, attrs={"output": 0})


# ----------------------------------------------------------------------------- spectral: SVD, eigh, pinv
def _svd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, m, n = _matrix(s[0], "svd")
    k = min(m, n)
    full = bool(a["full_matrices"])
    out = _pick(a, ("U", "S", "Vh"), "svd")
    return batch + ((m, m if full else k), (k,), (n if full else k, n))[out], _floats(d, "svd")


def _svd_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    out = int(a["output"])
    if out == 1:
        return np.linalg.svd(x[0].astype(np.float64), compute_uv=False).astype(x[0].dtype)
    u, _, vh = np.linalg.svd(x[0].astype(np.float64), full_matrices=bool(a["full_matrices"]))
    return (u if out == 0 else vh).astype(x[0].dtype)


_def("svd", "linear algebra", "singular value decomposition A = U diag(S) Vh of [..., m, n] (LAPACK gesdd, torch.linalg.svd): "
     "output 0 U [..., m, k], 1 S [..., k] descending, 2 Vh [..., k, n] (k = min(m, n); full_matrices: U [..., m, m], "
     "Vh [..., n, n]); the vectors' signs are LAPACK's",
     ("x",), _svd_rule, _svd_ref, attrs={"full_matrices": False, "output": 1})


def _eigh_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, n = _square(s[0], "eigh")
    if a["uplo"] not in ("L", "U"):
        raise ValueError(f"eigh reads the lower ('L') or upper ('U') triangle, got uplo={a['uplo']!r}")
    out = _pick(a, ("eigenvalues", "eigenvectors"), "eigh")
    return (batch + (n,) if out == 0 else s[0]), _floats(d, "eigh")


def _eigh_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    m = x[0].astype(np.float64)
    if int(a["output"]) == 0:
        return np.linalg.eigvalsh(m, UPLO=a["uplo"]).astype(x[0].dtype)
    return np.linalg.eigh(m, UPLO=a["uplo"])[1].astype(x[0].dtype)


_def("eigh", "linear algebra", "eigen-decomposition of symmetric [..., n, n] reading its lower (uplo 'L') or upper ('U') triangle "
     "(LAPACK syevd, torch.linalg.eigh): output 0 the eigenvalues [..., n] ascending, 1 the eigenvectors as columns; their "
     "signs are LAPACK's",
     ("x",), _eigh_rule, _eigh_ref, attrs={"uplo": "L", "output": 1})


def _pinv_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, m, n = _matrix(s[0], "pinv")
    if not _is_float(d[0]):
        raise ValueError(f"pinv takes a floating-point matrix, got {d[0]}")
    return _broadcast([batch, *s[1:]]) + (n, m), d[0]


def _pinv_tolerances(x: Arrays) -> tuple[np.ndarray, np.ndarray]:
    """(atol, rtol) as float64, each with a trailing axis to meet the singular values: rtol, when
    not given, is eps * max(m, n) of the input's dtype, or 0 where atol > 0 (torch's rule)."""
    atol = np.asarray(x[1], np.float64)
    if len(x) > 2:
        rtol = np.asarray(x[2], np.float64)
    else:
        rtol = np.where(atol > 0, 0.0, float(np.finfo(x[0].dtype).eps) * max(x[0].shape[-2:]))
    return atol[..., None], rtol[..., None]


def _pinv_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    m = x[0].astype(np.float64)
    atol, rtol = _pinv_tolerances(x)
    if min(m.shape[-2:]) == 0:
        batch = _broadcast([m.shape[:-2], atol.shape[:-1], rtol.shape[:-1]])
        return np.zeros(batch + (m.shape[-1], m.shape[-2]), x[0].dtype)
    if a["hermitian"]:
        values, vectors = np.linalg.eigh(m)
        size = np.abs(values)
        tol = np.maximum(atol, rtol * np.max(size, axis=-1, keepdims=True))
        with np.errstate(divide="ignore"):  # the zero values are dropped by the where
            inverse = np.where(size > tol, 1.0 / values, 0.0)
        return ((vectors * inverse[..., None, :]) @ _t(vectors)).astype(x[0].dtype)
    u, values, vh = np.linalg.svd(m, full_matrices=False)
    tol = np.maximum(atol, rtol * values[..., :1])  # S is descending: its first value is the largest
    with np.errstate(divide="ignore"):
        inverse = np.where(values > tol, 1.0 / values, 0.0)
    return ((_t(vh) * inverse[..., None, :]) @ _t(u)).astype(x[0].dtype)


_def("pinv", "linear algebra", "Moore-Penrose pseudo-inverse [..., n, m] of [..., m, n] through its SVD (hermitian: its "
     "eigen-decomposition, reading the lower triangle); singular values at or below max(atol, rtol * the largest) count as "
     "zero; without rtol it is eps(dtype) * max(m, n), or 0 where atol > 0 (torch.linalg.pinv); atol and rtol are float64 "
     "tensors that broadcast with the batch",
     ("x", "atol", "rtol?"), _pinv_rule, _pinv_ref, attrs={"hermitian": False})


# ----------------------------------------------------------------------------- QR and Householder reflectors
def _qr_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, m, n = _matrix(s[0], "qr")
    mode, k = a["mode"], min(m, n)
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr's mode is 'reduced', 'complete' or 'r', got {mode!r}")
    out = _pick(a, ("Q", "R"), "qr")
    if out == 0 and mode == "r":
        raise ValueError("qr in mode 'r' computes R only (output 1)")
    cols = m if mode == "complete" else k
    return batch + ((m, cols) if out == 0 else (cols, n)), _floats(d, "qr")


def _qr_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    m = x[0].astype(np.float64)
    if a["mode"] == "r":
        return np.asarray(np.linalg.qr(m, mode="r")).astype(x[0].dtype)
    return np.linalg.qr(m, mode=a["mode"])[int(a["output"])].astype(x[0].dtype)


_def("qr", "linear algebra", "QR decomposition of [..., m, n] by Householder reflections (LAPACK geqrf + orgqr, torch.linalg.qr): "
     "output 0 Q, 1 R; mode 'reduced' (Q [..., m, k], R [..., k, n], k = min(m, n)), 'complete' (Q [..., m, m], R [..., m, n]) "
     "or 'r' (R only)",
     ("x",), _qr_rule, _qr_ref, attrs={"mode": "reduced", "output": 0})


def _geqrf_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, m, n = _matrix(s[0], "geqrf")
    out = _pick(a, ("a", "tau"), "geqrf")
    return (s[0] if out == 0 else batch + (min(m, n),)), _floats(d, "geqrf")


def _geqrf_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    packed, tau = np.linalg.qr(x[0].astype(np.float64), mode="raw")  # LAPACK's own output, transposed (Fortran order)
    return (_t(packed) if int(a["output"]) == 0 else tau).astype(x[0].dtype)


_def("geqrf", "linear algebra", "QR decomposition of [..., m, n] in LAPACK geqrf's packed form (torch.geqrf): output 0 R on and "
     "above the diagonal with the Householder vectors below it, 1 their scales tau [..., min(m, n)]",
     ("x",), _geqrf_rule, _geqrf_ref, attrs={"output": 0})


def _householder_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    batch, m, n = _matrix(s[0], "householder_product")
    if not s[1] or s[1][:-1] != batch or not m >= n >= s[1][-1]:
        raise ValueError(f"householder_product takes A [..., m, n] with m >= n and tau [..., k] with k <= n, got {s[0]} and {s[1]}")
    return s[0], _floats(d, "householder_product")


def _householder_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    m = _stack(x[0])
    tau = np.asarray(x[1], np.float64).reshape(m.shape[0], x[1].shape[-1])
    return _unstack(_householder(m, tau, m.shape[2]), x[0].shape[:-2], x[0].dtype)


_def("householder_product", "linear algebra", "the first n columns of the product H(1) ... H(k) of the Householder reflectors "
     "I - tau[i] v v^T stored below the diagonal of A [..., m, n] (LAPACK orgqr, torch.linalg.householder_product)",
     ("a", "tau"), _householder_rule, _householder_ref)


def _ormqr_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _, mn, _ = _matrix(s[0], "ormqr")
    _, rows, cols = _matrix(s[2], "ormqr")
    if mn != (rows if a["left"] else cols) or not s[1] or s[1][-1] > mn:
        raise ValueError(f"ormqr: reflectors {s[0]} with tau {s[1]} do not apply to C {s[2]} (left={a['left']})")
    return s[2], _floats(d, "ormqr")


def _ormqr_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    batch = _broadcast([x[0].shape[:-2], x[1].shape[:-1], x[2].shape[:-2]])
    m = _stack(np.broadcast_to(x[0], batch + x[0].shape[-2:]))
    tau = np.broadcast_to(x[1], batch + x[1].shape[-1:]).reshape(m.shape[0], x[1].shape[-1]).astype(np.float64)
    q = _householder(m, tau, m.shape[1])
    q = _t(q) if a["transpose"] else q
    c = _stack(np.broadcast_to(x[2], batch + x[2].shape[-2:]))
    return _unstack(q @ c if a["left"] else c @ q, batch, x[2].dtype)


_def("ormqr", "linear algebra", "C [..., m, n] multiplied by Q = H(1) ... H(k) from the Householder reflectors below the diagonal of "
     "A with scales tau (geqrf's output): Q C (left) or C Q, with Q^T where transpose (LAPACK ormqr, torch.ormqr)",
     ("a", "tau", "c"), _ormqr_rule, _ormqr_ref, attrs={"left": True, "transpose": False})


# ----------------------------------------------------------------------------- matrix exponential
#: Padé (13, 13) coefficients of Higham's scaling-and-squaring method (SIAM J. Matrix Anal. Appl. 26(4), 2005).
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
           10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)
#: The largest 1-norm at which the degree-13 approximant is accurate to float64's unit roundoff.
_THETA13 = 5.371920351148152


def _expm(m: np.ndarray) -> np.ndarray:
    """exp of each (n, n) matrix of ``m`` (B, n, n) float64: scaling and squaring with a Padé (13, 13)
    approximant (Higham 2005), the scaling per matrix from its 1-norm."""
    count, n, _ = m.shape
    norm = np.max(np.sum(np.abs(m), axis=-2), axis=-1, initial=0.0) if n else np.zeros(count)
    finite = np.isfinite(norm)  # inf / NaN entries give NaN whatever the scaling
    squarings = np.where(finite & (norm > _THETA13), np.ceil(np.log2(np.where(finite & (norm > 0), norm, 1.0) / _THETA13)), 0)
    squarings = squarings.astype(np.int64)
    a = m / np.exp2(squarings)[:, None, None]
    b, eye = _PADE13, _eye(count, n)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    lu, pivots, _ = _lu(v - u)
    with np.errstate(divide="ignore", invalid="ignore"):  # only a NaN / inf input makes V - U singular
        r = _lu_solve(lu, pivots, v + u)
    for step in range(int(squarings.max(initial=0))):
        r = np.where((squarings > step)[:, None, None], r @ r, r)
    return r


def _matrix_exp_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _square(s[0], "matrix_exp")
    return s[0], _floats(d, "matrix_exp")


_def("matrix_exp", "linear algebra", "matrix exponential of [..., n, n] (scaling and squaring with a Padé (13, 13) approximant; "
     "torch.linalg.matrix_exp)",
     ("x",), _matrix_exp_rule, lambda a, x, p: _unstack(_expm(_stack(x[0])), x[0].shape[:-2], x[0].dtype))
