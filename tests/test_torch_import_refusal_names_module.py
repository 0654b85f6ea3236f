"""A refused ATen op names where it sits in the user's model: the module path and class of the
node (torch.export's module stack), beside the ATen op and the remedy."""

from __future__ import annotations

import pytest

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError

torch = pytest.importorskip("torch")


class Noisy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.poisson(x)  # random: no seed a compiled graph could hold, so it stays refused


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(torch.nn.ReLU(), Noisy())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x) + 1


def test_a_refusal_names_the_module_path_and_class() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"node 'poisson' \(op poisson\.default, in blocks\.1 \(Noisy\)\) .*; rewrite that part"):
        nx.nn.from_torch(Model(), (torch.rand(3),))


def test_a_node_of_the_top_module_names_no_path() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"node 'poisson' \(op poisson\.default\) "):
        nx.nn.from_torch(Noisy(), (torch.rand(3),))
