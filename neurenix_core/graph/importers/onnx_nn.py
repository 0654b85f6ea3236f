"""ONNX import handlers: Convolution, pooling, normalisation and image ops (ONNX's nn and image families).

Where a node fits an op of the first release (``conv2d`` / ``conv1d`` / ``conv_transpose2d`` with
constant weights, symmetric 2-D ``max_pool2d`` / ``avg_pool2d``, 4-D ``batch_norm2d`` and
``global_*_pool``, ``layer_norm`` with constant scale and bias), it becomes that op, which every
plugin lowers. Everything else becomes the ONNX-semantics op (``conv``, ``conv_transpose``,
``max_pool``, ``avg_pool``, ``layer_normalization``, ``batch_normalization`` ...), which takes
ONNX's attributes as they are and its operands as inputs, and resolves ``auto_pad`` against the
run-time shape. An op with several outputs emits one node per output the model uses (``output``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, const, fail, ints, outputs_used
from neurenix_core.graph.opset.schema import _np_dtype as opset_np_dtype

__all__ = ["HANDLERS"]

_SAME = ("SAME_UPPER", "SAME_LOWER")


def _x(n: OnnxNode) -> Value:
    x = n.inputs[0]
    assert x is not None
    return x


def _dynamic(b: GraphBuilder) -> bool:
    return any(s.dynamic for s in b.inputs)


def _list(v: Any) -> tuple[int, ...] | None:
    return None if v is None else tuple(int(i) for i in v)


def _spatial_attrs(n: OnnxNode, nd: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], str]:
    """(strides, dilations, pads begin+end, auto_pad) with ONNX's defaults (stride 1, not the kernel)."""
    a = n.attrs
    auto = str(a.get("auto_pad", "NOTSET"))
    pads = tuple(a.get("pads") or (0,) * 2 * nd) if auto == "NOTSET" else (0,) * 2 * nd
    return tuple(a.get("strides") or (1,) * nd), tuple(a.get("dilations") or (1,) * nd), pads, auto


def _same_pads(shape: tuple[int, ...], kernel: tuple[int, ...], st: tuple[int, ...], dil: tuple[int, ...], auto: str) -> tuple[int, ...]:
    nd = len(kernel)
    begin, end = [0] * nd, [0] * nd
    for i in range(nd):
        total = max(0, (math.ceil(shape[2 + i] / st[i]) - 1) * st[i] + dil[i] * (kernel[i] - 1) + 1 - shape[2 + i])
        begin[i] = total // 2 if auto == "SAME_UPPER" else total - total // 2
        end[i] = total - begin[i]
    return tuple(begin + end)


