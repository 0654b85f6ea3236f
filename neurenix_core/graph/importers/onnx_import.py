"""ONNX -> Graph through the ``onnx`` package (opset 13 and later; imported here only).

Each ONNX node maps to one opset node, or a few (``Flatten`` -> ``reshape``; ``Split`` -> one
``split`` per output; asymmetric ``Conv`` pads -> ``pad`` + ``conv2d``). Initializers and
``Constant`` nodes are NumPy constants; operand tensors that ONNX passes as inputs but that must
be static here (``Reshape``'s shape, ``Slice``'s starts, ``ReduceMean``'s axes in opset 18)
must be constants, and ``Shape`` of a static value is folded.

Dynamic axes: an input dimension with a ``dim_param`` (``torch.onnx.export(..., dynamic_shapes=
...)`` or ``dynamic_axes=``) stays dynamic. The importer builds with an example size for it
(``input_shapes=``, else 2) and keeps every size computed from it symbolic
(:class:`~neurenix_core.graph.ir.symbolic.SymDim`): ``Shape`` of a value gives its dimensions from
the model's value_info (ONNX shape inference fills it where missing), and the Gather / Slice /
Concat / Unsqueeze / arithmetic chains on them are folded symbolically into the ``Reshape``,
``Expand``, ``Slice`` and ``ConstantOfShape`` they feed. Where a size has no symbolic form the
model is imported with the example's static shapes, with a warning (an error under fallback
policy 'error').

Inputs and outputs keep the ONNX graph's order and names.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from typing import Any

import numpy as np

from neurenix_core.errors import (
    FallbackError,
    ModelFormatError,
    NeurenixError,
    NeurenixWarning,
    QuantizationError,
    UnsupportedOperationError,
)
from neurenix_core.graph.importers import (
    onnx_attention,
    onnx_controlflow,
    onnx_image,
    onnx_math,
    onnx_nn,
    onnx_qdq,
    onnx_quantization,
    onnx_reduction,
    onnx_rnn,
    onnx_signal,
    onnx_tensor,
    onnx_validate,
)
from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value, check_constant_bytes
from neurenix_core.graph.importers.onnx_common import REMEDY as _REMEDY
from neurenix_core.graph.importers.onnx_common import Handler, ValueInputNeeded
from neurenix_core.graph.importers.onnx_common import OnnxNode as _Node
from neurenix_core.graph.importers.onnx_common import const as _const
from neurenix_core.graph.importers.onnx_common import dims as _dims
from neurenix_core.graph.importers.onnx_common import fail as _fail
from neurenix_core.graph.importers.onnx_common import ints as _ints
from neurenix_core.graph.importers.onnx_common import simple as _simple
from neurenix_core.graph.importers.onnx_common import symbolic_const as _symbolic_const
from neurenix_core.graph.importers.onnx_common import variadic as _variadic
from neurenix_core.graph.ir import Graph, QuantizationPlan
from neurenix_core.graph.ir.symbolic import ARANGE_CAP, NotSymbolicError, SymDim, variable
from neurenix_core.graph.opset import DTYPES
from neurenix_core.graph.opset import _np_dtype as opset_dtype
from neurenix_core.graph.opset.schema import STORAGE_DTYPES
from neurenix_core.user_frame import user_stacklevel

__all__ = ["HANDLERS", "ValueImport", "build_for_values", "import_onnx", "import_onnx_quantized"]

MIN_OPSET = 13


def _gemm(b: GraphBuilder, n: _Node) -> Value:
    a = n.attrs
    alpha, beta, ta, tb = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0)), bool(a.get("transA", 0)), bool(a.get("transB", 0))
    w, c = n.inputs[1], n.input(2)
    if isinstance(w, Const) and (c is None or (isinstance(c, Const) and c.array.ndim <= 1)) and not ta and alpha == 1.0 and beta == 1.0:
        weight = w.array if tb else w.array.T
        bias = None if c is None else np.broadcast_to(c.array, (weight.shape[0],)).astype(np.float32)
        return b.emit(n.name, "linear", [n.inputs[0]], {"in_features": int(weight.shape[1]), "out_features": int(weight.shape[0])},  # type: ignore[list-item]
                      {"weight": np.ascontiguousarray(weight), "bias": bias})
    ins = [v for v in n.inputs if v is not None]
    return b.emit(n.name, "gemm", ins, {"alpha": alpha, "beta": beta, "trans_a": ta, "trans_b": tb})


def _conv(b: GraphBuilder, n: _Node) -> Value:
    w = _const(b, n, 1, "weight")
    bias = _const(b, n, 2, "bias")
    assert w is not None
    nd = w.ndim - 2
    if nd not in (1, 2):
        raise _fail(b, n, f"is a {nd}-D convolution; the opset has conv1d and conv2d")
    a = n.attrs
    stride = tuple(a.get("strides", (1,) * nd))
    dil = tuple(a.get("dilations", (1,) * nd))
    group = int(a.get("group", 1))
    pads = list(a.get("pads", (0,) * 2 * nd))
    auto = a.get("auto_pad", "NOTSET")
    x = n.inputs[0]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = b.spec(x).shape  # type: ignore[arg-type]
        pads = [0] * 2 * nd
        for i in range(nd):
            out = math.ceil(shape[2 + i] / stride[i])
            total = max(0, (out - 1) * stride[i] + dil[i] * (w.shape[2 + i] - 1) + 1 - shape[2 + i])
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads[i], pads[nd + i] = lo, total - lo
    elif auto == "VALID":
        pads = [0] * 2 * nd
    begin, end = pads[:nd], pads[nd:]
    if begin != end:
        x = b.emit(n.name + ".pad", "pad", [x], {"pads": ((0, 0), (0, 0)) + tuple(zip(begin, end))})  # type: ignore[list-item]
        begin = [0] * nd
    attrs: dict[str, Any] = {"stride": stride, "padding": tuple(begin), "dilation": dil, "groups": group}
    if nd == 2:
        attrs |= {"in_channels": int(w.shape[1]) * group, "out_channels": int(w.shape[0]), "kernel_size": tuple(int(k) for k in w.shape[2:])}
    return b.emit(n.name, "conv2d" if nd == 2 else "conv1d", [x], attrs, {"weight": w, "bias": bias})  # type: ignore[list-item]


def _conv_transpose(b: GraphBuilder, n: _Node) -> Value:
    w = _const(b, n, 1, "weight")
    bias = _const(b, n, 2, "bias")
    assert w is not None
    if w.ndim != 4:
        raise _fail(b, n, f"is a {w.ndim - 2}-D transposed convolution; the opset has conv_transpose2d")
    a = n.attrs
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or "output_shape" in a:
        raise _fail(b, n, "sets auto_pad SAME or output_shape; export with explicit pads and output_padding")
    pads = [int(p) for p in a.get("pads", (0, 0, 0, 0))] if a.get("auto_pad", "NOTSET") == "NOTSET" else [0, 0, 0, 0]
    group = int(a.get("group", 1))
    attrs = {"stride": tuple(a.get("strides", (1, 1))), "padding": (pads[0], pads[1]), "output_padding": tuple(a.get("output_padding", (0, 0))),
             "dilation": tuple(a.get("dilations", (1, 1))), "groups": group, "in_channels": int(w.shape[0]),
             "out_channels": int(w.shape[1]) * group, "kernel_size": tuple(int(k) for k in w.shape[2:])}
    if pads[:2] == pads[2:]:
        return b.emit(n.name, "conv_transpose2d", [n.inputs[0]], attrs, {"weight": w, "bias": bias})  # type: ignore[list-item]
    # Asymmetric pads crop the full output unevenly: no padding, then a slice.
    full = b.emit(n.name + ".full", "conv_transpose2d", [n.inputs[0]], attrs | {"padding": (0, 0)}, {"weight": w, "bias": bias})  # type: ignore[list-item]
    h, wd = b.spec(full).shape[2:]
    return b.emit(n.name, "slice", [full], {"starts": (pads[0], pads[1]), "ends": (h - pads[2], wd - pads[3]), "axes": (2, 3)})


def _pool(op: str) -> Handler:
    def run(b: GraphBuilder, n: _Node) -> Value:
        a = n.attrs
        k = tuple(a["kernel_shape"])
        if len(k) != 2:
            raise _fail(b, n, f"pools over {len(k)} axes; the opset pools 2-D")
        if a.get("ceil_mode", 0) or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or any(d != 1 for d in a.get("dilations", (1, 1))):
            raise _fail(b, n, "uses ceil_mode, auto_pad or dilations, which the opset's pooling does not have")
        pads = tuple(a.get("pads", (0, 0, 0, 0)))
        x = n.inputs[0]
        if pads[:2] != pads[2:]:
            raise _fail(b, n, f"has asymmetric pads {pads}")
        attrs: dict[str, Any] = {"kernel_size": k, "stride": tuple(a.get("strides", k)), "padding": pads[:2]}
        if op == "avg_pool2d":
            attrs["count_include_pad"] = bool(a.get("count_include_pad", 0))
        return b.emit(n.name, op, [x], attrs)  # type: ignore[list-item]

    return run


def _reduce(op: str) -> Handler:
    def run(b: GraphBuilder, n: _Node) -> Value:
        axes = n.attrs.get("axes")
        if axes is None and n.input(1) is not None:
            axes = _ints(_const(b, n, 1, "axes"))
        if not axes:
            if n.attrs.get("noop_with_empty_axes", 0):
                return n.inputs[0]  # type: ignore[return-value]
            axes = None
        return b.emit(n.name, op, [n.inputs[0]], {"axes": None if axes is None else tuple(axes), "keepdims": bool(n.attrs.get("keepdims", 1))})  # type: ignore[list-item]

    return run


def _reshape(b: GraphBuilder, n: _Node) -> Value:
    if _dynamic(b):
        target = _dynamic_target(b, n)
        if target is not None:
            return b.emit(n.name, "reshape", [n.inputs[0]], {"shape": target})  # type: ignore[list-item]
    shape = _ints(_const(b, n, 1, "target shape"))
    x = n.inputs[0]
    if n.attrs.get("allowzero", 0) and 0 in shape:
        # A 0 here is a size, not "copy": the result holds no elements, so neither does the input.
        if -1 in shape or math.prod(b.spec(x).shape) != 0:  # type: ignore[arg-type]
            raise _fail(b, n, f"uses allowzero=1 with a zero dimension in {shape} for input shape {b.spec(x).shape}")  # type: ignore[arg-type]
        return Const(np.empty(shape, opset_dtype(b.spec(x).dtype)))  # type: ignore[arg-type]
    target = tuple(b.spec(x).shape[i] if d == 0 else d for i, d in enumerate(shape))  # type: ignore[arg-type]
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        target = tuple(math.prod(b.spec(x).shape) // known if d == -1 else d for d in target)  # type: ignore[arg-type]
    return b.reshape(n.name, x, target)  # type: ignore[arg-type]


def _flatten(b: GraphBuilder, n: _Node) -> Value:
    shape = b.spec(n.inputs[0]).shape  # type: ignore[arg-type]
    axis = int(n.attrs.get("axis", 1)) % (len(shape) + 1)
    return b.reshape(n.name, n.inputs[0], (math.prod(shape[:axis]), math.prod(shape[axis:])))  # type: ignore[arg-type]


def _axes_input(b: GraphBuilder, n: _Node) -> tuple[int, ...] | None:
    if "axes" in n.attrs:
        return tuple(n.attrs["axes"])
    arr = _const(b, n, 1, "axes")
    return None if arr is None else _ints(arr)


def _split(b: GraphBuilder, n: _Node) -> list[Value]:
    x = n.inputs[0]
    axis = int(n.attrs.get("axis", 0))
    size = b.spec(x).shape[axis]  # type: ignore[arg-type]
    split = n.attrs.get("split")
    if split is None and n.input(1) is not None:
        split = _ints(_const(b, n, 1, "split sizes"))
    if split is None:
        parts = int(n.attrs.get("num_outputs", len(n.proto.output)))
        step = -(-size // parts)
        split = [min(step, size - i * step) for i in range(parts)]
    return [b.emit(f"{n.name}.{i}", "split", [x], {"axis": axis, "sizes": tuple(int(s) for s in split), "index": i})  # type: ignore[list-item]
            for i in range(len(split))]


def _slice(b: GraphBuilder, n: _Node) -> Value:
    starts, ends = _dims(_const(b, n, 1, "starts")), _dims(_const(b, n, 2, "ends"))
    axes = _const(b, n, 3, "axes")
    steps = _const(b, n, 4, "steps")
    big = 2**62
    ends = tuple(e if isinstance(e, SymDim) else max(min(e, big), -big) for e in ends)
    return b.emit(n.name, "slice", [n.inputs[0]], {"starts": starts, "ends": ends, "axes": None if axes is None else _ints(axes),  # type: ignore[list-item]
                                                   "steps": None if steps is None else _ints(steps)})


def _pad(b: GraphBuilder, n: _Node) -> Value:
    pads = _ints(_const(b, n, 1, "pads"))
    value = _const(b, n, 2, "constant value")
    if n.input(3) is not None:
        raise _fail(b, n, "pads selected axes (the axes input)")
    half = len(pads) // 2
    mode = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(n.attrs.get("mode", "constant"))
    if mode is None:
        raise _fail(b, n, f"uses pad mode {n.attrs.get('mode')!r}")
    return b.emit(n.name, "pad", [n.inputs[0]], {"pads": tuple(zip(pads[:half], pads[half:])), "mode": mode,  # type: ignore[list-item]
                                                 "value": 0.0 if value is None or value.size == 0 else float(value.ravel()[0])})


def _clip(b: GraphBuilder, n: _Node) -> Value:
    lo, hi = _const(b, n, 1, "min"), _const(b, n, 2, "max")
    return b.emit(n.name, "clip", [n.inputs[0]], {"min": None if lo is None else float(lo), "max": None if hi is None else float(hi)})  # type: ignore[list-item]


def _layer_norm(b: GraphBuilder, n: _Node) -> Value:
    x = n.inputs[0]
    shape = b.spec(x).shape  # type: ignore[arg-type]
    axis = int(n.attrs.get("axis", -1)) % len(shape)
    scale, bias = _const(b, n, 1, "scale"), _const(b, n, 2, "bias")
    if len(n.proto.output) > 1 and any(n.proto.output[1:]):
        raise _fail(b, n, "asks for the mean / inverse std outputs (training only)")
    return b.emit(n.name, "layer_norm", [x], {"normalized_shape": tuple(shape[axis:]), "eps": float(n.attrs.get("epsilon", 1e-5))},  # type: ignore[list-item]
                  {"weight": scale, "bias": bias})


def _batch_norm(b: GraphBuilder, n: _Node) -> Value:
    scale, bias, mean, var = (_const(b, n, i, w) for i, w in ((1, "scale"), (2, "bias"), (3, "mean"), (4, "variance")))
    if n.attrs.get("training_mode", 0):
        raise _fail(b, n, "runs in training mode")
    assert mean is not None and var is not None
    return b.emit(n.name, "batch_norm2d", [n.inputs[0]], {"num_features": int(mean.shape[0]), "eps": float(n.attrs.get("epsilon", 1e-5))},  # type: ignore[list-item]
                  {"running_mean": mean, "running_var": var, "weight": scale, "bias": bias})


def _dropout(b: GraphBuilder, n: _Node) -> list[Value | None]:
    """Dropout at inference: the output is the input and the optional mask is all True. A model
    that runs it in training mode with a ratio above 0 draws random masks: refused, since a
    deterministic import would silently compute something else."""
    x = n.inputs[0]
    training = _const(b, n, 2, "training_mode")
    ratio = _const(b, n, 1, "ratio")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]) and (ratio is None or float(np.asarray(ratio).reshape(-1)[0]) > 0):
        raise _fail(b, n, "runs in training mode (training_mode=True with a ratio above 0), which draws a random mask; "
                          "neurenix imports models for inference: export the model in eval mode")
    outs: list[Value | None] = [b.emit(n.name, "identity", [x]) if isinstance(x, str) else x]
    if len(n.proto.output) > 1 and n.proto.output[1]:
        # All True in x's shape, also for dynamic shapes and NaNs: isnan(x) or not isnan(x).
        nan = b.emit(n.name + ".isnan", "isnan", [x])  # type: ignore[list-item]
        outs.append(b.emit(n.name + ".mask", "logical_or", [nan, b.emit(n.name + ".notnan", "logical_not", [nan])]))
    return outs


def _cast_like(b: GraphBuilder, n: _Node) -> Value:
    return _cast_node(b, n, b.spec(n.inputs[1]).dtype)  # type: ignore[arg-type]


def _cast(b: GraphBuilder, n: _Node) -> Value:
    from onnx import helper

    try:
        to = str(np.dtype(helper.tensor_dtype_to_np_dtype(int(n.attrs["to"]))))
    except (KeyError, TypeError, ValueError) as exc:
        raise _fail(b, n, f"casts to TensorProto type {n.attrs.get('to')}, which has no NumPy dtype") from exc
    return _cast_node(b, n, to)


def _cast_node(b: GraphBuilder, n: _Node, to: str) -> Value:
    """Cast / CastLike to ``to``: ``saturate`` (float8) and ``round_mode`` (float8 e8m0) go on the
    node where they differ from ONNX's defaults; a storage dtype target always takes the opset's
    cast (a constant folds through it, so saturation applies to it as well)."""
    if to not in DTYPES:
        raise _fail(b, n, f"casts to {'strings' if to == 'object' else to}, a dtype neurenix has no type for")
    attrs: dict[str, Any] = {"to": to}
    if not int(n.attrs.get("saturate", 1)):
        attrs["saturate"] = 0
    mode = n.attrs.get("round_mode", "up")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "up":
        attrs["round_mode"] = mode
    x = n.required(b)
    if len(attrs) == 1 and to not in STORAGE_DTYPES:
        return b.cast_to(n.name, x, to)
    if not isinstance(x, Const) and b.spec(x).dtype == to:
        return x
    return b.emit(n.name + ".cast", "cast", [x], attrs)


def _shape(b: GraphBuilder, n: _Node) -> Value:
    x = n.inputs[0]
    dims: Any = b.spec(x).shape  # type: ignore[arg-type]
    if _dynamic(b) and not isinstance(x, Const):
        sym = _sym_shapes(b).get(n.proto.input[0])
        if sym is None or None in sym:
            raise NotSymbolicError(f"node {n.name!r}: Shape of {n.proto.input[0]!r}, whose symbolic shape the model does not record")
        dims = sym
    lo, hi = n.attrs.get("start", 0), n.attrs.get("end", None)
    if any(isinstance(d, SymDim) for d in dims):
        arr = np.empty(len(dims), object)
        arr[:] = list(dims)
        return Const(arr[lo:hi])
    return Const(np.asarray(dims, np.int64)[lo:hi])


def _constant_of_shape(b: GraphBuilder, n: _Node) -> Value:
    value = _to_array(n.attrs["value"], f"{b.source}: node {n.name!r} value") if "value" in n.attrs else np.zeros(1, np.float32)
    if _symbolic_const(n.input(0)):
        shape = _dims(n.input(0).array)  # type: ignore[union-attr]
        return b.emit(n.name, "expand", [Const(np.full((1,) * len(shape), value.ravel()[0], dtype=value.dtype))], {"shape": shape})
    shape = _ints(_const(b, n, 0, "shape"))
    check_constant_bytes(b.source, n.name, n.op, shape, value.dtype)
    return Const(np.full(shape, value.ravel()[0], dtype=value.dtype))


def _range(b: GraphBuilder, n: _Node) -> Value:
    """Range of constants (sizes a Shape chain folded) is a constant; a symbolic one has no
    bound to slice a constant from, so the model is imported static (NotSymbolicError)."""
    if any(_symbolic_const(v) for v in n.inputs):
        return _symbolic_range(b, n)
    start, limit, delta = (_const(b, n, i, w) for i, w in ((0, "start"), (1, "limit"), (2, "delta")))
    lo, hi, step = (np.asarray(v).item() for v in (start, limit, delta))
    if step == 0 or not all(math.isfinite(x) for x in (lo, hi, step)):
        raise ModelFormatError(f"{b.source}: node {n.name!r} (Range) has start {lo}, limit {hi}, delta {step}; the delta must be "
                               "non-zero and all three finite; re-export or fix the model")
    check_constant_bytes(b.source, n.name, n.op, (max(math.ceil((hi - lo) / step), 0),), np.asarray(start).dtype)
    return Const(np.arange(lo, hi, step, dtype=np.asarray(start).dtype))


def _symbolic_range(b: GraphBuilder, n: _Node) -> Value:
    """Range(start, d, 1) up to a dynamic input dimension ``d``: a slice of a constant range
    capped at ARANGE_CAP (Graph.limits says so at run time past the cap)."""
    start, limit, delta = (np.asarray(v.array).reshape(-1)[0] if isinstance(v, Const) else None for v in n.inputs[:3])
    if not isinstance(limit, SymDim) or isinstance(start, SymDim) or isinstance(delta, SymDim) or int(delta) != 1 or len(limit.variables) != 1:  # type: ignore[arg-type]
        raise NotSymbolicError(f"node {n.name!r}: Range({start}, {limit}, {delta}) over a dynamic size")
    (key,) = limit.variables
    if SymDim(variable(*key)) != limit:
        raise NotSymbolicError(f"node {n.name!r}: Range up to {limit.expr}, which is not one input dimension")
    cap = max(ARANGE_CAP, b.example(limit))
    b.limits[key] = min(b.limits.get(key, cap), cap)
    dtype = n.inputs[0].array.dtype if isinstance(n.inputs[0], Const) and n.inputs[0].array.dtype != object else np.int64
    full = Const(np.arange(int(start), cap, dtype=dtype))  # type: ignore[arg-type]
    return b.emit(n.name, "slice", [full], {"starts": (0,), "ends": (limit - int(start),), "axes": (0,), "steps": (1,)})  # type: ignore[arg-type]  # start: a number (checked above)


def _dynamic(b: GraphBuilder) -> bool:
    return any(s.dynamic for s in b.inputs)


def _sym_shapes(b: GraphBuilder) -> dict[str, tuple[int | SymDim | None, ...]]:
    return getattr(b, "onnx_sym_shapes", {})


def _dynamic_target(b: GraphBuilder, n: _Node) -> tuple[int | SymDim, ...] | None:
    """A Reshape's target in a dynamic graph: the output's symbolic shape where the model
    records it, else the target input with its -1 / 0 kept (resolved per input shape by the
    reshape op itself); None when the target is a plain static shape of a static input."""
    sym = _sym_shapes(b).get(n.proto.output[0])
    if sym is not None and None not in sym:
        return sym  # type: ignore[return-value]
    shape = n.input(1)
    if not isinstance(shape, Const):
        raise _fail(b, n, "takes its target shape from a value computed at run time; it must be a constant (initializer)")
    dims = _dims(shape.array)
    if n.attrs.get("allowzero", 0) and 0 in dims:
        raise _fail(b, n, "uses allowzero=1 with a zero dimension")
    return dims


def _symbolic_fold(n: _Node) -> Value:
    """Shape arithmetic on object arrays holding SymDims, evaluated at import time."""
    xs = [None if v is None else np.asarray(v.array) for v in n.inputs]  # type: ignore[union-attr]
    op, a = n.op, n.attrs
    if op in ("Add", "Sub", "Mul", "Div", "Mod"):
        fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.floor_divide, "Mod": np.mod}[op]
        out = fn(xs[0].astype(object), xs[1].astype(object))  # type: ignore[union-attr]
    elif op == "Gather":
        out = np.take(xs[0], xs[1].astype(np.int64), axis=int(a.get("axis", 0)))  # type: ignore[union-attr, arg-type]  # object arrays of SymDims
    elif op == "Concat":
        out = np.concatenate([x.astype(object) for x in xs if x is not None], axis=int(a.get("axis", 0)))
    elif op == "Unsqueeze":
        out = np.expand_dims(xs[0], tuple(_ints(xs[1]) if len(xs) > 1 else a["axes"]))  # type: ignore[arg-type]
    elif op == "Squeeze":
        out = np.squeeze(xs[0], tuple(_ints(xs[1])) if len(xs) > 1 and xs[1] is not None else None)  # type: ignore[arg-type]
    elif op == "Slice":
        axes = _ints(xs[3]) if len(xs) > 3 and xs[3] is not None else (0,)
        steps = _ints(xs[4]) if len(xs) > 4 and xs[4] is not None else (1,)
        if axes != (0,) or xs[0].ndim != 1:  # type: ignore[union-attr]
            raise NotSymbolicError(f"node {n.name!r}: Slice of a symbolic shape on axis {axes}")
        out = xs[0][int(_ints(xs[1])[0]) : int(min(_ints(xs[2])[0], 2**62)) : steps[0]]  # type: ignore[index]
    elif op in ("Cast", "Identity", "Reshape") and (op != "Reshape" or xs[0].ndim == 1):  # type: ignore[union-attr]
        out = xs[0].reshape(-1) if op == "Reshape" else xs[0]  # type: ignore[union-attr]
    else:
        raise NotSymbolicError(f"node {n.name!r} ({op}) computes with a symbolic size, which the importer cannot fold")
    out = np.asarray(out, dtype=object)
    return Const(out if any(isinstance(v, SymDim) for v in out.ravel()) else out.astype(np.int64))


def _arg(op: str) -> Handler:
    return lambda b, n: b.emit(n.name, op, [n.inputs[0]], {"axis": int(n.attrs.get("axis", 0)), "keepdims": bool(n.attrs.get("keepdims", 1))})  # type: ignore[list-item]


HANDLERS: dict[str, Handler] = {
    "Add": _simple("add"), "Sub": _simple("sub"), "Mul": _simple("mul"), "Div": _simple("div"), "Pow": _simple("pow"),
    "Max": _variadic("maximum"), "Min": _variadic("minimum"), "Sum": _variadic("add"),
    "Equal": _simple("equal"), "Less": _simple("less"), "LessOrEqual": _simple("less_equal"), "Greater": _simple("greater"),
    "GreaterOrEqual": _simple("greater_equal"), "And": _simple("logical_and"), "Or": _simple("logical_or"), "Not": _simple("logical_not"),
    "Where": _simple("where"),
    "Relu": _simple("relu"), "Sigmoid": _simple("sigmoid"), "Tanh": _simple("tanh"), "Exp": _simple("exp"), "Log": _simple("log"),
    "Sqrt": _simple("sqrt"), "Reciprocal": _simple("reciprocal"), "Neg": _simple("neg"), "Abs": _simple("abs"), "Erf": _simple("erf"),
    "Sin": _simple("sin"), "Cos": _simple("cos"), "Floor": _simple("floor"), "Ceil": _simple("ceil"), "Sign": _simple("sign"),
    "Identity": _simple("identity"), "Dropout": _dropout, "CastLike": _cast_like,
    "HardSigmoid": lambda b, n: b.emit(n.name, "hardsigmoid", [n.inputs[0]], {"alpha": float(n.attrs.get("alpha", 0.2)), "beta": float(n.attrs.get("beta", 0.5))}),  # type: ignore[list-item]
    "HardSwish": _simple("hardswish"),
    "Gelu": lambda b, n: b.emit(n.name, "gelu", [n.inputs[0]], {"approximate": n.attrs.get("approximate", "none")}),  # type: ignore[list-item]
    "LeakyRelu": lambda b, n: b.emit(n.name, "leaky_relu", [n.inputs[0]], {"alpha": float(n.attrs.get("alpha", 0.01))}),  # type: ignore[list-item]
    "Clip": _clip,
    "Softmax": lambda b, n: b.emit(n.name, "softmax", [n.inputs[0]], {"axis": int(n.attrs.get("axis", -1))}),  # type: ignore[list-item]
    "LogSoftmax": lambda b, n: b.emit(n.name, "log_softmax", [n.inputs[0]], {"axis": int(n.attrs.get("axis", -1))}),  # type: ignore[list-item]
    "MatMul": _simple("matmul"), "Gemm": _gemm, "Conv": _conv, "ConvTranspose": _conv_transpose,
    "MaxPool": _pool("max_pool2d"), "AveragePool": _pool("avg_pool2d"),
    "GlobalAveragePool": _simple("global_avg_pool"), "GlobalMaxPool": _simple("global_max_pool"),
    "ReduceMean": _reduce("reduce_mean"), "ReduceSum": _reduce("reduce_sum"), "ReduceMax": _reduce("reduce_max"),
    "ReduceMin": _reduce("reduce_min"), "ReduceProd": _reduce("reduce_prod"), "ArgMax": _arg("argmax"), "ArgMin": _arg("argmin"),
    "Reshape": _reshape, "Flatten": _flatten,
    "Transpose": lambda b, n: b.emit(n.name, "transpose", [n.inputs[0]], {"perm": tuple(n.attrs["perm"]) if "perm" in n.attrs else None}),  # type: ignore[list-item]
    "Squeeze": lambda b, n: b.emit(n.name, "squeeze", [n.inputs[0]], {"axes": _axes_input(b, n)}),  # type: ignore[list-item]
    "Unsqueeze": lambda b, n: b.emit(n.name, "unsqueeze", [n.inputs[0]], {"axes": _axes_input(b, n)}),  # type: ignore[list-item]
    "Expand": lambda b, n: b.emit(n.name, "expand", [n.inputs[0]], {"shape": _dims(_const(b, n, 1, "shape"))}),  # type: ignore[list-item]
    "Concat": lambda b, n: b.emit(n.name, "concat", [v for v in n.inputs if v is not None], {"axis": int(n.attrs["axis"])}),
    "Split": _split, "Slice": _slice, "Pad": _pad,
    "Gather": lambda b, n: b.emit(n.name, "gather", n.inputs[:2], {"axis": int(n.attrs.get("axis", 0))}),  # type: ignore[arg-type]
    "GatherElements": lambda b, n: b.emit(n.name, "gather_elements", n.inputs[:2], {"axis": int(n.attrs.get("axis", 0))}),  # type: ignore[arg-type]
    "GatherND": lambda b, n: b.emit(n.name, "gather_nd", n.inputs[:2], {"batch_dims": int(n.attrs.get("batch_dims", 0))}),  # type: ignore[arg-type]
    "IsNaN": _simple("isnan"),
    "Cast": _cast, "Shape": _shape, "Range": _range, "ConstantOfShape": _constant_of_shape,
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
}
# The families' handlers (one module per ONNX family); a family may replace a handler above.
for _family in (onnx_math, onnx_nn, onnx_image, onnx_tensor, onnx_reduction, onnx_attention, onnx_controlflow, onnx_quantization, onnx_rnn,
                onnx_signal):
    HANDLERS.update(_family.HANDLERS)


def _attr(a: Any) -> Any:
    from onnx import helper

    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _to_array(tensor: Any, what: str) -> np.ndarray:
    """A TensorProto's array; onnx_validate checked its bytes, so a failure here is a type
    onnx cannot convert (raised typed, with onnx's error as the cause)."""
    from onnx import numpy_helper

    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError) as exc:
        raise ModelFormatError(f"{what}: its data cannot be read ({type(exc).__name__}: {str(exc)[:200]}); re-export the model") from exc


