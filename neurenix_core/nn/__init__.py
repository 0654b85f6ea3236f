"""Portable models: layers, Module/Sequential, functional forms, PyTorch import, safe weights.

NCHW by default; memory format is a backend concern. Trainable (parameters require grad,
``train()``/``eval()``, losses; optimizers in neurenix_core.optim). Every layer runs through
the ``nn.*`` extension ops of its tensors' backend; ``nx.compile`` lowers a whole model.
"""

from __future__ import annotations

from typing import Any

from neurenix_core.nn import functional, init
from neurenix_core.nn.layers import (
    GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d, Dropout, Flatten, Identity, LayerNorm, Linear,
    MaxPool2d, MultiheadAttention, ReLU, Sigmoid, Softmax, Tanh,
)
from neurenix_core.nn.losses import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from neurenix_core.nn.module import Module, ModuleList, Sequential
from neurenix_core.nn.serialization import load_state, save_state

__all__ = [
    "Module", "Sequential", "ModuleList", "Linear", "Conv2d", "ReLU", "GELU", "Sigmoid", "Tanh", "Softmax",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "BatchNorm2d", "LayerNorm", "Dropout", "Identity",
    "MultiheadAttention", "functional", "init", "from_torch", "save", "load", "save_state", "load_state",
    "manual_seed", "MSELoss", "CrossEntropyLoss", "NLLLoss", "BCEWithLogitsLoss",
]

manual_seed = init.manual_seed


def from_torch(module: Any) -> Module:
    """Rebuild a PyTorch model from neurenix layers (weights copied); PyTorch loads only here."""
    from neurenix_core.nn.torch_import import from_torch as convert

    return convert(module)


def save(model_or_state: Module | dict[str, Any], path: Any) -> None:
    """Save a model's weights (or a state dict) to ``.npz`` / ``.safetensors``, atomically."""
    state = model_or_state.state_dict() if isinstance(model_or_state, Module) else model_or_state
    save_state(state, path)


def load(path: Any) -> dict[str, Any]:
    """Read a weights file into a state dict (name -> NumPy array); never unpickles."""
    return load_state(path)
