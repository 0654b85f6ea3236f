"""ATen -> opset mappings of ``torch.linalg`` (PyTorch is not imported here); merged into ``torch_export``'s table.

Each factorization maps onto the opset op of the same family (``neurenix_core.graph.opset.linalg``):
an ATen op with several results becomes one node per result a later node reads (the op's
``output`` attribute), so ``svdvals`` computes S only. What these ops return beside their
results is kept honest:

* the LU factors and pivots that ``_linalg_det``, ``_linalg_slogdet`` and ``_linalg_solve_ex``
  keep for their backward are of A or of A^T depending on A's memory layout, which an exported
  graph does not fix: they are not computed, and a node reading one is refused by name;
* the empty U / Vh (``compute_uv=False``), eigenvectors (``compute_v=False``) and Q (QR mode
  'r') PyTorch returns are empty constants of its shapes;
* ``info`` is computed (0 where the factorization succeeded).

Error checks: ``torch.linalg.inv``, ``cholesky``, ``solve``, ``lu_factor``, ``ldl_factor`` (and
``check_errors=True``) raise in PyTorch when ``info`` is not 0; torch.export keeps that check as
``with_effects(token, aten._linalg_check_errors, info, ...)``. The import accepts it and does not
raise: the graph computes, for a singular or not positive-definite matrix, the inf / NaN values
the ``*_ex`` functions return (and ``info`` when it is an output). What is not checked: that the
matrix was invertible / positive definite; a caller who needs that returns ``info`` and tests it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from neurenix_core.graph.importers.builder import Const, Value
from neurenix_core.graph.importers.torch_ops import Handler, Unavailable, _arg, _emit, _result

__all__ = ["HANDLERS"]


# ----------------------------------------------------------------------------- helpers
def _results(c: Any, n: Any, op: str, inputs: list[Value], attrs: dict[str, Any], tags: tuple[str, ...],
             empty: tuple[int, ...] = ()) -> list[Value | Unavailable]:
    """One ``op`` node per result of ``n`` that a later node reads (its ``output`` attribute picks
    the result); the results in ``empty`` are PyTorch's empty placeholders (:func:`_empty`)."""
    return [_result(n, i, partial(_empty, c, n, i) if i in empty else partial(_emit, c, n, tag, op, inputs, attrs | {"output": i}))
            for i, tag in enumerate(tags)]


def _empty(c: Any, n: Any, i: int) -> Const:
    """Result ``i`` where PyTorch returns an empty placeholder tensor (U of ``compute_uv=False`` ...)."""
    val = n.meta["val"][i]
    shape = tuple(int(c.b.example(c.dim(d))) for d in val.shape)
    return Const(np.zeros(shape, np.dtype(str(val.dtype).replace("torch.", ""))))


def _meta_shape(c: Any, n: Any, i: int) -> tuple[int, ...]:
    return tuple(int(c.b.example(c.dim(d))) for d in n.meta["val"][i].shape)


def _kept_for_backward(op: str) -> Unavailable:
    return Unavailable(f"the LU factors {op} keeps for its backward (of A or A^T, by memory layout)")


def _broadcast_to(c: Any, n: Any, v: Value, shape: tuple[int, ...], tag: str) -> Value:
    """``v`` expanded to ``shape`` (PyTorch's result shape for a broadcast batch), where it differs."""
    return v if tuple(c.b.spec(v).shape) == shape else _emit(c, n, tag, "expand", [v], {"shape": shape})


def _float64(c: Any, n: Any, v: Any, tag: str) -> Value:
    """A tolerance (a Python float or a tensor) as float64, the dtype torch.linalg computes them in."""
    return c.b.cast_to(f"{c.name(n)}.{tag}", v, "float64") if isinstance(v, (str, Const)) else Const(np.asarray(float(v), np.float64))


def _transposed(c: Any, n: Any, v: Value, tag: str) -> Value:
    rank = len(c.b.spec(v).shape)
    return _emit(c, n, tag, "transpose", [v], {"perm": (*range(rank - 2), rank - 1, rank - 2)})