def _constant_node(proto: Any) -> Const:
    a = {x.name: x for x in proto.attribute}
    if "value" in a:
        return Const(_to_array(a["value"].t, f"from_onnx: Constant node {proto.name!r}"))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return Const(np.asarray(_attr(a[key]), dtype))
    raise ModelFormatError(f"from_onnx: Constant node {proto.name!r} has no supported value attribute ({sorted(a)})")



def _load(model: Any) -> Any:
    """The checked ModelProto (onnx_validate: decoding, stored bytes, external data, the graph)
    before anything is converted or built from it."""
    proto = onnx_validate.load_model(model)
    onnx_validate.check_graph(proto)
    return proto


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _input_spec(b: GraphBuilder, value_info: Any, params: dict[str, str], example: Any, static: bool) -> tuple[tuple[int, ...], str, list[int]]:
    """An input's example shape, dtype and dynamic axes; a new dim_param gets a SymDim variable."""

    kind = onnx_controlflow.value_kind(value_info.type)
    if kind is not None:  # a sequence or optional: a list of arrays / an array or None per call, shape ()
        return (), kind, []
    t = value_info.type.tensor_type
    dims, dynamic = [], []
    for axis, d in enumerate(t.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
            continue
        size = None if example is None else int(example[axis])
        if size is None:
            if static:
                raise UnsupportedOperationError(
                    f"{b.source}: input {value_info.name!r} has a symbolic dimension {d.dim_param!r} and static=True; "
                    "give its size with input_shapes= (or drop static=True to keep it dynamic)")
            size = 2  # any size builds the symbolic graph; 2 keeps size-1 broadcasting out of the way
        dims.append(size)
        if not static:
            dynamic.append(axis)
            if d.dim_param and d.dim_param not in params:
                params[d.dim_param] = variable(len(b.inputs), axis)
    return tuple(dims), _input_dtype(b, value_info), dynamic


def _input_dtype(b: GraphBuilder, value_info: Any) -> str:
    """A tensor input's dtype name, refused when neurenix has no such dtype (float8, int4, strings ...)."""
    from onnx import TensorProto, helper

    elem = value_info.type.tensor_type.elem_type
    try:
        name = str(np.dtype(helper.tensor_dtype_to_np_dtype(elem)))
    except (KeyError, TypeError, ValueError):
        name = TensorProto.DataType.Name(elem).lower()
    if name not in DTYPES:
        kind = "strings" if name in ("object", "string") else name
        raise UnsupportedOperationError(
            f"{b.source}: input {value_info.name!r} holds {kind}, a dtype neurenix has no type for (it computes on "
            f"{', '.join(DTYPES)}); convert that input in the model (e.g. a Cast in the exporter) or run it in ONNX Runtime")
    return name


def _parse_dim(text: str, params: dict[str, str]) -> SymDim | None:
    """A value_info dim_param ("batch", "17*batch") as a SymDim over the inputs; None if it is not one."""
    names = set(_IDENT.findall(text))
    if not names or not names <= params.keys():
        return None
    try:
        return SymDim(_IDENT.sub(lambda m: params[m.group(0)], text))
    except NotSymbolicError:
        return None


def _value_shapes(proto: Any, params: dict[str, str]) -> dict[str, tuple[int | SymDim | None, ...]]:
    """Every value's symbolic shape the model records (ONNX shape inference first)."""
    import onnx

    with contextlib.suppress(Exception):  # inference is a help only; the exporter's own value_info stays
        proto = onnx.shape_inference.infer_shapes(proto)
    out: dict[str, tuple[int | SymDim | None, ...]] = {}
    for vi in list(proto.graph.value_info) + list(proto.graph.input) + list(proto.graph.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        out[vi.name] = tuple(int(d.dim_value) if d.HasField("dim_value") else (_parse_dim(d.dim_param, params) if d.dim_param else None)
                             for d in t.shape.dim)
    return out


class ValueImport:
    """A model with value inputs: graph inputs used where the import needs a value (a Reshape's
    target shape, Slice bounds, reduction axes, Pad's pads ... given as inputs rather than
    initializers). Its graph is built per call's input shapes and the values of those inputs,
    which become constants of that graph (the inputs stay in the signature, unused), the way
    static-shape runtimes treat shape tensors; ``nx.compile`` caches one compiled graph per
    shapes and values. ``value_inputs`` grows as imports meet more of them."""

    def __init__(self, proto: Any, first: str) -> None:
        self.proto = proto
        self.value_inputs: list[str] = [first]

    def template(self) -> Graph:
        """The model's inputs and outputs, without nodes (what the signature reads)."""
        from neurenix_core.graph.ir import TensorSpec

        inits = {i.name for i in self.proto.graph.initializer}
        specs = []
        for vi in self.proto.graph.input:
            if vi.name in inits:
                continue
            from onnx import helper

            t = vi.type.tensor_type
            shape = tuple(int(d.dim_value) if d.HasField("dim_value") else 1 for d in t.shape.dim)
            dynamic = tuple(a for a, d in enumerate(t.shape.dim) if not d.HasField("dim_value"))
            specs.append(TensorSpec(vi.name, shape, str(np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))), dynamic))
        return Graph(tuple(specs), (), tuple(o.name for o in self.proto.graph.output))

    def build(self, shapes: Any, values: Any) -> Graph:
        return build_for_values(self.proto, shapes, values, self.value_inputs)


