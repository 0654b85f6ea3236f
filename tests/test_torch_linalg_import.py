"""from_torch of ``torch.linalg`` (issue #41): SVD, eigh, pinv, QR and the Householder ops, LU,
determinants, inverses and solves, Cholesky, LDL, the matrix exponential and the error checks
torch.export keeps behind an effect token. Each op is imported as a one-op module, run on cpu:0
and compared with eager PyTorch (float32 results: rtol 1e-4, atol 1e-5 unless a test says why
it needs more), on batched, empty and singular inputs where the op takes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_eager import OpModule, assert_outputs_match, run_both

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError

_run = run_both


def _check(fn: Callable[..., Any], *inputs: Any, rtol: float = 1e-4, atol: float = 1e-5) -> list[np.ndarray]:
    got, want = run_both(fn, *inputs)
    assert_outputs_match(got, want, rtol=rtol, atol=atol)
    return got


def _randn(*shape: int, seed: int = 0) -> Any:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _spd(*shape: int, seed: int = 0) -> Any:
    """Symmetric positive definite matrices (well conditioned)."""
    x = _randn(*shape, seed=seed)
    return x @ x.mT + shape[-1] * torch.eye(shape[-1])


# ----------------------------------------------------------------------------- SVD, eigh, pinv
@pytest.mark.parametrize("shape", [(5, 3), (3, 3), (3, 4), (2, 5, 3)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_matches_lapack(shape: tuple[int, ...], full: bool) -> None:
    # Shapes where torch's LAPACK (MKL) and NumPy's (reference LAPACK, through OpenBLAS) pick the
    # same signs for these inputs: gesdd's QR path (rows >= 11/6 columns), square, and wide below
    # its LQ path. Elsewhere ((4, 3), (3, 5)) the two libraries often flip a singular pair.
    _check(lambda x: torch.linalg.svd(x, full_matrices=full), _randn(*shape))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 3, 3), (0, 3, 3), (0, 0), (3, 0)])
def test_svdvals_and_norms_of_singular_values(shape: tuple[int, ...]) -> None:
    x = _randn(*shape)
    _check(torch.linalg.svdvals, x)
    if x.numel() and len(shape) == 2:
        _check(lambda v: (torch.linalg.matrix_norm(v, "nuc"), torch.linalg.cond(v), torch.linalg.matrix_rank(v)), x)


@pytest.mark.parametrize("shape", [(3, 7), (4, 3)])
def test_svd_where_the_signs_differ_is_a_decomposition(shape: tuple[int, ...]) -> None:
    """Where the vectors' signs may differ from torch's (see above), S matches and U S Vh is A."""
    x = _randn(*shape)
    got, want = _run(lambda v: torch.linalg.svd(v, full_matrices=False), x)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose((got[0] * got[1][None, :]) @ got[2], x.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_eigenvalues_and_a_2x2_basis(uplo: str) -> None:
    x = _randn(2, 2)
    _check(lambda v: torch.linalg.eigh(v, UPLO=uplo), x + x.mT)
    _check(lambda v: torch.linalg.eigvalsh(v, UPLO=uplo), _randn(3, 4, 4, seed=1))


def test_eigh_vectors_diagonalize_the_triangle_read() -> None:
    """Eigenvector signs are LAPACK's own (MKL and reference LAPACK differ from 3x3 up): the test
    checks V diag(w) V^T against the symmetric matrix given by the lower triangle."""
    x = _randn(2, 5, 5)
    got, want = _run(torch.linalg.eigh, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    lower = np.tril(x.numpy())
    sym = lower + np.swapaxes(np.tril(lower, -1), -1, -2)
    np.testing.assert_allclose((got[1] * got[0][..., None, :]) @ np.swapaxes(got[1], -1, -2), sym, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(4, 3), (3, 4), (0, 0), (2, 0, 3)])
def test_pinv(shape: tuple[int, ...]) -> None:
    _check(torch.linalg.pinv, _randn(*shape))


def test_pinv_tolerances_rcond_and_hermitian() -> None:
    x = _randn(2, 4, 4)
    _check(lambda v, r: (torch.linalg.pinv(v, atol=0.5), torch.linalg.pinv(v, atol=0.1, rtol=0.3), torch.linalg.pinv(v, rtol=r),
                         torch.pinverse(v, rcond=0.25), torch.linalg.pinv(v + v.mT, hermitian=True)), x, torch.tensor([0.2, 0.9]))
    _check(torch.linalg.pinv, _randn(4, 2) @ _randn(2, 4, seed=1))  # rank 2: two singular values below the tolerance


# ----------------------------------------------------------------------------- QR and Householder
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4), (5, 0)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(shape: tuple[int, ...], mode: str) -> None:
    _check(lambda x: torch.linalg.qr(x, mode=mode), _randn(*shape))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_geqrf_householder_product_and_ormqr(shape: tuple[int, ...]) -> None:
    x = _randn(*shape)
    _check(torch.geqrf, x)
    a, tau = torch.geqrf(x)
    if shape[-2] >= shape[-1]:
        _check(torch.linalg.householder_product, a, tau)
    _check(lambda a_, t_, c_: [torch.ormqr(a_, t_, c_, left=True, transpose=tr) for tr in (False, True)]
           + [torch.ormqr(a_, t_, c_.mT, left=False, transpose=tr) for tr in (False, True)],
           a, tau, _randn(*shape[:-2], shape[-2], 2, seed=1))


# ----------------------------------------------------------------------------- LU, det, inverse, solves
@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 4, 4), (0, 3, 3), (0, 0)])
def test_lu_factor_and_lu(shape: tuple[int, ...]) -> None:
    _check(lambda x: (*torch.linalg.lu_factor_ex(x), *torch.linalg.lu_factor(x), *torch.linalg.lu(x)), _randn(*shape))


def test_lu_factor_of_a_singular_matrix_reports_info() -> None:
    x = torch.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]]])
    got = _check(torch.linalg.lu_factor_ex, x)
    assert got[2].tolist() == [3, 0]


def test_lu_without_pivoting_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedOperationError, match="pivot=False"):
        nx.nn.from_torch(OpModule(lambda x: torch.linalg.lu_factor_ex(x, pivot=False)), (_randn(3, 3),), static=True)


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (0, 0), (1, 1)])
def test_det_slogdet_logdet(shape: tuple[int, ...]) -> None:
    x = _randn(*shape)
    _check(lambda v: (torch.linalg.det(v), *torch.linalg.slogdet(v), torch.logdet(v)), x)


def test_determinants_of_singular_and_negative_matrices() -> None:
    x = torch.tensor([[[1.0, 2.0], [2.0, 4.0]], [[0.0, 1.0], [1.0, 0.0]], [[-1.0, 0.0], [0.0, 2.0]]])
    _check(lambda v: (torch.linalg.det(v), *torch.linalg.slogdet(v), torch.logdet(v)), x)


@pytest.mark.parametrize("shape", [(4, 4), (0, 5, 5), (0, 0)])
def test_inverse_and_its_error_check(shape: tuple[int, ...]) -> None:
    _check(lambda x: (torch.linalg.inv(x), *torch.linalg.inv_ex(x), torch.inverse(x)), _randn(*shape) + 3 * torch.eye(shape[-1]))


def test_inv_ex_of_a_singular_matrix_reports_info_and_the_checked_inv_does_not_raise() -> None:
    singular = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    got, want = _run(torch.linalg.inv_ex, singular)
    assert got[1].dtype == np.int32 and int(got[1]) == int(want[1]) == 2
    model = nx.nn.from_torch(OpModule(torch.linalg.inv), (singular,), static=True)
    assert not np.all(np.isfinite(np.asarray(model(singular.numpy()))))  # not checked: inf / NaN instead of torch's error


@pytest.mark.parametrize("b_shape", [(4,), (4, 1), (4, 3), (2, 4), (3, 1, 4, 2)])
def test_solve(b_shape: tuple[int, ...]) -> None:
    a = _randn(2, 4, 4) + 3 * torch.eye(4)
    _check(lambda x, y: (torch.linalg.solve(x, y), *torch.linalg.solve_ex(x, y)), a, _randn(*b_shape, seed=1))


def test_solve_on_the_right_tensorsolve_and_tensorinv() -> None:
    a = _randn(4, 4) + 3 * torch.eye(4)
    _check(lambda x, y: torch.linalg.solve(x, y, left=False), a, _randn(3, 4, seed=1))
    _check(torch.linalg.tensorsolve, _randn(2, 3, 6) + torch.eye(6).reshape(2, 3, 6), _randn(2, 3, seed=1))
    _check(lambda x: torch.linalg.tensorinv(x, ind=2), _randn(4, 3, 12) + torch.eye(12).reshape(4, 3, 12))


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [True, False])
def test_solve_triangular(upper: bool, left: bool, unit: bool) -> None:
    a = _randn(2, 3, 3) + 3 * torch.eye(3)
    b = _randn(2, 3, 2, seed=1) if left else _randn(1, 2, 3, seed=1)
    _check(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit), a, b)


@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(transpose: bool) -> None:
    a = _randn(3, 3) + 3 * torch.eye(3)
    _check(lambda y, x: torch.triangular_solve(y, x, upper=False, transpose=transpose), _randn(2, 3, 2, seed=1), a)
    _check(lambda y, x: torch.triangular_solve(y, x, transpose=transpose, unitriangular=True), _randn(0, 3, 1, seed=1), a)


# ----------------------------------------------------------------------------- Cholesky, LDL
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_family(upper: bool) -> None:
    a = _spd(2, 4, 4)
    _check(lambda x: (torch.linalg.cholesky(x, upper=upper), *torch.linalg.cholesky_ex(x, upper=upper), torch.cholesky(x, upper=upper)), a)
    factor = torch.linalg.cholesky(a, upper=upper)
    _check(lambda f, b: (torch.cholesky_inverse(f[0], upper=upper), torch.cholesky_solve(b, f, upper=upper)), factor, _randn(4, 3, seed=1))


def test_cholesky_ex_of_a_matrix_that_is_not_positive_definite() -> None:
    a = torch.tensor([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]).expand(2, 3, 3).clone()
    a[0] = _spd(3, 3)
    got, want = _run(torch.linalg.cholesky_ex, a)
    assert got[1].tolist() == want[1].tolist() == [0, 2]
    np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("matrix", [
    [[4.0, 1.0, 2.0], [1.0, 3.0, 0.0], [2.0, 0.0, 5.0]],  # 1x1 pivots, no interchange
    [[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]],  # a 2x2 block and an interchange
    [[0.1, 5.0, 0.0, 1.0], [5.0, 0.2, 1.0, 0.0], [0.0, 1.0, 7.0, 2.0], [1.0, 0.0, 2.0, 0.3]],
    [[1.0, 2.0], [2.0, 4.0]],  # singular: info 2
])
def test_ldl_factor(matrix: list[list[float]]) -> None:
    a = torch.tensor(matrix)
    _check(torch.linalg.ldl_factor_ex, a)
    if np.linalg.matrix_rank(a.numpy()) == len(matrix):
        _check(torch.linalg.ldl_factor, a)


def test_ldl_factor_batched_random() -> None:
    x = _randn(3, 5, 5)
    _check(torch.linalg.ldl_factor_ex, x + x.mT)


# ----------------------------------------------------------------------------- matrix functions
@pytest.mark.parametrize("scale", [0.1, 1.0, 3.0])
def test_matrix_exp(scale: float) -> None:
    # relative to the result's largest entry: float32 rounding of exp's large entries (scale 3: ~1e3)
    x = _randn(2, 4, 4) * scale
    got, want = _run(torch.linalg.matrix_exp, x)
    exact = torch.linalg.matrix_exp(x.double()).numpy()
    np.testing.assert_allclose(got[0], exact, rtol=1e-5, atol=1e-6 * np.abs(exact).max())
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5 * np.abs(exact).max())


def test_matrix_power() -> None:
    _check(lambda x: [torch.linalg.matrix_power(x, p) for p in (0, 1, 3, -2)], _randn(2, 3, 3) + 2 * torch.eye(3), rtol=1e-4, atol=1e-4)


def test_matrix_exp_of_an_empty_matrix() -> None:
    _check(torch.linalg.matrix_exp, torch.zeros(0, 0))


def test_copy_broadcasts_and_casts_src() -> None:
    _check(lambda x, y: torch.ops.aten.copy(x, y), _randn(2, 3), torch.arange(3))
