"""``from_torch`` with example inputs and ``from_onnx``: framework graphs in, GraphModules out."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph
from neurenix_core.graph.models.graph_module import GraphModule

__all__ = ["from_onnx", "from_torch_export"]


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


@contextmanager
def _without_cache(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[None]:
    """A ``transformers`` model whose config says ``use_cache`` (causal LMs) returns a
    DynamicCache next to the logits, which torch.export cannot return: unless the example passes
    ``use_cache`` itself, it is exported with ``config.use_cache = False`` (the logits only),
    and the config is restored afterwards."""
    import inspect

    config = getattr(module, "config", None)
    params: Mapping[str, Any]
    try:
        params = inspect.signature(module.forward).parameters
        given = "use_cache" in inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):  # a forward without a signature, or an example it does not bind
        params, given = {}, True
    if "use_cache" not in params or given or not getattr(config, "use_cache", False):
        yield
        return
    assert config is not None  # getattr(config, "use_cache", False) was true
    config.use_cache = False
    try:
        yield
    finally:
        config.use_cache = True


def from_torch_export(module: Any, example_inputs: Any, *, dynamic_shapes: Any = None, static: bool = False,
                      share_weights: bool = False) -> GraphModule:
    try:
        import torch
    except ImportError as exc:
        raise UnsupportedOperationError("from_torch needs PyTorch: pip install torch") from exc
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    from neurenix_core.graph.importers.torch_export import import_module
    from neurenix_core.graph.importers.torch_pt2e import import_pt2e, is_pt2e

    args, kwargs = _torch_inputs(torch, example_inputs)
    if is_pt2e(module):
        # A PT2E-quantized model carries its own int8 plan, which nx.compile lowers as it is.
        graph, plan = import_pt2e(module, args, kwargs, dynamic_shapes=dynamic_shapes, static=static)
        return GraphModule(graph, f"from_torch({type(module).__name__}, PT2E)", quantization_plan=plan)
    with _without_cache(module, args, kwargs):
        graph = import_module(module, args, kwargs, dynamic_shapes=dynamic_shapes, static=static, share_weights=share_weights)
    return GraphModule(graph, f"from_torch({type(module).__name__})")


def from_onnx(model: Any, *, input_shapes: Any = None, static: bool = False, qdq: str = "plan") -> GraphModule:
    try:
        import onnx  # noqa: F401
    except ImportError as exc:
        raise UnsupportedOperationError("from_onnx needs the onnx package: pip install onnx") from exc
    from neurenix_core.graph.importers.onnx_import import import_onnx_quantized

    # A pre-quantized (QDQ) file gives its own int8 plan, which nx.compile lowers as it is.
    graph, name, plan = import_onnx_quantized(model, input_shapes=input_shapes, static=static, qdq=qdq)
    if isinstance(graph, Graph):
        return GraphModule(graph, f"from_onnx({name})", quantization_plan=plan)
    return GraphModule(graph.template(), f"from_onnx({name})", values=graph)