def build_for_values(proto: Any, shapes: Any, values: Any, needed: list[str]) -> Graph:
    """The static graph at these input shapes with the ``needed`` inputs' values as constants;
    an import that meets another value input adds it to ``needed`` (``values`` holds every
    input's value) and starts again."""
    while True:
        try:
            return _import(proto, shapes, True, {k: np.asarray(values[k]) for k in needed})[0]
        except ValueInputNeeded as exc:
            if exc.input_name in needed or exc.input_name not in values:
                raise
            needed.append(exc.input_name)


def import_onnx(model: Any, *, input_shapes: Any = None, static: bool = False) -> tuple[Graph | ValueImport, str]:
    """The Graph of an ONNX model (a path, bytes or ModelProto) and the model's name; a
    :class:`ValueImport` for a model with value inputs.

    Inputs with ``dim_param`` dimensions are dynamic (``static=True``: fixed at ``input_shapes``);
    ``input_shapes`` (one shape per input, in order) gives the example sizes to build with."""
    proto = _lift_opset(_load(model))
    try:
        return _import_any(proto, input_shapes, static)
    except ValueInputNeeded as exc:
        return ValueImport(proto, exc.input_name), proto.graph.name or "model"


def import_onnx_quantized(model: Any, *, input_shapes: Any = None, static: bool = False, qdq: str = "plan",
                          reader: onnx_qdq.Reader | None = None) -> tuple[Graph | ValueImport, str, QuantizationPlan | None]:
    """:func:`import_onnx`, plus the file's own int8 plan for a pre-quantized (QDQ) model.

    ``qdq="plan"``: a QDQ model's Q/DQ nodes are folded into a float graph and a
    QuantizationPlan with the file's scales (``onnx_qdq``; what the core's int8 scheme cannot
    hold raises QuantizationError). ``qdq="ops"``: Q/DQ import as ordinary ops (float fake
    quantization), and the plan is None, as for a float model. ``reader`` words the refusals
    for another caller than ``from_onnx`` (``from_torch`` on a PT2E model: ``torch_pt2e``)."""
    if qdq not in ("plan", "ops"):
        raise QuantizationError(f"from_onnx: qdq={qdq!r}; use 'plan' (the file's scales as an int8 plan) or 'ops' (Q/DQ as float ops)")
    proto = _lift_opset(_load(model))
    if qdq == "ops" or not onnx_qdq.is_qdq(proto):
        try:
            return (*_import_any(proto, input_shapes, static), None)
        except ValueInputNeeded as exc:
            return ValueImport(proto, exc.input_name), proto.graph.name or "model", None
    fold = onnx_qdq.fold_qdq(proto, reader or onnx_qdq.Reader())
    env: dict[str, Any] = {}
    try:
        graph, name = _import_any(fold.proto, input_shapes, static, env)
    except ValueInputNeeded as exc:
        raise QuantizationError(f"{fold.model}: the quantized model reads input {exc.input_name!r} as a value (a shape or "
                                "axes), so it has no one graph to hold an int8 plan; make that input an initializer, or import "
                                "with qdq='ops'") from exc
    return graph, name, onnx_qdq.quantization_plan(fold, graph, env)


