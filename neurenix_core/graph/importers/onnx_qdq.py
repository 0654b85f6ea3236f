"""Pre-quantized ONNX models (QDQ format) onto the core's int8 plan, with the file's own scales.

A QDQ file (``onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ)`` and
other tools) is a float graph with ``QuantizeLinear`` -> ``DequantizeLinear`` pairs on
activations and ``DequantizeLinear`` on int8 weight and int32 bias initializers. Imported as
ordinary ops it would run as float fake quantization on cpu:0; here it becomes

* a float ONNX graph (:func:`fold_qdq`): every activation pair removed (its consumers read the
  float value again), every constant ``DequantizeLinear`` replaced by its float32 value
  ``(q - zp) * scale``, which the ordinary importer then imports; and
* a :class:`~neurenix_core.graph.ir.QuantizationPlan` keyed by that graph's value and node names
  (:func:`quantization_plan`), which ``nx.compile`` lowers without calibrating.

The plan holds the file's numbers, checked to survive the core's own arithmetic: activations
per tensor (uint8 ``(s, zp)`` is int8 ``(s, zp - 128)``: the same real values), weights
symmetric int8 per output channel (a per-tensor scale is broadcast to every channel), and
each int32 bias is checked to come back bit for bit when the core requantizes the float bias
with ``input_scale * weight_scale``. Whatever the core's scheme cannot hold as the file says
(an asymmetric weight, 16-bit or 4-bit types, a per-channel activation, a pooling op whose
output scale differs from its input's ...) raises :class:`QuantizationError` naming the node and
the remedy, rather than running other numbers than the file's.

ONNX Runtime removes a ReLU whose input is quantized with a range starting at 0 (the clamp at
the zero point is the ReLU). The float graph gets that ReLU back (:func:`fold_qdq` inserts one
after a Conv / Gemm / MatMul / Add whose output's zero point is the type's minimum), so the
float model computes what the file does, and the int8 plan is unchanged by it.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from neurenix_core.errors import NeurenixWarning, QuantizationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams
from neurenix_core.graph.ir import qmath as Q
from neurenix_core.graph.ir.shapes import infer_values
from neurenix_core.user_frame import user_stacklevel

__all__ = ["METHOD", "QdqFold", "Reader", "fold_qdq", "is_qdq", "quantization_plan"]

#: ``QuantizationPlan.method`` of a plan read from a file (no calibration ran).
METHOD = "onnx-qdq"
_Q, _DQ = "QuantizeLinear", "DequantizeLinear"
#: ops of the QOperator format: such a model is not QDQ and imports as ordinary ops.
_QOPERATOR = frozenset({"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QLinearAdd", "QLinearMul",
                        "QLinearGlobalAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QGemm"})
#: producers after which ONNX Runtime's QDQ quantizer removes a ReLU (the range starts at 0).
_RELU_PRODUCERS = frozenset({"Conv", "Gemm", "MatMul", "Add"})
#: activation storage types the core's int8 scheme holds, with the offset to int8.
_INT8_OFFSET = {"int8": 0, "uint8": -128}
_REMEDY_OPS = "or import it with nx.nn.from_onnx(path, qdq='ops') to run the file's Q/DQ nodes as float ops on cpu:0"


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads the QDQ model, for the errors: the call they name and the way out they end with.
    ``from_onnx`` offers ``qdq='ops'``; ``from_torch`` reads a PT2E model through this module too
    (``torch_pt2e``) and offers its own way out, since its user has no file to re-import."""

    call: str = "from_onnx"
    remedy: str = _REMEDY_OPS


@dataclass(frozen=True, slots=True)
class _Model:
    """The model's name and its reader: formats as ``from_onnx(name)`` at the head of an error."""

    name: str
    reader: Reader

    def __str__(self) -> str:
        return f"{self.reader.call}({self.name})"


@dataclass(frozen=True, slots=True)
class _Weight:
    """A constant ``DequantizeLinear``: the file's integers and parameters (axis as in the file)."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None
    node: str


@dataclass(frozen=True, slots=True)
class QdqFold:
    """The float ONNX model of a QDQ file and the file's parameters by ONNX tensor name."""

    proto: Any
    activations: Mapping[str, QuantParams]
    constants: Mapping[str, _Weight]
    name: str
    reader: Reader = Reader()

    @property
    def model(self) -> _Model:
        return _Model(self.name, self.reader)


