"""Convolution, pooling, normalisation and attention."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurenix_core.backends import cpu_nn as K
from neurenix_core.graph.opset.schema import (
    REQUIRED,
    Arrays,
    Attrs,
    Builder,
    Decompose,
    Params,
    Shape,
    _broadcast,
    _def,
    _f,
    _float_only,
    _numel,
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


def _global_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if len(s[0]) != 4:  # the decomposition reduces axes (2, 3); other ranks import as reduce_* over their spatial axes
        raise ValueError(f"expects a 4-D NCHW input, got shape {s[0]}")
    return s[0][:2] + (1, 1), d[0]


_def("global_avg_pool", "pooling", "mean over H and W, keeping them as 1 (ONNX GlobalAveragePool)", ("x",),
     _global_rule, lambda a, x, p: x[0].mean(axis=(2, 3), keepdims=True, dtype=_accumulator_of(x[0])).astype(x[0].dtype, copy=False),
     decompose=_global_dec("reduce_mean"), flops=lambda a, s, o, p: _numel(s[0]))
_def("global_max_pool", "pooling", "max over H and W, keeping them as 1 (ONNX GlobalMaxPool)", ("x",),
     _global_rule, lambda a, x, p: x[0].max(axis=(2, 3), keepdims=True),
     decompose=_global_dec("reduce_max"), flops=lambda a, s, o, p: _numel(s[0]))


# ----------------------------------------------------------------------------- normalisation
def _bn_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    c = int(p["running_mean"].shape[0])
    if len(s[0]) != 4 or s[0][1] != c:  # the decomposition broadcasts per channel over H, W
        raise ValueError(f"expects N,C,H,W with {c} channels, got shape {s[0]}")
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


# ----------------------------------------------------------------------------- ONNX-semantics convolution and pooling
# These take ONNX's attributes as they are (pads = begin..., end...; auto_pad resolved against the
# run-time shape), over 1 to 3 spatial axes; the legacy conv2d / max_pool2d ... stay what plugins lower.
_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _nd(a: Attrs, key: str, nd: int, default: int) -> tuple[int, ...]:
    v = a[key]
    out = (default,) * nd if v is None or len(v) == 0 else tuple(int(i) for i in v)
    if len(out) != nd:
        raise ValueError(f"{key} {out} has {len(out)} entries for {nd} spatial axes")
    if key in ("strides", "dilations") and min(out) < 1:
        raise ValueError(f"{key} {out} must be positive")
    return out


def _pads(a: Attrs, spatial: Shape, kernel: Sequence[int], st: Sequence[int], dil: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if a["auto_pad"] not in _AUTO_PADS:
        raise ValueError(f"auto_pad must be one of {_AUTO_PADS}, got {a['auto_pad']!r}")
    pads = a["pads"]
    if pads is not None and len(pads) not in (0, 2 * len(spatial)):
        raise ValueError(f"pads {tuple(pads)} must have 2 x {len(spatial)} entries")
    begin, end = K.auto_pads(spatial, kernel, st, dil, pads or None, a["auto_pad"])
    if min(begin + end, default=0) < 0:
        raise ValueError(f"pads {begin + end} must not be negative")
    return begin, end


def _float_in(d: str) -> None:
    if not d.startswith(("float", "bfloat")):
        raise ValueError(f"expects a floating-point input, got {d}")


#: kernel, strides, dilations, pads begin, pads end, output spatial shape.
_Geometry = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def _pool_geometry(a: Attrs, x: Shape) -> _Geometry:
    k = tuple(int(v) for v in a["kernel_shape"])
    nd = len(k)
    if len(x) != nd + 2 or nd == 0:
        raise ValueError(f"a {nd}-D kernel {k} needs an N,C + {nd} spatial axes input, got shape {x}")
    st, dil = _nd(a, "strides", nd, 1), _nd(a, "dilations", nd, 1)
    begin, end = _pads(a, x[2:], k, st, dil)
    if a["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
        out = tuple(-(-n // s) for n, s in zip(x[2:], st))
    else:
        out = K.pool_output(x[2:], k, st, dil, begin, end, bool(a["ceil_mode"]))
    if min(out) < 1 or min(k) < 1:
        raise ValueError(f"kernel {k} (dilations {dil}) does not fit the padded input {x[2:]}")
    return k, st, dil, begin, end, out


def _pool_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    out = _pool_geometry(a, s[0])[-1]
    if a.get("output", 0) == 1:
        return s[0][:2] + out, "int64"
    if "count_include_pad" in a or "p" in a:
        _float_in(d[0])
    return s[0][:2] + out, d[0]


def _max_pool_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    k, st, dil, begin, end, out = _pool_geometry(a, x[0].shape)
    if a["output"] == 1:
        return K.max_pool_indices(x[0], k, st, dil, begin, out, int(a["storage_order"]))
    return K.pool_nd(x[0], "max", k, st, dil, begin, end, out)


_POOL_ATTRS = {"kernel_shape": REQUIRED, "strides": None, "pads": None, "dilations": None, "auto_pad": "NOTSET", "ceil_mode": False}
_def("max_pool", "pooling", "ONNX MaxPool over 1-3 spatial axes (pads begin..., end...; auto_pad, ceil_mode, dilations); "
     "output 0 = values, 1 = the int64 flat indices of the maxima (storage_order 1: column-major spatial)", ("x",), _pool_nd_rule,
     _max_pool_ref, attrs=_POOL_ATTRS | {"storage_order": 0, "output": 0},
     flops=lambda a, s, o, p: _numel(o) * _numel(tuple(a["kernel_shape"])))
_def("avg_pool", "pooling", "ONNX AveragePool over 1-3 spatial axes; count_include_pad counts the declared pads, never the "
     "ceil-mode overhang", ("x",), _pool_nd_rule,
     lambda a, x, p: K.pool_nd(x[0], "avg", *_pool_geometry(a, x[0].shape), count_include_pad=bool(a["count_include_pad"])),
     attrs=_POOL_ATTRS | {"count_include_pad": False}, flops=lambda a, s, o, p: _numel(o) * _numel(tuple(a["kernel_shape"])))
_def("lp_pool", "pooling", "ONNX LpPool: (sum over the window of |x|^p)^(1/p), padding adds nothing", ("x",), _pool_nd_rule,
     lambda a, x, p: K.pool_nd(x[0], "lp", *_pool_geometry(a, x[0].shape), p=float(a["p"])),
     attrs=_POOL_ATTRS | {"p": 2}, flops=lambda a, s, o, p: 3 * _numel(o) * _numel(tuple(a["kernel_shape"])))


def _global_lp_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0]
    axes = tuple(range(2, t.ndim))
    pw = np.asarray(a["p"], t.dtype)
    return (np.sum(np.abs(t) ** pw, axis=axes, keepdims=True) ** (1 / pw)).astype(t.dtype, copy=False)


def _global_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if len(s[0]) < 3:
        raise ValueError(f"expects N,C and at least one spatial axis, got shape {s[0]}")
    _float_in(d[0])
    return s[0][:2] + (1,) * (len(s[0]) - 2), d[0]


_def("global_lp_pool", "pooling", "ONNX GlobalLpPool: (sum of |x|^p over every spatial axis)^(1/p), kept as size 1", ("x",),
     _global_nd_rule, _global_lp_ref, attrs={"p": 2}, flops=lambda a, s, o, p: 3 * _numel(s[0]))


def _unpool_geometry(a: Attrs, x: Shape) -> tuple[Shape, Shape]:
    k = tuple(int(v) for v in a["kernel_shape"])
    nd = len(k)
    if len(x) != nd + 2:
        raise ValueError(f"a {nd}-D kernel {k} needs an N,C + {nd} spatial axes input, got shape {x}")
    st = _nd(a, "strides", nd, 1)
    pads = tuple(a["pads"] or (0,) * 2 * nd)
    inferred = x[:2] + tuple((n - 1) * s - pads[i] - pads[nd + i] + kk for i, (n, s, kk) in enumerate(zip(x[2:], st, k)))
    out = inferred if a["output_shape"] is None else tuple(int(v) for v in a["output_shape"])
    if len(out) != len(x) or any(o < i for o, i in zip(out, inferred)) or min(inferred) < 1:
        raise ValueError(f"output_shape {out} must be N,C + spatial sizes at least the unpooled {inferred}")
    return inferred, out


def _max_unpool_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if s[1] != s[0]:
        raise ValueError(f"indices {s[1]} must have the shape of x {s[0]}")
    return _unpool_geometry(a, s[0])[1], d[0]


def _max_unpool_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    """Scatter into the unpooled shape (the indices are flat over it, N and C included), then
    place that at the origin of ``output_shape`` (ONNX's reference and test data)."""
    inferred, out = _unpool_geometry(a, x[0].shape)
    flat = np.zeros(_numel(inferred), x[0].dtype)
    idx = x[1].astype(np.int64).ravel()
    if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
        raise ValueError(f"max_unpool: an index is outside the unpooled shape {inferred}")
    flat[idx] = x[0].ravel()
    res = np.zeros(out, x[0].dtype)
    res[tuple(slice(0, n) for n in inferred)] = flat.reshape(inferred)
    return res


_def("max_unpool", "pooling", "ONNX MaxUnpool: x scattered to its int64 flat indices (from max_pool output 1), zeros elsewhere",
     ("x", "indices"), _max_unpool_rule, _max_unpool_ref,
     attrs={"kernel_shape": REQUIRED, "strides": None, "pads": None, "output_shape": None}, flops=lambda a, s, o, p: _numel(s[0]))


def conv_geometry(attrs: Attrs, x_shape: Shape, w_shape: Shape) -> tuple[tuple[int, ...], ...]:
    """ONNX Conv's geometry, as the reference computes it: ``(strides, dilations, begin, end, out)``,
    one entry per spatial axis each: the strides and dilations (absent: 1), the zero pads before
    (``begin``) and after (``end``) the input (explicit ``pads``, VALID: none, SAME_*: output
    ceil(size / stride), SAME_UPPER with the odd pad at the end), and the output's spatial sizes.

    ``attrs`` are the ``conv`` node's attributes completed with the defaults
    (``opset.attrs_of("conv", node.attrs)``); ``x_shape`` is (N, C, *S), ``w_shape`` (O, C/group, *k).
    Raises ValueError where the reference would (shapes, group, attribute lengths, auto_pad,
    negative pads, a kernel that does not fit the padded input)."""
    a, x, w = attrs, tuple(x_shape), tuple(w_shape)
    nd = len(w) - 2
    g = int(a["group"])
    if len(x) != len(w) or nd < 1 or g < 1 or x[1] != w[1] * g or w[0] % g:
        raise ValueError(f"expects x (N, C, *S) and weight (O, C/group, *k) of one rank with O divisible by group {g}; got {x} and {w}")
    st, dil = _nd(a, "strides", nd, 1), _nd(a, "dilations", nd, 1)
    begin, end = _pads(a, x[2:], w[2:], st, dil)
    out = tuple(_window(x[2 + i] + begin[i] + end[i], w[2 + i], st[i], 0, dil[i]) for i in range(nd))
    if min(out) < 1:
        raise ValueError(f"kernel {w[2:]} (dilations {dil}) does not fit the padded input {x[2:]}")
    return st, dil, begin, end, out


def _conv_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _float_in(d[0])
    out = conv_geometry(a, s[0], s[1])[-1]
    if len(s) > 2 and s[2] != (s[1][0],):
        raise ValueError(f"bias {s[2]} must be ({s[1][0]},)")
    return (s[0][0], s[1][0]) + out, d[0]


def _conv_nd_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    st, dil, begin, end, _ = conv_geometry(a, x[0].shape, x[1].shape)
    bias = x[2].astype(x[0].dtype) if len(x) > 2 else None
    return K.conv_nd(x[0], x[1].astype(x[0].dtype), bias, st, dil, begin, end, int(a["group"]))


_def("conv", "convolution", "ONNX Conv over 1-3 spatial axes with the weight (O, C/group, *k) and bias as inputs "
     "(pads begin..., end...; auto_pad)", ("x", "w", "b?"), _conv_nd_rule, _conv_nd_ref,
     attrs={"strides": None, "pads": None, "dilations": None, "group": 1, "auto_pad": "NOTSET"},
     flops=lambda a, s, o, p: 2 * _numel(o) * _numel(s[1][1:]))


def conv_transpose_geometry(attrs: Attrs, x_shape: Shape, w_shape: Shape) -> tuple[tuple[int, ...], ...]:
    """ONNX ConvTranspose's geometry, as the reference computes it: ``(strides, dilations, begin,
    out)``, one entry per spatial axis each. The output is a window of the full (unpadded) result,
    whose size is ``(n - 1) * stride + dilation * (k - 1) + 1 + output_padding``: ``out`` elements
    from ``begin`` (past the full result's end: zeros). Explicit pads set ``begin`` (and ``out`` =
    full - begin - end); output_shape sets ``out`` and, without explicit pads, splits the difference
    to the full size as auto_pad says (SAME_UPPER: the odd one at the end); SAME_* alone keeps
    size * stride (or the full size where that is smaller).

    ``attrs`` are the ``conv_transpose`` node's attributes completed with the defaults
    (``opset.attrs_of("conv_transpose", node.attrs)``); ``x_shape`` is (N, C, *S), ``w_shape``
    (C, O/group, *k). Raises ValueError where the reference would."""
    a, x, w = attrs, tuple(x_shape), tuple(w_shape)
    nd = len(w) - 2
    g = int(a["group"])
    if len(x) != len(w) or nd < 1 or g < 1 or x[1] != w[0] or w[0] % g:
        raise ValueError(f"expects x (N, C, *S) and weight (C, O/group, *k) of one rank with C divisible by group {g}; got {x} and {w}")
    if a["auto_pad"] not in _AUTO_PADS:
        raise ValueError(f"auto_pad must be one of {_AUTO_PADS}, got {a['auto_pad']!r}")
    st, dil, opad = _nd(a, "strides", nd, 1), _nd(a, "dilations", nd, 1), _nd(a, "output_padding", nd, 0)
    full = [(n - 1) * s + d * (k - 1) + 1 + op for n, s, d, k, op in zip(x[2:], st, dil, w[2:], opad)]
    explicit = a["auto_pad"] == "NOTSET" and bool(a["pads"])
    if explicit and len(a["pads"]) != 2 * nd:
        raise ValueError(f"pads {tuple(a['pads'])} must have 2 x {nd} entries")
    begin = tuple(int(v) for v in a["pads"][:nd]) if explicit else (0,) * nd
    if a["output_shape"] is not None and len(a["output_shape"]):
        out = tuple(int(v) for v in a["output_shape"])[-nd:]
        if not explicit:
            total = [max(0, f - o) for f, o in zip(full, out)]
            begin = tuple(t // 2 if a["auto_pad"] == "SAME_UPPER" else t - t // 2 for t in total)
    elif a["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
        # size * stride, or the full size where that is smaller (ONNX shape inference and ONNX Runtime)
        total = [max(0, f - n * s) for f, n, s in zip(full, x[2:], st)]
        out = tuple(f - t for f, t in zip(full, total))
        begin = tuple(t // 2 if a["auto_pad"] == "SAME_UPPER" else t - t // 2 for t in total)
    else:
        end = tuple(int(v) for v in a["pads"][nd:]) if explicit else (0,) * nd
        out = tuple(f - b - e for f, b, e in zip(full, begin, end))
    if len(out) != nd or min(out) < 1 or min(begin) < 0:
        raise ValueError(f"pads / output_shape leave no output (full size {tuple(full)}, output {out})")
    return st, dil, begin, out


def _conv_t_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _float_in(d[0])
    out = conv_transpose_geometry(a, s[0], s[1])[-1]
    o_ch = s[1][1] * int(a["group"])
    if len(s) > 2 and s[2] != (o_ch,):
        raise ValueError(f"bias {s[2]} must be ({o_ch},)")
    return (s[0][0], o_ch) + out, d[0]


def _conv_t_nd_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    st, dil, begin, out = conv_transpose_geometry(a, x[0].shape, x[1].shape)
    bias = x[2].astype(x[0].dtype) if len(x) > 2 else None
    return K.conv_transpose_nd(x[0], x[1].astype(x[0].dtype), bias, st, dil, int(a["group"]), begin, out)


_def("conv_transpose", "convolution", "ONNX ConvTranspose over 1-3 spatial axes with the weight (C, O/group, *k) and bias as "
     "inputs (pads, output_padding, output_shape, auto_pad)", ("x", "w", "b?"), _conv_t_nd_rule, _conv_t_nd_ref,
     attrs={"strides": None, "pads": None, "dilations": None, "group": 1, "auto_pad": "NOTSET", "output_padding": None,
            "output_shape": None},
     flops=lambda a, s, o, p: 2 * _numel(s[0]) * _numel(s[1][1:]))


def _col2im_geometry(a: Attrs, x: Shape) -> tuple[tuple[int, ...], ...]:
    image, block = tuple(int(v) for v in a["image_shape"]), tuple(int(v) for v in a["block_shape"])
    nd = len(image)
    if len(block) != nd or len(x) != 3 or min(block, default=0) < 1 or x[1] % _numel(block):
        raise ValueError(f"expects input (N, C * prod(block_shape {block}), L) and {nd}-D image_shape {image}, got {x}")
    st, dil = _nd(a, "strides", nd, 1), _nd(a, "dilations", nd, 1)
    pads = tuple(a["pads"] or (0,) * 2 * nd)
    begin, end = pads[:nd], pads[nd:]
    blocks = [_window(n + b + e, k, s, 0, d) for n, b, e, k, s, d in zip(image, begin, end, block, st, dil)]
    if min(blocks) < 1 or _numel(tuple(blocks)) != x[2]:
        raise ValueError(f"input length {x[2]} is not the number of blocks {tuple(blocks)} of image {image}")
    return image, block, st, dil, begin, end


def _col2im_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    image, block = _col2im_geometry(a, s[0])[:2]
    return (s[0][0], s[0][1] // _numel(block)) + image, d[0]


_def("col2im", "convolution", "ONNX Col2Im: sliding blocks (N, C * prod(block), L) summed back into the image (N, C, *image_shape)",
     ("x",), _col2im_rule, lambda a, x, p: K.col2im(x[0], *_col2im_geometry(a, x[0].shape)),
     attrs={"image_shape": REQUIRED, "block_shape": REQUIRED, "strides": None, "pads": None, "dilations": None},
     flops=lambda a, s, o, p: _numel(s[0]))


def _deform_geometry(a: Attrs, s: list[Shape]) -> tuple[tuple[int, ...], ...]:
    x, w, off = s[:3]
    if len(x) != 4:
        raise ValueError(f"deformable convolution is 2-D here; got input {x}")
    st, dil, begin, _end, out = conv_geometry({**a, "auto_pad": "NOTSET"}, x, w)
    og = int(a["offset_group"])
    taps = _numel(w[2:])
    if og < 1 or x[1] % og or off != (x[0], og * taps * 2) + out:
        raise ValueError(f"offset {off} must be (N, offset_group * kh * kw * 2, *out) = {(x[0], og * taps * 2) + out}")
    if len(s) > 4 and s[4] != (x[0], og * taps) + out:
        raise ValueError(f"mask {s[4]} must be {(x[0], og * taps) + out}")
    if len(s) > 3 and s[3] != (w[0],):
        raise ValueError(f"bias {s[3]} must be ({w[0]},)")
    return st, dil, begin, out


def _deform_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _float_in(d[0])
    out = _deform_geometry(a, s)[-1]
    return (s[0][0], s[1][0]) + out, d[0]


def _deform_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    st, dil, begin, _ = _deform_geometry(a, [t.shape for t in x])
    return K.deform_conv2d(x[0], x[1], x[2], x[3] if len(x) > 3 else None, x[4] if len(x) > 4 else None,
                           st, dil, begin, int(a["group"]), int(a["offset_group"]))


_def("deform_conv", "convolution", "ONNX DeformConv (2-D): kernel taps sampled bilinearly at their offsets (zero outside), "
     "times the optional mask, then a grouped convolution with weight (O, C/group, kh, kw)", ("x", "w", "offset", "b?", "mask?"),
     _deform_rule, _deform_ref, attrs={"strides": None, "pads": None, "dilations": None, "group": 1, "offset_group": 1},
     flops=lambda a, s, o, p: 2 * _numel(o) * _numel(s[1][1:]) + 8 * _numel(s[2]) * s[0][1])


# ----------------------------------------------------------------------------- ONNX-semantics normalisation
_STASH = {1: np.float32, 10: np.float16, 11: np.float64, 16: None}


def _stash(t: np.ndarray, stash_type: int) -> np.ndarray:
    """``t`` in ONNX's stash_type (1 float32, 11 float64, 10 float16, 16 bfloat16)."""
    if stash_type == 16:
        from neurenix_core.graph.opset.schema import _np_dtype

        return t.astype(_np_dtype("bfloat16"), copy=False)
    return t.astype(_STASH[stash_type], copy=False)


def _compute(t: np.ndarray, stash_type: int) -> np.ndarray:
    """The precision a normalisation computes in: stash_type, or the input's own when that is wider (float64)."""
    return t if t.dtype == np.float64 else _stash(t, stash_type)


def _stash_name(stash_type: int) -> str:
    if stash_type not in _STASH:
        raise ValueError(f"stash_type {stash_type} is not a floating type (1, 10, 11 or 16)")
    return {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}[stash_type]


def _channel_vec(s: Shape, x: Shape, what: str) -> None:
    if s != (x[1],):
        raise ValueError(f"{what} {s} must be ({x[1]},) for input {x}")


def _instance_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _float_in(d[0])
    if len(s[0]) < 3:
        raise ValueError(f"expects N,C and spatial axes, got {s[0]}")
    _channel_vec(s[1], s[0], "scale")
    _channel_vec(s[2], s[0], "bias")
    return s[0], d[0]


def _per_channel(v: np.ndarray, ndim: int, dtype: Any) -> np.ndarray:
    return v.astype(dtype, copy=False).reshape((1, -1) + (1,) * (ndim - 2))


def _standardise(t: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = t.mean(axis=axes, keepdims=True)
    centred = t - mean
    var = (centred * centred).mean(axis=axes, keepdims=True)
    return centred / np.sqrt(var + np.asarray(eps, t.dtype))


def _instance_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0]
    y = _standardise(t, tuple(range(2, t.ndim)), a["epsilon"])
    return (y * _per_channel(x[1], t.ndim, t.dtype) + _per_channel(x[2], t.ndim, t.dtype)).astype(t.dtype, copy=False)


_def("instance_norm", "normalisation", "ONNX InstanceNormalization: each (n, c) plane standardised, then scale and bias per channel",
     ("x", "scale", "bias"), _instance_rule, _instance_ref, attrs={"epsilon": 1e-5}, flops=lambda a, s, o, p: 8 * _numel(o))


def _group_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _float_in(d[0])
    g = int(a["num_groups"])
    if len(s[0]) < 2 or g < 1 or s[0][1] % g:
        raise ValueError(f"channels of {s[0]} must divide into num_groups {g}")
    _channel_vec(s[1], s[0], "scale")
    _channel_vec(s[2], s[0], "bias")
    _stash_name(int(a["stash_type"]))
    return s[0], d[0]


def _group_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t, g = x[0], int(a["num_groups"])
    grouped = _compute(t, int(a["stash_type"])).reshape((t.shape[0], g, -1))
    y = _standardise(grouped, (2,), a["epsilon"]).reshape(t.shape)
    return (y * _per_channel(x[1], t.ndim, y.dtype) + _per_channel(x[2], t.ndim, y.dtype)).astype(t.dtype, copy=False)


_def("group_norm", "normalisation", "ONNX GroupNormalization (opset 21): channels standardised in num_groups groups (in stash_type), "
     "then scale and bias per channel", ("x", "scale", "bias"), _group_rule, _group_ref,
     attrs={"num_groups": REQUIRED, "epsilon": 1e-5, "stash_type": 1}, flops=lambda a, s, o, p: 8 * _numel(o))


def _ln_axis(a: Attrs, x: Shape) -> int:
    from neurenix_core.graph.opset.schema import _axis

    return _axis(int(a["axis"]), len(x))


def _layer_normalization_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _float_in(d[0])
    axis = _ln_axis(a, s[0])
    for extra in s[1:]:
        _broadcast([s[0], extra])
        if len(extra) > len(s[0]) - axis:
            raise ValueError(f"scale / bias {extra} reach beyond the normalised axes {s[0][axis:]}")
    if a["output"] == 0:
        return s[0], d[0]
    return s[0][:axis] + (1,) * (len(s[0]) - axis), _stash_name(int(a["stash_type"]))


def _layer_normalization_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0]
    axis = _ln_axis(a, t.shape)
    axes = tuple(range(axis, t.ndim))
    xs = _compute(t, int(a["stash_type"]))
    mean = xs.mean(axis=axes, keepdims=True)
    centred = xs - mean
    inv = 1 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + np.asarray(a["epsilon"], xs.dtype))
    if a["output"] == 1:
        return _stash(mean, int(a["stash_type"]))
    if a["output"] == 2:
        return _stash(inv, int(a["stash_type"]))
    y = centred * inv * x[1].astype(xs.dtype, copy=False)
    if len(x) > 2:
        y = y + x[2].astype(xs.dtype, copy=False)
    return y.astype(t.dtype, copy=False)


_def("layer_normalization", "normalisation", "ONNX LayerNormalization: standardise over the axes from `axis` (in stash_type), "
     "times scale plus bias (inputs, broadcast); output 0 = Y, 1 = Mean, 2 = InvStdDev", ("x", "scale", "bias?"),
     _layer_normalization_rule, _layer_normalization_ref, attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1, "output": 0},
     flops=lambda a, s, o, p: 8 * _numel(s[0]))


def _rms_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0]
    axes = tuple(range(_ln_axis(a, t.shape), t.ndim))
    xs = _compute(t, int(a["stash_type"]))
    y = xs / np.sqrt((xs * xs).mean(axis=axes, keepdims=True) + np.asarray(a["epsilon"], xs.dtype))
    return (y * x[1].astype(xs.dtype, copy=False)).astype(t.dtype, copy=False)


def _rms_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _stash_name(int(a["stash_type"]))
    return _layer_normalization_rule({**a, "output": 0}, s, d, p)


_def("rms_normalization", "normalisation", "ONNX RMSNormalization: x / sqrt(mean(x^2 over the axes from `axis`) + epsilon) * scale",
     ("x", "scale"), _rms_rule, _rms_ref, attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1},
     flops=lambda a, s, o, p: 5 * _numel(s[0]))


