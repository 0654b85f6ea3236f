"""One JAX handler per opset op: ``LOWERINGS[op](node, params, inputs, mode) -> Value``.

The handlers run while ``jax.jit`` traces the whole graph (``lowering.py`` drives them), so every
op below becomes part of one XLA program. Semantics are the opset's (``neurenix_core.graph.opset``,
whose NumPy ``ref`` is the ground truth the tests compare against); shapes come from the opset's
own shape rules (``opset.infer``) so reshape-like ops cannot drift from the core.

Layout: a 4-D value may be held NHWC (``Value.nhwc``) while its logical layout stays NCHW.
Convolutions, pools and batch norm produce NHWC; elementwise ops, keepdims reductions, softmax,
transpose and concat follow the layout they are given (mapping their axes); every other op asks
for the logical layout with :func:`nchw`. That keeps chains of conv/bn/activation/SE blocks free of
transposes, which XLA could not always remove on its own.

Precision: floats flow in ``mode.compute`` (bfloat16 by default); dots and convolutions pass
``mode.precision`` and accumulate in ``mode.acc``; softmax, normalisation and float reductions
accumulate in float32 and hand back the activation dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from neurenix_core.contract import Node, conv_geometry, conv_transpose_geometry, opset
from neurenix_tpu import kernels
from neurenix_tpu.modes import Mode

__all__ = ["LOWERINGS", "Lowering", "Value", "attention_core", "nchw", "nhwc"]

Array = Any
Params = Mapping[str, Array]

#: Logical NCHW axis -> physical axis of the NHWC array (and back).
_TO_NHWC = (0, 3, 1, 2)
_FROM_NHWC = (0, 2, 3, 1)


class Value(NamedTuple):
    """A traced value and whether it is a 4-D tensor held as NHWC (its logical layout is NCHW)."""

    array: Array
    nhwc: bool = False


def nhwc(v: Value) -> Array:
    return v.array if v.nhwc or v.array.ndim != 4 else v.array.transpose(_FROM_NHWC)


def nchw(v: Value) -> Array:
    return v.array.transpose(_TO_NHWC) if v.nhwc else v.array


Lowering = Callable[[Node, Params, Sequence[Value], Mode], Value]


def _attrs(node: Node) -> dict[str, Any]:
    return opset.attrs_of(node.op, node.attrs)


def _is_float(x: Array) -> bool:
    return bool(jnp.issubdtype(x.dtype, jnp.floating))


def _acc(x: Array) -> Any:
    # Low-precision floats accumulate in float32 (float64 stays float64).
    return jnp.promote_types(x.dtype, jnp.float32)


def _phys_axis(axis: int, v: Value) -> int:
    """The physical axis of logical ``axis`` of ``v``."""
    ax = axis % v.array.ndim
    return _TO_NHWC[ax] if v.nhwc else ax


def _out_shape(node: Node, ins: Sequence[Array], p: Params) -> tuple[int, ...]:
    """The opset's own shape rule on the (logical) traced shapes."""
    shapes = [tuple(int(n) for n in x.shape) for x in ins]
    return opset.infer(node.op, node.attrs, shapes, [_dtype_name(x) for x in ins], p)[0]


def _dtype_name(x: Array) -> str:
    return "bool" if x.dtype == jnp.bool_ else str(jnp.dtype(x.dtype))


# ----------------------------------------------------------------------------- elementwise
def _aligned(ins: Sequence[Value]) -> tuple[list[Array], bool]:
    """Operands in one layout: NHWC when some operand is NHWC and all fit in four dimensions
    (a (C, 1, 1) constant becomes (1, 1, 1, C)); else the logical layout."""
    if any(v.nhwc for v in ins) and all(v.array.ndim <= 4 for v in ins):
        out = []
        for v in ins:
            a = v.array
            if not v.nhwc:
                a = a.reshape((1,) * (4 - a.ndim) + a.shape).transpose(_FROM_NHWC)
            out.append(a)
        return out, True
    return [nchw(v) for v in ins], False


def _nary(fn: Callable[..., Array]) -> Lowering:
    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        arrays, flag = _aligned(ins)
        return Value(fn(*arrays), flag)

    return lower


def _div(a: Array, b: Array) -> Array:
    if _is_float(a) or _is_float(b):
        return jnp.divide(a, b)
    t = jnp.result_type(a, b)
    return lax.div(a.astype(t), b.astype(t))  # integer division truncates toward zero (ONNX)