def is_qdq(proto: Any) -> bool:
    """The model is in QDQ format: a DequantizeLinear of a constant is the weight (input 1) of
    a Conv / Gemm / MatMul, and some activation runs through a QuantizeLinear -> DequantizeLinear
    pair. Other models with Q/DQ nodes (a lone QuantizeLinear with an integer output, the
    QOperator format's QLinearConv ...) have no float graph to fold into and import as ops."""
    nodes = [n for n in proto.graph.node if n.domain in ("", "ai.onnx")]
    if any(n.op_type in _QOPERATOR for n in nodes):
        return False
    consts = {i.name for i in proto.graph.initializer} | {n.output[0] for n in nodes if n.op_type == "Constant"}
    weight_dq = {n.output[0] for n in nodes if n.op_type == _DQ and n.input[0] in consts}
    has_layer = any(n.op_type in ("Conv", "Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in weight_dq for n in nodes)
    q_outputs = {n.output[0] for n in nodes if n.op_type == _Q and n.input[0] not in consts}
    has_pair = any(n.op_type == _DQ and n.input[0] in q_outputs for n in nodes)
    return has_layer and has_pair


# ----------------------------------------------------------------------------- reading the file
def _constants(proto: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    out = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            value = next((a for a in n.attribute if a.name == "value"), None)
            if value is not None:
                out[n.output[0]] = numpy_helper.to_array(value.t)
    return out


def _refuse(model: _Model, node: Any, why: str, remedy: str = "") -> QuantizationError:
    tail = f"; {remedy}" if remedy else ""
    return QuantizationError(f"{model}: node {node.name or node.output[0]!r} ({node.op_type}) {why}{tail} {model.reader.remedy}")


def _attr(node: Any, name: str, default: int) -> int:
    from onnx import helper

    a = next((a for a in node.attribute if a.name == name), None)
    return default if a is None else int(helper.get_attribute_value(a))


def _operands(model: _Model, node: Any, consts: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A Q/DQ node's scale and zero point, which must be constants (a computed scale has no plan)."""
    if node.input[1] not in consts:
        raise _refuse(model, node, "computes its scale at run time; the core's int8 plan needs constant scales")
    scale = np.asarray(consts[node.input[1]])
    if len(node.input) > 2 and node.input[2]:
        if node.input[2] not in consts:
            raise _refuse(model, node, "computes its zero point at run time; the core's int8 plan needs constant zero points")
        zp = np.asarray(consts[node.input[2]])
    else:
        zp = np.zeros(scale.shape, np.uint8)  # ONNX's default zero point type
    if scale.dtype != np.float32 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
        raise _refuse(model, node, f"has scale {scale.ravel()[:4]} ({scale.dtype}); the core's int8 plan needs positive float32 scales")
    if _attr(node, "block_size", 0):
        raise _refuse(model, node, "quantizes in blocks (block_size); the core's int8 plan is per tensor or per channel")
    return scale, zp


def _activation(model: _Model, node: Any, scale: np.ndarray, zp: np.ndarray) -> QuantParams:
    """The int8 plan's per-tensor parameters for an activation pair (uint8 shifted by -128)."""
    if scale.size != 1:
        raise _refuse(model, node, f"quantizes an activation per channel ({scale.size} scales); the core's activations are per tensor")
    offset = _INT8_OFFSET.get(str(zp.dtype))
    if offset is None:
        raise _refuse(model, node, f"quantizes an activation to {zp.dtype}; the core's int8 plan holds int8 and uint8 activations",
                      "re-quantize with activation_type=QuantType.QUInt8 or QInt8")
    return QuantParams(scale.reshape(1).astype(np.float32), np.array([int(zp.ravel()[0]) + offset], np.int64), 8, None, -128, 127)


def _dequantized(q: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis: int | None) -> np.ndarray:
    """ONNX DequantizeLinear in float32: ``(q - zp) * scale``, per channel along ``axis``."""
    shape = [1] * q.ndim
    if axis is not None:
        shape[axis] = -1
    diff = (q.astype(np.int64) - zp.astype(np.int64).reshape(shape)).astype(np.float32)
    return diff * scale.astype(np.float32).reshape(shape)


def _weight(model: _Model, node: Any, q: np.ndarray, consts: Mapping[str, np.ndarray]) -> _Weight:
    scale, zp = _operands(model, node, consts)
    if str(q.dtype) not in ("int8", "uint8", "int32"):
        raise _refuse(model, node, f"dequantizes a {q.dtype} constant; the core's int8 plan holds int8 weights and int32 biases")
    axis = None if scale.size == 1 else _attr(node, "axis", 1) % max(q.ndim, 1)
    return _Weight(q, scale.ravel().astype(np.float32), zp.ravel(), axis, node.name or node.output[0])


def _quantized_constant(model: _Model, node: Any, w: np.ndarray, consts: Mapping[str, np.ndarray]) -> np.ndarray:
    """``QuantizeLinear`` of a float constant (a fake-quantized weight): ONNX's rounding (half to
    even) and saturation, so the plan holds the integers the file's runtime would."""
    scale, zp = _operands(model, node, consts)
    info = np.iinfo(zp.dtype) if zp.dtype.kind in "iu" else None
    if info is None or zp.dtype.itemsize != 1:
        raise _refuse(model, node, f"quantizes a constant to {zp.dtype}; the core's int8 plan holds int8 weights")
    axis = None if scale.size == 1 else _attr(node, "axis", 1) % w.ndim
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.rint(w.astype(np.float32) / scale.reshape(shape)) + zp.astype(np.int64).reshape(shape)
    return np.clip(q, info.min, info.max).astype(zp.dtype)


# ----------------------------------------------------------------------------- folding
def fold_qdq(proto: Any, reader: Reader = Reader()) -> QdqFold:
    """The float model of a QDQ file and its parameters (see the module docstring); raises
    :class:`QuantizationError` on a Q/DQ pattern the core's int8 scheme cannot hold, worded
    for ``reader``."""
    import onnx
    from onnx import numpy_helper

    model = _Model(proto.graph.name or "model", reader)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    g = out.graph
    consts = _constants(out)
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list[Any]] = defaultdict(list)
    for n in g.node:
        for i in n.input:
            consumers[i].append(n)
    graph_outputs = {o.name for o in g.output}

    acts: dict[str, QuantParams] = {}
    weights: dict[str, _Weight] = {}
    rename: dict[str, str] = {}  # a DQ output -> the float value it stands for
    folded: dict[str, np.ndarray] = {}  # a constant DQ output -> its float32 value
    dropped: set[int] = set()
    for n in g.node:
        if n.op_type not in (_Q, _DQ):
            continue
        if n.domain not in ("", "ai.onnx"):
            raise _refuse(model, n, f"is from domain {n.domain!r} (16-bit / 4-bit Q/DQ); the core's int8 plan reads ai.onnx Q/DQ")
        dropped.add(id(n))
        if n.op_type == _DQ:
            src = producer.get(n.input[0])
            if n.input[0] in consts:  # a weight or bias
                w = _weight(model, n, np.asarray(consts[n.input[0]]), consts)
                weights[n.output[0]] = w
                folded[n.output[0]] = _dequantized(w.q, w.scale, w.zero_point, w.axis)
            elif src is not None and src.op_type == _Q and src.input[0] in consts:  # Q(float constant) -> DQ
                q = _quantized_constant(model, src, np.asarray(consts[src.input[0]]), consts)
                w = _weight(model, n, q, consts)
                weights[n.output[0]] = w
                folded[n.output[0]] = _dequantized(w.q, w.scale, w.zero_point, w.axis)
            elif src is None or src.op_type != _Q:
                raise _refuse(model, n, "dequantizes a value that no QuantizeLinear in the file produced (an integer input?)",
                              "give the model a float input")
            continue
        # QuantizeLinear: every consumer must be a DequantizeLinear with the same parameters.
        if n.input[0] in consts:
            continue  # a fake-quantized constant, folded at its DequantizeLinear
        scale, zp = _operands(model, n, consts)
        users = consumers[n.output[0]]
        if n.output[0] in graph_outputs or not users or any(u.op_type != _DQ for u in users):
            raise _refuse(model, n, "feeds something other than DequantizeLinear (an integer output or a QOperator op)")
        for u in users:
            us, uz = _operands(model, u, consts)
            if not (np.array_equal(us, scale) and np.array_equal(uz, zp) and uz.dtype == zp.dtype):
                raise _refuse(model, u, f"dequantizes with other parameters than its QuantizeLinear {n.name!r} uses")
            rename[u.output[0]] = n.input[0]
        qp = _activation(model, n, scale, zp)
        prev = acts.get(n.input[0])
        if prev is not None and not (np.array_equal(prev.scale, qp.scale) and np.array_equal(prev.zero_point, qp.zero_point)):
            raise _refuse(model, n, f"quantizes {n.input[0]!r} a second time with other parameters")
        acts[n.input[0]] = qp

    kept = [n for n in g.node if id(n) not in dropped]
    for n in kept:
        for k, name in enumerate(n.input):
            if name in rename:
                n.input[k] = rename[name]
    for o in g.output:
        if o.name in rename:
            o.name = rename[o.name]
    kept = _restore_relus(kept, acts, g.output)
    g.ClearField("node")
    g.node.extend(kept)
    # Drop the integer initializers (now unread) and add each dequantized constant in float32.
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    inits = [i for i in g.initializer if i.name in used and i.name not in folded]
    g.ClearField("initializer")
    g.initializer.extend(inits)
    g.initializer.extend(numpy_helper.from_array(v, name) for name, v in folded.items() if name in used)
    inputs = [i for i in g.input if i.name in used or i.name not in consts]
    g.ClearField("input")
    g.input.extend(inputs)
    g.ClearField("value_info")  # types of removed int8 tensors; the importer infers what it needs
    return QdqFold(out, acts, {k: v for k, v in weights.items() if k in used}, model.name, reader)


def _restore_relus(nodes: list[Any], acts: dict[str, QuantParams], outputs: Any) -> list[Any]:
    """A ReLU after each Conv / Gemm / MatMul / Add whose output's quantized range starts at 0
    (zero point at int8's minimum): the file's Q/DQ clamped there, which is how ONNX Runtime
    represents a ReLU it removed. The ReLU output shares the parameters, so int8 numbers do not
    change and the float graph computes what the file does."""
    from onnx import helper

    out = []
    moved: dict[str, str] = {}
    for n in nodes:
        n_inputs = [moved.get(i, i) for i in n.input]
        del n.input[:]
        n.input.extend(n_inputs)
        out.append(n)
        for o in n.output:
            qp = acts.get(o)
            if n.op_type in _RELU_PRODUCERS and qp is not None and int(qp.zero_point[0]) == qp.qmin:
                relu = f"{o}_relu"
                out.append(helper.make_node("Relu", [o], [relu], name=relu))
                acts[relu] = qp
                moved[o] = relu
    for o in outputs:
        if o.name in moved:
            o.name = moved[o.name]
    return out


# ----------------------------------------------------------------------------- the plan
def _weight_axis(onnx_node: Any, w: np.ndarray) -> int:
    """The output-channel axis of an ONNX node's weight (input 1) as stored in the file."""
    if onnx_node.op_type == "Gemm":
        return 0 if _attr(onnx_node, "transB", 0) else 1
    if onnx_node.op_type == "MatMul":
        return w.ndim - 1
    return 0  # Conv: (out, in/groups, kh, kw)


def _graph_weight(node: Node, producers: Mapping[str, Node]) -> tuple[np.ndarray, int] | None:
    """The weight the core quantizes for ``node`` and its channel axis, or None where the
    core runs the node in float (a gemm with alpha/beta, a batched constant ...)."""
    if node.op in ("linear", "conv2d"):
        return np.asarray(node.params["weight"]), 0
    axis = Q.constant_weight_axis(node, producers)
    if axis is None:
        return None
    return np.asarray(producers[node.inputs[1]].params["value"]), axis


def _plan_weight(fold: QdqFold, onnx_node: Any, node: Node, w: np.ndarray, axis: int) -> QuantParams:
    """The file's weight parameters as the core's per-channel symmetric int8, checked on the
    graph's weight: requantizing it with them gives the file's integers back."""
    model = fold.model
    dq = fold.constants[onnx_node.input[1]]
    if str(dq.q.dtype) != "int8" or np.any(dq.zero_point != 0):
        raise _refuse(model, onnx_node, f"has an asymmetric or {dq.q.dtype} weight (zero point {dq.zero_point.ravel()[:4]}); the "
                      "core's int8 weights are symmetric int8", "re-quantize with weight_type=QuantType.QInt8 (symmetric)")
    channels = w.shape[axis]
    if dq.axis is None:
        scale = np.broadcast_to(dq.scale, (channels,)).astype(np.float32)
    elif dq.axis == _weight_axis(onnx_node, dq.q) and dq.scale.size == channels:
        scale = dq.scale.astype(np.float32)
    else:
        raise _refuse(model, onnx_node, f"quantizes its weight per channel along axis {dq.axis}, not its output channels")
    qp = QuantParams(scale, np.zeros(channels, np.int64), 8, axis, -127, 127)
    back = Q.dequantize(Q.quantize_weight(w, qp), qp)
    if not np.allclose(back, np.asarray(w, np.float64), rtol=1e-6, atol=0.0):
        raise _refuse(model, onnx_node, "has weight integers outside [-127, 127] (a -128); the core's int8 weights are symmetric",
                      "re-quantize with symmetric weights (ONNX Runtime's WeightSymmetric=True, the QInt8 default)")
    return qp


def _check_bias(fold: QdqFold, onnx_node: Any, node: Node, bias: np.ndarray | None, in_qp: QuantParams | None, wqp: QuantParams) -> None:
    """The core requantizes the float bias with ``input_scale * weight_scale[c]``: that must give
    back the file's int32 (ONNX Runtime writes exactly that scale)."""
    name = onnx_node.input[2] if len(onnx_node.input) > 2 else ""
    dq = fold.constants.get(name)
    if dq is None or bias is None or in_qp is None:
        return  # a float bias (the core rounds it to int32 itself), or no bias
    if str(dq.q.dtype) != "int32" or np.any(dq.zero_point != 0):
        raise _refuse(fold.model, onnx_node, f"has a {dq.q.dtype} bias with zero point {dq.zero_point.ravel()[:4]}; the core's bias is int32, zero point 0")
    channels = wqp.scale.size
    got = Q.quantize_bias(np.broadcast_to(np.asarray(bias, np.float64).ravel(), (channels,)), in_qp, wqp, channels)
    want = np.broadcast_to(dq.q.astype(np.int64).ravel(), (channels,))
    if not np.array_equal(got.astype(np.int64), want):
        raise _refuse(fold.model, onnx_node, "has an int32 bias whose scale is not input_scale * weight_scale, so the core's "
                      "integer kernels would add another bias", "re-quantize the model with ONNX Runtime's quantize_static")


def _layers(fold: QdqFold, graph: Graph, env: Mapping[str, Any], acts: Mapping[str, QuantParams]) -> dict[str, QuantParams]:
    """``plan.weights`` from each Conv / Gemm / MatMul whose weight the file dequantizes."""
    producers = {n.output: n for n in graph.nodes}
    weights: dict[str, QuantParams] = {}
    for onnx_node in fold.proto.graph.node:
        if onnx_node.op_type not in ("Conv", "Gemm", "MatMul") or len(onnx_node.input) < 2 or onnx_node.input[1] not in fold.constants:
            continue
        out = env.get(onnx_node.output[0])
        node = producers.get(out) if isinstance(out, str) else None
        found = None if node is None else _graph_weight(node, producers)
        if node is None or found is None:
            continue  # imported as an op the core runs in float (conv1d, a batched matmul ...): the dequantized weight is exact
        w, axis = found
        wqp = _plan_weight(fold, onnx_node, node, w, axis)
        weights[node.name] = wqp
        bias = node.params.get("bias") if node.op in ("linear", "conv2d") else (
            producers[node.inputs[2]].params["value"] if len(node.inputs) > 2 else None)
        _check_bias(fold, onnx_node, node, bias, acts.get(node.inputs[0]), wqp)
    return weights


def _same(a: QuantParams, b: QuantParams) -> bool:
    return bool(np.array_equal(a.scale, b.scale) and np.array_equal(a.zero_point, b.zero_point))


def _complete(model: _Model, graph: Graph, acts: dict[str, QuantParams]) -> None:
    """Parameters where the core's integer kernels need them and the file is silent, where that
    changes no number: a pass-through op (pooling, flatten, a pad or reshape of a quantized
    value) takes its input's (its output lies on the input's grid), and a linear/conv read only
    by a ReLU takes the ReLU's (the fused ReLU, as calibration ties them). A pass-through op the
    file gives other output parameters is refused: the core's integer pooling keeps the scale.
    An average the file leaves unquantized but quantizes further on with other parameters (PT2E's
    XNNPACK quantizer does not annotate avg_pool2d) is rounded onto its input's grid by the core
    and not by the model: that one is kept, and named in a warning (:func:`_warn_rounded_means`)."""
    shapes = {k: v.shape for k, v in infer_values(graph).items()}
    given = dict(acts)  # the file's own parameters, before completion
    consumers: dict[str, list[Node]] = defaultdict(list)
    for n in graph.nodes:
        for i in n.inputs:
            consumers[i].append(n)
    for n in graph.nodes:
        if not n.inputs or n.inputs[0] not in acts:
            continue
        src = acts[n.inputs[0]]
        if Q.passes_through(n, shapes.get(n.inputs[0])) or n.op in ("pad", "reshape", "identity"):
            own = acts.get(n.output)
            if own is None:
                acts[n.output] = src
                _warn_rounded_means(model, n, src, given, consumers)
            elif not _same(own, src) and n.op in Q.PASS_THROUGH:
                raise QuantizationError(
                    f"{model}: node {n.name!r} ({n.op}) has output scale/zero point {own.scale[0]}/{own.zero_point[0]} "
                    f"but input {src.scale[0]}/{src.zero_point[0]}; the core's integer {n.op} keeps its input's parameters "
                    f"(as TFLite does). Re-quantize the model so they match (ONNX Runtime does) {model.reader.remedy}")
    producers = {n.output: n for n in graph.nodes}
    for n in graph.nodes:
        if n.op == "relu" and n.output in acts:
            src_node = producers.get(n.inputs[0])
            if src_node is not None and src_node.op in ("linear", "conv2d") and src_node.output not in acts and len(consumers[src_node.output]) == 1:
                acts[src_node.output] = acts[n.output]


def _downstream(node: Node, given: Mapping[str, QuantParams], consumers: Mapping[str, list[Node]]) -> QuantParams | None:
    """The parameters the file quantizes ``node``'s output with further on, through a chain of
    single reshapes (the flatten before a linear), or None where it does not."""
    value = node.output
    while value not in given:
        users = consumers.get(value, [])
        if len(users) != 1 or users[0].op not in ("reshape", "flatten", "identity"):
            return None
        value = users[0].output
    return given[value]


def _warn_rounded_means(model: _Model, node: Node, src: QuantParams, given: Mapping[str, QuantParams],
                        consumers: Mapping[str, list[Node]]) -> None:
    """Name an average pool whose completed parameters add a rounding the model does not have:
    the core's integer average keeps its input's grid (TFLite's AVERAGE_POOL_2D requires it),
    while the model averages in float and quantizes later with other parameters. Max pooling and
    reshapes select values already on the grid, so they never round."""
    if node.op not in ("avg_pool2d", "adaptive_avg_pool2d"):
        return
    later = _downstream(node, given, consumers)
    if later is not None and _same(later, src):
        return  # the model's own quantization after the average is the same rounding
    warnings.warn(
        f"{model}: node {node.name!r} ({node.op}) is not quantized by the model, which averages in float"
        + ("" if later is None else f" and quantizes later with scale {later.scale[0]:.6g}")
        + f"; the core's integer {node.op} rounds its output to its input's scale {src.scale[0]:.6g} (TFLite requires it), "
        f"one rounding step the model does not have. Quantize that op in the model with its input's parameters to match "
        f"exactly (a quantizer that annotates {node.op})", NeurenixWarning, stacklevel=user_stacklevel())


def _check_fixed(model: _Model, graph: Graph, acts: Mapping[str, QuantParams]) -> None:
    """softmax / sigmoid / tanh outputs must have TFLite's fixed parameters, which integer
    backends write whatever the plan says (``qmath.fixed_output_params``)."""
    for n in graph.nodes:
        fixed = Q.fixed_output_params(n.op, 8)
        own = acts.get(n.output)
        if fixed is not None and own is not None and not _same(fixed, own):
            raise QuantizationError(
                f"{model}: node {n.name!r} ({n.op}) output is quantized with scale {own.scale[0]}, zero point "
                f"{own.zero_point[0]}; integer backends use the fixed {fixed.scale[0]}, {fixed.zero_point[0]} for {n.op}. "
                f"Quantize the model without this op (op_types_to_quantize) {model.reader.remedy}")


def quantization_plan(fold: QdqFold, graph: Graph, env: Mapping[str, Any]) -> QuantizationPlan:
    """The plan of ``graph`` (the import of ``fold.proto``; ``env`` maps ONNX tensor names to its
    values) with the file's parameters; raises :class:`QuantizationError` where the core would
    run other numbers than the file's or has no parameters for a value its integer kernels read."""
    acts: dict[str, QuantParams] = {}
    for onnx_name, qp in fold.activations.items():
        value = env.get(onnx_name)
        if isinstance(value, str):
            acts[value] = qp
    _complete(fold.model, graph, acts)
    _check_fixed(fold.model, graph, acts)
    weights = _layers(fold, graph, env, acts)
    plan = QuantizationPlan(bits=8, activations=acts, weights=weights, method=METHOD, dynamic=False)
    try:
        Q.check_plan(graph, plan)
    except QuantizationError as exc:
        raise QuantizationError(f"{fold.model}: the file leaves values the core's int8 kernels read unquantized: {exc}. "
                                "Quantize those ops too (op_types_to_quantize) " + fold.reader.remedy) from exc
    return plan
