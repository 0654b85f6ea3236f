"""from_torch of ops along a dim of a 0-d tensor (issue #41, from PyTorch's OpInfo samples): torch
takes dim 0 or -1 there and treats the tensor as its one element. These failed at import (an
IndexError out of the importer, or "needs an input of at least one dimension")."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx

OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "t": lambda x: x.t(),
    "transpose": lambda x: x.transpose(0, -1),
    "cumsum": lambda x: torch.cumsum(x, 0),
    "cumprod": lambda x: torch.cumprod(x, -1),
    "flip": lambda x: torch.flip(x, (0,)),
    "squeeze": lambda x: x.squeeze(0),
    "topk": lambda x: torch.topk(x, 1, 0).values,
    "topk_indices": lambda x: torch.topk(x, 1, 0).indices,
    "sum": lambda x: x.sum(0),
    "amax": lambda x: x.amax(-1),
    "argmin": lambda x: torch.argmin(x, 0),
    "logsumexp": lambda x: torch.logsumexp(x, 0),
    "all": lambda x: (x > 0).all(0),
}


class _Op(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_of_a_0d_tensor_matches_eager(name: str) -> None:
    model = _Op(OPS[name])
    x = torch.tensor(0.7)
    graph = nx.nn.from_torch(model, (x,), static=True)
    got = nx.compile(graph, device="cpu", runtime="numpy")(np.asarray(0.7, np.float32)).numpy()
    want = model(x).numpy()
    assert got.shape == want.shape == ()
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6)
