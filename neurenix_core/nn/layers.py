"""The layers. Each is a leaf of the model graph (``graph_op``) and runs eagerly through the
functional forms, i.e. through the ``nn.*`` extension ops of the tensor's backend."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from neurenix_core.autograd import amp
from neurenix_core.autograd.grad import no_grad
from neurenix_core.errors import ShapeError
from neurenix_core.nn import functional as F
from neurenix_core.nn import init
from neurenix_core.nn.module import Module
from neurenix_core.tensor import ops
from neurenix_core.tensor.tensor import Tensor

__all__ = [
    "GELU",
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BatchNorm2d",
    "Conv2d",
    "Dropout",
    "Flatten",
    "Identity",
    "LayerNorm",
    "Linear",
    "MaxPool2d",
    "MultiheadAttention",
    "ReLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
]


class Linear(Module):
    """``y = x W^T + b`` with W of shape (out_features, in_features), PyTorch's initialisation."""

    graph_op = "linear"

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
        self.weight = init.uniform((self.out_features, self.in_features), bound)
        self.register_parameter("bias", init.uniform((self.out_features,), bound) if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"in_features": self.in_features, "out_features": self.out_features}

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    """2-D convolution over NCHW input; weight (out, in/groups, kh, kw)."""

    graph_op = "conv2d"

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ShapeError(f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must be divisible by groups {groups}")
        self.in_channels, self.out_channels, self.groups = int(in_channels), int(out_channels), int(groups)
        self.kernel_size, self.stride, self.dilation = F.pair(kernel_size), F.pair(stride), F.pair(dilation)
        self.padding = _conv_padding(padding, self.kernel_size, self.stride, self.dilation)
        fan_in = self.in_channels // self.groups * self.kernel_size[0] * self.kernel_size[1]
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = init.uniform((self.out_channels, self.in_channels // self.groups, *self.kernel_size), bound)
        self.register_parameter("bias", init.uniform((self.out_channels,), bound) if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"in_channels": self.in_channels, "out_channels": self.out_channels, "kernel_size": self.kernel_size,
                "stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups}

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


def _conv_padding(padding: Any, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    if padding == "valid":
        return (0, 0)
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        if stride != (1, 1) or any(t % 2 for t in total):
            raise ShapeError("Conv2d(padding='same') needs stride 1 and an odd kernel extent (symmetric padding)")
        return (total[0] // 2, total[1] // 2)
    return F.pair(padding)


class _Activation(Module):
    def _graph_attrs(self) -> dict[str, Any]:
        return {}


class ReLU(_Activation):
    graph_op = "relu"

    def __init__(self, inplace: bool = False) -> None:  # inplace accepted for PyTorch parity; we never mutate
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(_Activation):
    graph_op = "gelu"

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"approximate": self.approximate}


class Sigmoid(_Activation):
    graph_op = "sigmoid"

    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Tanh(_Activation):
    graph_op = "tanh"

    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Softmax(Module):
    graph_op = "softmax"

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = int(dim)

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"axis": self.dim}


class MaxPool2d(Module):
    graph_op = "max_pool2d"

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        self.kernel_size = F.pair(kernel_size)
        self.stride = self.kernel_size if stride is None else F.pair(stride)
        self.padding = F.pair(padding)

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"kernel_size": self.kernel_size, "stride": self.stride, "padding": self.padding}


class AvgPool2d(Module):
    graph_op = "avg_pool2d"

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size = F.pair(kernel_size)
        self.stride = self.kernel_size if stride is None else F.pair(stride)
        self.padding = F.pair(padding)
        self.count_include_pad = bool(count_include_pad)

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"kernel_size": self.kernel_size, "stride": self.stride, "padding": self.padding, "count_include_pad": self.count_include_pad}


class AdaptiveAvgPool2d(Module):
    graph_op = "adaptive_avg_pool2d"

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = F.pair(output_size)

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"output_size": self.output_size}


class Flatten(Module):
    graph_op = "flatten"

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_dim, self.end_dim)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"start_dim": self.start_dim, "end_dim": self.end_dim}


