"""from_torch of ``torch.special`` (issue #41): the gamma family (lgamma, digamma, polygamma,
mvlgamma, the incomplete gamma functions, Hurwitz zeta), the error-function family (erfc, erfinv,
erfcx, ndtri, log_ndtr), the Bessel functions, the Airy function and the orthogonal polynomials.

Each op is imported as a one-op module, run on cpu:0 and compared with eager PyTorch. float64
inputs check the algorithm itself (PyTorch's float64 kernels and the opset's references evaluate
the same Cephes / SciPy formulas: rtol 1e-9); float32 inputs check the dtype path against
PyTorch's float32 kernels, which compute in float32 (rtol 1e-4, atol 1e-5). The inputs cover the
poles, the interval ends, +-inf and NaN where the function defines a value there, and 0-d and
empty tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx
from neurenix_core.graph import opset

_Module: Any = torch.nn.Module  # torch is importorskip's module: typed Any for mypy
_INF, _NAN = float("inf"), float("nan")


class _Op(_Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: Any) -> Any:
        return self.fn(*xs)


def _check(fn: Callable[..., Any], *inputs: Any, rtol: float | None = None, atol: float | None = None) -> np.ndarray:
    """Import ``fn`` with these inputs, run it on cpu:0 and compare each result with eager PyTorch
    (NaN where PyTorch's NaN is, infinities equal); returns neurenix's (first) result."""
    module = _Op(fn)
    got = nx.nn.from_torch(module, tuple(inputs), static=True)(*[t.numpy() for t in inputs])
    want = module(*inputs)
    pairs = list(zip(got, want)) if isinstance(want, tuple) else [(got, want)]
    for g, w in pairs:
        g, w = np.asarray(g), w.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        double = w.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=rtol if rtol is not None else (1e-9 if double else 1e-4),
                                   atol=atol if atol is not None else (1e-12 if double else 1e-5), equal_nan=True)
    return np.asarray(pairs[0][0])


def _t(values: Any, dtype: Any = None) -> Any:
    return torch.tensor(values, dtype=dtype or torch.float64)


def _grid(low: float, high: float, count: int = 41) -> Any:
    return torch.linspace(low, high, count, dtype=torch.float64)


# ----------------------------------------------------------------------------- unary functions
_EDGES = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, -2.5, 1e-8, -1e-8, 8.0, 30.0, 60.0, _INF, -_INF, _NAN]

UNARY: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "lgamma": (torch.lgamma, torch.cat([_grid(-9.75, 30.0), _t(_EDGES + [1e300, -1e20])])),
    "digamma": (torch.digamma, torch.cat([_grid(-9.75, 30.0), _t(_EDGES + [10.0, 1e18])])),
    "erfc": (torch.erfc, torch.cat([_grid(-6.0, 27.0), _t(_EDGES)])),
    # (not much nearer to 1: erf(x) - y then cancels in both Newton steps, and the two erf implementations round apart)
    "erfinv": (torch.erfinv, torch.cat([_grid(-0.999, 0.999), _t([0.0, 1.0, -1.0, 1.5, -2.0, 0.7, 1 - 1e-7, _NAN])])),
    "erfcx": (torch.special.erfcx, torch.cat([_grid(-27.0, 60.0), _t(_EDGES + [5e7, 1e8, -26.8, -6.2, 1e300])])),
    "ndtri": (torch.special.ndtri, torch.cat([_grid(0.0, 1.0), _t([1e-300, 1e-20, 1 - 1e-15, 0.5, -0.1, 1.1, _NAN])])),
    "log_ndtr": (torch.special.log_ndtr, torch.cat([_grid(-40.0, 10.0), _t([-1.0, -0.999, _INF, -_INF, _NAN])])),
    "airy_ai": (torch.special.airy_ai, torch.cat([_grid(-30.0, 20.0, 81), _t([-2.09, 2.09, 8.3, 103.9, 200.0, _INF, -_INF, _NAN])])),
    "mvlgamma_p3": (lambda x: torch.mvlgamma(x, 3), _grid(1.01, 40.0)),
    "i0": (torch.i0, torch.cat([_grid(-30.0, 30.0), _t(_EDGES)])),
    "special.i0e": (torch.special.i0e, torch.cat([_grid(-30.0, 30.0), _t(_EDGES)])),
    "special.i1": (torch.special.i1, torch.cat([_grid(-30.0, 30.0), _t(_EDGES)])),
    "special.i1e": (torch.special.i1e, torch.cat([_grid(-30.0, 30.0), _t(_EDGES)])),
    "bessel_j0": (torch.special.bessel_j0, torch.cat([_grid(-40.0, 40.0, 81), _t(_EDGES + [5.0, 4e-6])])),
    "bessel_j1": (torch.special.bessel_j1, torch.cat([_grid(-40.0, 40.0, 81), _t(_EDGES + [5.0])])),
    "bessel_y0": (torch.special.bessel_y0, torch.cat([_grid(-1.0, 40.0, 81), _t(_EDGES + [5.0])])),
    "bessel_y1": (torch.special.bessel_y1, torch.cat([_grid(-1.0, 40.0, 81), _t(_EDGES + [5.0])])),
    "modified_bessel_i0": (torch.special.modified_bessel_i0, _grid(-30.0, 30.0)),
    "modified_bessel_i1": (torch.special.modified_bessel_i1, _grid(-30.0, 30.0)),
    "modified_bessel_k0": (torch.special.modified_bessel_k0, torch.cat([_grid(-1.0, 30.0), _t(_EDGES)])),
    "modified_bessel_k1": (torch.special.modified_bessel_k1, torch.cat([_grid(-1.0, 30.0), _t(_EDGES)])),
    "scaled_modified_bessel_k0": (torch.special.scaled_modified_bessel_k0, torch.cat([_grid(-1.0, 30.0), _t(_EDGES)])),
    "scaled_modified_bessel_k1": (torch.special.scaled_modified_bessel_k1, torch.cat([_grid(-1.0, 30.0), _t(_EDGES)])),
    "spherical_bessel_j0": (torch.special.spherical_bessel_j0, torch.cat([_grid(-20.0, 20.0), _t(_EDGES + [0.4999])])),
}


@pytest.mark.parametrize("case", sorted(UNARY))
def test_unary_float64_follows_torch_kernels(case: str) -> None:
    fn, x = UNARY[case]
    _check(fn, x)


@pytest.mark.parametrize("case", sorted(UNARY))
def test_unary_float32_within_float32_rounding(case: str) -> None:
    fn, x = UNARY[case]
    x = x[torch.isfinite(x) & (x.abs() < 1e30)].float()  # float32's own range
    _check(fn, x)


@pytest.mark.parametrize("case", ["lgamma", "digamma", "i0", "special.i1e", "bessel_y0", "erfc"])
def test_integer_input_gives_float32(case: str) -> None:
    fn, _ = UNARY[case]
    got = _check(fn, torch.arange(-3, 9, dtype=torch.int64))
    assert got.dtype == np.float32


@pytest.mark.parametrize("case", ["lgamma", "special.i0e", "erfinv", "airy_ai"])
def test_zero_d_and_empty(case: str) -> None:
    fn, _ = UNARY[case]
    assert _check(fn, _t(0.25, torch.float32)).shape == ()
    assert _check(fn, torch.zeros(2, 0, 3)).shape == (2, 0, 3)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma(n: int) -> None:
    x = torch.cat([_grid(-4.75, 20.0), _t([0.0, -2.0, 1e-3, 1e3, _NAN])])
    _check(lambda v: torch.polygamma(n, v), x)
    # float32 without the negative poles, where trigamma's pi^2 / sin(pi x)^2 is 1 / (sin's rounding error)^2
    pole = (x < 0) & (x == x.round())
    _check(lambda v: torch.special.polygamma(n, v), x[~pole & (x.abs() < 1e2)].float())


# ----------------------------------------------------------------------------- binary functions
def test_zeta_including_poles_domain_and_scalars() -> None:
    x = _t([2.0, 3.0, 1.0, 0.5, 4.0, 2.5, 3.0, 2.0, 6.0, _INF, _NAN, 1.5])
    q = _t([1.0, 0.5, 2.0, 2.0, -2.0, -2.5, -2.5, 1e-3, 30.0, 2.0, 1.0, 1e6])
    _check(torch.special.zeta, x, q)
    # float32; the scalar overloads; broadcasting (5, 1) with (4,)
    _check(lambda u, v, w, z: (torch.special.zeta(u, v), torch.special.zeta(w, 2.0), torch.special.zeta(3.0, w),
                               torch.special.zeta(w.reshape(-1, 1)[:5], z)),
           x.float(), q.float(), _grid(1.1, 9.0).float(), _grid(-3.7, 8.0, 4).float())


@pytest.mark.parametrize("upper", [False, True])
def test_incomplete_gamma_regimes_and_boundary(upper: bool) -> None:
    fn = torch.igammac if upper else torch.igamma
    # small x (series / the upper series), x > a (continued fraction), a ~ x for large a (Temme's regime in SciPy)
    # (and beyond a = 1e6, Temme's expansion here too)
    a = _t([0.5, 2.0, 0.1, 3.0, 1.05, 25.0, 150.0, 1000.0, 5e4, 30.0, 1.0, 7.5, 1e8, 1e9])
    x = _t([0.3, 0.05, 0.9, 12.0, 1.06, 26.0, 140.0, 1010.0, 5.01e4, 2.0, 1e-10, 60.0, 1e8 + 5e3, 1e9 - 3e4])
    _check(fn, a, x, rtol=1e-8)  # PyTorch uses Temme's expansion where this uses the series or fraction
    edges_a = _t([-1.0, 1.0, 0.0, 0.0, 2.0, _INF, _INF, 2.0, _NAN, 0.0])
    edges_x = _t([1.0, -1.0, 1.0, 0.0, 0.0, 1.0, _INF, _INF, 0.0, _NAN])
    _check(fn, edges_a, edges_x)
    grid_a, grid_x = torch.meshgrid(_grid(0.05, 12.0, 9), _grid(0.01, 15.0, 9), indexing="ij")
    _check(fn, grid_a.float(), grid_x.float())


_POLY: dict[str, Callable[..., Any]] = {
    name: getattr(torch.special, name)
    for name in ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
                 "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
                 "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
                 "legendre_polynomial_p")
}


@pytest.mark.parametrize("name", sorted(_POLY))
def test_orthogonal_polynomial_cases(name: str) -> None:
    """Every branch PyTorch takes: n < 0, the interval's ends (|x| = 1; x = 0 and 1 shifted),
    the trigonometric form for high degrees inside it, the recurrence outside it; a
    fractional n truncates toward zero, NaN n gives 0."""
    fn = _POLY[name]
    x = torch.cat([_grid(-1.5, 1.5, 13), _t([1.0, -1.0, 0.0, 0.5, 0.3, -0.7, 2.0, 0.9])]).reshape(-1, 1)
    n = _t([-2.0, -0.5, 0.0, 1.0, 2.0, 3.7, 5.0, 8.0, 9.0, 12.0, 20.0, _NAN])
    _check(fn, x, n)  # broadcasting (21, 1) with (12,)
    # float32; n a Python scalar (the n_scalar overload), x one (x_scalar); 0-d x with an integer n
    _check(lambda v, m, v0, m0: (fn(v, m), fn(v, 4), fn(0.25, m), fn(v0, m0)),
           x.float(), n.float(), _t(0.5, torch.float32), torch.tensor(3, dtype=torch.int64))


def test_hermite_degree_limit_depends_on_dtype() -> None:
    """PyTorch returns NaN for H_n and He_n beyond degree 128 in float32 and 512 in float64 (in
    float32 the values near the limit overflow anyway, and in float64 from degree ~170: degrees 20
    and 100 are checked below it; the overflowing ones only match PyTorch's NaN)."""
    h, he = torch.special.hermite_polynomial_h, torch.special.hermite_polynomial_he
    x32, n32 = _t([0.3, 0.03, 0.5, 0.001]).float(), _t([20.0, 129.0, 300.0, 513.0]).float()
    got32 = _check(lambda x, n: (h(x, n), he(x, n)), x32, n32)
    assert np.isnan(got32[1:]).all() and not np.isnan(got32[0])
    got64 = _check(lambda x, n: (h(x, n), he(x, n)), _t([0.01, 0.03, 0.001, 0.5]), _t([100.0, 300.0, 512.0, 513.0]), rtol=1e-6)
    assert np.isnan(got64[3]) and not np.isnan(got64[0])


# ----------------------------------------------------------------------------- opset rules
def test_opset_rules_name_what_they_accept() -> None:
    assert opset.infer("lgamma", {}, [(2, 3)], ["int64"], {}) == ((2, 3), "float32")
    assert opset.infer("zeta", {}, [(2, 1), (3,)], ["float32", "float64"], {}) == ((2, 3), "float64")
    with pytest.raises(ValueError, match="kind must be one of i0, i0e"):
        opset.infer("bessel", {"kind": "j2"}, [(3,)], ["float32"], {})
    with pytest.raises(ValueError, match="family must be one of chebyshev_t"):
        opset.infer("orthogonal_polynomial", {"family": "jacobi"}, [(3,), (3,)], ["float32", "float32"], {})
    with pytest.raises(ValueError, match="polygamma's n must be an integer >= 0"):
        opset.infer("polygamma", {"n": -1}, [(3,)], ["float32"], {})


def test_references_keep_half_precision_dtypes() -> None:
    x = np.array([0.5, 1.5, 3.0], np.float16)
    out = opset.evaluate("bessel", {"kind": "k1e"}, [x], {})
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), torch.special.scaled_modified_bessel_k1(torch.tensor(x).double()).numpy(),
                               rtol=1e-3)


def test_float64_erf_is_exact_to_a_float64_ulp() -> None:
    """The opset's erf on float64 (what ndtr and gelu decompose into) agrees with PyTorch's
    float64 erf to rounding, not only to the float32 fit's 1.2e-7."""
    x = torch.linspace(-6.0, 6.0, 1201, dtype=torch.float64)
    _check(torch.special.ndtr, x, rtol=1e-13, atol=1e-15)
    _check(torch.erf, x, rtol=1e-13, atol=1e-15)