def _bn_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _float_in(d[0])
    if len(s[0]) < 2:
        raise ValueError(f"expects N,C,... got {s[0]}")
    for what, v in zip(("scale", "bias", "mean", "var"), s[1:]):
        _channel_vec(v, s[0], what)
    if a["output"] == 0:
        return s[0], d[0]
    if not a["training_mode"]:
        raise ValueError("running_mean / running_var outputs exist only with training_mode=1")
    return (s[0][1],), d[3]


def _bn_nd_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    """Inference: the given statistics. training_mode=1 (ONNX's reference): the batch's mean and
    biased variance normalise; outputs 1 and 2 are the momentum-blended running statistics."""
    t, (scale, bias, mean, var) = x[0], x[1:5]
    eps = np.asarray(a["epsilon"], t.dtype)
    if a["training_mode"]:
        axes = (0,) + tuple(range(2, t.ndim))
        batch_mean, batch_var = t.mean(axis=axes), t.var(axis=axes)
        m = np.asarray(a["momentum"], mean.dtype)
        if a["output"] == 1:
            return (mean * m + batch_mean.astype(mean.dtype) * (1 - m)).astype(mean.dtype, copy=False)
        if a["output"] == 2:
            return (var * m + batch_var.astype(var.dtype) * (1 - m)).astype(var.dtype, copy=False)
        mean, var = batch_mean, batch_var
    scale, bias, mean, var = (_per_channel(v, t.ndim, t.dtype) for v in (scale, bias, mean, var))
    return (scale * (t - mean) / np.sqrt(var + eps) + bias).astype(t.dtype, copy=False)


