"""Convolution, pooling, normalisation and attention."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurenix_core.backends import cpu_nn as K
from neurenix_core.graph.opset.schema import (
    Arrays, Attrs, Builder, Decompose, Params, REQUIRED, Shape, _broadcast, _def, _f, _float_only, _numel,
)

# ----------------------------------------------------------------------------- convolution and pooling
def _window(size: int, k: int, st: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // st + 1


def _spatial(x: Shape, k: Sequence[int], st: Sequence[int], pad: Sequence[int], dil: Sequence[int]) -> Shape:
    out = tuple(_window(x[2 + i], k[i], st[i], pad[i], dil[i]) for i in range(len(k)))
    if min(out) < 1:
        raise ValueError(f"spatial size {x[2:]} is smaller than the kernel extent {tuple(dil[i] * (k[i] - 1) + 1 for i in range(len(k)))}")
    return out


def _conv_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, w = s[0], p["weight"].shape
    nd = len(w) - 2
    if len(x) != nd + 2 or x[1] != w[1] * a["groups"]:
        raise ValueError(f"expects an N,C{',H,W' if nd == 2 else ',L'} input with {w[1] * a['groups']} channels, got shape {x}")
    return (x[0], int(w[0])) + _spatial(x, w[2:], a["stride"], a["padding"], a["dilation"]), d[0]


def _conv_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    return 2 * _numel(out) * _numel(tuple(p["weight"].shape[1:]))


def _conv2d_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    bias = p.get("bias")
    return K.conv2d(x[0], p["weight"].astype(x[0].dtype), None if bias is None else bias.astype(x[0].dtype),
                    a["stride"], a["padding"], a["dilation"], a["groups"]).astype(x[0].dtype, copy=False)


_CONV_ATTRS = {"in_channels": None, "out_channels": None, "kernel_size": None, "stride": (1, 1), "padding": (0, 0),
               "dilation": (1, 1), "groups": 1}
_def("conv2d", "convolution", "NCHW cross-correlation, weight (O, C/groups, kh, kw) on the node; symmetric zero padding "
     "(other padding modes: a pad node before it)", ("x",), _conv_rule, _conv2d_ref, attrs=_CONV_ATTRS,
     params=("weight", "bias?"), flops=_conv_flops)


def _conv_t_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, w = s[0], p["weight"].shape
    if len(x) != 4 or len(w) != 4 or x[1] != w[0]:
        raise ValueError(f"expects an N,C,H,W input with {w[0]} channels (weight (C, O/groups, kh, kw)), got shape {x}")
    st, pad, out_pad, dil = a["stride"], a["padding"], a["output_padding"], a["dilation"]
    if any(op >= max(sv, dv) for op, sv, dv in zip(out_pad, st, dil)):
        raise ValueError(f"output_padding {tuple(out_pad)} must be smaller than the stride or the dilation")
    size = tuple((x[2 + i] - 1) * st[i] - 2 * pad[i] + dil[i] * (w[2 + i] - 1) + out_pad[i] + 1 for i in range(2))
    if min(size) < 1:
        raise ValueError(f"padding {tuple(pad)} leaves no output from input {x[2:]}")
    return (x[0], int(w[1]) * a["groups"]) + size, d[0]


def _conv_t_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    """Scatter form: every input pixel adds its kernel-weighted patch at stride steps into the
    full output, which is then cropped by ``padding`` (output_padding extends the far end)."""
    xs, w = x[0], p["weight"].astype(x[0].dtype)
    n, c, h, wd = xs.shape
    g, (st, pad, out_pad, dil) = a["groups"], (a["stride"], a["padding"], a["output_padding"], a["dilation"])
    cg, og, kh, kw = c // g, w.shape[1], w.shape[2], w.shape[3]
    full = np.zeros((n, og * g, (h - 1) * st[0] + dil[0] * (kh - 1) + 1 + out_pad[0],
                     (wd - 1) * st[1] + dil[1] * (kw - 1) + 1 + out_pad[1]), xs.dtype)
    for k in range(g):
        xg, wg = xs[:, k * cg:(k + 1) * cg], w[k * cg:(k + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                r, q = i * dil[0], j * dil[1]
                full[:, k * og:(k + 1) * og, r:r + (h - 1) * st[0] + 1:st[0], q:q + (wd - 1) * st[1] + 1:st[1]] += np.einsum(
                    "nchw,co->nohw", xg, wg[:, :, i, j])
    oh = full.shape[2] - 2 * pad[0]
    ow = full.shape[3] - 2 * pad[1]
    out = full[:, :, pad[0]:pad[0] + oh, pad[1]:pad[1] + ow]
    bias = p.get("bias")
    if bias is not None:
        out = out + bias.astype(xs.dtype).reshape(1, -1, 1, 1)
    return np.ascontiguousarray(out)


_def("conv_transpose2d", "convolution", "NCHW transposed convolution (the gradient of conv2d w.r.t. its input), weight "
     "(C, O/groups, kh, kw) on the node; output size (H-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1",
     ("x",), _conv_t_rule, _conv_t_ref,
     attrs={"in_channels": None, "out_channels": None, "kernel_size": None, "stride": (1, 1), "padding": (0, 0),
            "output_padding": (0, 0), "dilation": (1, 1), "groups": 1},
     params=("weight", "bias?"), flops=lambda a, s, o, p: 2 * _numel(s[0]) * _numel(tuple(p["weight"].shape[1:])))


def _conv1d_attrs2(a: Attrs) -> dict[str, Any]:
    return {"stride": (1, a["stride"][0]), "padding": (0, a["padding"][0]), "dilation": (1, a["dilation"][0]), "groups": a["groups"]}


def _conv1d_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    params = {"weight": np.asarray(p["weight"])[:, :, None, :]} | ({} if p.get("bias") is None else {"bias": p["bias"]})
    x = b.op("unsqueeze", [i[0]], {"axes": (2,)})
    return b.op("squeeze", [b.op("conv2d", [x], _conv1d_attrs2(a), params)], {"axes": (2,)})


def _conv1d_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    p2 = {"weight": p["weight"][:, :, None, :]} | ({} if p.get("bias") is None else {"bias": p["bias"]})
    return _conv2d_ref(_conv1d_attrs2(a), [x[0][:, :, None, :]], p2)[:, :, 0, :]


_def("conv1d", "convolution", "N,C,L cross-correlation, weight (O, C/groups, k) on the node", ("x",), _conv_rule, _conv1d_ref,
     attrs={"stride": (1,), "padding": (0,), "dilation": (1,), "groups": 1}, params=("weight", "bias?"), decompose=_conv1d_dec,
     flops=_conv_flops)


def _pool_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    if len(x) != 4:
        raise ValueError(f"expects a 4-D NCHW input, got shape {x}")
    st = a["stride"] if a["stride"] is not None else a["kernel_size"]
    return x[:2] + _spatial(x, a["kernel_size"], st, a["padding"], (1, 1)), d[0]


def _pool_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    return _numel(out) * _numel(tuple(a["kernel_size"]))


_def("max_pool2d", "pooling", "max over kh x kw windows (padding counts as -inf)", ("x",), _pool_rule,
     lambda a, x, p: K.max_pool2d(x[0], a["kernel_size"], a["stride"], a["padding"]),
     attrs={"kernel_size": REQUIRED, "stride": None, "padding": (0, 0)}, flops=_pool_flops)
_def("avg_pool2d", "pooling", "mean over kh x kw windows", ("x",), _pool_rule,
     lambda a, x, p: K.avg_pool2d(x[0], a["kernel_size"], a["stride"], a["padding"], a["count_include_pad"]),
     attrs={"kernel_size": REQUIRED, "stride": None, "padding": (0, 0), "count_include_pad": True}, flops=_pool_flops)


def _adaptive_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if len(s[0]) != 4:
        raise ValueError(f"expects a 4-D NCHW input, got shape {s[0]}")
    return s[0][:2] + tuple(int(v) for v in a["output_size"]), d[0]


def _adaptive_max_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0]
    hs, he = K.adaptive_bounds(t.shape[2], a["output_size"][0])
    ws, we = K.adaptive_bounds(t.shape[3], a["output_size"][1])
    rows = [np.stack([t[:, :, h0:h1, w0:w1].max(axis=(2, 3)) for w0, w1 in zip(ws, we)], -1) for h0, h1 in zip(hs, he)]
    return np.stack(rows, -2)


_def("adaptive_avg_pool2d", "pooling", "mean over PyTorch's adaptive cells", ("x",), _adaptive_rule,
     lambda a, x, p: K.adaptive_avg_pool2d(x[0], a["output_size"]), attrs={"output_size": REQUIRED},
     flops=lambda a, s, o, p: _numel(s[0]))
_def("adaptive_max_pool2d", "pooling", "max over PyTorch's adaptive cells", ("x",), _adaptive_rule, _adaptive_max_ref,
     attrs={"output_size": REQUIRED}, flops=lambda a, s, o, p: _numel(s[0]))


def _global_dec(kind: str) -> Decompose:
    return lambda b, i, a, p: b.op(kind, [i[0]], {"axes": (2, 3), "keepdims": True})


_def("global_avg_pool", "pooling", "mean over H and W, keeping them as 1 (ONNX GlobalAveragePool)", ("x",),
     lambda a, s, d, p: (s[0][:2] + (1,) * (len(s[0]) - 2), d[0]), lambda a, x, p: x[0].mean(axis=(2, 3), keepdims=True),
     decompose=_global_dec("reduce_mean"), flops=lambda a, s, o, p: _numel(s[0]))
_def("global_max_pool", "pooling", "max over H and W, keeping them as 1 (ONNX GlobalMaxPool)", ("x",),
     lambda a, s, d, p: (s[0][:2] + (1,) * (len(s[0]) - 2), d[0]), lambda a, x, p: x[0].max(axis=(2, 3), keepdims=True),
     decompose=_global_dec("reduce_max"), flops=lambda a, s, o, p: _numel(s[0]))


# ----------------------------------------------------------------------------- normalisation
def _bn_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    c = int(p["running_mean"].shape[0])
    if len(s[0]) < 2 or s[0][1] != c:
        raise ValueError(f"expects N,C,... with {c} channels, got shape {s[0]}")
    return _float_only(a, s, d, p)


def _bn_affine(p: Params, eps: float) -> tuple[np.ndarray, np.ndarray]:
    scale = 1.0 / np.sqrt(np.asarray(p["running_var"], np.float64) + eps)
    if p.get("weight") is not None:
        scale = scale * p["weight"]
    shift = -np.asarray(p["running_mean"], np.float64) * scale
    if p.get("bias") is not None:
        shift = shift + p["bias"]
    return scale, shift


def _bn_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    scale, shift = _bn_affine(p, a["eps"])
    shape = (-1, 1, 1)  # channels first, then H and W (batch_norm2d is N,C,H,W)
    mul = b.op("mul", [i[0], b.const(scale.reshape(shape).astype(np.float32))])
    return b.op("add", [mul, b.const(shift.reshape(shape).astype(np.float32))])


def _bn_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    cast = {k: (None if v is None else v.astype(x[0].dtype)) for k, v in p.items()}
    return K.batch_norm(x[0], cast["running_mean"], cast["running_var"], cast.get("weight"), cast.get("bias"), a["eps"])


_def("batch_norm2d", "normalisation", "inference batch norm over channel axis 1 with running statistics", ("x",), _bn_rule, _bn_ref,
     attrs={"num_features": None, "eps": 1e-5}, params=("running_mean", "running_var", "weight?", "bias?"), decompose=_bn_dec,
     flops=lambda a, s, o, p: 2 * _numel(o))


def _ln_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    dims = tuple(a["normalized_shape"])
    if s[0][len(s[0]) - len(dims):] != dims:
        raise ValueError(f"expects trailing dimensions {dims}, got shape {s[0]}")
    return _float_only(a, s, d, p)


def _ln_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    axes = tuple(range(-len(tuple(a["normalized_shape"])), 0))
    centred = b.op("sub", [i[0], b.op("reduce_mean", [i[0]], {"axes": axes, "keepdims": True})])
    var = b.op("reduce_mean", [b.op("mul", [centred, centred])], {"axes": axes, "keepdims": True})
    out = b.op("mul", [centred, b.op("rsqrt", [b.op("add", [var, b.const(np.float32(a["eps"]))])])])
    if p.get("weight") is not None:
        out = b.op("mul", [out, b.const(np.asarray(p["weight"]))])
    if p.get("bias") is not None:
        out = b.op("add", [out, b.const(np.asarray(p["bias"]))])
    return out


def _ln_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    w, bias = p.get("weight"), p.get("bias")
    return K.layer_norm(x[0], a["normalized_shape"], None if w is None else w.astype(x[0].dtype),
                        None if bias is None else bias.astype(x[0].dtype), a["eps"])


_def("layer_norm", "normalisation", "normalise over the trailing normalized_shape, then weight and bias", ("x",), _ln_rule, _ln_ref,
     attrs={"normalized_shape": REQUIRED, "eps": 1e-5}, params=("weight?", "bias?"), decompose=_ln_dec,
     flops=lambda a, s, o, p: 8 * _numel(o))


# ----------------------------------------------------------------------------- attention
def _sdpa_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    q, k, v = s[:3]
    if len(q) < 2 or q[-1] != k[-1] or k[-2] != v[-2]:
        raise ValueError(f"expects q (..., L, E), k (..., S, E), v (..., S, Ev); got {q}, {k}, {v}")
    scores = _broadcast([q[:-2], k[:-2]]) + (q[-2], k[-2])
    if len(s) > 3:
        _broadcast([scores, s[3]])
    return _broadcast([q[:-2], v[:-2]]) + (q[-2], v[-1]), d[0]


def _sdpa_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    q, k, v = x[:3]
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * _f(q, scale)
    if a["is_causal"]:
        L, S = q.shape[-2], k.shape[-2]
        scores = np.where(np.tril(np.ones((L, S), bool)), scores, _f(q, -np.inf))
    if len(x) > 3:
        mask = x[3]
        scores = np.where(mask, scores, _f(q, -np.inf)) if mask.dtype == np.bool_ else scores + mask.astype(q.dtype)
    return np.matmul(K.softmax(scores, -1).astype(q.dtype, copy=False), v)


def _sdpa_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    q, k = s[0], s[1]
    return 4 * _numel(_broadcast([q[:-2], k[:-2]])) * q[-2] * k[-2] * q[-1]


_def("scaled_dot_product_attention", "attention",
     "softmax(q @ k^T * scale + mask) @ v; a bool mask keeps True (PyTorch), a float mask is added; scale None = 1/sqrt(E)",
     ("q", "k", "v", "mask?"), _sdpa_rule, _sdpa_ref, attrs={"scale": None, "is_causal": False}, flops=_sdpa_flops)


def _mha_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    e = int(p["out_proj_weight"].shape[0])
    for x in s[:3]:
        if len(x) != 3 or x[-1] != e:
            raise ValueError(f"expects 3-D (batch, length, {e}) or (length, batch, {e}) inputs, got {x}")
    return s[0], d[0]


def _mha_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    q, k, v = i[:3]
    e, h = int(p["out_proj_weight"].shape[0]), int(a["num_heads"])
    if not a["batch_first"]:
        q, k, v = (b.op("transpose", [t], {"perm": (1, 0, 2)}) for t in (q, k, v))
    w, bias = np.asarray(p["in_proj_weight"]), p.get("in_proj_bias")

    def project(t: str, j: int) -> str:
        params = {"weight": w[j * e : (j + 1) * e]} | ({} if bias is None else {"bias": np.asarray(bias)[j * e : (j + 1) * e]})
        lin = b.op("linear", [t], {"in_features": e, "out_features": e}, params)
        return b.op("transpose", [b.op("reshape", [lin], {"shape": (0, 0, h, e // h)})], {"perm": (0, 2, 1, 3)})

    ctx = b.op("scaled_dot_product_attention", [project(q, 0), project(k, 1), project(v, 2)] + list(i[3:]))
    merged = b.op("reshape", [b.op("transpose", [ctx], {"perm": (0, 2, 1, 3)})], {"shape": (0, 0, e)})
    out_params = {"weight": p["out_proj_weight"]} | ({} if p.get("out_proj_bias") is None else {"bias": p["out_proj_bias"]})
    out = b.op("linear", [merged], {"in_features": e, "out_features": e}, out_params)
    return out if a["batch_first"] else b.op("transpose", [out], {"perm": (1, 0, 2)})


def _mha_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    q, k, v = x[:3]
    if not a["batch_first"]:
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
    e, h = int(p["out_proj_weight"].shape[0]), int(a["num_heads"])
    w, bias = p["in_proj_weight"].astype(q.dtype), p.get("in_proj_bias")

    def project(t: np.ndarray, j: int) -> np.ndarray:
        out = t @ w[j * e : (j + 1) * e].T
        if bias is not None:
            out = out + bias[j * e : (j + 1) * e].astype(q.dtype)
        return out.reshape(t.shape[0], t.shape[1], h, e // h).transpose(0, 2, 1, 3)

    ctx = _sdpa_ref({"scale": None, "is_causal": False}, [project(q, 0), project(k, 1), project(v, 2)] + list(x[3:]), {})
    merged = ctx.transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    ob = p.get("out_proj_bias")
    out = K.linear(merged, p["out_proj_weight"].astype(q.dtype), None if ob is None else ob.astype(q.dtype))
    return out if a["batch_first"] else out.transpose(1, 0, 2)


def _mha_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    e = int(p["out_proj_weight"].shape[0])
    n, lq, lk = _numel(s[0][:-1]), s[0][1] if a["batch_first"] else s[0][0], s[1][1] if a["batch_first"] else s[1][0]
    return 2 * n * e * e * 4 + 4 * n * lk * e + 0 * lq


_def("multihead_attention", "attention", "PyTorch nn.MultiheadAttention at inference (q, k, v; optional mask as in sdpa)",
     ("q", "k", "v", "mask?"), _mha_rule, _mha_ref, attrs={"embed_dim": None, "num_heads": REQUIRED, "batch_first": False},
     params=("in_proj_weight", "in_proj_bias?", "out_proj_weight", "out_proj_bias?"), decompose=_mha_dec, flops=_mha_flops)



