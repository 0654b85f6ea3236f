"""A torch function imported with ``nx.nn.from_torch`` and run on cpu:0 beside eager PyTorch: the
check the per-family import tests (special, linalg, reductions, fft, the small ops) share.

Import it after ``pytest.importorskip("torch")``: it imports torch itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import neurenix_core as nx

__all__ = ["OpModule", "assert_outputs_match", "run_both"]


class OpModule(torch.nn.Module):
    """``fn`` as a module: its tensor arguments are forward's inputs."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: Any) -> Any:
        return self.fn(*xs)


def run_both(fn: Callable[..., Any], *inputs: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(neurenix's outputs on cpu:0, eager PyTorch's) of ``fn`` imported with these inputs (static
    shapes). Eager runs on clones (an in-place op must not change the next call's inputs) and its
    outputs are flattened as torch's pytree does (histogramdd: hist, then each edge tensor), with
    negation and conjugation views resolved."""
    module = OpModule(fn)
    model = nx.nn.from_torch(module, tuple(inputs), static=True)
    got = model(*[t.numpy() for t in inputs])
    got = [np.asarray(o) for o in (got if isinstance(got, (list, tuple)) else [got])]
    with torch.no_grad():
        want = module(*[t.clone() for t in inputs])
    return got, [w.resolve_neg().resolve_conj().numpy() for w in torch.utils._pytree.tree_leaves(want)]


def assert_outputs_match(got: list[np.ndarray], want: list[np.ndarray], *, rtol: float, atol: float,
                         integer_width: bool = False) -> None:
    """Same count, shapes and dtypes; floats within rtol/atol (NaN where eager's NaN is, infinities
    equal), everything else exactly. ``integer_width``: an integer result may differ in width from
    eager's (int32 against int64 indices), not in kind."""
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        loose = integer_width and {g.dtype.kind, w.dtype.kind} <= {"i", "u"}
        assert loose or g.dtype == w.dtype, (g.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
