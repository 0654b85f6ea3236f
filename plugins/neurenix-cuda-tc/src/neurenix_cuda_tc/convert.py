"""Models in: ``neurenix_core.nn`` models, core Graphs and ``torch.nn.Module`` -> a torch module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.errors import UnsupportedOperationError

if TYPE_CHECKING:
    import torch

__all__ = ["to_torch_module"]


def to_torch_module(model: Any) -> torch.nn.Module:
    """The PyTorch module for ``model``: itself when it already is one, else its lowered graph.

    Raises UnsupportedOperationError for anything else (the remedy names what is accepted);
    a neurenix model whose forward cannot be traced raises the core's CompilationError.
    """
    import torch

    from neurenix_core.contract import Graph
    from neurenix_cuda_tc.lowering import lower_graph

    if isinstance(model, torch.nn.Module):
        return model
    if isinstance(model, Graph):
        return lower_graph(model)
    from neurenix_core.contract import Module

    if isinstance(model, Module):
        return lower_graph(model.to_graph())
    raise UnsupportedOperationError(
        f"plugin cuda cannot lower a {type(model).__module__}.{type(model).__qualname__}: pass a neurenix_core.nn model, "
        "a neurenix_core.graph.ir.Graph or a torch.nn.Module"
    )

