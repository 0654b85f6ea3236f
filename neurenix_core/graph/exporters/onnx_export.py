"""The op-level graph -> ONNX (``export``): every opset op as standard ONNX nodes, weights as initializers.

The one ONNX exporter of the project: ``GraphModule.to_onnx`` / ``nx.nn.export_onnx`` write files
with it, and the onnxruntime example plugin lowers graphs for its sessions with it (subclassing
:class:`Exporter` for int8 QDQ). ``onnx`` is imported here, at module level: this module is
imported on use only (``import neurenix_core`` never loads it).

The inverse of the core's ONNX importer (``nx.nn.from_onnx``): graph -> ONNX -> from_onnx computes
what the graph computes (tests/test_to_onnx.py, and the example plugin's tests/test_onnx_export.py
on every opset op). Shapes
are static (``neurenix_core.graph.ir.shapes.infer_values``), so shape operands (``Reshape``'s target,
``Slice``'s bounds, ``Expand``'s shape) are int64 initializers and reshape-like ops use the
inferred output shape. Composites with an ONNX counterpart keep it (``Conv``, ``Gelu``,
``HardSwish``, ``LayerNormalization``, ``BatchNormalization``, ``Gather`` for embedding,
``GlobalAveragePool``); the others (``multihead_attention``) go through the opset's own
decomposition first. ``scaled_dot_product_attention`` becomes MatMul -> Mul -> Where/Add ->
Softmax -> MatMul (ONNX's Attention op arrived in opset 23, which ONNX Runtime 1.18 lacks).

Float values take one ONNX float type (``float_type``: float32, or float16 for the fp16 model,
with float32 kept at the inputs and outputs); integer and bool values keep their dtype. Where the
opset promotes mixed operand dtypes (``add`` of int64 and float32 ...) the exporter inserts the
Cast ONNX requires. A float -> float ``cast`` keeps the working precision, as the opset says.

:class:`Exporter` has three hooks (``weight``, ``bias``, ``after``) that a subclass overrides
(the onnxruntime example plugin's ``lowering.py`` writes the int8 QDQ model from the core's
QuantizationPlan through them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph import opset
from neurenix_core.graph.ir import Graph, Node, fresh_name
from neurenix_core.graph.ir.decompose import legalize
from neurenix_core.graph.ir.shapes import ValueSpec, infer_values

__all__ = ["EMIT", "EXPORTED_OPS", "GRAPH_OPS", "MIN_OPSET", "Exporter", "export", "write_onnx"]

#: The oldest ONNX opset the exporter writes (LayerNormalization: 17; Gelu: 20 -> decomposed below that).
MIN_OPSET: Final = 17
_DEFAULT_OPSET: Final = 21


def _float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _in_memory(name: str, arr: np.ndarray) -> onnx.TensorProto:
    """An initializer whose data a runtime is given from memory (external data, location "in-memory")."""
    t = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype), dims=list(arr.shape))
    t.data_location = onnx.TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", "in-memory"
    return t


class Exporter:
    """One export: ONNX nodes and initializers for ``graph`` (static input shapes)."""

    def __init__(self, graph: Graph, *, float_type: Any = np.float32, opset_version: int = _DEFAULT_OPSET,
                 external_min_bytes: int | None = None) -> None:
        if opset_version < MIN_OPSET:
            raise UnsupportedOperationError(f"onnx_export writes ONNX opset {MIN_OPSET} or later, not {opset_version}")
        # Composites without an ONNX counterpart go through the opset's own decomposition.
        self.graph = legalize(graph, lambda n: n.op in EXPORTED_OPS)
        self.float_type = np.dtype(float_type)
        self.opset = opset_version
        self.specs: dict[str, ValueSpec] = infer_values(self.graph)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        # Constants of external_min_bytes or more are left out of the model (a TensorProto that
        # names them, data "in-memory") and kept here, for a runtime that takes them from memory
        # (ONNX Runtime's add_external_initializers): no copy in the protobuf, none serialized.
        self.external_min_bytes = external_min_bytes
        self.external: dict[str, np.ndarray] = {}
        self.names: dict[str, str] = {}  # graph value -> the ONNX value its consumers read
        self._used: set[str] = {s.name for s in self.graph.inputs} | {n.output for n in self.graph.nodes}
        self._inputs: list[onnx.ValueInfoProto] = []
        self._outputs: list[onnx.ValueInfoProto] = []

    # ------------------------------------------------------------------ names, constants, nodes
    def fresh(self, name: str) -> str:
        return fresh_name(name, self._used)

    def onnx_dtype(self, dtype: str) -> np.dtype[Any]:
        """The ONNX element type of a graph dtype (floats: the model's float type)."""
        return self.float_type if _float(dtype) else np.dtype(dtype)

    def const(self, name: str, array: Any, dtype: Any = None) -> str:
        arr = np.asarray(array)
        if dtype is not None:
            arr = arr.astype(dtype)
        elif arr.dtype.kind == "f":
            arr = arr.astype(self.float_type, copy=False)
        name = self.fresh(name)
        if self.external_min_bytes is not None and arr.ndim > 0 and arr.nbytes >= self.external_min_bytes:
            self.external[name] = np.ascontiguousarray(arr)
            self.inits.append(_in_memory(name, arr))
            return name
        # np.ascontiguousarray would turn a 0-d scalar into shape (1,): copy in C order instead.
        self.inits.append(numpy_helper.from_array(np.array(arr, order="C", copy=True), name))
        return name

    def ints(self, name: str, values: Any) -> str:
        return self.const(name, np.asarray(values, np.int64).reshape(-1), np.int64)

    def add(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        out = self.fresh(name)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def read(self, value: str) -> str:
        return self.names[value]

    def dtype(self, value: str) -> str:
        return self.specs[value].dtype

    def shape(self, value: str) -> tuple[int, ...]:
        return self.specs[value].shape

    def read_as(self, value: str, dtype: str, node: Node) -> str:
        """``value`` in ``dtype``'s ONNX type (a Cast where ONNX needs equal operand types)."""
        have, want = self.onnx_dtype(self.dtype(value)), self.onnx_dtype(dtype)
        if have == want:
            return self.read(value)
        return self.add("Cast", [self.read(value)], f"{node.name}/cast_{value}", to=helper.np_dtype_to_tensor_dtype(want))

    def scalar(self, node: Node, value: float, like: str) -> str:
        return self.const(f"{node.name}.scalar", np.asarray(value, self.onnx_dtype(self.dtype(like))))

    # ------------------------------------------------------------------ hooks (int8 QDQ overrides them)
    def weight(self, node: Node, key: str, array: np.ndarray, transpose: bool = False) -> str:
        """The initializer of a node's weight (``transpose``: stored (in, out) for MatMul)."""
        arr = np.asarray(array, np.float32)
        return self.const(f"{node.name}.{key}", arr.T if transpose else arr)

    def bias(self, node: Node) -> str | None:
        b = node.params.get("bias")
        return None if b is None else self.weight(node, "bias", b)

    def after(self, value: str) -> None:
        """Called once ``value`` is written (graph inputs and node outputs)."""

    def emitter(self, node: Node) -> Emit | None:
        """The function writing ``node``'s ONNX nodes (a subclass may lower some nodes its own way)."""
        return EMIT.get(node.op)

    # ------------------------------------------------------------------ driver
    def export(self, name: str = "neurenix_model") -> onnx.ModelProto:
        for spec in self.graph.inputs:
            elem = np.dtype(np.float32) if _float(spec.dtype) else np.dtype(spec.dtype)
            self._inputs.append(helper.make_tensor_value_info(spec.name, helper.np_dtype_to_tensor_dtype(elem), list(spec.shape)))
            self.names[spec.name] = spec.name
            if _float(spec.dtype) and self.float_type != np.float32:  # float32 at the boundary, float16 inside
                self.names[spec.name] = self.add("Cast", [spec.name], f"{spec.name}/to_{self.float_type}",
                                                 to=helper.np_dtype_to_tensor_dtype(self.float_type))
            self.after(spec.name)
        for node in self.graph.nodes:
            emit = self.emitter(node)
            if emit is None:  # an op added to the opset after this exporter was written
                raise UnsupportedOperationError(
                    f"layer {node.name} ({node.op}) has no ONNX export in neurenix_core.graph.exporters.onnx_export; run the model "
                    "on another device, or save it as a neurenix model file (nx.nn.save(model, 'model.nxm'))"
                )
            self.names[node.output] = emit(self, node, opset.attrs_of(node.op, node.attrs))
            self.after(node.output)
        out_names = []
        for i, value in enumerate(self.graph.outputs):
            dtype = self.dtype(value)
            out = self.fresh(f"output_{i}")
            if _float(dtype) and self.float_type != np.float32:
                self.nodes.append(helper.make_node("Cast", [self.read(value)], [out], name=out, to=TensorProto.FLOAT))
            else:
                self.nodes.append(helper.make_node("Identity", [self.read(value)], [out], name=out))
            elem = np.dtype(np.float32) if _float(dtype) else np.dtype(dtype)
            self._outputs.append(helper.make_tensor_value_info(out, helper.np_dtype_to_tensor_dtype(elem), list(self.shape(value))))
            out_names.append(out)
        g = helper.make_graph(self.nodes, name, self._inputs, self._outputs, initializer=self.inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="neurenix")
        model.ir_version = 10  # the newest IR every ONNX Runtime >= 1.18 reads
        return model


# ----------------------------------------------------------------------------- per-op emitters
Emit = Callable[[Exporter, Node, dict[str, Any]], str]

_ONNX_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "maximum": "Max", "minimum": "Min"}
_ONNX_COMPARE = {"equal": "Equal", "less": "Less", "less_equal": "LessOrEqual", "greater": "Greater", "greater_equal": "GreaterOrEqual"}
_ONNX_UNARY = {
    "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "reciprocal": "Reciprocal", "sin": "Sin", "cos": "Cos", "erf": "Erf",
    "tanh": "Tanh", "sigmoid": "Sigmoid", "floor": "Floor", "ceil": "Ceil", "neg": "Neg", "abs": "Abs", "sign": "Sign",
    "relu": "Relu", "identity": "Identity", "dropout": "Identity", "hardswish": "HardSwish",
}


def _binary(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    out = e.dtype(n.output)  # the opset's promoted dtype: ONNX wants both operands in it
    return e.add(_ONNX_BINARY[n.op], [e.read_as(i, out, n) for i in n.inputs], n.name)


def _compare(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    common = opset._promote([e.dtype(i) for i in n.inputs])
    args = [e.read_as(i, common, n) for i in n.inputs]
    if n.op == "not_equal":
        return e.add("Not", [e.add("Equal", args, f"{n.name}/equal")], n.name)
    return e.add(_ONNX_COMPARE[n.op], args, n.name)


def _logical(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    args = [e.read_as(i, "bool", n) for i in n.inputs]
    return e.add({"logical_and": "And", "logical_or": "Or", "logical_not": "Not"}[n.op], args, n.name)


def _unary(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add(_ONNX_UNARY[n.op], [e.read(n.inputs[0])], n.name)


def _rsqrt(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("Reciprocal", [e.add("Sqrt", [e.read(n.inputs[0])], f"{n.name}/sqrt")], n.name)


def _clip(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    x = n.inputs[0]
    lo = "" if a["min"] is None else e.scalar(n, a["min"], x)
    hi = "" if a["max"] is None else e.scalar(n, a["max"], x)
    return e.add("Clip", [e.read(x), lo, hi], n.name)


def _leaky_relu(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("LeakyRelu", [e.read(n.inputs[0])], n.name, alpha=float(a["alpha"]))


def _hardsigmoid(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("HardSigmoid", [e.read(n.inputs[0])], n.name, alpha=float(a["alpha"]), beta=float(a["beta"]))


def _gelu(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    x = e.read(n.inputs[0])
    if e.opset >= 20:
        return e.add("Gelu", [x], n.name, approximate=str(a["approximate"]))
    if a["approximate"] != "none":
        raise UnsupportedOperationError(f"node {n.name!r}: tanh-approximate gelu needs ONNX opset 20 (Gelu); export with opset_version=20+")
    inner = e.add("Erf", [e.add("Mul", [x, e.scalar(n, 1.0 / np.sqrt(2.0), n.inputs[0])], f"{n.name}/scale")], f"{n.name}/erf")
    t = e.add("Add", [inner, e.scalar(n, 1.0, n.inputs[0])], f"{n.name}/plus1")
    return e.add("Mul", [e.add("Mul", [x, t], f"{n.name}/mul"), e.scalar(n, 0.5, n.inputs[0])], n.name)


def _silu(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    x = e.read(n.inputs[0])
    return e.add("Mul", [x, e.add("Sigmoid", [x], f"{n.name}/sigmoid")], n.name)


def _softmax(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("LogSoftmax" if n.op == "log_softmax" else "Softmax", [e.read(n.inputs[0])], n.name, axis=int(a["axis"]))


def _matmul(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    out = e.dtype(n.output)
    return e.add("MatMul", [e.read_as(i, out, n) for i in n.inputs], n.name)


def _gemm(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    out = e.dtype(n.output)
    return e.add("Gemm", [e.read_as(i, out, n) for i in n.inputs], n.name, alpha=float(a["alpha"]), beta=float(a["beta"]),
                 transA=int(bool(a["trans_a"])), transB=int(bool(a["trans_b"])))


def _linear(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    y = e.add("MatMul", [e.read(n.inputs[0]), e.weight(n, "weight", n.params["weight"], transpose=True)], f"{n.name}/matmul")
    b = e.bias(n)
    return y if b is None else e.add("Add", [y, b], n.name)


def _conv_node(e: Exporter, n: Node, a: dict[str, Any], op_type: str, **extra: Any) -> str:
    """Conv / ConvTranspose: input, weight, optional bias, and the attributes both share."""
    pads = [int(p) for p in a["padding"]]
    args = [e.read(n.inputs[0]), e.weight(n, "weight", n.params["weight"])]
    b = e.bias(n)
    if b is not None:
        args.append(b)
    kernel = [int(k) for k in np.shape(n.params["weight"])[2:]]
    return e.add(op_type, args, n.name, kernel_shape=kernel, strides=[int(s) for s in a["stride"]], pads=pads + pads,
                 dilations=[int(d) for d in a["dilation"]], group=int(a["groups"]), **extra)


def _conv(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return _conv_node(e, n, a, "Conv")


def _conv_transpose(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return _conv_node(e, n, a, "ConvTranspose", output_padding=[int(p) for p in a["output_padding"]])


def _pool(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    k = [int(v) for v in a["kernel_size"]]
    s = [int(v) for v in a["stride"]] if a["stride"] is not None else k
    p = [int(v) for v in a["padding"]]
    if n.op == "max_pool2d":
        return e.add("MaxPool", [e.read(n.inputs[0])], n.name, kernel_shape=k, strides=s, pads=p + p)
    return e.add("AveragePool", [e.read(n.inputs[0])], n.name, kernel_shape=k, strides=s, pads=p + p,
                 count_include_pad=int(bool(a["count_include_pad"])))


def _adaptive(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    from neurenix_core.backends.cpu_nn import adaptive_bounds

    oh, ow = (int(v) for v in a["output_size"])
    _, _, h, w = e.shape(n.inputs[0])
    x, mean = e.read(n.inputs[0]), n.op == "adaptive_avg_pool2d"
    if (oh, ow) == (1, 1):
        return e.add("GlobalAveragePool" if mean else "GlobalMaxPool", [x], n.name)
    if h % oh == 0 and w % ow == 0:
        k = [h // oh, w // ow]
        return e.add("AveragePool" if mean else "MaxPool", [x], n.name, kernel_shape=k, strides=k)
    # Uneven cells (PyTorch's adaptive bounds): one Slice + Reduce per cell, concatenated.
    hs, he = adaptive_bounds(h, oh)
    ws, we = adaptive_bounds(w, ow)
    rows = []
    for i, (h0, h1) in enumerate(zip(hs, he)):
        cells = []
        for j, (w0, w1) in enumerate(zip(ws, we)):
            cell = e.add("Slice", [x, e.ints(f"{n.name}.starts", [h0, w0]), e.ints(f"{n.name}.ends", [h1, w1]),
                                   e.ints(f"{n.name}.axes", [2, 3])], f"{n.name}/cell_{i}_{j}")
            cells.append(e.add("ReduceMean" if mean else "ReduceMax", [cell, e.ints(f"{n.name}.raxes", [2, 3])], f"{n.name}/reduce_{i}_{j}",
                               keepdims=1))
        rows.append(e.add("Concat", cells, f"{n.name}/row_{i}", axis=3))
    return e.add("Concat", rows, n.name, axis=2)


def _global(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("GlobalAveragePool" if n.op == "global_avg_pool" else "GlobalMaxPool", [e.read(n.inputs[0])], n.name)


_ONNX_REDUCE = {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
                "reduce_prod": "ReduceProd"}


def _reduce(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    op, keep = _ONNX_REDUCE[n.op], int(bool(a["keepdims"]))
    rank = len(e.shape(n.inputs[0]))
    axes = list(range(rank)) if a["axes"] is None else [int(v) % max(rank, 1) for v in a["axes"]]
    shape = e.shape(n.inputs[0])
    if op in ("ReduceMax", "ReduceMin") and e.dtype(n.inputs[0]) == "bool" and any(shape[i] == 0 for i in axes):
        # ONNX Runtime's bool ReduceMax/Min fail at run time on an empty set: refused at export.
        raise UnsupportedOperationError(f"node {n.name!r}: ONNX Runtime cannot {op} an empty bool axis (shape {shape})")
    # Axes became an input in opset 18 (13 for ReduceSum); before that an attribute.
    if e.opset >= 18 or op == "ReduceSum":
        return e.add(op, [e.read(n.inputs[0]), e.ints(f"{n.name}.axes", axes)], n.name, keepdims=keep)
    return e.add(op, [e.read(n.inputs[0])], n.name, axes=axes, keepdims=keep)


def _arg(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("ArgMax" if n.op == "argmax" else "ArgMin", [e.read(n.inputs[0])], n.name, axis=int(a["axis"]), keepdims=int(bool(a["keepdims"])))


def _to_shape(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    """reshape, flatten, squeeze, unsqueeze: a Reshape to the inferred static output shape."""
    return e.add("Reshape", [e.read(n.inputs[0]), e.ints(f"{n.name}.shape", e.shape(n.output))], n.name)


def _transpose(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    rank = len(e.shape(n.inputs[0]))
    perm = list(reversed(range(rank))) if a["perm"] is None else [int(v) % rank for v in a["perm"]]
    return e.add("Transpose", [e.read(n.inputs[0])], n.name, perm=perm)


def _expand(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("Expand", [e.read(n.inputs[0]), e.ints(f"{n.name}.shape", e.shape(n.output))], n.name)


def _concat(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    out = e.dtype(n.output)
    return e.add("Concat", [e.read_as(i, out, n) for i in n.inputs], n.name, axis=int(a["axis"]))


def _split(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    sizes = [int(s) for s in a["sizes"]]
    lo = sum(sizes[: int(a["index"])])
    ax = int(a["axis"]) % len(e.shape(n.inputs[0]))
    args = [e.read(n.inputs[0]), e.ints(f"{n.name}.starts", [lo]), e.ints(f"{n.name}.ends", [lo + sizes[int(a["index"])]]),
            e.ints(f"{n.name}.axes", [ax])]
    return e.add("Slice", args, n.name)


def _slice(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    starts = [int(v) for v in a["starts"]]
    axes = [int(v) for v in a["axes"]] if a["axes"] is not None else list(range(len(starts)))
    steps = [int(v) for v in a["steps"]] if a["steps"] is not None else [1] * len(axes)
    args = [e.read(n.inputs[0]), e.ints(f"{n.name}.starts", starts), e.ints(f"{n.name}.ends", [int(v) for v in a["ends"]]),
            e.ints(f"{n.name}.axes", axes), e.ints(f"{n.name}.steps", steps)]
    return e.add("Slice", args, n.name)


def _gather(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("Gather", [e.read(n.inputs[0]), e.read(n.inputs[1])], n.name, axis=int(a["axis"]))


def _gather_elements(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("GatherElements", [e.read(n.inputs[0]), e.read(n.inputs[1])], n.name, axis=int(a["axis"]))


def _gather_nd(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("GatherND", [e.read(n.inputs[0]), e.read(n.inputs[1])], n.name, batch_dims=int(a["batch_dims"]))


def _isnan(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("IsNaN", [e.read(n.inputs[0])], n.name)


def _embedding(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.add("Gather", [e.weight(n, "weight", n.params["weight"]), e.read(n.inputs[0])], n.name, axis=0)


def _where(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    out = e.dtype(n.output)
    return e.add("Where", [e.read_as(n.inputs[0], "bool", n)] + [e.read_as(i, out, n) for i in n.inputs[1:]], n.name)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    pads = [(int(lo), int(hi)) for lo, hi in a["pads"]]
    if a["mode"] == "wrap" and e.opset < 19:
        raise UnsupportedOperationError(f"node {n.name!r}: pad mode 'wrap' needs ONNX opset 19; export with opset_version=19+")
    args = [e.read(n.inputs[0]), e.ints(f"{n.name}.pads", [lo for lo, _ in pads] + [hi for _, hi in pads])]
    if a["mode"] == "constant":
        args.append(e.scalar(n, a["value"], n.inputs[0]))
    return e.add("Pad", args, n.name, mode=_PAD_MODES[str(a["mode"])])


def _cast(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    to, x = str(a["to"]), n.inputs[0]
    if _float(to) and _float(e.dtype(x)):
        return e.add("Identity", [e.read(x)], n.name)  # float -> float keeps the working precision (the opset's rule)
    return e.add("Cast", [e.read(x)], n.name, to=helper.np_dtype_to_tensor_dtype(e.onnx_dtype(to)))


def _constant(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    return e.const(n.name, n.params["value"])


def _batch_norm(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    c = int(np.shape(n.params["running_mean"])[0])
    fill = {"weight": np.ones(c, np.float32), "bias": np.zeros(c, np.float32)}
    args = [e.read(n.inputs[0])]
    for key in ("weight", "bias", "running_mean", "running_var"):
        value = n.params.get(key)
        args.append(e.weight(n, key, fill[key] if value is None else value))
    return e.add("BatchNormalization", args, n.name, epsilon=float(a["eps"]))


def _layer_norm(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    shape = tuple(int(d) for d in a["normalized_shape"])
    weight = n.params.get("weight")
    args = [e.read(n.inputs[0]), e.weight(n, "weight", np.ones(shape, np.float32) if weight is None else weight)]
    if n.params.get("bias") is not None:
        args.append(e.weight(n, "bias", n.params["bias"]))
    return e.add("LayerNormalization", args, n.name, axis=-len(shape), epsilon=float(a["eps"]))


def _attention(e: Exporter, n: Node, a: dict[str, Any]) -> str:
    q, k, v = n.inputs[:3]
    rank_k, L, S = len(e.shape(k)), e.shape(q)[-2], e.shape(k)[-2]
    kt = e.add("Transpose", [e.read(k)], f"{n.name}/k_t", perm=list(range(rank_k - 2)) + [rank_k - 1, rank_k - 2])
    scale = a["scale"] if a["scale"] is not None else 1.0 / np.sqrt(e.shape(q)[-1])
    s = e.add("Mul", [e.add("MatMul", [e.read(q), kt], f"{n.name}/scores"), e.scalar(n, scale, q)], f"{n.name}/scaled")
    if a["is_causal"]:
        tri = e.const(f"{n.name}.causal", np.tril(np.ones((L, S), bool)), np.bool_)
        s = e.add("Where", [tri, s, e.scalar(n, -np.inf, q)], f"{n.name}/causal")
    if len(n.inputs) > 3:
        mask = n.inputs[3]
        if e.dtype(mask) == "bool":  # True keeps (PyTorch's rule)
            s = e.add("Where", [e.read(mask), s, e.scalar(n, -np.inf, q)], f"{n.name}/masked")
        else:  # a float mask is added
            s = e.add("Add", [s, e.read_as(mask, e.dtype(q), n)], f"{n.name}/masked")
    p = e.add("Softmax", [s], f"{n.name}/softmax", axis=-1)
    return e.add("MatMul", [p, e.read(v)], n.name)


EMIT: dict[str, Emit] = {
    **{op: _binary for op in _ONNX_BINARY}, **{op: _compare for op in (*_ONNX_COMPARE, "not_equal")},
    **{op: _logical for op in ("logical_and", "logical_or", "logical_not")}, **{op: _unary for op in _ONNX_UNARY},
    "rsqrt": _rsqrt, "clip": _clip, "leaky_relu": _leaky_relu, "hardsigmoid": _hardsigmoid, "gelu": _gelu, "silu": _silu,
    "softmax": _softmax, "log_softmax": _softmax, "matmul": _matmul, "gemm": _gemm, "linear": _linear,
    "conv2d": _conv, "conv1d": _conv, "max_pool2d": _pool, "avg_pool2d": _pool, "adaptive_avg_pool2d": _adaptive,
    "adaptive_max_pool2d": _adaptive, "global_avg_pool": _global, "global_max_pool": _global,
    **{op: _reduce for op in _ONNX_REDUCE}, "argmax": _arg, "argmin": _arg,
    "reshape": _to_shape, "flatten": _to_shape, "squeeze": _to_shape, "unsqueeze": _to_shape, "transpose": _transpose,
    "expand": _expand, "concat": _concat, "split": _split, "slice": _slice, "gather": _gather, "embedding": _embedding,
    "where": _where, "pad": _pad, "cast": _cast, "constant": _constant, "batch_norm2d": _batch_norm, "layer_norm": _layer_norm,
    "scaled_dot_product_attention": _attention, "conv_transpose2d": _conv_transpose, "gather_elements": _gather_elements,
    "gather_nd": _gather_nd, "isnan": _isnan,
}

#: Ops written as ONNX nodes directly; the other composites (multihead_attention) are decomposed first.
EXPORTED_OPS: Final = frozenset(EMIT)
#: Every opset op the exporter takes (what the ort plugin declares as ``graph_ops``).
GRAPH_OPS: Final = tuple(sorted(EXPORTED_OPS | opset.COMPOSITES))


def export(graph: Graph, *, opset_version: int = _DEFAULT_OPSET, float_type: Any = np.float32, name: str = "neurenix_model") -> onnx.ModelProto:
    """``graph`` (static input shapes) as an ONNX model of ``opset_version``; ``onnx.checker`` accepts it."""
    return Exporter(graph, float_type=float_type, opset_version=opset_version).export(name)


def write_onnx(model: Any, path: Any, *shapes: tuple[int, ...], opset_version: int = _DEFAULT_OPSET) -> Any:
    """``model`` (a GraphModule or anything with its ``to_graph``; or a static Graph) as an ONNX
    file at ``path``, written atomically; returns the path. The file has static input shapes:
    ``shapes`` (one per input), else the import's example shapes (a dynamic axis is fixed at the
    size given). (Duck-typed: this module is below ``neurenix_core.nn`` and does not import it.)"""
    import os
    import tempfile
    from pathlib import Path

    if getattr(model, "value_inputs", ()):
        raise UnsupportedOperationError(f"{model!r} is built per value of its inputs {list(model.value_inputs)}, so it has no one "
                                        "graph to export; give those inputs as initializers (constants) in the model")
    if isinstance(model, Graph):
        graph = model
    else:
        graph = model.to_graph(*shapes) if shapes else model.to_graph()
    proto = export(graph, opset_version=opset_version)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        onnx.save(proto, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # the destination was never touched; re-raised as is
        raise
    return target
