"""``from_torch`` with example inputs and ``from_onnx``: framework graphs in, GraphModules out."""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph
from neurenix_core.nn.graph_module import GraphModule

__all__ = ["from_torch_export", "from_onnx"]


def _torch_inputs(torch: Any, example: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    def one(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return torch.from_numpy(x)
        if hasattr(x, "numpy") and not isinstance(x, torch.Tensor):  # a neurenix Tensor
            return torch.from_numpy(np.asarray(x.numpy()))
        return x

    if isinstance(example, dict):
        return (), {k: one(v) for k, v in example.items()}
    if isinstance(example, (tuple, list)):
        return tuple(one(x) for x in example), {}
    return (one(example),), {}


def from_torch_export(module: Any, example_inputs: Any, *, dynamic_shapes: Any = None, static: bool = False) -> GraphModule:
    try:
        import torch
    except ImportError as exc:
        raise UnsupportedOperationError("from_torch needs PyTorch: pip install torch") from exc
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    from neurenix_core.graph.importers.torch_export import import_module

    args, kwargs = _torch_inputs(torch, example_inputs)
    return GraphModule(import_module(module, args, kwargs, dynamic_shapes=dynamic_shapes, static=static), f"from_torch({type(module).__name__})")


def from_onnx(model: Any, *, input_shapes: Any = None, static: bool = False) -> GraphModule:
    try:
        import onnx  # noqa: F401
    except ImportError as exc:
        raise UnsupportedOperationError("from_onnx needs the onnx package: pip install onnx") from exc
    from neurenix_core.graph.importers.onnx_import import import_onnx

    graph, name = import_onnx(model, input_shapes=input_shapes, static=static)
    if isinstance(graph, Graph):
        return GraphModule(graph, f"from_onnx({name})")
    return GraphModule(graph.template(), f"from_onnx({name})", values=graph)