class BatchNorm2d(Module):
    """Batch normalisation over NCHW channels (buffers ``running_mean``/``running_var``).

    In eval mode (the default) it normalises with the running statistics; in train mode with
    the batch's own (biased) statistics, which it folds into the running ones with ``momentum``
    (the unbiased variance, as PyTorch does)."""

    graph_op = "batch_norm2d"
    # Buffers (register_buffer sets them), declared for type checkers.
    running_mean: Tensor
    running_var: Tensor

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), float(momentum)
        c = self.num_features
        self.register_parameter("weight", init.constant((c,), 1.0) if affine else None)
        self.register_parameter("bias", init.constant((c,), 0.0) if affine else None)
        self.register_buffer("running_mean", init.constant((c,), 0.0))
        self.register_buffer("running_var", init.constant((c,), 1.0))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ShapeError(f"BatchNorm2d expects a 4-D NCHW input, got shape {x.shape}")
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.eps)
        x = amp.at_least_fp32(x)  # batch statistics in fp32 under autocast
        mean = ops.mean(x, axis=(0, 2, 3))
        var = ops.var(x, axis=(0, 2, 3))
        # The batch statistics are on the tape: batch_norm's rule differentiates through them.
        y = F.batch_norm(x, mean, var, self.weight, self.bias, self.eps)
        n = x.shape[0] * x.shape[2] * x.shape[3]
        m = self.momentum
        with no_grad():
            unbiased = var.detach() * (n / max(n - 1, 1))
            self.running_mean = self.running_mean * (1.0 - m) + ops.astype(mean.detach(), self.running_mean.dtype) * m
            self.running_var = self.running_var * (1.0 - m) + ops.astype(unbiased, self.running_var.dtype) * m
        return y

    def _graph_attrs(self) -> dict[str, Any]:
        return {"num_features": self.num_features, "eps": self.eps}

    def _graph_params(self) -> dict[str, np.ndarray]:
        c = self.num_features
        params = super()._graph_params()
        # The graph always carries weight and bias (ones/zeros when not affine): one lowering path.
        params.setdefault("weight", np.ones(c, np.float32))
        params.setdefault("bias", np.zeros(c, np.float32))
        return params


class LayerNorm(Module):
    graph_op = "layer_norm"

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.normalized_shape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(d) for d in normalized_shape)
        self.eps = float(eps)
        self.register_parameter("weight", init.constant(self.normalized_shape, 1.0) if elementwise_affine else None)
        self.register_parameter("bias", init.constant(self.normalized_shape, 0.0) if elementwise_affine and bias else None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"normalized_shape": self.normalized_shape, "eps": self.eps}


class Dropout(Module):
    """Zeroes elements with probability ``p`` in train mode; the identity in eval mode."""

    graph_op = "dropout"

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout probability must be in [0, 1], got {p}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def _graph_attrs(self) -> dict[str, Any]:
        return {"p": self.p}


class Identity(Module):
    """Returns its input (a container: it adds no graph node)."""

    def forward(self, x: Any) -> Any:
        return x


class MultiheadAttention(Module):
    """Inference multi-head attention with PyTorch's parameter layout.

    ``forward(query, key=None, value=None)`` returns the attention output only (key and value
    default to query: self-attention). Shapes are (L, N, E), or (N, L, E) with ``batch_first``.
    """

    graph_op = "multihead_attention"

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, batch_first: bool = False) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ShapeError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads, self.batch_first = int(embed_dim), int(num_heads), bool(batch_first)
        e = self.embed_dim
        bound = math.sqrt(6.0 / (e + 3 * e))  # xavier_uniform on the packed (3E, E) projection
        self.in_proj_weight = init.uniform((3 * e, e), bound)
        self.register_parameter("in_proj_bias", init.constant((3 * e,), 0.0) if bias else None)
        # A Linear submodule, as in PyTorch, so state dicts use the same keys (out_proj.weight).
        self.out_proj = Linear(e, e, bias=bias)
        if bias:
            self.out_proj.bias = init.constant((e,), 0.0)

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None) -> Tensor:
        key = query if key is None else key
        value = key if value is None else value
        return F.multi_head_attention(query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias,
                                      self.out_proj.weight, self.out_proj.bias, self.batch_first)

    def _trace(self, tracer: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        query = args[0]
        key = args[1] if len(args) > 1 else kwargs.get("key", query)
        value = args[2] if len(args) > 2 else kwargs.get("value", key)
        return tracer.record(name, "multihead_attention", (query, key if key is not None else query, value if value is not None else key),
                             self._graph_attrs(), self._graph_params())

    def _graph_attrs(self) -> dict[str, Any]:
        return {"embed_dim": self.embed_dim, "num_heads": self.num_heads, "batch_first": self.batch_first}

    def _graph_params(self) -> dict[str, np.ndarray]:
        e = self.embed_dim
        params = super()._graph_params()
        params.setdefault("in_proj_bias", np.zeros(3 * e, np.float32))
        out = self.out_proj._graph_params()
        params["out_proj_weight"] = out["weight"]
        params["out_proj_bias"] = out.get("bias", np.zeros(e, np.float32))
        return params
