"""ONNX -> Graph through the ``onnx`` package (opset 13 and later; imported here only).

Each ONNX node maps to one opset node, or a few (``Flatten`` -> ``reshape``; ``Split`` -> one
``split`` per output; asymmetric ``Conv`` pads -> ``pad`` + ``conv2d``). Initializers and
``Constant`` nodes are NumPy constants; operand tensors that ONNX passes as inputs but that must
be static here (``Reshape``'s shape, ``Slice``'s starts, ``ReduceMean``'s axes in opset 18)
must be constants, and ``Shape`` of a static value is folded. Graph inputs need static shapes:
export with fixed sizes, or fix them with ``onnx.tools.update_model_dims``.

Inputs and outputs keep the ONNX graph's order and names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.errors import ModelFormatError, UnsupportedOperationError
from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.ir import Graph

__all__ = ["import_onnx", "HANDLERS"]

MIN_OPSET = 13
_REMEDY = "re-export the model with supported ops (the opset is listed in docs/models.md) or run it in ONNX Runtime"


class _Node:
    """One ONNX node with resolved inputs and attributes as Python values."""

    def __init__(self, proto: Any, index: int, inputs: list[Value | None], attrs: dict[str, Any]) -> None:
        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.inputs = inputs
        self.attrs = attrs

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None


Handler = Callable[[GraphBuilder, _Node], Any]


def _fail(b: GraphBuilder, n: _Node, why: str) -> UnsupportedOperationError:
    return b.unsupported(n.name, n.op, why, _REMEDY)


def _const(b: GraphBuilder, n: _Node, i: int, what: str) -> np.ndarray | None:
    v = n.input(i)
    if v is None:
        return None
    if not isinstance(v, Const):
        raise _fail(b, n, f"takes its {what} from a value computed at run time; it must be a constant (initializer)")
    return v.array


def _ints(v: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in np.asarray(v).ravel())


def _simple(op: str, **fixed: Any) -> Handler:
    return lambda b, n: b.emit(n.name, op, [v for v in n.inputs if v is not None], fixed)


def _variadic(op: str) -> Handler:
    def run(b: GraphBuilder, n: _Node) -> Value:
        out = n.inputs[0]
        for i, v in enumerate(n.inputs[1:]):
            out = b.emit(f"{n.name}" if i == len(n.inputs) - 2 else f"{n.name}.{i}", op, [out, v])  # type: ignore[list-item]
        return out  # type: ignore[return-value]

    return run


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
    shape = _ints(_const(b, n, 1, "target shape"))
    if n.attrs.get("allowzero", 0) and 0 in shape:
        raise _fail(b, n, "uses allowzero=1 with a zero dimension")
    x = n.inputs[0]
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
    starts, ends = _ints(_const(b, n, 1, "starts")), _ints(_const(b, n, 2, "ends"))
    axes = _const(b, n, 3, "axes")
    steps = _const(b, n, 4, "steps")
    big = 2**62
    ends = tuple(max(min(e, big), -big) for e in ends)
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


def _cast(b: GraphBuilder, n: _Node) -> Value:
    from onnx import helper

    return b.cast_to(n.name, n.inputs[0], str(np.dtype(helper.tensor_dtype_to_np_dtype(int(n.attrs["to"])))))  # type: ignore[arg-type]


def _shape(b: GraphBuilder, n: _Node) -> Value:
    shape = np.asarray(b.spec(n.inputs[0]).shape, np.int64)  # type: ignore[arg-type]
    return Const(shape[n.attrs.get("start", 0) : n.attrs.get("end", None)])


def _constant_of_shape(b: GraphBuilder, n: _Node) -> Value:
    shape = _ints(_const(b, n, 0, "shape"))
    from onnx import numpy_helper

    value = numpy_helper.to_array(n.attrs["value"]) if "value" in n.attrs else np.zeros(1, np.float32)
    return Const(np.full(shape, value.ravel()[0], dtype=value.dtype))


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
    "Identity": _simple("identity"), "Dropout": lambda b, n: n.inputs[0],
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
    "Expand": lambda b, n: b.emit(n.name, "expand", [n.inputs[0]], {"shape": _ints(_const(b, n, 1, "shape"))}),  # type: ignore[list-item]
    "Concat": lambda b, n: b.emit(n.name, "concat", [v for v in n.inputs if v is not None], {"axis": int(n.attrs["axis"])}),
    "Split": _split, "Slice": _slice, "Pad": _pad,
    "Gather": lambda b, n: b.emit(n.name, "gather", n.inputs[:2], {"axis": int(n.attrs.get("axis", 0))}),  # type: ignore[arg-type]
    "GatherElements": lambda b, n: b.emit(n.name, "gather_elements", n.inputs[:2], {"axis": int(n.attrs.get("axis", 0))}),  # type: ignore[arg-type]
    "GatherND": lambda b, n: b.emit(n.name, "gather_nd", n.inputs[:2], {"batch_dims": int(n.attrs.get("batch_dims", 0))}),  # type: ignore[arg-type]
    "IsNaN": _simple("isnan"),
    "Cast": _cast, "Shape": _shape, "ConstantOfShape": _constant_of_shape,
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
}


def _attr(a: Any) -> Any:
    from onnx import helper

    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _constant_node(proto: Any) -> Const:
    from onnx import numpy_helper

    a = {x.name: x for x in proto.attribute}
    if "value" in a:
        return Const(numpy_helper.to_array(a["value"].t))
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64), ("value_ints", np.int64)):
        if key in a:
            return Const(np.asarray(_attr(a[key]), dtype))
    raise ModelFormatError(f"from_onnx: Constant node {proto.name!r} has no supported value attribute ({sorted(a)})")


def _load(model: Any) -> Any:
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    path = Path(model)
    if not path.is_file():
        raise ModelFormatError(f"from_onnx: {path} is not a file; pass a path to a .onnx file, its bytes or an onnx.ModelProto")
    return onnx.load(str(path))


def _input_spec(b: GraphBuilder, value_info: Any) -> tuple[tuple[int, ...], str]:
    from onnx import helper

    t = value_info.type.tensor_type
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value"):
            raise UnsupportedOperationError(
                f"{b.source}: input {value_info.name!r} has a symbolic dimension {d.dim_param!r}; neurenix graphs have static shapes. "
                "Export with fixed sizes or fix them with onnx.tools.update_model_dims.update_inputs_outputs_dims"
            )
        dims.append(int(d.dim_value))
    return tuple(dims), str(np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)))


def import_onnx(model: Any) -> tuple[Graph, str]:
    """The Graph of an ONNX model (a path, bytes or ModelProto) and the model's name."""
    from onnx import numpy_helper

    proto = _load(model)
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    name = proto.graph.name or "model"
    if opset < MIN_OPSET:
        raise ModelFormatError(f"from_onnx({name}): the model uses ONNX opset {opset}; neurenix reads opset {MIN_OPSET} and later. "
                               "Convert it with onnx.version_converter.convert_version(model, 17)")
    b = GraphBuilder(f"from_onnx({name})")
    env: dict[str, Any] = {"": None}
    for init in proto.graph.initializer:
        env[init.name] = Const(numpy_helper.to_array(init))
    for vi in proto.graph.input:
        if vi.name not in env:
            shape, dtype = _input_spec(b, vi)
            env[vi.name] = b.add_input(vi.name, shape, dtype)
    for i, node in enumerate(proto.graph.node):
        if node.domain not in ("", "ai.onnx"):
            raise b.unsupported(node.name or node.op_type, f"{node.domain}.{node.op_type}", "is from a custom domain", _REMEDY)
        if node.op_type == "Constant":
            env[node.output[0]] = _constant_node(node)
            continue
        n = _Node(node, i, [env[x] for x in node.input], {a.name: _attr(a) for a in node.attribute})
        handler = HANDLERS.get(node.op_type)
        if handler is None:
            raise _fail(b, n, "has no mapping to the neurenix opset")
        out = handler(b, n)
        outs = out if isinstance(out, list) else [out]
        for o, v in zip(node.output, outs):
            env[o] = v
    return b.graph([env[o.name] for o in proto.graph.output]), name