def _import_any(proto: Any, input_shapes: Any, static: bool, env_out: dict[str, Any] | None = None) -> tuple[Graph, str]:
    if static:
        return _import(proto, input_shapes, True, env_out=env_out)
    try:
        return _import(proto, input_shapes, False, env_out=env_out)
    except NotSymbolicError as exc:
        from neurenix_core.tensor.fallback import get_fallback_policy

        graph, name = _import(proto, input_shapes or _example_shapes(proto), True, env_out=env_out)
        fixed = _fixed_dims(proto, graph)
        msg = (f"from_onnx({name}): {len(fixed)} dynamic {'axis' if len(fixed) == 1 else 'axes'} came out fixed at the example's "
               f"size, so calls must use that size there: {'; '.join(fixed)}: the model was imported with static input shapes "
               f"{[s.shape for s in graph.inputs]} only, because {exc}. Remedy: pass input_shapes= for the shapes you run "
               "(or static=True to silence this)")
        if get_fallback_policy() == "error":
            raise FallbackError(msg) from exc
        warnings.warn(msg, NeurenixWarning, stacklevel=user_stacklevel())
        return graph, name


def _fixed_dims(proto: Any, graph: Graph) -> list[str]:
    """Each symbolic input dimension (a dim_param, or none named) of ``proto`` with the size
    ``graph`` (its static import) fixed it at: what the fallback warning names."""
    inits = {i.name for i in proto.graph.initializer}
    inputs = [vi for vi in proto.graph.input if vi.name not in inits]
    out = []
    for vi, spec in zip(inputs, graph.inputs):
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                param = f"dim_param {d.dim_param!r}" if d.dim_param else "an unnamed dimension"
                out.append(f"input {vi.name!r} axis {axis} ({param}, example size {spec.shape[axis]})")
    return out


