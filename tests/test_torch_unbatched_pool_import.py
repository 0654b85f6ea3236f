"""from_torch of convolutions on unbatched inputs (C, *S), which torch takes beside (N, C, *S),
and of adaptive max pooling's indices (issue #41, from PyTorch's OpInfo samples): against eager."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx

F = torch.nn.functional
_G = torch.Generator().manual_seed(0)
W1, W2, WT3 = torch.randn(4, 3, 3, generator=_G), torch.randn(4, 3, 3, 3, generator=_G), torch.randn(3, 2, 2, 2, 2, generator=_G)


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], object]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> object:
        return self.fn(x)


def _run(fn: Callable[[torch.Tensor], object], shape: tuple[int, ...]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    model = _Fn(fn)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    out = nx.compile(nx.nn.from_torch(model, (x,), static=True), device="cpu", runtime="numpy")(x.numpy())
    got = [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    want = model(x)
    return got, [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]


CONVS = {
    "conv1d": (lambda x: F.conv1d(x, W1), (3, 10)),
    "conv2d": (lambda x: F.conv2d(x, W2, padding=1), (3, 8, 9)),
    "conv_transpose1d": (lambda x: F.conv_transpose1d(x, W1), (4, 10)),
    "conv_transpose3d": (lambda x: F.conv_transpose3d(x, WT3, stride=2), (3, 4, 5, 6)),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_unbatched_convolution_matches_eager(name: str) -> None:
    fn, shape = CONVS[name]
    (got,), (want,) = _run(fn, shape)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("shape", "size"), [((2, 3, 8, 9), (2, 3)), ((3, 8, 9), (4, 3)), ((2, 3, 12), (4,)), ((1, 2, 4, 6, 8), (2, 3, 2))])
def test_adaptive_max_pool_indices_match_eager_where_the_sizes_divide(shape: tuple[int, ...], size: tuple[int, ...]) -> None:
    pool = getattr(F, f"adaptive_max_pool{len(size)}d")
    got, want = _run(lambda x: pool(x, size, return_indices=True), shape)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])


def test_adaptive_max_pool_indices_of_uneven_windows_match_eager() -> None:
    got, want = _run(lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True), (2, 3, 7, 9))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
