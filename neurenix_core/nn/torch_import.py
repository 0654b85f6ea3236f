"""``nx.nn.from_torch(module)``: rebuild a PyTorch model from neurenix layers, weights copied.

PyTorch is imported only when this function is called. A layer we do not have, or a setting we
do not implement (``ceil_mode``, reflect padding), fails with the layer's path and type before
anything is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.nn import layers as L
from neurenix_core.nn.module import Module, Sequential

__all__ = ["SUPPORTED", "from_torch"]


def _np(t: Any) -> np.ndarray:
    return t.detach().cpu().float().numpy()


def _reject(path: str, layer: Any, why: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(f"from_torch: layer {path or '<model>'!r} ({type(layer).__name__}) {why}")


def _linear(m: Any, path: str) -> Module:
    return L.Linear(m.in_features, m.out_features, bias=m.bias is not None)


def _conv(m: Any, path: str) -> Module:
    if m.padding_mode != "zeros":
        raise _reject(path, m, f"uses padding_mode={m.padding_mode!r}; only 'zeros' is supported")
    return L.Conv2d(m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation, m.groups, bias=m.bias is not None)


def _maxpool(m: Any, path: str) -> Module:
    if m.ceil_mode or m.dilation not in (1, (1, 1)) or m.return_indices:
        raise _reject(path, m, "uses ceil_mode, dilation or return_indices, which are not supported")
    return L.MaxPool2d(m.kernel_size, m.stride, m.padding)


def _avgpool(m: Any, path: str) -> Module:
    if m.ceil_mode or m.divisor_override is not None:
        raise _reject(path, m, "uses ceil_mode or divisor_override, which are not supported")
    return L.AvgPool2d(m.kernel_size, m.stride, m.padding, m.count_include_pad)


def _adaptive(m: Any, path: str) -> Module:
    size = m.output_size
    if size is None or (isinstance(size, tuple) and None in size):
        raise _reject(path, m, "has a None output size; give both sizes")
    return L.AdaptiveAvgPool2d(size)


def _batchnorm(m: Any, path: str) -> Module:
    if not m.track_running_stats:
        raise _reject(path, m, "has no running statistics (track_running_stats=False); inference needs them")
    return L.BatchNorm2d(m.num_features, m.eps, affine=m.affine)


def _layernorm(m: Any, path: str) -> Module:
    return L.LayerNorm(m.normalized_shape, m.eps, elementwise_affine=m.elementwise_affine, bias=getattr(m, "bias", None) is not None)


def _mha(m: Any, path: str) -> Module:
    if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
        raise _reject(path, m, "uses kdim/vdim, bias_k/bias_v or add_zero_attn, which are not supported")
    return L.MultiheadAttention(m.embed_dim, m.num_heads, bias=m.in_proj_bias is not None, batch_first=m.batch_first)


def _softmax(m: Any, path: str) -> Module:
    if m.dim is None:
        raise _reject(path, m, "has dim=None; give the axis explicitly")
    return L.Softmax(m.dim)


SUPPORTED: dict[str, Callable[[Any, str], Module]] = {
    "Linear": _linear,
    "Conv2d": _conv,
    "ReLU": lambda m, p: L.ReLU(),
    "GELU": lambda m, p: L.GELU(m.approximate),
    "Sigmoid": lambda m, p: L.Sigmoid(),
    "Tanh": lambda m, p: L.Tanh(),
    "Softmax": _softmax,
    "MaxPool2d": _maxpool,
    "AvgPool2d": _avgpool,
    "AdaptiveAvgPool2d": _adaptive,
    "Flatten": lambda m, p: L.Flatten(m.start_dim, m.end_dim),
    "BatchNorm2d": _batchnorm,
    "LayerNorm": _layernorm,
    "Dropout": lambda m, p: L.Dropout(m.p),
    "Identity": lambda m, p: L.Identity(),
    "MultiheadAttention": _mha,
}


def _convert(m: Any, path: str, torch: Any) -> Module:
    kind = type(m).__name__
    if isinstance(m, torch.nn.Sequential):
        return Sequential([_convert(child, f"{path}.{name}" if path else name, torch) for name, child in m.named_children()])
    builder = SUPPORTED.get(kind) if type(m).__module__.startswith("torch.nn") else None
    if builder is None:
        raise _reject(path, m, f"is not supported; from_torch knows {', '.join(sorted(SUPPORTED))} and nn.Sequential "
                               "(custom modules with their own forward must be rebuilt as a neurenix Module subclass)")
    return builder(m, path)


def from_torch(module: Any) -> Module:
    """A neurenix model equal to the PyTorch ``module`` (weights copied, fp32), on the default device."""
    try:
        import torch
    except ImportError as exc:
        raise UnsupportedOperationError("from_torch needs PyTorch: pip install torch") from exc
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch expects a torch.nn.Module, got {type(module).__name__}")
    model = _convert(module, "", torch)
    state = {k: _np(v) for k, v in module.state_dict().items() if not k.endswith("num_batches_tracked")}
    model.load_state_dict(state, strict=True)
    return model