def _default_opset(proto: Any) -> int:
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _lift_opset(proto: Any) -> Any:
    """A model below opset 13 converted to opset 13 by ONNX's own version converter, with a
    NeurenixWarning saying so (the converter rewrites ops whose signature changed, e.g. Split's
    and Squeeze's attributes that became inputs); one it cannot convert is refused."""
    opset, name = _default_opset(proto), proto.graph.name or "model"
    if opset >= MIN_OPSET:
        return proto
    uses_default = any(n.domain in ("", "ai.onnx") for n in proto.graph.node)
    if opset == 0 and uses_default:
        raise ModelFormatError(f"from_onnx({name}): the model's nodes use the ai.onnx domain but it declares no ai.onnx opset "
                               "(opset_import); re-export it with an opset_import entry for the default domain")
    if opset == 0:
        return proto  # no ai.onnx node: custom-domain nodes are refused one by one with their domain
    from onnx import version_converter

    try:
        lifted = version_converter.convert_version(proto, MIN_OPSET)
    except Exception as exc:  # the converter raises RuntimeError, ValidationError ...; wrapped, not swallowed
        raise ModelFormatError(f"from_onnx({name}): the model uses ONNX opset {opset}; neurenix reads opset {MIN_OPSET} and later, "
                               f"and onnx.version_converter could not convert it ({type(exc).__name__}: {str(exc)[:200]}); "
                               "re-export the model with opset 13 or later") from exc
    warnings.warn(f"from_onnx({name}): the model uses ONNX opset {opset}; it was converted to opset {MIN_OPSET} with "
                  "onnx.version_converter before import", NeurenixWarning, stacklevel=user_stacklevel())
    return onnx_controlflow.batched_scan8(proto, lifted)  # Scan-8's batch axis, which the converter drops


