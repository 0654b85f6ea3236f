"""JAX implementations of the neural-network extension ops, shared by eager dispatch and lowering.

Eager ``nn.*`` ops (NCHW, the core's layout) are these functions under ``jax.jit`` with their
configuration static; the whole-model lowering calls the NHWC variants inside one traced function
so XLA fuses across layers. ``precision`` is a ``jax.lax.Precision`` (None = the platform default,
which on TPU is one bf16 pass) and ``acc`` the accumulation dtype of matmuls and convolutions.
Imported only by backend.py and lowering.py, i.e. after the backend factory ran.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "EAGER_NN_OPS",
    "adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "attention",
    "avg_pool2d",
    "batch_norm",
    "conv2d",
    "gelu",
    "layer_norm",
    "linear",
    "max_pool2d",
    "pair",
    "softmax",
]

Array = Any
NCHW = ("NCHW", "OIHW", "NCHW")
NHWC = ("NHWC", "HWIO", "NHWC")


def pair(v: int | Sequence[int]) -> tuple[int, int]:
    """The ops take ints or 2-tuples (CONTRIBUTING); XLA wants 2-tuples."""
    if isinstance(v, int):
        return (v, v)
    a, b = v
    return (int(a), int(b))


def _dot_out(y: Array, like: Array) -> Array:
    # Accumulate wide, hand back the activation dtype: bf16 in, bf16 out (f32 accumulation).
    return y.astype(like.dtype) if y.dtype != like.dtype else y


def linear(x: Array, weight: Array, bias: Array | None, precision: Any = None, acc: Any = None) -> Array:
    """y = x @ weight.T + bias with weight (out, in), contracting the last axis of x."""
    w = weight.astype(x.dtype) if weight.dtype != x.dtype else weight
    y = lax.dot_general(x, w, (((x.ndim - 1,), (1,)), ((), ())), precision=precision, preferred_element_type=acc)
    if bias is not None:
        y = y + bias.astype(y.dtype)
    return _dot_out(y, x)


def conv2d(
    x: Array, weight: Array, bias: Array | None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
    groups: int = 1, *, layout: tuple[str, str, str] = NCHW, precision: Any = None, acc: Any = None,
) -> Array:
    """2-D convolution; ``layout`` NCHW/OIHW (eager, the core's layout) or NHWC/HWIO (lowered)."""
    ph, pw = pair(padding)
    w = weight.astype(x.dtype) if weight.dtype != x.dtype else weight
    y = lax.conv_general_dilated(
        x, w, window_strides=pair(stride), padding=((ph, ph), (pw, pw)), rhs_dilation=pair(dilation),
        dimension_numbers=layout, feature_group_count=int(groups), precision=precision, preferred_element_type=acc,
    )
    if bias is not None:
        shape = (1, -1, 1, 1) if layout[0] == "NCHW" else (1, 1, 1, -1)
        y = y + bias.astype(y.dtype).reshape(shape)
    return _dot_out(y, x)


def _window(kernel: Any, stride: Any, padding: Any, nhwc: bool) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
    (kh, kw), (sh, sw), (ph, pw) = pair(kernel), pair(kernel if stride is None else stride), pair(padding)
    if nhwc:
        return (1, kh, kw, 1), (1, sh, sw, 1), ((0, 0), (ph, ph), (pw, pw), (0, 0))
    return (1, 1, kh, kw), (1, 1, sh, sw), ((0, 0), (0, 0), (ph, ph), (pw, pw))


def max_pool2d(x: Array, kernel_size: Any, stride: Any = None, padding: Any = 0, *, nhwc: bool = False) -> Array:
    dims, strides, pads = _window(kernel_size, stride, padding, nhwc)
    return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, pads)


def avg_pool2d(
    x: Array, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True, *, nhwc: bool = False,
) -> Array:
    dims, strides, pads = _window(kernel_size, stride, padding, nhwc)
    total = lax.reduce_window(x, jnp.zeros((), x.dtype), lax.add, dims, strides, pads)
    if count_include_pad:
        return total / math.prod(dims)
    counts = lax.reduce_window(jnp.ones(x.shape, x.dtype), jnp.zeros((), x.dtype), lax.add, dims, strides, pads)
    return total / counts