def _unary(fn: Callable[[Array], Array]) -> Lowering:
    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        return Value(fn(ins[0].array), ins[0].nhwc)  # layout-agnostic: keep whatever layout came in

    return lower


def _unary_attrs(fn: Callable[[Array, dict[str, Any]], Array]) -> Lowering:
    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        return Value(fn(ins[0].array, _attrs(node)), ins[0].nhwc)

    return lower


def _clip(x: Array, a: dict[str, Any]) -> Array:
    lo, hi = a["min"], a["max"]
    if lo is None and hi is None:
        return x
    return jnp.clip(x, lo, hi).astype(x.dtype)


def _hardsigmoid(x: Array, a: dict[str, Any]) -> Array:
    return jnp.clip(x * a["alpha"] + a["beta"], 0, 1).astype(x.dtype)


def _hardswish(x: Array) -> Array:
    return x * jnp.clip(x / 6.0 + 0.5, 0, 1)


def _relu(x: Array) -> Array:
    return jnp.maximum(x, jnp.zeros((), x.dtype))


def _with_axis(fn: Callable[[Array, int], Array]) -> Lowering:
    """softmax / log_softmax: same shape out, so the layout is kept and the axis mapped."""
    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        v = ins[0]
        x = v.array
        return Value(fn(x.astype(_acc(x)), _phys_axis(int(_attrs(node)["axis"]), v)).astype(x.dtype), v.nhwc)

    return lower


# ----------------------------------------------------------------------------- linear algebra
def _dot(fn: Callable[..., Array], a: Array, b: Array, mode: Mode) -> Array:
    """A dot on the MXU: floats at the mode's precision with wide accumulation, back in the operand dtype."""
    if _is_float(a) and _is_float(b):
        t = jnp.result_type(a, b)
        y = fn(a.astype(t), b.astype(t), precision=mode.precision, preferred_element_type=mode.acc)
        return y.astype(t)
    return fn(a, b)