# ----------------------------------------------------------------------------- decompositions
def _svd(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    """``_linalg_svd(A, full_matrices, compute_uv, driver)``: the driver (a CUDA choice) does not change the result."""
    full, with_uv = bool(_arg(a, k, 1, "full_matrices", False)), bool(_arg(a, k, 2, "compute_uv", True))
    return _results(c, n, "svd", [a[0]], {"full_matrices": full}, ("U", "", "Vh"), () if with_uv else (0, 2))


def _eigh(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    uplo, with_v = str(_arg(a, k, 1, "UPLO", "L")).upper(), bool(_arg(a, k, 2, "compute_v", True))
    return _results(c, n, "eigh", [a[0]], {"uplo": uplo}, ("", "vectors"), () if with_v else (1,))


def _pinv(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """All four ``linalg_pinv`` overloads: ``rcond`` is rtol with atol 0; a missing rtol is the op's default."""
    atol: Any
    if getattr(n.target, "_overloadname", "") in ("default", "rcond_tensor"):
        atol, rtol, hermitian = 0.0, a[1], bool(_arg(a, k, 2, "hermitian", False))
    else:
        atol, rtol, hermitian = k.get("atol"), k.get("rtol"), bool(k.get("hermitian", False))
    tolerances = [_float64(c, n, 0.0 if atol is None else atol, "atol")]
    if rtol is not None:
        tolerances.append(_float64(c, n, rtol, "rtol"))
    return _emit(c, n, "", "pinv", [a[0], *tolerances], {"hermitian": hermitian})


def _qr(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    mode = str(_arg(a, k, 1, "mode", "reduced"))
    return _results(c, n, "qr", [a[0]], {"mode": mode}, ("", "R"), (0,) if mode == "r" else ())


def _geqrf(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    return _results(c, n, "geqrf", [a[0]], {}, ("", "tau"))


def _ormqr(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    left, transpose = bool(_arg(a, k, 3, "left", True)), bool(_arg(a, k, 4, "transpose", False))
    return _emit(c, n, "", "ormqr", [a[0], a[1], a[2]], {"left": left, "transpose": transpose})


# ----------------------------------------------------------------------------- LU, determinants, inverse, solves
def _no_pivot(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> None:
    if not bool(k.get("pivot", True)):
        raise c.fail(n, "factors without pivoting (pivot=False), which PyTorch computes on CUDA only; use pivot=True")


def _lu_factor(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    """``linalg_lu_factor_ex(A, pivot, check_errors)``; check_errors is not enforced (see the module's docstring)."""
    _no_pivot(c, n, a, k)
    return _results(c, n, "lu_factor", [a[0]], {}, ("", "pivots", "info"))


def _lu(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    _no_pivot(c, n, a, k)
    return _results(c, n, "lu", [a[0]], {}, ("P", "L", "U"))


def _det(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    return [_emit(c, n, "", "det", [a[0]]), _kept_for_backward("_linalg_det"), _kept_for_backward("_linalg_det")]


def _slogdet(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    return [*_results(c, n, "slogdet", [a[0]], {}, ("sign", "logabsdet")),
            _kept_for_backward("_linalg_slogdet"), _kept_for_backward("_linalg_slogdet")]


def _info(c: Any, n: Any, matrix: Value, i: int) -> Value:
    """getrf's info of ``matrix``, broadcast to PyTorch's shape of result ``i``."""
    info = _emit(c, n, "info", "lu_factor", [matrix], {"output": 2})
    return _broadcast_to(c, n, info, _meta_shape(c, n, i), "info.expand")


def _inv_ex(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    return [_result(n, 0, lambda: _emit(c, n, "", "inv", [a[0]])), _result(n, 1, lambda: _info(c, n, a[0], 1))]


def _solve_ex(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    """``_linalg_solve_ex(A, B, left, check_errors)`` -> (result, LU, pivots, info)."""
    left = bool(k.get("left", True))
    return [_result(n, 0, lambda: _emit(c, n, "", "solve", [a[0], a[1]], {"left": left})),
            _kept_for_backward("_linalg_solve_ex"), _kept_for_backward("_linalg_solve_ex"),
            _result(n, 3, lambda: _info(c, n, a[0], 3))]


def _solve_triangular(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    attrs = {"upper": bool(k["upper"]), "left": bool(k.get("left", True)), "unitriangular": bool(k.get("unitriangular", False))}
    return _emit(c, n, "", "solve_triangular", [a[0], a[1]], attrs)


def _triangular_solve(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    """``triangular_solve(B, A, upper, transpose, unitriangular)`` -> (X, A broadcast to the batch):
    A^T (transpose) is the transposed matrix, whose triangle is the other one."""
    upper, transpose = bool(_arg(a, k, 2, "upper", True)), bool(_arg(a, k, 3, "transpose", False))
    unit = bool(_arg(a, k, 4, "unitriangular", False))
    b, matrix = a[0], a[1]

    def solution() -> Value:
        coefficient = _transposed(c, n, matrix, "At") if transpose else matrix
        attrs = {"upper": upper != transpose, "left": True, "unitriangular": unit}
        return _emit(c, n, "", "solve_triangular", [coefficient, b], attrs)

    return [_result(n, 0, solution), _result(n, 1, lambda: _broadcast_to(c, n, matrix, _meta_shape(c, n, 1), "A"))]


# ----------------------------------------------------------------------------- Cholesky, LDL, matrix functions
def _cholesky_ex(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    return _results(c, n, "cholesky", [a[0]], {"upper": bool(k.get("upper", False))}, ("", "info"))


def _cholesky(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _emit(c, n, "", "cholesky", [a[0]], {"upper": bool(_arg(a, k, 1, "upper", False)), "output": 0})


def _cholesky_solve(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _emit(c, n, "", "cholesky_solve", [a[0], a[1]], {"upper": bool(_arg(a, k, 2, "upper", False))})


def _cholesky_inverse(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _emit(c, n, "", "cholesky_inverse", [a[0]], {"upper": bool(_arg(a, k, 1, "upper", False))})


def _ldl_factor(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    """``linalg_ldl_factor_ex(A, hermitian, check_errors)``: for real matrices hermitian is symmetric."""
    return _results(c, n, "ldl_factor", [a[0]], {}, ("", "pivots", "info"))


def _copy(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """``copy(self, src)``: the values of src, broadcast to self's shape, in self's dtype."""
    shape, dtype = c.meta(n)
    return _broadcast_to(c, n, c.b.cast_to(c.name(n) + ".src", a[1], dtype), shape, "")


# ----------------------------------------------------------------------------- error checks (effect tokens)
def _check_errors(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> None:
    """``_linalg_check_errors(info, api_name, is_matrix)``: not enforced (the module's docstring says what is not checked)."""


def _with_effects(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[None]:
    """``with_effects(token, op, *args)`` -> (token, *op's results), as torch.export orders side
    effects. Only the linalg error check is accepted (it has no results); its token stands for nothing."""
    op = a[1]
    name = str(getattr(getattr(op, "overloadpacket", None), "__name__", op))
    if name != "_linalg_check_errors":
        raise c.fail(n, f"runs {name} for its side effect, which a neurenix graph (outputs only) cannot perform")
    return [None]


HANDLERS: dict[str, Handler] = {
    "_linalg_svd": _svd, "_linalg_eigh": _eigh, "linalg_pinv": _pinv,
    "linalg_qr": _qr, "geqrf": _geqrf, "ormqr": _ormqr,
    "linalg_householder_product": lambda c, n, a, k: _emit(c, n, "", "householder_product", [a[0], a[1]]),
    "linalg_lu_factor_ex": _lu_factor, "linalg_lu": _lu, "_linalg_det": _det, "_linalg_slogdet": _slogdet,
    "linalg_inv_ex": _inv_ex, "_linalg_solve_ex": _solve_ex,
    "linalg_solve_triangular": _solve_triangular, "triangular_solve": _triangular_solve,
    "linalg_cholesky_ex": _cholesky_ex, "cholesky": _cholesky, "cholesky_solve": _cholesky_solve,
    "cholesky_inverse": _cholesky_inverse, "linalg_ldl_factor_ex": _ldl_factor,
    "linalg_matrix_exp": lambda c, n, a, k: _emit(c, n, "", "matrix_exp", [a[0]]),
    "copy": _copy,
    "_linalg_check_errors": _check_errors, "with_effects": _with_effects,
}
