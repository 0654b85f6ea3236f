"""Gradients of indexing forms the array API leaves out (a slice mixed with an index array) and of
a non-differentiable key, on the CPU against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import neurenix_core as nx


def test_index_array_after_slices_adds_repeated_indices() -> None:
    x = np.random.default_rng(0).standard_normal((3, 4, 2))
    idx = np.array([3, 0, 3, 3])
    xt = torch.from_numpy(x.copy()).requires_grad_()
    (xt[:, torch.from_numpy(idx)] * 2.0).sum().backward()
    xn = nx.asarray(x).requires_grad_()
    nx.sum(xn[:, nx.asarray(idx)] * 2.0).backward()
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy())


def test_two_index_arrays_are_not_differentiable() -> None:
    xn = nx.asarray(np.ones((3, 3))).requires_grad_()
    y = xn[nx.asarray(np.array([0, 1])), nx.asarray(np.array([1, 2]))]
    with pytest.raises(nx.NotDifferentiableError, match="nx.take"):
        nx.sum(y).backward()