def _onnx_attrs(n: OnnxNode, keys: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in keys:
        if k in n.attrs:
            v = n.attrs[k]
            out[k] = tuple(int(i) for i in v) if isinstance(v, (list, tuple)) else v
    return out


# ----------------------------------------------------------------------------- convolution
def _conv(b: GraphBuilder, n: OnnxNode) -> Value:
    x, w, bias = _x(n), n.input(1), n.input(2)
    nd = len(b.spec(x).shape) - 2
    st, dil, pads, auto = _spatial_attrs(n, nd)
    group = int(n.attrs.get("group", 1))
    legacy = (isinstance(w, Const) and w.array.ndim in (3, 4) and w.array.ndim == nd + 2 and (bias is None or isinstance(bias, Const))
              and (auto not in _SAME or not _dynamic(b)))
    if not legacy:
        attrs = {"group": group, "auto_pad": auto} | _onnx_attrs(n, ("strides", "pads", "dilations"))
        return b.emit(n.name, "conv", [v for v in n.inputs if v is not None], attrs)
    weight = w.array  # type: ignore[union-attr]
    if auto in _SAME:
        pads = _same_pads(b.spec(x).shape, tuple(weight.shape[2:]), st, dil, auto)
    begin, end = list(pads[:nd]), list(pads[nd:])
    if begin != end:
        x = b.emit(n.name + ".pad", "pad", [x], {"pads": ((0, 0), (0, 0)) + tuple(zip(begin, end))})
        begin = [0] * nd
    attrs = {"stride": st, "padding": tuple(begin), "dilation": dil, "groups": group}
    if nd == 2:
        attrs |= {"in_channels": int(weight.shape[1]) * group, "out_channels": int(weight.shape[0]),
                  "kernel_size": tuple(int(k) for k in weight.shape[2:])}
    params = {"weight": weight, "bias": None if bias is None else bias.array}  # type: ignore[union-attr]
    return b.emit(n.name, "conv2d" if nd == 2 else "conv1d", [x], attrs, params)


def _conv_transpose(b: GraphBuilder, n: OnnxNode) -> Value:
    x, w, bias = _x(n), n.input(1), n.input(2)
    a = n.attrs
    auto = str(a.get("auto_pad", "NOTSET"))
    pads = tuple(a.get("pads") or (0, 0, 0, 0))
    st, dil, out_pad = tuple(a.get("strides") or (1, 1)), tuple(a.get("dilations") or (1, 1)), tuple(a.get("output_padding") or (0, 0))
    legacy = (isinstance(w, Const) and w.array.ndim == 4 and len(b.spec(x).shape) == 4 and (bias is None or isinstance(bias, Const))
              and auto in ("NOTSET", "VALID") and not a.get("output_shape") and pads[:2] == pads[2:]
              and all(o < max(s, d) for o, s, d in zip(out_pad, st, dil)))
    if not legacy:
        attrs = {"group": int(a.get("group", 1)), "auto_pad": auto} | _onnx_attrs(
            n, ("strides", "pads", "dilations", "output_padding", "output_shape"))
        return b.emit(n.name, "conv_transpose", [v for v in n.inputs if v is not None], attrs)
    weight = w.array  # type: ignore[union-attr]
    group = int(a.get("group", 1))
    padding = (0, 0) if auto == "VALID" else pads[:2]
    attrs = {"stride": st, "padding": padding, "output_padding": out_pad, "dilation": dil, "groups": group,
             "in_channels": int(weight.shape[0]), "out_channels": int(weight.shape[1]) * group,
             "kernel_size": tuple(int(k) for k in weight.shape[2:])}
    return b.emit(n.name, "conv_transpose2d", [x], attrs, {"weight": weight, "bias": None if bias is None else bias.array})  # type: ignore[union-attr]


def _col2im(b: GraphBuilder, n: OnnxNode) -> Value:
    image, block = ints(const(b, n, 1, "image_shape")), ints(const(b, n, 2, "block_shape"))
    attrs = {"image_shape": image, "block_shape": block} | _onnx_attrs(n, ("strides", "pads", "dilations"))
    return b.emit(n.name, "col2im", [_x(n)], attrs)


def _deform_conv(b: GraphBuilder, n: OnnxNode) -> Value:
    x, w, offset, bias, mask = (n.input(i) for i in range(5))
    if w is None or offset is None:
        raise fail(b, n, "needs a weight and an offset")
    if bias is None and mask is not None:  # the op's optional inputs are positional: a zero bias keeps mask in its slot
        bias = Const(np.zeros(b.spec(w).shape[0], opset_np_dtype(b.spec(x).dtype)))  # type: ignore[arg-type]
    attrs = {"group": int(n.attrs.get("group", 1)), "offset_group": int(n.attrs.get("offset_group", 1))}
    attrs |= _onnx_attrs(n, ("strides", "pads", "dilations"))
    return b.emit(n.name, "deform_conv", [v for v in (x, w, offset, bias, mask) if v is not None], attrs)


# ----------------------------------------------------------------------------- pooling
def _pool_attrs(n: OnnxNode) -> dict[str, Any]:
    attrs = {"kernel_shape": tuple(int(k) for k in n.attrs["kernel_shape"]), "auto_pad": str(n.attrs.get("auto_pad", "NOTSET")),
             "ceil_mode": bool(n.attrs.get("ceil_mode", 0))}
    return attrs | _onnx_attrs(n, ("strides", "pads", "dilations"))


def _legacy_pool(b: GraphBuilder, n: OnnxNode) -> dict[str, Any] | None:
    """max_pool2d / avg_pool2d attributes when the node is a plain symmetric 2-D pool, else None."""
    if "kernel_shape" not in n.attrs:
        return None
    k = tuple(int(v) for v in n.attrs["kernel_shape"])
    if len(k) != 2 or len(b.spec(_x(n)).shape) != 4 or n.attrs.get("ceil_mode", 0):
        return None
    st, dil, pads, auto = _spatial_attrs(n, 2)
    if auto in _SAME or dil != (1, 1) or pads[:2] != pads[2:] or any(p >= kk for p, kk in zip(pads, k)):
        return None
    return {"kernel_size": k, "stride": st, "padding": pads[:2]}


def _max_pool(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    used = outputs_used(n) + [False]
    legacy = _legacy_pool(b, n)
    if legacy is not None and not used[1]:
        return [b.emit(n.name, "max_pool2d", [_x(n)], legacy)]
    if "kernel_shape" not in n.attrs:
        raise fail(b, n, "has no kernel_shape")
    attrs = _pool_attrs(n) | {"storage_order": int(n.attrs.get("storage_order", 0))}
    return [b.emit(f"{n.name}.{i}" if i else n.name, "max_pool", [_x(n)], attrs | {"output": i}) if used[i] else None for i in range(2)]


def _avg_pool(b: GraphBuilder, n: OnnxNode) -> Value:
    count = bool(n.attrs.get("count_include_pad", 0))
    legacy = _legacy_pool(b, n)
    if legacy is not None:
        return b.emit(n.name, "avg_pool2d", [_x(n)], legacy | {"count_include_pad": count})
    if "kernel_shape" not in n.attrs:
        raise fail(b, n, "has no kernel_shape")
    return b.emit(n.name, "avg_pool", [_x(n)], _pool_attrs(n) | {"count_include_pad": count})


def _lp_pool(b: GraphBuilder, n: OnnxNode) -> Value:
    if "kernel_shape" not in n.attrs:
        raise fail(b, n, "has no kernel_shape")
    return b.emit(n.name, "lp_pool", [_x(n)], _pool_attrs(n) | {"p": int(n.attrs.get("p", 2))})


def _global(legacy: str, reduce: str) -> Handler:
    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        rank = len(b.spec(_x(n)).shape)
        if rank == 4:
            return b.emit(n.name, legacy, [_x(n)])
        if rank < 3:
            raise fail(b, n, f"pools a {rank}-D input; it needs N, C and spatial axes")
        return b.emit(n.name, reduce, [_x(n)], {"axes": tuple(range(2, rank)), "keepdims": True})

    return run


def _max_unpool(b: GraphBuilder, n: OnnxNode) -> Value:
    shape = const(b, n, 2, "output_shape")
    attrs = {"kernel_shape": tuple(int(k) for k in n.attrs["kernel_shape"]), "output_shape": None if shape is None else ints(shape)}
    return b.emit(n.name, "max_unpool", [_x(n), n.inputs[1]], attrs | _onnx_attrs(n, ("strides", "pads")))  # type: ignore[list-item]


# ----------------------------------------------------------------------------- normalisation
def _layer_norm(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    x, scale, bias = _x(n), n.input(1), n.input(2)
    spec = b.spec(x)
    axis = int(n.attrs.get("axis", -1))
    eps, stash = float(n.attrs.get("epsilon", 1e-5)), int(n.attrs.get("stash_type", 1))
    used = (outputs_used(n) + [False, False])[:3]
    if not -len(spec.shape) <= axis < len(spec.shape):
        raise fail(b, n, f"normalises from axis {axis} of a {len(spec.shape)}-D input")
    dims = tuple(spec.shape[axis % len(spec.shape):])
    fits = [isinstance(v, Const) and tuple(v.array.shape) == dims for v in (scale, bias) if v is not None]
    if used == [True, False, False] and all(fits) and fits and spec.dtype == "float32" and stash == 1:
        params = {"weight": scale.array, "bias": None if bias is None else bias.array}  # type: ignore[union-attr]
        return [b.emit(n.name, "layer_norm", [x], {"normalized_shape": dims, "eps": eps}, params)]
    ins = [v for v in (x, scale, bias) if v is not None]
    attrs = {"axis": axis, "epsilon": eps, "stash_type": stash}
    return [b.emit(f"{n.name}.{i}" if i else n.name, "layer_normalization", ins, attrs | {"output": i}) if used[i] else None
            for i in range(3)]


def _batch_norm(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    x = _x(n)
    ops = n.inputs[1:5]
    training = bool(n.attrs.get("training_mode", 0))
    eps = float(n.attrs.get("epsilon", 1e-5))
    used = (outputs_used(n) + [False, False])[:3]
    if len(ops) != 4 or any(v is None for v in ops):
        raise fail(b, n, "needs scale, bias, mean and var")
    if not training and any(used[1:]):
        raise fail(b, n, "asks for running mean / var outputs outside training mode")
    if not training and used == [True, False, False] and all(isinstance(v, Const) for v in ops) and len(b.spec(x).shape) == 4:
        scale, bias, mean, var = (v.array for v in ops)  # type: ignore[union-attr]
        return [b.emit(n.name, "batch_norm2d", [x], {"num_features": int(mean.shape[0]), "eps": eps},
                       {"running_mean": mean, "running_var": var, "weight": scale, "bias": bias})]
    attrs = {"epsilon": eps, "momentum": float(n.attrs.get("momentum", 0.9)), "training_mode": training}
    ins = [x] + list(ops)
    return [b.emit(f"{n.name}.{i}" if i else n.name, "batch_normalization", ins, attrs | {"output": i}) if used[i] else None  # type: ignore[arg-type]
            for i in range(3)]


def _group_norm(b: GraphBuilder, n: OnnxNode) -> Value:
    c = b.spec(_x(n)).shape[1] if len(b.spec(_x(n)).shape) > 1 else 0
    g = int(n.attrs["num_groups"])
    if n.input(1) is None or n.input(2) is None:
        raise fail(b, n, "needs scale and bias")
    if b.spec(n.input(1)).shape == (g,) and g != c:  # type: ignore[arg-type]
        raise fail(b, n, "has per-group scale and bias (GroupNormalization-18, deprecated); opset 21 takes them per channel")
    attrs = {"num_groups": g, "epsilon": float(n.attrs.get("epsilon", 1e-5)), "stash_type": int(n.attrs.get("stash_type", 1))}
    return b.emit(n.name, "group_norm", n.inputs[:3], attrs)  # type: ignore[arg-type]


def _attrs_op(op: str, defaults: dict[str, Any], rename: dict[str, str] | None = None) -> Handler:
    """A one-output op whose ONNX attributes map by name (``rename``: ONNX name -> op name)."""
    names = rename or {}

    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        attrs = {names.get(k, k): (tuple(v) if isinstance(v, list) else v) for k, v in n.attrs.items() if names.get(k, k) in defaults}
        return b.emit(n.name, op, [v for v in n.inputs if v is not None], attrs)

    return run


def _lrn(b: GraphBuilder, n: OnnxNode) -> Value:
    a = n.attrs
    attrs = {"size": int(a["size"]), "alpha": float(a.get("alpha", 1e-4)), "beta": float(a.get("beta", 0.75)), "bias": float(a.get("bias", 1.0))}
    return b.emit(n.name, "lrn", [_x(n)], attrs)


def _rms_norm(b: GraphBuilder, n: OnnxNode) -> Value:
    attrs = {"axis": int(n.attrs.get("axis", -1)), "epsilon": float(n.attrs.get("epsilon", 1e-5)), "stash_type": int(n.attrs.get("stash_type", 1))}
    return b.emit(n.name, "rms_normalization", n.inputs[:2], attrs)  # type: ignore[arg-type]


HANDLERS: dict[str, Handler] = {
    "Conv": _conv, "ConvTranspose": _conv_transpose, "Col2Im": _col2im, "DeformConv": _deform_conv,
    "MaxPool": _max_pool, "AveragePool": _avg_pool, "LpPool": _lp_pool, "MaxUnpool": _max_unpool,
    "GlobalAveragePool": _global("global_avg_pool", "reduce_mean"), "GlobalMaxPool": _global("global_max_pool", "reduce_max"),
    "GlobalLpPool": lambda b, n: b.emit(n.name, "global_lp_pool", [_x(n)], {"p": int(n.attrs.get("p", 2))}),
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm, "GroupNormalization": _group_norm,
    "InstanceNormalization": lambda b, n: b.emit(n.name, "instance_norm", n.inputs[:3], {"epsilon": float(n.attrs.get("epsilon", 1e-5))}),  # type: ignore[arg-type]
    "LRN": _lrn, "RMSNormalization": _rms_norm,
    "LpNormalization": lambda b, n: b.emit(n.name, "lp_normalization", [_x(n)], {"axis": int(n.attrs.get("axis", -1)), "p": int(n.attrs.get("p", 2))}),
    "MeanVarianceNormalization": lambda b, n: b.emit(n.name, "mean_variance_normalization", [_x(n)],
                                                     {"axes": tuple(int(i) for i in n.attrs.get("axes", (0, 2, 3)))}),
}
