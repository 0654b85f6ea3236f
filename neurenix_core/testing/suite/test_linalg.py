"""matmul, tensordot, vecdot, matrix_transpose; the ``linalg`` extension where the backend has it."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device, require_dtype, rounded

SHAPES = [((4, 3), (3, 5)), ((2, 4, 3), (3, 2)), ((2, 1, 4, 3), (3, 3, 2)), ((3,), (3, 4)), ((4, 3), (3,)), ((16, 16), (16, 16))]


def _rand(shape: tuple[int, ...], seed: int, dtype: str) -> np.ndarray:
    return rounded(np.random.default_rng(seed).uniform(-1, 1, shape), dtype)


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_matmul(nx_device: nx.Device, sa: tuple[int, ...], sb: tuple[int, ...], dtype: str) -> None:
    require_dtype(nx_device, dtype)
    a, b = _rand(sa, 1, dtype), _rand(sb, 2, dtype)
    out = nx.matmul(on_device(a, dtype, nx_device), on_device(b, dtype, nx_device))
    # Sums of k products: absolute error grows with k.
    assert_close(out, np.matmul(a, b), nx_device, dtype, scale=sa[-1])
    assert_close(on_device(a, dtype, nx_device) @ on_device(b, dtype, nx_device), np.matmul(a, b), nx_device, dtype, scale=sa[-1])


def test_matmul_integers(nx_device: nx.Device) -> None:
    require_dtype(nx_device, "int32")
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert_close(on_device(a, "int32", nx_device) @ on_device(b, "int32", nx_device), a @ b, nx_device, "int32")


def test_tensordot_vecdot_transpose(nx_device: nx.Device) -> None:
    a, b = _rand((2, 3, 4), 3, "float32"), _rand((3, 4, 5), 4, "float32")
    x, y = on_device(a, "float32", nx_device), on_device(b, "float32", nx_device)
    assert_close(nx.tensordot(x, y, axes=2), np.tensordot(a, b, axes=2), nx_device, "float32", scale=12)
    assert_close(nx.tensordot(x, y, axes=([1], [0])), np.tensordot(a, b, axes=([1], [0])), nx_device, "float32", scale=3)
    v, w = _rand((4, 6), 5, "float32"), _rand((4, 6), 6, "float32")
    assert_close(nx.vecdot(on_device(v, "float32", nx_device), on_device(w, "float32", nx_device)), np.sum(v * w, axis=-1), nx_device, "float32", scale=6)
    assert_close(nx.matrix_transpose(x), np.swapaxes(a, -1, -2), nx_device, "float32")
    assert_close(x.mT, np.swapaxes(a, -1, -2), nx_device, "float32")


def _require_linalg(device: nx.Device) -> None:
    if not any(op.startswith("linalg.") for op in nx.backend(device).ops):
        pytest.skip(f"{device}: backend {nx.backend(device).name} has no linalg extension (no linalg.* ops in its op table)")


def _spd(n: int, seed: int) -> np.ndarray:
    m = np.random.default_rng(seed).uniform(-1, 1, (n, n))
    return rounded(m @ m.T + n * np.eye(n), "float32")


def test_linalg_solve_inv_det(nx_device: nx.Device) -> None:
    _require_linalg(nx_device)
    a = _spd(4, 7)
    b = rounded(np.random.default_rng(8).uniform(-1, 1, (4, 2)), "float32")
    x = on_device(a, "float32", nx_device)
    # Results of inversion carry the condition number: 1e-4 relative in float32 here.
    assert_close(nx.linalg.inv(x), np.linalg.inv(a), nx_device, "float32", scale=100)
    assert_close(nx.linalg.det(x), np.linalg.det(a), nx_device, "float32", scale=float(abs(np.linalg.det(a))))
    assert_close(nx.linalg.solve(x, on_device(b, "float32", nx_device)), np.linalg.solve(a, b), nx_device, "float32", scale=100)
    assert_close(nx.linalg.cholesky(x), np.linalg.cholesky(a), nx_device, "float32", scale=10)


def test_linalg_norms_and_reductions(nx_device: nx.Device) -> None:
    _require_linalg(nx_device)
    a = rounded(np.random.default_rng(9).uniform(-1, 1, (3, 4)), "float32")
    x = on_device(a, "float32", nx_device)
    assert_close(nx.linalg.vector_norm(x), np.linalg.norm(a.ravel()), nx_device, "float32", scale=4)
    assert_close(nx.linalg.vector_norm(x, axis=1, ord=1), np.sum(np.abs(a), axis=1), nx_device, "float32", scale=4)
    assert_close(nx.linalg.matrix_norm(x), np.linalg.norm(a, "fro"), nx_device, "float32", scale=4)
    assert_close(nx.linalg.svdvals(x), np.linalg.svd(a, compute_uv=False), nx_device, "float32", scale=10)
    sq = on_device(a[:3, :3], "float32", nx_device)
    assert_close(nx.linalg.trace(sq), np.trace(a[:3, :3]), nx_device, "float32", scale=3)
    assert_close(nx.linalg.diagonal(sq), np.diagonal(a[:3, :3]), nx_device, "float32")
    u, w = on_device(a[0], "float32", nx_device), on_device(a[1], "float32", nx_device)
    assert_close(nx.linalg.outer(u, w), np.outer(a[0], a[1]), nx_device, "float32")


def test_linalg_decompositions_reconstruct(nx_device: nx.Device) -> None:
    _require_linalg(nx_device)
    a = rounded(np.random.default_rng(10).uniform(-1, 1, (5, 3)), "float32")
    q, r = nx.linalg.qr(on_device(a, "float32", nx_device))
    assert_close(q @ r, a, nx_device, "float32", scale=10)
    s = _spd(3, 11)
    w, v = nx.linalg.eigh(on_device(s, "float32", nx_device))
    assert_close(w, np.linalg.eigvalsh(s), nx_device, "float32", scale=100)
    recon = (v * w[None, :]) @ v.mT
    assert_close(recon, s, nx_device, "float32", scale=100)
