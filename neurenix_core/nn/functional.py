"""Functional forms of the layers. Each calls an ``nn.*`` extension op through the tensor
dispatch, so a backend's native version runs when it has one and the fallback policy applies
otherwise. Parameter-free forms also work while a model is traced (they record a graph node).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from neurenix_core.autograd import amp
from neurenix_core.errors import CompilationError, ShapeError
from neurenix_core.nn import init
from neurenix_core.nn.tracing import Symbol
from neurenix_core.tensor.creation import asarray
from neurenix_core.tensor.tensor import Tensor, _call, cast

__all__ = [
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "batch_norm",
    "binary_cross_entropy_with_logits",
    "conv2d",
    "cross_entropy",
    "dropout",
    "flatten",
    "gelu",
    "layer_norm",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "multi_head_attention",
    "nll_loss",
    "pair",
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
]


def pair(v: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    a, b = v
    return (int(a), int(b))


def _symbolic(op: str, x: Any, **attrs: Any) -> Symbol | None:
    if isinstance(x, Symbol):
        return x._tracer.functional(op, (x,), attrs)
    return None


def _run(sym: Symbol | None, op: str, args: tuple[Any, ...]) -> Any:
    # Never `sym or ...`: truth-testing a Symbol is refused (graphs cannot branch on values).
    return sym if sym is not None else _call(op, args)


def _no_trace(op: str, *values: Any) -> None:
    if any(isinstance(v, Symbol) for v in values):
        raise CompilationError(
            f"functional {op} with weights cannot be traced: weights must belong to a layer. Use nn.{op.title()} modules"
        )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    _no_trace("linear", x)
    if x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: input has {x.shape[-1]} features (shape {x.shape}), the weight expects {weight.shape[1]}")
    return _call("nn.linear", amp.cast(x, weight, bias))  # autocast: low-precision matmul


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    _no_trace("conv2d", x)
    if x.ndim != 4 or x.shape[1] != weight.shape[1] * groups:
        raise ShapeError(f"conv2d: expected an NCHW input with {weight.shape[1] * groups} channels, got shape {x.shape}")
    x, weight, bias = amp.cast(x, weight, bias)  # autocast: low-precision convolution
    return _call("nn.conv2d", (x, weight, bias, pair(stride), pair(padding), pair(dilation), int(groups)))


def relu(x: Any) -> Any:
    return _run(_symbolic("relu", x), "nn.relu", (x,))


def gelu(x: Any, approximate: str = "none") -> Any:
    return _run(_symbolic("gelu", x, approximate=approximate), "nn.gelu", (x, approximate))


def sigmoid(x: Any) -> Any:
    return _run(_symbolic("sigmoid", x), "nn.sigmoid", (x,))


def tanh(x: Any) -> Any:
    return _run(_symbolic("tanh", x), "nn.tanh", (x,))


def softmax(x: Any, axis: int = -1, dim: int | None = None) -> Any:
    axis = axis if dim is None else dim  # PyTorch spells it dim
    return _run(_symbolic("softmax", x, axis=axis), "nn.softmax", (amp.at_least_fp32(x), axis))


def log_softmax(x: Tensor, axis: int = -1, dim: int | None = None) -> Tensor:
    """``log(softmax(x))`` computed stably: ``x - max - log(sum(exp(x - max)))``."""
    axis = axis if dim is None else dim
    if isinstance(x, Symbol):
        raise CompilationError("log_softmax cannot be traced into a model graph; use nn.Softmax in models and log_softmax in losses")
    # The shift by the max does not change the result, so it is taken off the tape.
    x = amp.at_least_fp32(x)
    shifted = x - _call("max", (x,), {"axis": axis, "keepdims": True}).detach()
    return shifted - _call("log", (_call("sum", (_call("exp", (shifted,)),), {"axis": axis, "keepdims": True}),))


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Any:
    k = pair(kernel_size)
    s = k if stride is None else pair(stride)
    return _run(_symbolic("max_pool2d", x, kernel_size=k, stride=s, padding=pair(padding)), "nn.max_pool2d", (x, k, s, pair(padding)))


def avg_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> Any:
    k = pair(kernel_size)
    s = k if stride is None else pair(stride)
    sym = _symbolic("avg_pool2d", x, kernel_size=k, stride=s, padding=pair(padding), count_include_pad=count_include_pad)
    return _run(sym, "nn.avg_pool2d", (x, k, s, pair(padding), count_include_pad))


def adaptive_avg_pool2d(x: Any, output_size: Any) -> Any:
    o = pair(output_size)
    return _run(_symbolic("adaptive_avg_pool2d", x, output_size=o), "nn.adaptive_avg_pool2d", (x, o))


def flatten(x: Any, start_dim: int = 1, end_dim: int = -1) -> Any:
    sym = _symbolic("flatten", x, start_dim=start_dim, end_dim=end_dim)
    if sym is not None:
        return sym
    return _call("reshape", (x, flattened_shape(tuple(x.shape), start_dim, end_dim)))


def flattened_shape(shape: tuple[int, ...], start_dim: int, end_dim: int) -> tuple[int, ...]:
    n = len(shape)
    s, e = start_dim % n if n else 0, end_dim % n if n else 0
    if s > e:
        raise ShapeError(f"flatten: start_dim {start_dim} is after end_dim {end_dim} for a {n}-D input")
    return shape[:s] + (math.prod(shape[s : e + 1]),) + shape[e + 1 :]


def batch_norm(x: Tensor, running_mean: Tensor, running_var: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    _no_trace("batch_norm", x)
    if x.ndim < 2 or x.shape[1] != running_mean.shape[0]:
        raise ShapeError(f"batch_norm: input shape {x.shape} does not have {running_mean.shape[0]} channels on axis 1")
    return _call("nn.batch_norm", (amp.at_least_fp32(x), running_mean, running_var, weight, bias, float(eps)))


def layer_norm(x: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    _no_trace("layer_norm", x)
    dims = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[-len(dims):]) != dims:
        raise ShapeError(f"layer_norm: input shape {x.shape} does not end with the normalized shape {dims}")
    return _call("nn.layer_norm", (amp.at_least_fp32(x), dims, weight, bias, float(eps)))


def dropout(x: Any, p: float = 0.5, training: bool = False) -> Any:
    """Identity at inference; in training, zero each element with probability ``p`` and scale
    the rest by ``1 / (1 - p)`` (the mask is drawn from nn.init's seeded generator)."""
    sym = _symbolic("dropout", x, p=p)
    if sym is not None or not training or p == 0.0:
        return x if sym is None else sym
    if p >= 1.0:
        return x * 0.0
    keep = (init.generator().random(tuple(x.shape)) >= p).astype(np.float64) / (1.0 - p)
    return x * asarray(keep, dtype=x.dtype, device=x.device)


def multi_head_attention(
    query: Tensor, key: Tensor, value: Tensor, num_heads: int, in_proj_weight: Tensor, in_proj_bias: Tensor | None,
    out_proj_weight: Tensor, out_proj_bias: Tensor | None, batch_first: bool = False,
) -> Tensor:
    """Scaled dot-product attention over ``num_heads`` heads (PyTorch's packed projections)."""
    _no_trace("multi_head_attention", query, key, value)
    if not batch_first:  # (L, N, E) -> (N, L, E)
        query, key, value = (_call("permute_dims", (t, (1, 0, 2))) for t in (query, key, value))
    n, length, e = query.shape
    if e % num_heads:
        raise ShapeError(f"multi_head_attention: embed_dim {e} is not divisible by num_heads {num_heads}")
    d = e // num_heads
    bq, bk, bv = (None, None, None) if in_proj_bias is None else (in_proj_bias[:e], in_proj_bias[e : 2 * e], in_proj_bias[2 * e :])
    q = _heads(linear(query, in_proj_weight[:e, ...], bq), num_heads, d)
    k = _heads(linear(key, in_proj_weight[e : 2 * e, ...], bk), num_heads, d)
    v = _heads(linear(value, in_proj_weight[2 * e :, ...], bv), num_heads, d)
    scores = _call("matmul", (q, _call("matrix_transpose", (k,)))) * (1.0 / math.sqrt(d))
    ctx = _call("matmul", amp.cast(softmax(scores, -1), v))  # (N, H, L, D)
    ctx = _call("reshape", (_call("permute_dims", (ctx, (0, 2, 1, 3))), (n, length, e)))
    out = linear(ctx, out_proj_weight, out_proj_bias)
    return out if batch_first else _call("permute_dims", (out, (1, 0, 2)))


def _heads(t: Tensor, h: int, d: int) -> Tensor:
    n, length, _ = t.shape
    return _call("permute_dims", (_call("reshape", (t, (n, length, h, d))), (0, 2, 1, 3)))


# ----------------------------------------------------------------------------- losses
# Losses are computed in float32 at least (under nx.autocast the logits may be float16).
_REDUCTIONS = ("mean", "sum", "none")


_at_least_fp32 = amp.at_least_fp32


def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction == "mean":
        return _call("mean", (loss,))
    if reduction == "sum":
        return _call("sum", (loss,))
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # PyTorch's name
    """Mean squared error."""
    diff = _at_least_fp32(input) - _at_least_fp32(target)
    return _reduce(diff * diff, reduction, "mse_loss")


def _one_hot(target: Tensor, classes: int, like: Tensor) -> Tensor:
    """(N, C, ...) one-hot of the class indices ``target`` (N, ...), in ``like``'s dtype."""
    from neurenix_core.tensor.creation import arange

    if target.dtype.kind not in "iu":
        raise TypeError(f"class-index targets must be integers, got {target.dtype} on {target.device}; pass probabilities as a float tensor of the input's shape")
    labels = _call("reshape", (arange(classes, dtype=target.dtype, device=target.device), (1, classes) + (1,) * (target.ndim - 1)))
    hot = _call("expand_dims", (target,), {"axis": 1}) == labels
    # cast, not _call("astype", backend-native dtype): a backend whose native astype is not in its op
    # table falls back to the host, which cannot read the native dtype (OpenVINO's Type on npu:0 made
    # every cross_entropy / nll_loss with class indices raise there; found by tests/differential).
    return cast(hot, like.dtype)


def nll_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class indices ``target`` (N, ...) under log-probabilities ``input`` (N, C, ...)."""
    logp = _at_least_fp32(input)
    if target.ndim != logp.ndim - 1 or target.shape[0] != logp.shape[0]:
        raise ShapeError(f"nll_loss: input {logp.shape} (N, C, ...) needs targets of shape (N, ...), got {target.shape}")
    picked = _call("sum", (logp * _one_hot(target, logp.shape[1], logp),), {"axis": 1})
    return _reduce(-picked, reduction, "nll_loss")


def cross_entropy(input: Tensor, target: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits ``input`` (N, C, ...) with class indices (N, ...) or class
    probabilities (N, C, ...); ``label_smoothing`` mixes the target with the uniform distribution."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    logp = log_softmax(_at_least_fp32(input), axis=1)
    classes = logp.shape[1]
    if target.dtype.kind in "iu":
        if target.ndim != logp.ndim - 1 or target.shape[0] != logp.shape[0]:
            raise ShapeError(f"cross_entropy: logits {logp.shape} (N, C, ...) need class indices of shape (N, ...), got {target.shape}")
        probs = _one_hot(target, classes, logp)
    else:
        if target.shape != logp.shape:
            raise ShapeError(f"cross_entropy: probability targets must have the logits' shape {logp.shape}, got {target.shape}")
        probs = _at_least_fp32(target)
    if label_smoothing:
        probs = probs * (1.0 - label_smoothing) + label_smoothing / classes
    return _reduce(-_call("sum", (probs * logp,), {"axis": 1}), reduction, "cross_entropy")


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross entropy in one stable expression (no log of a rounded 0 or 1)."""
    x, t = _at_least_fp32(input), _at_least_fp32(target)
    if x.shape != t.shape:
        raise ShapeError(f"binary_cross_entropy_with_logits: input {x.shape} and target {t.shape} differ")
    # log(1 + exp(-|x|)) + max(-x, 0) = -log(sigmoid(x)), computed without overflow.
    softplus = _call("log1p", (_call("exp", (-_call("abs", (x,)),)),)) + _call("maximum", (-x, 0.0))
    if pos_weight is None:
        loss = (1.0 - t) * x + softplus
    else:
        loss = (1.0 - t) * x + (1.0 + (pos_weight - 1.0) * t) * softplus
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")