def _example_shapes(proto: Any) -> list[tuple[int, ...]]:
    inits = {i.name for i in proto.graph.initializer}
    return [tuple(int(d.dim_value) if d.HasField("dim_value") else 2 for d in vi.type.tensor_type.shape.dim)
            for vi in proto.graph.input if vi.name not in inits]


def _import(proto: Any, input_shapes: Any, static: bool, values: Any = None, env_out: dict[str, Any] | None = None) -> tuple[Graph, str]:
    """The Graph of ``proto``; ``env_out`` receives each ONNX tensor name's Value (a graph value
    name or a Const), which a QDQ import keys its plan by."""
    name = proto.graph.name or "model"
    b = GraphBuilder(f"from_onnx({name})")
    b.onnx_opset = _default_opset(proto)  # type: ignore[attr-defined] # attribute defaults that changed between opsets
    env: dict[str, Any] = {"": None}
    for init in proto.graph.initializer:
        env[init.name] = Const(_to_array(init, f"{b.source}: initializer {init.name!r}"))
    params: dict[str, str] = {}
    k = 0
    for vi in proto.graph.input:
        if vi.name not in env:
            example = None if input_shapes is None else input_shapes[k]
            shape, dtype, dynamic = _input_spec(b, vi, params, example, static)
            env[vi.name] = b.add_input(vi.name, shape, dtype, dynamic)
            if values and vi.name in values:  # a value input: its value is a constant of this graph
                env[vi.name] = Const(values[vi.name])
            k += 1
    if _dynamic(b):
        b.onnx_sym_shapes = _value_shapes(proto, params)  # type: ignore[attr-defined]
    b.onnx_model, b.onnx_env = proto, env  # type: ignore[attr-defined]  # control flow: declared types, outer-scope values
    for i, node in enumerate(proto.graph.node):
        _import_node(b, node, i, env)
    graph = b.graph([env[o.name] for o in proto.graph.output])
    if env_out is not None:
        env_out.clear()
        env_out.update(env)
    return graph, name