def _matmul(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    return Value(_dot(jnp.matmul, nchw(ins[0]), nchw(ins[1]), mode))


def _gemm(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    x, y = nchw(ins[0]), nchw(ins[1])
    out = _dot(jnp.matmul, x.T if a["trans_a"] else x, y.T if a["trans_b"] else y, mode)
    if a["alpha"] != 1.0:
        out = out * a["alpha"]
    if len(ins) > 2:
        c = nchw(ins[2])
        out = out + (c * a["beta"] if a["beta"] != 1.0 else c)
    return Value(out)


def _linear(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    return Value(kernels.linear(nchw(ins[0]), p["weight"], p.get("bias"), mode.precision, mode.acc))


# ----------------------------------------------------------------------------- convolution, pooling
def _conv2d(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    y = kernels.conv2d(
        nhwc(ins[0]), p["weight"], p.get("bias"), a["stride"], a["padding"], a["dilation"], int(a["groups"]),
        layout=kernels.NHWC, precision=mode.precision, acc=mode.acc,
    )
    return Value(y, True)


def _conv1d(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    x = nchw(ins[0])
    w = p["weight"].astype(x.dtype)
    pad = int(a["padding"][0])
    y = lax.conv_general_dilated(
        x, w, window_strides=(int(a["stride"][0]),), padding=((pad, pad),), rhs_dilation=(int(a["dilation"][0]),),
        dimension_numbers=("NCH", "OIH", "NCH"), feature_group_count=int(a["groups"]),
        precision=mode.precision, preferred_element_type=mode.acc,
    )
    if p.get("bias") is not None:
        y = y + p["bias"].astype(y.dtype).reshape(1, -1, 1)
    return Value(y.astype(x.dtype))


def _conv_transpose2d(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """The gradient-of-conv form: the input dilated by the stride, convolved with the spatially
    flipped kernel (channels swapped per group), padded by dilation*(k-1) - padding (plus
    output_padding at the far end)."""
    a = _attrs(node)
    x = nchw(ins[0])
    g = int(a["groups"])
    w = p["weight"].astype(x.dtype)  # (C, O/g, kh, kw)
    c, og, kh, kw = w.shape
    w = w.reshape(g, c // g, og, kh, kw).transpose(0, 2, 1, 3, 4).reshape(g * og, c // g, kh, kw)[:, :, ::-1, ::-1]
    st, pad, out_pad, dil = a["stride"], a["padding"], a["output_padding"], a["dilation"]
    edges = [(int(d) * (k - 1) - int(q), int(d) * (k - 1) - int(q) + int(o)) for d, k, q, o in zip(dil, (kh, kw), pad, out_pad)]
    y = lax.conv_general_dilated(
        x, w, window_strides=(1, 1), padding=edges, lhs_dilation=tuple(int(s) for s in st), rhs_dilation=tuple(int(d) for d in dil),
        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=g, precision=mode.precision, preferred_element_type=mode.acc,
    )
    if p.get("bias") is not None:
        y = y + p["bias"].astype(y.dtype).reshape(1, -1, 1, 1)
    return Value(y.astype(x.dtype))


def _logical_shape(v: Value) -> tuple[int, ...]:
    s = tuple(int(n) for n in v.array.shape)
    return (s[0], s[3], s[1], s[2]) if v.nhwc else s


def _conv_layout(nd: int, w_nhwc: bool) -> tuple[tuple[str, str, str], bool]:
    """(lhs, rhs, out) dimension numbers and whether x and the result are NHWC: 2-D convolutions
    run NHWC as conv2d's do (chains stay free of transposes); a weight held NHWC is read in place."""
    if nd == 2:
        return ("NHWC", "OHWI" if w_nhwc else "OIHW", "NHWC"), True
    spatial = "DHW"[3 - nd:]
    return (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}"), False


def _with_bias(y: Array, ins: Sequence[Value], channels_last: bool) -> Array:
    """y (accumulator dtype) plus the optional bias input, broadcast over the channel axis."""
    if len(ins) < 3:
        return y
    shape = (1,) * (y.ndim - 1) + (-1,) if channels_last else (1, -1) + (1,) * (y.ndim - 2)
    return y + nchw(ins[2]).astype(y.dtype).reshape(shape)


def _conv_nd(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """ONNX Conv with the weight (O, C/group, *k) and bias as inputs (training graphs, where they
    are values), at the mode's precision with wide accumulation."""
    a = _attrs(node)
    xs, ws = _logical_shape(ins[0]), _logical_shape(ins[1])
    nd = len(ws) - 2
    st, dil, begin, end, _ = conv_geometry(a, xs, ws)  # the reference's pads; ValueError as it refuses
    layout, held = _conv_layout(nd, ins[1].nhwc)
    x = nhwc(ins[0]) if held else nchw(ins[0])
    w = ins[1].array if held else nchw(ins[1])
    y = lax.conv_general_dilated(
        x, w.astype(x.dtype), window_strides=st, padding=tuple(zip(begin, end)), rhs_dilation=dil, dimension_numbers=layout,
        feature_group_count=int(a["group"]), precision=mode.precision, preferred_element_type=mode.acc,
    )
    return Value(_with_bias(y, ins, held).astype(x.dtype), held)


def _conv_t_nd(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """ONNX ConvTranspose with the weight (C, O/group, *k) and bias as inputs, in the
    gradient-of-conv form (see _conv_transpose2d); the padding of the stride-dilated input places
    the output window: negative crops, beyond the kernel's extent adds zeros (output_padding,
    output_shape)."""
    a = _attrs(node)
    xs = _logical_shape(ins[0])
    w = nchw(ins[1])
    nd, g = w.ndim - 2, int(a["group"])
    kernel = tuple(int(k) for k in w.shape[2:])
    # the reference's output window of the unpadded result; ValueError as it refuses
    st, dil, begin, out = conv_transpose_geometry(a, xs, tuple(int(n) for n in w.shape))
    c, og = int(w.shape[0]), int(w.shape[1])
    # (C, O/g, *k) -> (g * O/g, C/g, *k), spatially flipped: the kernel of the equivalent convolution.
    swapped = w.reshape((g, c // g, og) + kernel).swapaxes(1, 2).reshape((g * og, c // g) + kernel)
    w = jnp.flip(swapped, axis=tuple(range(2, 2 + nd)))
    ext = [d * (k - 1) for d, k in zip(dil, kernel)]
    full = [(n - 1) * s + e + 1 for n, s, e in zip(xs[2:], st, ext)]
    edges = tuple((e - b, e + b + o - f) for e, b, o, f in zip(ext, begin, out, full))
    layout, held = _conv_layout(nd, False)
    x = nhwc(ins[0]) if held else nchw(ins[0])
    y = lax.conv_general_dilated(
        x, w.astype(x.dtype), window_strides=(1,) * nd, padding=edges, lhs_dilation=st, rhs_dilation=dil,
        dimension_numbers=layout, feature_group_count=g, precision=mode.precision, preferred_element_type=mode.acc,
    )
    return Value(_with_bias(y, ins, held).astype(x.dtype), held)


def _max_pool(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    return Value(kernels.max_pool2d(nhwc(ins[0]), a["kernel_size"], a["stride"], a["padding"], nhwc=True), True)


def _avg_pool(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    y = kernels.avg_pool2d(nhwc(ins[0]), a["kernel_size"], a["stride"], a["padding"], bool(a["count_include_pad"]), nhwc=True)
    return Value(y, True)


def _adaptive(reduce: str) -> Lowering:
    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        size = _attrs(node)["output_size"]
        x = nhwc(ins[0])
        if reduce == "mean":
            return Value(kernels.adaptive_avg_pool2d(x, size, nhwc=True), True)
        return Value(kernels.adaptive_max_pool2d(x, size, nhwc=True), True)

    return lower


def _global(reduce: Callable[..., Array]) -> Lowering:
    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        v = ins[0]
        axes = tuple(_phys_axis(i, v) for i in (2, 3))
        x = v.array
        return Value(reduce(x.astype(_acc(x)), axis=axes, keepdims=True).astype(x.dtype), v.nhwc)

    return lower


# ----------------------------------------------------------------------------- reductions
_REDUCERS: dict[str, Callable[..., Array]] = {
    "reduce_sum": jnp.sum, "reduce_mean": jnp.mean, "reduce_max": jnp.max, "reduce_min": jnp.min, "reduce_prod": jnp.prod,
}


def _lowest(dtype: np.dtype[Any]) -> Any:
    return False if dtype == np.bool_ else np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _highest(dtype: np.dtype[Any]) -> Any:
    return True if dtype == np.bool_ else np.iinfo(dtype).max if dtype.kind in "iu" else np.inf


#: The value of a max / min over an empty set, per dtype (as the opset's reference).
_EMPTY_IDENTITY: dict[str, Callable[[np.dtype[Any]], Any]] = {"reduce_max": _lowest, "reduce_min": _highest}


def _reduce(op: str) -> Lowering:
    fn = _REDUCERS[op]
    widen = op in ("reduce_sum", "reduce_mean", "reduce_prod")

    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        a = _attrs(node)
        v = ins[0]
        keep = bool(a["keepdims"])
        src = v if keep else Value(nchw(v))  # without keepdims the result's layout is the logical one
        n = src.array.ndim
        axes = tuple(range(n)) if a["axes"] is None else tuple(_phys_axis(int(i), src) for i in a["axes"])
        x = src.array
        if x.size == 0 and op in _EMPTY_IDENTITY:
            # jnp.max/min of nothing raise; the opset gives the identity (the dtype's lowest /
            # highest value, -inf / +inf for floats, False / True for bool). Shapes are static here.
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else tuple(d for i, d in enumerate(x.shape) if i not in axes)
            return Value(jnp.full(shape, _EMPTY_IDENTITY[op](np.dtype(x.dtype)), x.dtype), src.nhwc)
        xw = x.astype(_acc(x)) if widen and _is_float(x) else x
        # The opset keeps the input dtype (integer means truncate, as NumPy's astype does).
        return Value(fn(xw, axis=axes, keepdims=keep).astype(x.dtype), src.nhwc)

    return lower


def _arg(fn: Callable[..., Array]) -> Lowering:
    def lower(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
        a = _attrs(node)
        v = ins[0] if a["keepdims"] else Value(nchw(ins[0]))
        if v.array.ndim == 0:  # a 0-d input's only index (torch.max(x, 0) of a scalar); it has no axis 0
            return Value(jnp.zeros((), jnp.int64))
        return Value(fn(v.array, axis=_phys_axis(int(a["axis"]), v), keepdims=bool(a["keepdims"])).astype(jnp.int64), v.nhwc)

    return lower


# ----------------------------------------------------------------------------- shape manipulation
def _reshaped(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """reshape, flatten, squeeze, unsqueeze: the same elements in the shape the opset infers."""
    x = nchw(ins[0])
    return Value(x.reshape(_out_shape(node, [x], p)))


def _expand(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    x = nchw(ins[0])
    return Value(jnp.broadcast_to(x, _out_shape(node, [x], p)))


def _transpose(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    v = ins[0]
    n = v.array.ndim
    perm = tuple(reversed(range(n))) if _attrs(node)["perm"] is None else tuple(int(i) % n for i in _attrs(node)["perm"])
    if v.nhwc:  # compose with the NHWC -> NCHW permutation: one transpose instead of two
        perm = tuple(_TO_NHWC[i] for i in perm)
    return Value(v.array.transpose(perm))


def _concat(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    axis = int(_attrs(node)["axis"])
    if all(v.nhwc for v in ins):
        return Value(jnp.concatenate([v.array for v in ins], axis=_phys_axis(axis, ins[0])), True)
    xs = [nchw(v) for v in ins]
    t = jnp.result_type(*xs)
    return Value(jnp.concatenate([x.astype(t) for x in xs], axis=axis % xs[0].ndim))


def _split(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    x = nchw(ins[0])
    ax = int(a["axis"]) % x.ndim
    sizes = [int(s) for s in a["sizes"]]
    start = sum(sizes[: int(a["index"])])
    return Value(lax.slice_in_dim(x, start, start + sizes[int(a["index"])], axis=ax))


def _slice(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    x = nchw(ins[0])
    index = [slice(None)] * x.ndim
    axes = a["axes"] if a["axes"] is not None else tuple(range(len(a["starts"])))
    steps = a["steps"] if a["steps"] is not None else (1,) * len(axes)
    for ax, st, en, sp in zip(axes, a["starts"], a["ends"], steps):
        # Python slices clamp out-of-range starts/ends exactly as ONNX Slice does.
        index[int(ax) % x.ndim] = slice(int(st), int(en), int(sp))
    return Value(x[tuple(index)])


def _take(data: Array, idx: Array, axis: int) -> Array:
    n = data.shape[axis]
    idx = jnp.where(idx < 0, idx + n, idx)  # negative indices count from the end (ONNX)
    # Out-of-range indices give NaN (floats) / the dtype's minimum (ints) instead of an error:
    # a jitted program cannot raise on data.
    return jnp.take(data, idx, axis=axis, mode="fill")


def _gather(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    data = nchw(ins[0])
    return Value(_take(data, nchw(ins[1]), int(_attrs(node)["axis"]) % data.ndim))


def _gather_elements(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    data, idx = nchw(ins[0]), nchw(ins[1])
    ax = int(_attrs(node)["axis"]) % data.ndim
    idx = jnp.where(idx < 0, idx + data.shape[ax], idx)
    # ONNX lets indices be shorter than data off the axis: those parts of data are not read.
    data = data[tuple(slice(None) if i == ax else slice(0, n) for i, n in enumerate(idx.shape))]
    return Value(jnp.take_along_axis(data, idx, axis=ax))


def _gather_nd(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    data, idx = nchw(ins[0]), nchw(ins[1])
    coords = tuple(jnp.where(idx[..., i] < 0, idx[..., i] + data.shape[i], idx[..., i]) for i in range(idx.shape[-1]))
    return Value(data[coords])


def _embedding(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    return Value(_take(p["weight"], nchw(ins[0]), 0))


def _where(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    (cond, a, b), flag = _aligned(ins)
    return Value(jnp.where(cond, a, b), flag)


def _pad(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    x = nchw(ins[0])
    pads = [(int(lo), int(hi)) for lo, hi in a["pads"]]
    if a["mode"] == "constant":
        return Value(jnp.pad(x, pads, mode="constant", constant_values=jnp.asarray(a["value"], x.dtype)))
    return Value(jnp.pad(x, pads, mode=a["mode"]))


def _cast(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    v = ins[0]
    to = str(_attrs(node)["to"])
    if to.startswith(("float", "bfloat")):
        # Floats inside the program are the mode's compute dtype (the reference likewise keeps its
        # working precision on float -> float casts); the result dtype follows at the outputs.
        return Value(v.array if _is_float(v.array) else v.array.astype(mode.compute), v.nhwc)
    return Value(v.array.astype(jnp.bool_ if to == "bool" else jnp.dtype(to)), v.nhwc)


def _constant(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    return Value(jnp.asarray(p["value"]))


# ----------------------------------------------------------------------------- normalisation
def _batch_norm(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    v = ins[0]
    x, axis, flag = (nhwc(v), 3, True) if v.array.ndim == 4 else (nchw(v), 1, False)
    y = kernels.batch_norm(x, p["running_mean"], p["running_var"], p.get("weight"), p.get("bias"), float(_attrs(node)["eps"]), axis=axis)
    return Value(y, flag)


def _layer_norm(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    return Value(kernels.layer_norm(nchw(ins[0]), a["normalized_shape"], p.get("weight"), p.get("bias"), float(a["eps"])))


# ----------------------------------------------------------------------------- attention
def attention_core(q: Array, k: Array, v: Array, mask: Array | None, scale: float | None, causal: bool, mode: Mode) -> Array:
    """softmax(q @ k^T * scale + mask) @ v with the opset's mask rule: a bool mask keeps True
    (False -> -inf), any other mask is added. Scores and softmax in float32, both dots at the
    mode's precision with float32 accumulation."""
    s = (1.0 / math.sqrt(q.shape[-1])) if scale is None else float(scale)
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2).astype(q.dtype), precision=mode.precision, preferred_element_type=_acc(q)) * s
    if causal:
        L, S = q.shape[-2], k.shape[-2]
        scores = jnp.where(jnp.tril(jnp.ones((L, S), jnp.bool_)), scores, -jnp.inf)
    if mask is not None:
        scores = jnp.where(mask, scores, -jnp.inf) if mask.dtype == jnp.bool_ else scores + mask.astype(scores.dtype)
    weights = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.matmul(weights, v, precision=mode.precision, preferred_element_type=_acc(v))
    return out.astype(q.dtype)


def _sdpa(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    q, k, v = (nchw(i) for i in ins[:3])
    mask = nchw(ins[3]) if len(ins) > 3 else None
    return Value(attention_core(q, k, v, mask, a["scale"], bool(a["is_causal"]), mode))


def _mha(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """nn.MultiheadAttention at inference: three projections, per-head attention, out projection."""
    a = _attrs(node)
    q_in, k_in, v_in = (nchw(i) for i in ins[:3])
    if not a["batch_first"]:  # (L, N, E) -> (N, L, E)
        q_in, k_in, v_in = (jnp.swapaxes(t, 0, 1) for t in (q_in, k_in, v_in))
    w, b = p["in_proj_weight"], p.get("in_proj_bias")
    e, h = int(p["out_proj_weight"].shape[0]), int(a["num_heads"])

    def project(t: Array, j: int) -> Array:
        y = kernels.linear(t, w[j * e : (j + 1) * e], None if b is None else b[j * e : (j + 1) * e], mode.precision, mode.acc)
        return y.reshape(y.shape[0], y.shape[1], h, e // h).transpose(0, 2, 1, 3)

    mask = nchw(ins[3]) if len(ins) > 3 else None
    ctx = attention_core(project(q_in, 0), project(k_in, 1), project(v_in, 2), mask, None, False, mode)
    merged = ctx.transpose(0, 2, 1, 3).reshape(q_in.shape[0], q_in.shape[1], e)
    out = kernels.linear(merged, p["out_proj_weight"], p.get("out_proj_bias"), mode.precision, mode.acc)
    return Value(out if a["batch_first"] else jnp.swapaxes(out, 0, 1))


# ----------------------------------------------------------------------------- beyond the portable opset
# Ops the transformers sweep met on tpu:0 (issue #41): each off-device node cut the program into
# segments around a cpu:0 round trip. Each follows its NumPy reference (opset math / tensor) step
# by step, so ties, signs and repeated indices come out as the reference's.
def _mod_operands(a: Array, b: Array) -> tuple[Array, Array]:
    """Both operands broadcast, in the result dtype: a float operand's dtype when one side is
    float (the elementwise rule's promotion), else the wider of the two (lax.rem takes neither
    broadcasting nor mixed dtypes)."""
    if _is_float(a) != _is_float(b):
        t = a.dtype if _is_float(a) else b.dtype
    else:
        t = jnp.result_type(a, b)
    x, y = jnp.broadcast_arrays(a.astype(t), b.astype(t))
    return x, y


def _int_mod(a: Array, b: Array, fmod: bool) -> Array:
    """NumPy's integer remainder: x % 0 is 0 (no trap), and x % -1 is 0 (XLA leaves INT_MIN % -1
    implementation-defined, so both divisors take the remainder by 1)."""
    signed = bool(jnp.issubdtype(a.dtype, jnp.signedinteger))
    trivial = (b == 0) | (b == -1) if signed else b == 0
    r = lax.rem(a, jnp.where(trivial, jnp.ones((), b.dtype), b))  # C remainder: the dividend's sign
    if fmod or not signed:
        return r
    return jnp.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)  # Python's %: the divisor's sign


def _float_mod(a: Array, b: Array, fmod: bool) -> Array:
    """C fmod (fmod=True), else NumPy's float mod: fmod moved to the divisor's sign, and a zero
    remainder signed as the divisor (npy_divmod)."""
    r = lax.rem(a, b)
    if fmod:
        return r
    r = jnp.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    return jnp.where(r == 0, jnp.copysign(jnp.zeros((), r.dtype), b), r)


def _mod(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    (x, y), flag = _aligned(ins)
    x, y = _mod_operands(x, y)
    fmod = bool(_attrs(node)["fmod"])
    if x.dtype == jnp.bool_:  # NumPy computes bool % bool in int8; the result is cast back
        return Value(_int_mod(x.astype(jnp.int8), y.astype(jnp.int8), fmod).astype(jnp.bool_), flag)
    return Value(_float_mod(x, y, fmod) if _is_float(x) else _int_mod(x, y, fmod), flag)


def _softplus(x: Array) -> Array:
    return jnp.logaddexp(x, jnp.zeros((), x.dtype))  # log(1 + e**x) without overflow, as the reference


def _cumsum(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """Running sum (floats accumulate in float32 at least); exclusive shifts the scan by one
    toward its end, with a zero first (the last element for reverse)."""
    a = _attrs(node)
    x = nchw(ins[0])
    ax = int(a["axis"]) % x.ndim
    reverse = bool(a["reverse"])
    y = lax.cumsum(x.astype(_acc(x)) if _is_float(x) else x, axis=ax, reverse=reverse)
    if a["exclusive"] and x.shape[ax]:
        zero = jnp.zeros_like(lax.slice_in_dim(y, 0, 1, axis=ax))
        n = x.shape[ax]
        parts = [lax.slice_in_dim(y, 1, n, axis=ax), zero] if reverse else [zero, lax.slice_in_dim(y, 0, n - 1, axis=ax)]
        y = jnp.concatenate(parts, axis=ax)
    return Value(y.astype(x.dtype))


def _trilu(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """The upper (j - i >= k) or lower (j - i <= k) triangle of the last two axes, as np.triu / np.tril."""
    a = _attrs(node)
    x = nchw(ins[0])
    return Value(jnp.triu(x, int(a["k"])) if a["upper"] else jnp.tril(x, int(a["k"])))


def _topk(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    """The reference's stable sorts: ascending for the smallest; for the largest, an ascending
    sort of the reversed axis read backwards, so equal values keep the lower index first (as
    torch.topk). NaN sorts as the largest value, -0.0 equals 0.0 (NumPy's order, JAX's too)."""
    a = _attrs(node)
    x = nchw(ins[0])
    ax = int(a["axis"]) % x.ndim
    n = x.shape[ax]
    if a["largest"]:
        order = (n - 1) - jnp.flip(jnp.argsort(jnp.flip(x, ax), axis=ax, stable=True), ax)
    else:
        order = jnp.argsort(x, axis=ax, stable=True)
    order = lax.slice_in_dim(order, 0, int(a["k"]), axis=ax)
    if int(a["output"]) == 0:
        return Value(jnp.take_along_axis(x, order, axis=ax))
    return Value(order.astype(jnp.int64))


def _scatter(data: Array, where: tuple[Array, ...], updates: Array, reduction: str) -> Array:
    """``data`` with ``updates`` written at the index arrays ``where`` (over data's leading
    ``len(where)`` axes; in range, non-negative). A reduction combines every update of a repeated
    index; a plain write keeps the last update in row-major order, as NumPy's assignment: XLA's
    scatter leaves the winner unspecified, so the position of the last writer is taken by a
    scatter-max of update positions, and the updates are gathered from it.

    Out-of-range indices must be dropped by the caller's index (mode="drop"): the reference
    raises on them, which a traced program cannot do on data (as gather's fill)."""
    updates = updates.astype(data.dtype)
    if reduction != "none" and data.dtype == jnp.bool_:
        # NumPy's bool add / mul are logical or / and: max / min of 0 and 1 (XLA has no bool add)
        logical = {"add": "max", "mul": "min"}.get(reduction, reduction)
        return _scatter(data.astype(jnp.int8), where, updates.astype(jnp.int8), logical).astype(jnp.bool_)
    if reduction != "none":
        at = data.at[where]
        combine = {"add": at.add, "mul": at.multiply, "max": at.max, "min": at.min}[reduction]
        return combine(updates, mode="drop")
    k = len(where)
    lead = jnp.broadcast_shapes(*(w.shape for w in where))
    count = math.prod(lead)
    if count == 0:
        return data
    position = jnp.arange(count, dtype=jnp.int64).reshape(lead)
    winner = jnp.full(data.shape[:k], -1, jnp.int64).at[where].max(position, mode="drop")
    picked = updates.reshape((count,) + tuple(data.shape[k:]))[jnp.maximum(winner, 0)]
    written = (winner >= 0).reshape(winner.shape + (1,) * (data.ndim - k))
    return jnp.where(written, picked, data)


def _in_range(idx: Array, n: int) -> Array:
    """Negative indices count from the end; what is still out of range becomes ``n``, which the
    scatter drops (JAX would wrap a remaining negative index a second time)."""
    idx = idx.astype(jnp.int64)
    idx = jnp.where(idx < 0, idx + n, idx)
    return jnp.where((idx < 0) | (idx >= n), n, idx)


def _scatter_elements(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    a = _attrs(node)
    data, idx, upd = (nchw(v) for v in ins[:3])
    ax = int(a["axis"]) % data.ndim
    grids = jnp.indices(idx.shape, sparse=True)
    where = tuple(_in_range(idx, data.shape[ax]) if i == ax else jnp.broadcast_to(g, idx.shape) for i, g in enumerate(grids))
    return Value(_scatter(data, where, upd, str(a["reduction"])))


def _scatter_nd(node: Node, p: Params, ins: Sequence[Value], mode: Mode) -> Value:
    data, idx, upd = (nchw(v) for v in ins[:3])
    where = tuple(_in_range(idx[..., i], data.shape[i]) for i in range(idx.shape[-1]))
    return Value(_scatter(data, where, upd, str(_attrs(node)["reduction"])))


# ----------------------------------------------------------------------------- the table
_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": _div, "pow": jnp.power,
    "maximum": jnp.maximum, "minimum": jnp.minimum,
    "equal": jnp.equal, "not_equal": jnp.not_equal, "less": jnp.less, "less_equal": jnp.less_equal,
    "greater": jnp.greater, "greater_equal": jnp.greater_equal, "logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
}

_UNARY: dict[str, Callable[[Array], Array]] = {
    "exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt, "reciprocal": jnp.reciprocal,
    "sin": jnp.sin, "cos": jnp.cos, "erf": lax.erf, "tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid,
    "floor": jnp.floor, "ceil": jnp.ceil, "neg": jnp.negative, "abs": jnp.abs, "sign": jnp.sign,
    "relu": _relu, "identity": lambda x: x, "dropout": lambda x: x,  # dropout is the identity at inference
    "logical_not": jnp.logical_not, "silu": jax.nn.silu, "hardswish": _hardswish, "isnan": jnp.isnan,
    "softplus": _softplus,
}

LOWERINGS: dict[str, Lowering] = {
    **{name: _nary(fn) for name, fn in _BINARY.items()},
    **{name: _unary(fn) for name, fn in _UNARY.items()},
    "clip": _unary_attrs(_clip),
    "leaky_relu": _unary_attrs(lambda x, a: jnp.where(x >= 0, x, x * a["alpha"]).astype(x.dtype)),
    "hardsigmoid": _unary_attrs(_hardsigmoid),
    "gelu": _unary_attrs(lambda x, a: kernels.gelu(x, a["approximate"])),
    "softmax": _with_axis(lambda x, axis: jax.nn.softmax(x, axis=axis)),
    "log_softmax": _with_axis(lambda x, axis: jax.nn.log_softmax(x, axis=axis)),
    "matmul": _matmul,
    "gemm": _gemm,
    "linear": _linear,
    "conv2d": _conv2d,
    "conv1d": _conv1d,
    "max_pool2d": _max_pool,
    "avg_pool2d": _avg_pool,
    "adaptive_avg_pool2d": _adaptive("mean"),
    "adaptive_max_pool2d": _adaptive("max"),
    "global_avg_pool": _global(jnp.mean),
    "global_max_pool": _global(jnp.max),
    **{name: _reduce(name) for name in _REDUCERS},
    "argmax": _arg(jnp.argmax),
    "argmin": _arg(jnp.argmin),
    "reshape": _reshaped,
    "flatten": _reshaped,
    "squeeze": _reshaped,
    "unsqueeze": _reshaped,
    "expand": _expand,
    "transpose": _transpose,
    "concat": _concat,
    "split": _split,
    "slice": _slice,
    "gather": _gather,
    "gather_elements": _gather_elements,
    "gather_nd": _gather_nd,
    "conv_transpose2d": _conv_transpose2d,
    "conv": _conv_nd,
    "conv_transpose": _conv_t_nd,
    "embedding": _embedding,
    "where": _where,
    "pad": _pad,
    "cast": _cast,
    "constant": _constant,
    "batch_norm2d": _batch_norm,
    "layer_norm": _layer_norm,
    "scaled_dot_product_attention": _sdpa,
    "multihead_attention": _mha,
    "mod": _mod,
    "cumsum": _cumsum,
    "topk": _topk,
    "trilu": _trilu,
    "scatter_elements": _scatter_elements,
    "scatter_nd": _scatter_nd,
}
