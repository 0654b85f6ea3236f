"""Portable models: layers, Module/Sequential, functional forms, PyTorch import, safe weights.

NCHW by default; memory format is a backend concern. Trainable (parameters require grad,
``train()``/``eval()``, losses; optimizers in neurenix_core.optim). Every layer runs through
the ``nn.*`` extension ops of its tensors' backend; ``nx.compile`` lowers a whole model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.kwargs import strict_kwargs
from neurenix_core.nn import functional, init
from neurenix_core.nn.layers import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Flatten,
    Identity,
    LayerNorm,
    Linear,
    MaxPool2d,
    MultiheadAttention,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
)
from neurenix_core.nn.losses import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from neurenix_core.nn.module import Module, ModuleList, Sequential
from neurenix_core.nn.serialization import load_state, save_state

__all__ = [
    "GELU",
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BCEWithLogitsLoss",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Flatten",
    "GraphModule",
    "Identity",
    "LayerNorm",
    "Linear",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "ModuleList",
    "MultiheadAttention",
    "NLLLoss",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "export_onnx",
    "from_onnx",
    "from_torch",
    "functional",
    "init",
    "load",
    "load_state",
    "manual_seed",
    "save",
    "save_state",
]

manual_seed = init.manual_seed

if TYPE_CHECKING:
    from neurenix_core.graph.models.graph_module import GraphModule


def __getattr__(name: str) -> Any:
    # GraphModule sits above nn (calling one compiles it: docs/architecture.md). Loaded on first
    # access: at module level it would run whenever any nn submodule is imported, graph_module's
    # own import of nn.module included (a circular import).
    if name == "GraphModule":
        from neurenix_core.graph.models.graph_module import GraphModule

        return GraphModule
    raise AttributeError(f"module 'neurenix_core.nn' has no attribute {name!r}")


@strict_kwargs("nx.nn.from_torch")
def from_torch(module: Any, example_inputs: Any = None, *, dynamic_shapes: Any = None, static: bool = False) -> Module:
    """A neurenix model equal to the PyTorch ``module`` (weights copied as NumPy float32).

    With ``example_inputs`` (a tensor, a tuple of positional inputs, or a dict of keyword inputs)
    any ``forward`` is captured through ``torch.export`` into a :class:`GraphModule`. Axis 0 of
    every input (and axis 1 of rank-2 integer inputs: token ids) is dynamic: the model runs at
    any batch size and sequence length, not only the example's. ``dynamic_shapes`` (as
    ``torch.export.export`` takes it) chooses the dynamic axes; ``static=True`` keeps the
    example's shapes. Without examples, an ``nn.Sequential`` of known layers is rebuilt from
    neurenix layers (shape-generic). PyTorch is imported only here.
    """
    if example_inputs is None:
        if dynamic_shapes is not None or static:
            raise TypeError("from_torch: dynamic_shapes= and static= apply to example_inputs; pass example inputs")
        from neurenix_core.nn.torch_import import from_torch as convert

        return convert(module)
    from neurenix_core.graph.models.importing import from_torch_export

    return from_torch_export(module, example_inputs, dynamic_shapes=dynamic_shapes, static=static)


@strict_kwargs("nx.nn.from_onnx")
def from_onnx(model: Any, *, input_shapes: Any = None, static: bool = False, qdq: str = "plan") -> Module:
    """A neurenix model from an ONNX file path, bytes or ``onnx.ModelProto`` (opset 13+);
    the ``onnx`` package is imported only here. Input dimensions with a ``dim_param`` (dynamic
    axes of the export) stay dynamic; ``input_shapes`` (one per input) gives the sizes to build
    with, and ``static=True`` fixes them there. A pre-quantized (QDQ) file becomes a float graph
    with the file's int8 plan (``model.quantization_plan``, which ``nx.compile`` lowers);
    ``qdq="ops"`` imports its Q/DQ nodes as float ops instead (docs/quantization.md)."""
    from neurenix_core.graph.models.importing import from_onnx as convert

    return convert(model, input_shapes=input_shapes, static=static, qdq=qdq)


@strict_kwargs("nx.nn.export_onnx")
def export_onnx(model: Module, path: Any, *shapes: tuple[int, ...], opset_version: int = 21) -> Any:
    """``model`` as a standard ONNX file at ``path`` (static input shapes: ``shapes``, one per
    input, which a GraphModule may omit to use its import's example shapes); returns the path.
    The same as ``GraphModule.to_onnx``; ``onnx`` is imported only here."""
    from neurenix_core.graph.models.graph_module import GraphModule

    if isinstance(model, GraphModule):
        return model.to_onnx(path, *shapes, opset_version=opset_version)
    from neurenix_core.errors import UnsupportedOperationError

    if not isinstance(model, Module) or not shapes:
        raise UnsupportedOperationError(f"nx.nn.export_onnx takes a GraphModule, or a neurenix Module with its input shapes "
                                        f"(export_onnx(model, path, (1, 3, 32, 32))); got {type(model).__name__}"
                                        f"{'' if shapes else ' without shapes'}")
    from neurenix_core.graph.exporters.onnx_export import write_onnx

    return write_onnx(model, path, *shapes, opset_version=opset_version)


@strict_kwargs("nx.nn.save")
def save(model_or_state: Module | dict[str, Any], path: Any, *, quantization_plan: Any = None) -> None:
    """Save a model to ``path``, atomically.

    ``.npz`` / ``.safetensors``: the weights (a Module's ``state_dict``, or a state dict).
    ``.nxm``: a self-contained model file of a GraphModule
    (graph, weights, input specs, ``quantization_plan`` or the model's own; docs/model-files.md)
    that :func:`load` reads back without the framework it was imported from."""
    from neurenix_core.graph.models.model_file import is_model_file, save_model

    if is_model_file(path):
        save_model(model_or_state, path, quantization_plan=quantization_plan)
        return
    if quantization_plan is not None:
        raise TypeError("nx.nn.save: quantization_plan= is saved in a model file (a GraphModule to a '.nxm' path), not in weights")
    state = model_or_state.state_dict() if isinstance(model_or_state, Module) else model_or_state
    save_state(state, path)


@strict_kwargs("nx.nn.load")
def load(path: Any) -> Any:
    """A model file (``.nxm``) as a GraphModule on cpu:0; a weights file as a state dict (name -> NumPy array). Never unpickles."""
    from neurenix_core.graph.models.model_file import is_model_file, load_model

    return load_model(path) if is_model_file(path) else load_state(path)