def _bins(size: int, out: int) -> list[tuple[int, int]]:
    # PyTorch's adaptive pooling bins: start = floor(i*size/out), end = ceil((i+1)*size/out).
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def adaptive_avg_pool2d(x: Array, output_size: Any, *, nhwc: bool = False) -> Array:
    return _adaptive(x, output_size, nhwc, jnp.mean)


def adaptive_max_pool2d(x: Array, output_size: Any, *, nhwc: bool = False) -> Array:
    return _adaptive(x, output_size, nhwc, jnp.max)


def _adaptive(x: Array, output_size: Any, nhwc: bool, reduce: Any) -> Array:
    oh, ow = pair(output_size)
    h_ax, w_ax = (1, 2) if nhwc else (2, 3)
    h, w = x.shape[h_ax], x.shape[w_ax]
    if h % oh == 0 and w % ow == 0:  # equal bins: one reshape-reduce XLA fuses well
        if nhwc:
            n, _, _, c = x.shape
            return reduce(x.reshape(n, oh, h // oh, ow, w // ow, c), axis=(2, 4))
        n, c = x.shape[:2]
        return reduce(x.reshape(n, c, oh, h // oh, ow, w // ow), axis=(3, 5))
    rows = []
    for h0, h1 in _bins(h, oh):
        cols = [reduce(lax.slice_in_dim(lax.slice_in_dim(x, h0, h1, axis=h_ax), w0, w1, axis=w_ax), axis=(h_ax, w_ax)) for w0, w1 in _bins(w, ow)]
        rows.append(jnp.stack(cols, axis=-1))
    out = jnp.stack(rows, axis=-2)  # (..., oh, ow) with the channel axis first
    return jnp.moveaxis(out, (-2, -1), (1, 2)) if nhwc else out


def batch_norm(x: Array, mean: Array, var: Array, weight: Array | None, bias: Array | None, eps: float, *, axis: int = 1) -> Array:
    """Inference batch norm over channel ``axis``; statistics in f32 even for bf16 activations."""
    shape = [1] * x.ndim
    shape[axis] = -1
    acc = _accumulator(x)
    scale = lax.rsqrt(var.astype(acc) + eps)
    if weight is not None:
        scale = scale * weight.astype(acc)
    shift = -mean.astype(acc) * scale
    if bias is not None:
        shift = shift + bias.astype(acc)
    return (x.astype(acc) * scale.reshape(shape) + shift.reshape(shape)).astype(x.dtype)


def _accumulator(x: Array) -> Any:
    # Low-precision activations are normalised in f32; float64 stays float64 (gradient checks).
    return jnp.promote_types(x.dtype, jnp.float32)


def layer_norm(x: Array, normalized_shape: Any, weight: Array | None, bias: Array | None, eps: float) -> Array:
    dims = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    axes = tuple(range(x.ndim - len(dims), x.ndim))
    acc = _accumulator(x)
    xf = x.astype(acc)
    mean = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (xf - mean) * lax.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.astype(acc)
    if bias is not None:
        y = y + bias.astype(acc)
    return y.astype(x.dtype)


def gelu(x: Array, approximate: str | bool = "none") -> Array:
    tanh = approximate is True or approximate == "tanh"
    return jax.nn.gelu(x, approximate=tanh)


def softmax(x: Array, axis: int = -1) -> Array:
    return jax.nn.softmax(x.astype(_accumulator(x)), axis=axis).astype(x.dtype)


def attention(
    q_in: Array, k_in: Array, v_in: Array, in_w: Array, in_b: Array | None, out_w: Array, out_b: Array | None,
    num_heads: int, batch_first: bool, precision: Any = None, acc: Any = None,
) -> Array:
    """Multi-head attention as torch.nn.MultiheadAttention computes it (no mask, no dropout)."""
    if not batch_first:  # (L, N, E) -> (N, L, E)
        q_in, k_in, v_in = (jnp.swapaxes(t, 0, 1) for t in (q_in, k_in, v_in))
    e = q_in.shape[-1]
    bq, bk, bv = (None, None, None) if in_b is None else (in_b[:e], in_b[e : 2 * e], in_b[2 * e :])
    q = linear(q_in, in_w[:e], bq, precision, acc)
    k = linear(k_in, in_w[e : 2 * e], bk, precision, acc)
    v = linear(v_in, in_w[2 * e :], bv, precision, acc)
    n, lq, _ = q.shape
    hd = e // num_heads

    def heads(t: Array) -> Array:
        return t.reshape(n, t.shape[1], num_heads, hd).transpose(0, 2, 1, 3)

    scores = jnp.einsum("nhqd,nhkd->nhqk", heads(q), heads(k), precision=precision, preferred_element_type=acc)
    weights = jax.nn.softmax(scores.astype(_accumulator(scores)) / math.sqrt(hd), axis=-1).astype(q.dtype)
    ctx = jnp.einsum("nhqk,nhkd->nhqd", weights, heads(v), precision=precision, preferred_element_type=acc).astype(q.dtype)
    out = linear(ctx.transpose(0, 2, 1, 3).reshape(n, lq, e), out_w, out_b, precision, acc)
    return out if batch_first else jnp.swapaxes(out, 0, 1)


def _eager_conv(x: Array, weight: Array, bias: Array | None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Array:
    return _conv_jit(x, weight, bias, pair(stride), pair(padding), pair(dilation), int(groups))


_conv_jit = jax.jit(conv2d, static_argnums=(3, 4, 5, 6))
_max_pool_jit = jax.jit(max_pool2d, static_argnums=(1, 2, 3))
_avg_pool_jit = jax.jit(avg_pool2d, static_argnums=(1, 2, 3, 4))
_adaptive_jit = jax.jit(adaptive_avg_pool2d, static_argnums=(1,))
_layer_norm_jit = jax.jit(layer_norm, static_argnums=(1, 4))
_batch_norm_jit = jax.jit(batch_norm, static_argnums=(5,))
_gelu_jit = jax.jit(gelu, static_argnums=(1,))


def _static(v: Any) -> Any:
    # jit needs hashable static arguments: lists (from users) become tuples.
    return pair(v) if isinstance(v, (list, tuple)) and len(v) == 2 else v


#: Eager extension ops (CONTRIBUTING's signatures), each one jitted XLA computation.
EAGER_NN_OPS: dict[str, Any] = {
    "nn.linear": jax.jit(linear),
    "nn.conv2d": _eager_conv,
    "nn.max_pool2d": lambda x, kernel_size, stride=None, padding=0: _max_pool_jit(x, _static(kernel_size), _static(stride), _static(padding)),
    "nn.avg_pool2d": lambda x, kernel_size, stride=None, padding=0, count_include_pad=True: _avg_pool_jit(
        x, _static(kernel_size), _static(stride), _static(padding), bool(count_include_pad)
    ),
    "nn.adaptive_avg_pool2d": lambda x, output_size: _adaptive_jit(x, _static(output_size)),
    "nn.relu": jax.jit(jax.nn.relu),
    "nn.gelu": lambda x, approximate="none": _gelu_jit(x, approximate),
    "nn.sigmoid": jax.jit(jax.nn.sigmoid),
    "nn.tanh": jax.jit(jnp.tanh),
    "nn.softmax": jax.jit(softmax, static_argnums=(1,)),
    "nn.batch_norm": lambda x, running_mean, running_var, weight, bias, eps: _batch_norm_jit(x, running_mean, running_var, weight, bias, float(eps)),
    "nn.layer_norm": lambda x, normalized_shape, weight, bias, eps: _layer_norm_jit(
        x, tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,), weight, bias, float(eps)
    ),
}