def _import_node(b: GraphBuilder, node: Any, index: int, env: dict[str, Any], prefix: str = "") -> None:
    """One ONNX node through its handler (or the symbolic shape arithmetic), its outputs into
    ``env``: the top-level graph's nodes and control-flow bodies' (``prefix``: the enclosing
    node, naming an unnamed body node) go through this one path."""
    if node.domain not in ("", "ai.onnx"):
        raise b.unsupported(node.name or node.op_type, f"{node.domain}.{node.op_type}", "is from a custom domain", _REMEDY)
    if node.op_type == "Constant":
        env[node.output[0]] = _constant_node(node)
        return
    n = _Node(node, index, [env.get(x) for x in node.input], {a.name: _attr(a) for a in node.attribute})
    if prefix and not node.name:
        n.name = f"{prefix}.{n.name}"
    missing = [x for x in node.input if x not in env]
    if missing:
        raise _fail(b, n, f"reads {missing}, which no earlier node, input or enclosing graph defines")
    handler = HANDLERS.get(node.op_type)
    symbolic = any(_symbolic_const(v) for v in n.inputs)
    constant = all(v is None or isinstance(v, Const) for v in n.inputs)
    # A Slice of a constant tensor (position ids sliced to the sequence length) is a slice op
    # with a symbolic end; only a Slice of shape values is shape arithmetic.
    tensor_slice = node.op_type == "Slice" and bool(n.inputs) and not _symbolic_const(n.inputs[0])
    if constant and (symbolic and node.op_type not in ("ConstantOfShape", "Expand", "Range") and not tensor_slice
                     or handler is None and node.op_type == "Mod"):
        out = _checked(b, n, lambda: _symbolic_fold(n))  # shape arithmetic (Mod has no graph mapping, only this one)
    elif handler is None:
        raise _fail(b, n, "has no mapping to the neurenix opset")
    elif symbolic and node.op_type not in ("ConstantOfShape", "Expand", "Reshape", "Slice", "Range", "Resize"):
        raise NotSymbolicError(f"node {n.name!r} ({node.op_type}) mixes a symbolic size with run-time values")
    else:
        out = _checked(b, n, lambda: handler(b, n))
    env.update(zip(node.output, out if isinstance(out, list) else [out]))


def _checked(b: GraphBuilder, n: _Node, build: Any) -> Any:
    """``build()`` (a handler), with an operand the handler cannot index or convert (a rank-1
    Gemm weight, an attribute of the wrong type in a damaged file) raised as ModelFormatError
    naming the node and its operand shapes instead of a bare IndexError (issue #28). The
    importer's own signals (NeurenixError, NotSymbolicError) pass through."""
    try:
        return build()
    except (NeurenixError, NotSymbolicError):
        raise
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        shapes = ["-" if v is None else b.spec(v).shape if isinstance(v, Const) or v in b.specs else "?" for v in n.inputs]
        raise ModelFormatError(f"{b.source}: node {n.name!r} ({n.op}) cannot take its operands (shapes {shapes}, attributes "
                               f"{sorted(n.attrs)}): {type(exc).__name__}: {str(exc)[:200]}; the node does not follow ONNX's "
                               f"definition of {n.op}; re-export the model") from exc


# Subgraph bodies (If, Loop, Scan, SequenceMap) run their nodes through the same per-node import.
onnx_controlflow.bind(HANDLERS, _constant_node, _attr, _import_node)
