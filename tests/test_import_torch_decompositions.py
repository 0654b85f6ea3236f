"""ATen ops the importer does not map arrive as PyTorch's own decompositions (issue 41).

``from_torch`` runs ``run_decompositions`` with PyTorch's decomposition table restricted to the
ops the importer has no mapping for: ops it maps whole stay one node, the others become the ops
PyTorch computes them with. Each case is a composite the importer used to refuse ("has no
mapping to the neurenix opset"); it is imported with static shapes, run on cpu:0 and compared
with eager PyTorch (float32: rtol 1e-5, atol 1e-6; integers exactly).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx
from neurenix_core import nn


def _x(*shape: int, seed: int = 0) -> Any:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "logaddexp": (torch.logaddexp, (_x(3, 4), _x(3, 4, seed=1))),
    "deg2rad": (torch.deg2rad, (_x(5),)),
    "diagonal": (lambda x: torch.diagonal(x, offset=1), (_x(4, 5),)),
    "tensordot": (lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1])), (_x(2, 3, 4), _x(3, 4, 5, seed=1))),
    "divide_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), (_x(6), _x(6, seed=1).abs() + 0.5)),
    "meshgrid": (lambda a, b: torch.stack(torch.meshgrid(a, b, indexing="ij")), (_x(3), _x(4, seed=1))),
    "repeat_interleave": (lambda x: x.repeat_interleave(2, dim=1), (_x(2, 3),)),
    "index_put": (lambda x, v: x.index_put((torch.tensor([0, 2]),), v), (_x(4, 3), _x(2, 3, seed=1))),
    "trace": (torch.trace, (_x(4, 4),)),
    "hypot": (torch.hypot, (_x(5), _x(5, seed=1))),
    # a sum of bools counts them in int64 (it stayed bool: cross_entropy's mean divided by 1, not N)
    "bool_sum": (lambda x: (x > 0).sum() + (x > 0).sum(dim=1), (_x(3, 4),)),
    "cross_entropy": (torch.nn.functional.cross_entropy, (_x(4, 3), torch.tensor([2, 0, 1, 2]))),
    "masked_std": (lambda x, m: torch.masked.std(x, dim=None, mask=m), (_x(4, 5), _x(4, 5, seed=1) > 0)),
    "index_copy": (lambda x, i, v: x.index_copy(0, i, v), (_x(5, 2), torch.tensor([3, 0]), _x(2, 2, seed=1))),
    # a 0-d tensor reduced over dim 0 (PyTorch's one element); the opset's axes did not exist
    "reduce_0d": (lambda x: x.sum(0) + x.mean(-1) + x.amax(0) + torch.logsumexp(x, 0) + x.prod(0), (_x(1).reshape(()),)),
    "index_copy_0d": (lambda x, i, v: x.index_copy(0, i, v), (_x(1).reshape(()), torch.tensor([0]), _x(1, seed=1).reshape(()))),
}


class _Call(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_decomposed_composite_runs_like_eager(name: str) -> None:
    fn, args = CASES[name]
    module = _Call(fn).eval()
    want = np.asarray(module(*args).numpy())
    compiled = nx.compile(nn.from_torch(module, args, static=True), device="cpu:0", outputs="host")
    got = np.asarray(compiled(*(a.numpy() for a in args)))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