_def("batch_normalization", "normalisation", "ONNX BatchNormalization with scale, bias, mean and var as inputs; training_mode=1 "
     "normalises with the batch statistics, output 1 / 2 = running mean / var", ("x", "scale", "bias", "mean", "var"),
     _bn_nd_rule, _bn_nd_ref, attrs={"epsilon": 1e-5, "momentum": 0.9, "training_mode": False, "output": 0},
     flops=lambda a, s, o, p: 4 * _numel(o))


def _lrn_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if len(s[0]) < 3 or int(a["size"]) < 1:
        raise ValueError(f"expects N,C,... input and a positive size, got {s[0]} and {a['size']}")
    return _float_only(a, s, d, p)


def _lrn_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    """Sum of squares over channels c - floor((size-1)/2) .. c + ceil((size-1)/2) by a cumulative sum."""
    t, size = x[0], int(a["size"])
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = (t * t).astype(_accumulator_of(t), copy=False)
    csum = np.concatenate([np.zeros_like(sq[:, :1]), np.cumsum(sq, axis=1)], axis=1)
    ch = np.arange(t.shape[1])
    window = csum[:, np.minimum(ch + hi + 1, t.shape[1])] - csum[:, np.maximum(ch - lo, 0)]
    den = (a["bias"] + (a["alpha"] / size) * window) ** a["beta"]
    return (t / den.astype(t.dtype)).astype(t.dtype, copy=False)


def _accumulator_of(t: np.ndarray) -> Any:
    return np.float32 if t.dtype.itemsize < 4 else t.dtype


_def("lrn", "normalisation", "ONNX LRN: x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels)^beta", ("x",),
     _lrn_rule, _lrn_ref, attrs={"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, flops=lambda a, s, o, p: 6 * _numel(o))


def _lp_norm_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    from neurenix_core.graph.opset.schema import _axis

    _axis(int(a["axis"]), len(s[0]))
    if int(a["p"]) not in (1, 2):
        raise ValueError(f"p must be 1 or 2, got {a['p']}")
    return _float_only(a, s, d, p)


def _lp_norm_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0]
    norm = np.abs(t).sum(axis=int(a["axis"]), keepdims=True) if int(a["p"]) == 1 else np.sqrt((t * t).sum(axis=int(a["axis"]), keepdims=True))
    safe = np.where(norm == 0, np.ones_like(norm), norm)
    return np.where(norm == 0, np.zeros_like(t), t / safe).astype(t.dtype, copy=False)


_def("lp_normalization", "normalisation", "ONNX LpNormalization: x / its L1 or L2 norm along `axis` (0 where the norm is 0)", ("x",),
     _lp_norm_rule, _lp_norm_ref, attrs={"axis": -1, "p": 2}, flops=lambda a, s, o, p: 3 * _numel(o))


def _mvn_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    from neurenix_core.graph.opset.schema import _axes

    _axes(a["axes"], len(s[0]))
    return _float_only(a, s, d, p)


def _mvn_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    from neurenix_core.graph.opset.schema import _axes

    t = x[0]
    axes = _axes(a["axes"], t.ndim)
    mean = t.mean(axis=axes, keepdims=True)
    centred = t - mean
    # ONNX's function body: (x - mean) / (sqrt(E[x^2] - E[x]^2) + 1e-9)
    std = np.sqrt(np.maximum((t * t).mean(axis=axes, keepdims=True) - mean * mean, 0))
    return (centred / (std + np.asarray(1e-9, t.dtype))).astype(t.dtype, copy=False)


_def("mean_variance_normalization", "normalisation", "ONNX MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes`", ("x",),
     _mvn_rule, _mvn_ref, attrs={"axes": (0, 2, 3)}, flops=lambda a, s, o, p: 6 * _numel(o))


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



