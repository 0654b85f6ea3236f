"""Core ``Graph`` -> TFLite flatbuffer (float32, or full-integer int8 from a QuantizationPlan).

Images are NCHW in the core and NHWC inside the model. With ``io="float"`` (the default) the
model's inputs and outputs are exactly what the user passes and gets back: float32, NCHW. The
edges live in the model: QUANTIZE (float32 -> int8) then TRANSPOSE to NHWC at each input,
TRANSPOSE back and DEQUANTIZE at each output, so LiteRT does them in C++ (inside the XNNPACK
delegate on the CPU) and the Python wrapper does no arithmetic. ``io="int8"`` writes the
model the Edge TPU compiler likes best (int8 NHWC inputs and outputs, nothing but integer
ops); its edges then run on the host in one vectorised step per edge.

A Flatten feeding Linear layers permutes their weight columns instead of transposing
activations. ReLU is fused into the producing CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED /
ADD / MUL as the TFLite converter does. The int8 body respects the Edge TPU compiler's
constraints and reaches XNNPACK's signed 8-bit (QS8) kernels on the CPU: int8 activations with
per-tensor parameters, symmetric per-channel int8 weights (zero point 0, ``quantized_dimension``
set), int32 bias with scale ``input_scale * weight_scale[c]``, static shapes, ops at the
versions the converter emits, pass-through ops (pool, reshape) keeping their input's
quantization.

The handlers are split by concern: layers (conv, linear, pools, flatten, softmax, batch norm)
here, elementwise ops and activations in ``lower_elementwise.py``, data movement, reductions,
matmul and attention in ``lower_tensor.py``; ``lower_values.py`` holds the per-value layout
record they share. The ops handled are exactly the manifest's ``graph_ops`` (``plugin.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import tflite

from neurenix_core.contract import Graph, Node, QuantizationPlan, ValueSpec, infer_values, softmax_output_params
from neurenix_core.errors import CompilationError, QuantizationError, ShapeError, UnsupportedOperationError
from neurenix_edgetpu import quantize as qz
from neurenix_edgetpu import tflite_writer as w
from neurenix_edgetpu.lower_elementwise import ElementwiseOps
from neurenix_edgetpu.lower_pad import PaddingOps, spatial_values
from neurenix_edgetpu.lower_s2d import SpaceToDepthOps
from neurenix_edgetpu.lower_tensor import TensorOps
from neurenix_edgetpu.lower_values import TO_NCHW as _TO_NCHW
from neurenix_edgetpu.lower_values import TO_NHWC as _TO_NHWC
from neurenix_edgetpu.lower_values import Value as _Value
from neurenix_edgetpu.lower_values import per_tensor as _per_tensor
from neurenix_edgetpu.lower_values import symmetric as _symmetric
from neurenix_edgetpu.tflite_writer import ModelBuilder, TensorQuant

__all__ = ["IO_KINDS", "PRECISIONS", "IOSpec", "Lowered", "lower"]

OP: Final = tflite.BuiltinOperator
ACT: Final = tflite.ActivationFunctionType
PAD_SAME: Final = tflite.Padding.SAME
PAD_VALID: Final = tflite.Padding.VALID
PRECISIONS: Final = ("fp32", "int8")
#: "float": float32 NCHW model I/O, quantize/layout ops inside the model; "int8": int8 NHWC I/O.
IO_KINDS: Final = ("float", "int8")
#: Producers a following ReLU is fused into (as the TFLite converter does).
_FUSABLE: Final = frozenset({"linear", "conv2d", "add", "mul", "sub"})

# Versions the TFLite converter writes for int8 kernels; the Edge TPU compiler checks them.
_INT8_VERSION: Final = {
    OP.FULLY_CONNECTED: 4, OP.CONV_2D: 3, OP.DEPTHWISE_CONV_2D: 3, OP.ADD: 2, OP.MUL: 2,
    OP.MAX_POOL_2D: 2, OP.AVERAGE_POOL_2D: 2, OP.RESHAPE: 1, OP.SOFTMAX: 2, OP.MEAN: 2,
    OP.CONCATENATION: 2, OP.RELU: 2, OP.RELU6: 2, OP.PAD: 2, OP.TRANSPOSE: 2, OP.SUB: 2, OP.LOGISTIC: 2,
    OP.TANH: 2, OP.STRIDED_SLICE: 2, OP.GATHER: 2, OP.RSQRT: 2, OP.SUM: 2, OP.REDUCE_MAX: 2, OP.REDUCE_MIN: 2,
    OP.PADV2: 2, OP.GELU: 2, OP.GATHER_ND: 2, OP.BATCH_MATMUL: 2, OP.MAXIMUM: 2, OP.MINIMUM: 2, OP.RELU_N1_TO_1: 2,
    # float32 -> int8 QUANTIZE is version 2 (int8 output), int8 -> float32 DEQUANTIZE version 2.
    OP.QUANTIZE: 2, OP.DEQUANTIZE: 2,
    # int8 SPACE_TO_DEPTH is version 2 (tensorflow/lite/tools/versioning/op_version.cc).
    OP.SPACE_TO_DEPTH: 2,
}


@dataclass(frozen=True, slots=True)
class IOSpec:
    """One model input or output as the user sees it (NCHW) and as the model stores it."""

    name: str
    index: int
    shape: tuple[int, ...]
    nhwc: bool
    dtype: np.dtype[Any]
    quant: tuple[float, int] | None


@dataclass(frozen=True, slots=True)
class Lowered:
    """A written model and what its edges need."""

    data: bytes
    inputs: tuple[IOSpec, ...]
    outputs: tuple[IOSpec, ...]
    precision: str
    op_counts: Mapping[str, int]
    io: str = "float"
    #: "space_to_depth" where the writer rewrote a stem (lower_s2d.py), else "plain".
    stem: str = "plain"


@dataclass(slots=True)
class _Lowerer(ElementwiseOps, TensorOps, SpaceToDepthOps, PaddingOps):
    graph: Graph
    precision: str
    plan: QuantizationPlan | None
    io: str = "float"
    stem: str = "plain"
    m: ModelBuilder = field(default_factory=lambda: ModelBuilder(description="neurenix edgetpu writer"))
    values: dict[str, _Value] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    fused: dict[str, Node] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    specs: dict[str, ValueSpec] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)  # constant nodes, written where used
    const_tensors: dict[tuple[str, bool], int] = field(default_factory=dict)
    core_cache: dict[str, int] = field(default_factory=dict)  # NHWC values transposed back to NCHW
    nhwc_cache: dict[str, int] = field(default_factory=dict)  # NCHW images transposed to NHWC (lower_pad.py)
    spatial: set[str] = field(default_factory=set)
    s2d_stems: dict[str, str] = field(default_factory=dict)  # space-to-depth stems: A -> its successor B
    s2d_next: set[str] = field(default_factory=set)
    s2d_values: dict[str, int] = field(default_factory=dict)  # A's blocked output, read by B only

    @property
    def int8(self) -> bool:
        return self.precision == "int8"

    @property
    def float_io(self) -> bool:
        return self.io == "float"

    # ------------------------------------------------------------------ driver
    def run(self) -> Lowered:
        try:
            self.specs = infer_values(self.graph)
        except ShapeError as exc:
            raise ShapeError(f"edgetpu: the graph's shapes must be static and consistent to write a TFLite model: {exc}") from exc
        self.spatial = spatial_values(self.graph)  # 4-D graph inputs an image op reads are stored NHWC
        self._plan_fusion()
        if self.int8 and self.stem == "space_to_depth":
            self._plan_s2d({name: tuple(spec.shape) for name, spec in self.specs.items()})
        if self.int8:
            self._refuse_float_inputs()
        ins = [self._input(spec.name, tuple(spec.shape)) for spec in self.graph.inputs]
        for node in self.graph.nodes:
            if node.name in self.skipped:
                continue
            handler: Callable[[Node], None] | None = getattr(self, f"_op_{node.op}", None)
            if handler is None:
                raise UnsupportedOperationError(
                    f"layer {node.name!r} ({node.op}) cannot be expressed in a TFLite model for the Edge TPU; "
                    f"the writer handles {', '.join(sorted(_HANDLED))}. Run the model eagerly or on another device.", node=node.name
                )
            try:
                handler(node)
            except UnsupportedOperationError as exc:
                exc.node = exc.node or node.name  # the core places this node on cpu:0 and compiles the rest
                raise
        outs = [self._output(name) for name in self.graph.outputs]
        data = self.m.finish([s.index for s in ins], [s.index for s in outs])
        return Lowered(data, tuple(ins), tuple(outs), self.precision, dict(self.counts), self.io,
                       "space_to_depth" if self.s2d_stems else "plain")

    def _plan_fusion(self) -> None:
        uses = Counter(i for n in self.graph.nodes for i in n.inputs) + Counter(self.graph.outputs)
        producers = {n.output: n for n in self.graph.nodes}
        for n in self.graph.nodes:
            if n.op != "relu" or len(n.inputs) != 1:
                continue
            src = producers.get(n.inputs[0])
            if src is not None and src.op in _FUSABLE and uses[src.output] == 1 and src.name not in self.fused:
                self.fused[src.name] = n
                self.skipped.add(n.name)

    def _input(self, name: str, shape: tuple[int, ...]) -> IOSpec:
        if all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape) and 0 in shape:
            # Static but empty: LiteRT's kernels (reductions above all) are not written for
            # zero-size tensors; the core runs such a segment on cpu:0.
            raise UnsupportedOperationError(f"graph input {name!r} has shape {shape}: the TFLite writer does not write empty tensors")
        if any((not isinstance(d, (int, np.integer))) or d <= 0 for d in shape):
            raise ShapeError(
                f"graph input {name!r} has shape {shape}: the Edge TPU needs static shapes. "
                "Compile with concrete input shapes (nx.compile calls the model once per shape)."
            )
        dtype = self.specs[name].dtype
        if not dtype.startswith(("float", "bfloat")):
            # Token ids, masks: stored as they are (no quantization, no layout change).
            index = self.m.tensor(name, shape, np.dtype(dtype))
            self.values[name] = _Value(index, False)
            return self._spec(name, index, shape, False)
        nhwc = len(shape) == 4 and name in self.spatial
        if not self.float_io:
            # int8 NHWC model input: the host quantizes and transposes (model.Edge).
            stored = _to_nhwc(shape) if nhwc else shape
            index = self.m.tensor(name, stored, np.int8 if self.int8 else np.float32, quant=self._act(name) if self.int8 else None)
            self.values[name] = _Value(index, nhwc)
            return self._spec(name, index, shape, nhwc)
        outer = self.m.tensor(name, shape, np.float32)
        index = outer
        if self.int8:
            index = self.m.tensor(f"{name}/int8", shape, np.int8, quant=self._act(name))
            self._emit(OP.QUANTIZE, [outer], [index])
        if nhwc:  # after QUANTIZE: the int8 transpose moves a quarter of the bytes
            inner = self._new(f"{name}/nhwc", _to_nhwc(shape), like=index)
            self._emit(OP.TRANSPOSE, [index, self.m.constant(f"{name}/perm", np.array(_TO_NHWC, np.int32))], [inner])
            index = inner
        self.values[name] = _Value(index, nhwc)
        return self._spec(name, outer, shape, False)

    def _output(self, name: str) -> IOSpec:
        v = self._value(name)
        if v.chw_order is not None:
            v = self._restore_chw(name, v)
        v = self._requantize_output(name, v)
        stored = self.m.shape_of(v.index)
        shape = _to_nchw(stored) if v.nhwc else stored
        if not self.float_io:
            return self._spec(name, v.index, shape, v.nhwc)
        index = v.index
        if v.nhwc:
            out = self._new(f"{name}/nchw", shape, like=index)
            self._emit(OP.TRANSPOSE, [index, self.m.constant(f"{name}/perm_out", np.array(_TO_NCHW, np.int32))], [out])
            index = out
        if self.m.quant_of(index) is not None:
            out = self.m.tensor(f"{name}/float", shape, np.float32)
            self._emit(OP.DEQUANTIZE, [index], [out])
            index = out
        if index != v.index:  # the signature names the tensor the user receives after the graph's value
            self.m.tensors[v.index].name, self.m.tensors[index].name = f"{name}/body", name
        return self._spec(name, index, shape, False)

    def _spec(self, name: str, index: int, shape: tuple[int, ...], nhwc: bool) -> IOSpec:
        q = self.m.quant_of(index)
        quant = None if q is None else (float(q.scale[0]), int(q.zero_point[0]))
        dtype = np.dtype(np.int8) if q is not None else self.m.tensors[index].dtype
        return IOSpec(name, index, shape, nhwc, dtype, quant)

    def _refuse_float_inputs(self) -> None:
        """A segment input a mixed-precision plan keeps in float (a layer norm's output computed on
        cpu:0) cannot enter an int8 model: its first reader is refused by name, so the core moves
        that node to cpu:0 too and compiles the rest, rather than the whole segment."""
        assert self.plan is not None
        for spec in self.graph.inputs:
            if spec.dtype.startswith(("float", "bfloat")) and spec.name not in self.plan.activations:
                reader = next((n.name for n in self.graph.nodes if spec.name in n.inputs), None)
                raise UnsupportedOperationError(
                    f"value {spec.name!r} stays in float in the quantization plan (mixed precision), and the Edge TPU computes int8 only",
                    node=reader,
                )

    # ------------------------------------------------------------------ helpers
    def _act(self, name: str) -> TensorQuant:
        assert self.plan is not None
        params = self.plan.activations.get(name)
        if params is None:
            # The core checked the plan against the whole model (qmath.check_plan), so a float value
            # here is one a mixed-precision plan keeps in float on purpose: the Edge TPU computes
            # int8 only, so the layer reading or writing it is refused (the lowering loop names it)
            # and the core runs it on cpu:0 with the integer reference, in float.
            raise UnsupportedOperationError(
                f"value {name!r} stays in float in the quantization plan (mixed precision), and the Edge TPU computes int8 only"
            )
        if params.bits != 8 or params.axis is not None:
            raise QuantizationError(f"value {name!r}: the Edge TPU needs per-tensor int8 activations, got {params.bits}-bit axis={params.axis}")
        return _per_tensor(params)

    def _new(self, value: str, shape: tuple[int, ...], *, quant: TensorQuant | None = None, like: int | None = None) -> int:
        """A new activation tensor: ``quant`` given, or dtype and quantization copied from tensor
        ``like``, or the value's dtype with the plan's parameters."""
        if like is not None:
            t = self.m.tensors[like]
            return self.m.tensor(value, shape, t.dtype, quant=t.quant if quant is None else quant)
        spec = self.specs.get(value)
        if spec is not None and not spec.dtype.startswith(("float", "bfloat")):
            return self.m.tensor(value, shape, np.dtype(spec.dtype))  # integer/bool values are never quantized
        if not self.int8:
            return self.m.tensor(value, shape, np.float32)
        return self.m.tensor(value, shape, np.int8, quant=quant if quant is not None else self._act(value))

    def _emit(self, opcode: int, ins: list[int], outs: list[int], **kw: Any) -> None:
        version = _INT8_VERSION.get(opcode, 1) if self.int8 else 1
        self.m.op(opcode, ins, outs, version=version, **kw)
        self.counts[_OP_NAMES[opcode]] += 1

    def _get(self, node: Node, i: int = 0) -> _Value:
        v = self._value(node.inputs[i])
        if v.chw_order is not None and node.op != "linear":
            v = self._restore_chw(node.inputs[i], v)
        return v

    def _out_name(self, node: Node) -> str:
        relu = self.fused.get(node.name)
        return relu.output if relu is not None else node.output

    def _fused_act(self, node: Node) -> int:
        return ACT.RELU if node.name in self.fused else ACT.NONE

    def _restore_chw(self, name: str, v: _Value) -> _Value:
        # A flattened NHWC value consumed by something other than Linear: put it back in the core's
        # (C, H, W) order with TRANSPOSE, so the numbers the user sees are the ones the core defines.
        c, h, wd = v.chw_order  # type: ignore[misc]
        n = self.m.shape_of(v.index)[0]
        four = self._new(f"{name}/nhwc", (n, h, wd, c), like=v.index)
        self._emit(OP.RESHAPE, [v.index, self._shape_const(f"{name}/nhwc_shape", (n, h, wd, c))], [four],
                   options_type=w.OPTIONS.ReshapeOptions, options=w.reshape_options((n, h, wd, c)))
        nchw = self._new(f"{name}/nchw", (n, c, h, wd), like=v.index)
        self._emit(OP.TRANSPOSE, [four, self.m.constant(f"{name}/perm", np.array([0, 3, 1, 2], np.int32))], [nchw])
        flat = self._new(f"{name}/chw", (n, c * h * wd), like=v.index)
        self._emit(OP.RESHAPE, [nchw, self._shape_const(f"{name}/chw_shape", (n, c * h * wd))], [flat],
                   options_type=w.OPTIONS.ReshapeOptions, options=w.reshape_options((n, c * h * wd)))
        restored = _Value(flat, False)
        self.values[name] = restored
        return restored

    def _shape_const(self, name: str, shape: tuple[int, ...]) -> int:
        return self.m.constant(name, np.array(shape, np.int32))

    def _set(self, name: str, index: int, nhwc: bool) -> None:
        self.values[name] = _Value(index, nhwc)

    def _value(self, name: str) -> _Value:
        """The written tensor of a value; a constant node's value is written on first use."""
        v = self.values.get(name)
        if v is None:
            if name not in self.consts:
                raise CompilationError(f"edgetpu writer: value {name!r} is read before any node writes it")
            v = self.values[name] = _Value(self._const_tensor(name, nhwc=False), False)
        return v

    def _core(self, name: str) -> int:
        """The value in the core's layout (an NHWC image is transposed back to NCHW once)."""
        v = self._value(name)
        if v.chw_order is not None:
            v = self._restore_chw(name, v)
        if not v.nhwc:
            return v.index
        cached = self.core_cache.get(name)
        if cached is None:
            cached = self._new(f"{name}/nchw", _to_nchw(self.m.shape_of(v.index)), like=v.index)
            self._emit(OP.TRANSPOSE, [v.index, self.m.constant(f"{name}/to_nchw", np.array(_TO_NCHW, np.int32))], [cached])
            self.core_cache[name] = cached
        return cached

    def _const_tensor(self, name: str, *, nhwc: bool) -> int:
        """A constant node's array as a constant tensor (NHWC: padded to 4-D and permuted).
        int8: quantized with the plan's parameters for that value (symmetric from its range when
        the plan has none); integer and bool constants are written as they are."""
        key = (name, nhwc)
        if key in self.const_tensors:
            return self.const_tensors[key]
        arr = np.asarray(self.consts[name])
        if nhwc:
            arr = arr.reshape((1,) * (4 - arr.ndim) + arr.shape).transpose(_TO_NHWC)
        label = f"{name}/nhwc" if nhwc else name
        if arr.dtype.kind != "f":
            # As it is: np.ascontiguousarray made a 0-d constant 1-d (cummax's 0-d index output came
            # back with shape (1,)); the writer copies a non-contiguous array itself.
            index = self.m.constant(label, arr)
        elif not self.int8:
            index = self.m.constant(label, arr.astype(np.float32))
        else:
            params = self.plan.activations.get(name) if self.plan is not None else None
            quant = _per_tensor(params) if params is not None else _symmetric(arr)
            index = self.m.constant(label, qz.quantize(arr, float(quant.scale[0]), int(quant.zero_point[0])), quant=quant)
        self.const_tensors[key] = index
        return index

    def _scalar_shape(self, like: int | None) -> tuple[int, ...]:
        # A (1,) operand would broadcast a 0-d tensor to (1,) when LiteRT resizes the op's output.
        return () if like is not None and self.m.shape_of(like) == () else (1,)

    def _scalar(self, name: str, value: float, like: int | None = None) -> int:
        """A float scalar operand (int8: symmetric, the value itself at 127), 0-d beside a 0-d ``like``."""
        shape = self._scalar_shape(like)
        arr = np.array([value], np.float32)
        if not self.int8:
            return self.m.constant(name, arr.reshape(shape))
        quant = _symmetric(arr)
        return self.m.constant(name, qz.quantize(arr, float(quant.scale[0]), 0).reshape(shape), quant=quant)

    def _scalar_like(self, name: str, value: float, like: int) -> int:
        """A scalar of tensor ``like``'s dtype and int8 parameters (clipped to its range)."""
        t = self.m.tensors[like]
        shape = self._scalar_shape(like)
        if t.quant is None:
            return self.m.constant(name, np.array([value], t.dtype).reshape(shape))
        q = qz.quantize(np.array([value]), float(t.quant.scale[0]), int(t.quant.zero_point[0]))
        return self.m.constant(name, q.reshape(shape), quant=t.quant)

    def _requantize_output(self, name: str, v: _Value) -> _Value:
        """A graph output whose op fixes its int8 parameters (LOGISTIC, TANH) gets the plan's,
        so every output follows the plan."""
        return _Value(self._follow_plan(name, v.index), v.nhwc)

    def _follow_plan(self, name: str, index: int) -> int:
        """``index`` on the plan's int8 parameters for value ``name``: one int8 -> int8 QUANTIZE
        where an op had to keep or fix other ones (TFLite requires them for pooling, LOGISTIC, ...)."""
        q = self.m.quant_of(index)
        if not self.int8 or q is None or self.plan is None or name not in self.plan.activations:
            return index
        want = _per_tensor(self.plan.activations[name])
        if np.float32(want.scale[0]) == np.float32(q.scale[0]) and int(want.zero_point[0]) == int(q.zero_point[0]):
            return index
        out = self.m.tensor(f"{name}/requant", self.m.shape_of(index), np.int8, quant=want)
        self._emit(OP.QUANTIZE, [index], [out])
        return out

    def _weight_scales(self, node: Node) -> np.ndarray:
        """The plan's per-output-channel int8 weight scales of ``node`` (symmetric: zero point 0)."""
        assert self.plan is not None
        params = self.plan.weights.get(node.name)
        if params is None:
            raise QuantizationError(f"the quantization plan has no weight parameters for layer {node.name!r}; recalibrate the model")
        if np.any(np.asarray(params.zero_point) != 0):
            raise QuantizationError(f"layer {node.name!r}: TFLite int8 weights must be symmetric (zero point 0)")
        return np.asarray(params.scale, np.float32).ravel()

    def _weights(self, node: Node, weight: np.ndarray, in_index: int, axis: int) -> tuple[int, int | None]:
        """Constant weight (transposed to TFLite layout by the caller) and bias tensors."""
        bias = node.params.get("bias")
        if not self.int8:
            # CONV_2D's bias input is not optional in LiteRT's kernels: a missing bias is zeros.
            b = np.zeros(weight.shape[axis], np.float32) if bias is None else np.asarray(bias, np.float32)
            return self.m.constant(f"{node.name}/weight", weight.astype(np.float32)), self.m.constant(f"{node.name}/bias", b)
        scale = self._weight_scales(node)
        # ``weight`` is already in TFLite layout; its output channels lie along ``axis``.
        q = qz.weights_int8(weight, scale, axis)
        wi = self.m.constant(f"{node.name}/weight", q, quant=TensorQuant(scale, np.zeros(scale.shape, np.int64), axis))
        in_scale = float(self.m.quant_of(in_index).scale[0])  # type: ignore[union-attr]
        b = np.zeros(scale.shape, np.float32) if bias is None else np.asarray(bias, np.float32)
        bq, bquant = qz.bias_int32(b, in_scale, scale)
        return wi, self.m.constant(f"{node.name}/bias", bq, quant=bquant)

    # ------------------------------------------------------------------ layers
    def _op_linear(self, node: Node) -> None:
        v = self._get(node)
        if v.chw_order is None and v.nhwc:
            v = _Value(self._core(node.inputs[0]), False)
        shape = self.m.shape_of(v.index)
        weight = np.asarray(node.params["weight"], np.float32)
        if v.chw_order is not None:
            c, h, wd = v.chw_order
            weight = weight.reshape(-1, c, h, wd).transpose(0, 2, 3, 1).reshape(weight.shape[0], -1)
        wi, bi = self._weights(node, weight, v.index, 0)
        out_name = self._out_name(node)
        out = self._new(out_name, (*shape[:-1], weight.shape[0]))
        # keep_num_dims: a (B, L, in) input (transformers) gives (B, L, out), one FULLY_CONNECTED.
        self._emit(OP.FULLY_CONNECTED, [v.index, wi, -1 if bi is None else bi], [out],
                   options_type=w.OPTIONS.FullyConnectedOptions, options=w.fc_options(self._fused_act(node), len(shape) > 2))
        self.values[out_name] = _Value(out, False)

    def _op_conv2d(self, node: Node) -> None:
        if node.name in self.s2d_stems:
            self._s2d_stem(node)
            return
        if node.name in self.s2d_next:
            self._s2d_successor(node)
            return
        v = self._image_input(node)
        a = node.attrs
        weight = np.asarray(node.params["weight"], np.float32)
        groups, cin = int(a.get("groups", 1)), self.m.shape_of(v.index)[3]
        stride, dil, pad = _pair(a.get("stride", 1)), _pair(a.get("dilation", 1)), _pair(a.get("padding", 0))
        kernel = weight.shape[2:]
        index, padding = self._pad(node, v.index, kernel, stride, dil, pad)
        n, h, wd, _ = self.m.shape_of(index)
        oh, ow = _out_size(h, kernel[0], stride[0], dil[0], padding), _out_size(wd, kernel[1], stride[1], dil[1], padding)
        out_name = self._out_name(node)
        out = self._new(out_name, (n, oh, ow, weight.shape[0]))
        act = self._fused_act(node)
        if groups == 1:
            wi, bi = self._weights(node, weight.transpose(0, 2, 3, 1), index, 0)
            self._emit(OP.CONV_2D, [index, wi, -1 if bi is None else bi], [out],
                       options_type=w.OPTIONS.Conv2DOptions, options=w.conv_options(stride, dil, padding, act))
        elif groups == cin:
            wi, bi = self._weights(node, weight.transpose(1, 2, 3, 0), index, 3)
            mult = weight.shape[0] // cin
            self._emit(OP.DEPTHWISE_CONV_2D, [index, wi, -1 if bi is None else bi], [out],
                       options_type=w.OPTIONS.DepthwiseConv2DOptions, options=w.depthwise_options(stride, dil, padding, mult, act))
        else:
            raise UnsupportedOperationError(
                f"layer {node.name!r} (conv2d, groups={groups}): TFLite/Edge TPU express groups=1 (CONV_2D) or "
                f"groups=in_channels (DEPTHWISE_CONV_2D) only; split the layer into per-group convolutions"
            )
        self.values[out_name] = _Value(out, True)

    def _op_conv_transpose2d(self, node: Node) -> None:
        """TRANSPOSE_CONV per group (STRIDED_SLICE of the input channels, CONCATENATION of the
        outputs when groups > 1), fp32. TFLite's TRANSPOSE_CONV has no dilation and only SAME/VALID
        padding: the kernel is dilated with zeros, the VALID output is written ``max(0,
        output_padding - padding)`` rows/columns larger (those positions receive only the bias, as
        in the core's definition) and STRIDED_SLICE crops ``padding`` from each side."""
        self._float_only(node)  # the plan has no weight parameters for transposed convolutions
        v = self._image_input(node)
        from neurenix_core.contract import attrs_of

        a = attrs_of("conv_transpose2d", node.attrs)
        weight = np.asarray(node.params["weight"], np.float32)
        stride, dil = _pair(a["stride"]), _pair(a["dilation"])
        pad, extra = _pair(a["padding"]), _pair(a["output_padding"])
        groups = int(a["groups"])
        n, h, wd, cin = self.m.shape_of(v.index)
        kernel = _dilated(weight, dil)
        kh, kw = kernel.shape[2:]
        grow = (max(0, extra[0] - pad[0]), max(0, extra[1] - pad[1]))
        full = (n, (h - 1) * stride[0] + kh + grow[0], (wd - 1) * stride[1] + kw + grow[1], kernel.shape[1] * groups)
        bias = node.params.get("bias")
        bias = np.zeros(full[3], np.float32) if bias is None else np.asarray(bias, np.float32)
        step, per = cin // groups, kernel.shape[1]
        parts = []
        for g in range(groups):
            x = v.index
            if groups > 1:
                x = self._new(f"{node.name}/in{g}", (n, h, wd, step), like=v.index)
                self._emit(OP.STRIDED_SLICE, [v.index, self.m.constant(f"{node.name}/in{g}/begin", np.array([0, 0, 0, g * step], np.int32)),
                                              self.m.constant(f"{node.name}/in{g}/end", np.array([n, h, wd, (g + 1) * step], np.int32)),
                                              self.m.constant(f"{node.name}/in{g}/strides", np.ones(4, np.int32))], [x],
                           options_type=w.OPTIONS.StridedSliceOptions, options=w.strided_slice_options())
            part_shape = (*full[:3], per)
            part = self._new(f"{node.name}/full{g}", part_shape)
            # TFLite's filter is (out, kh, kw, in): the core's (in, out/groups, kh, kw) of this group.
            wg = np.ascontiguousarray(kernel[g * step:(g + 1) * step].transpose(1, 2, 3, 0))
            self._emit(OP.TRANSPOSE_CONV, [self._shape_const(f"{node.name}/shape{g}", part_shape),
                                           self.m.constant(f"{node.name}/weight{g}", wg), x,
                                           self.m.constant(f"{node.name}/bias{g}", bias[g * per:(g + 1) * per])], [part],
                       options_type=w.OPTIONS.TransposeConvOptions, options=w.transpose_conv_options(stride, PAD_VALID))
            parts.append(part)
        whole = parts[0]
        if groups > 1:
            whole = self._new(f"{node.name}/full", full)
            self._emit(OP.CONCATENATION, parts, [whole], options_type=w.OPTIONS.ConcatenationOptions, options=w.concat_options(3))
        out_shape = self.specs[node.output].shape
        oh, ow = out_shape[2], out_shape[3]
        out = whole
        if (oh, ow) != full[1:3]:
            out = self._new(node.output, (n, oh, ow, full[3]))
            self._emit(OP.STRIDED_SLICE, [whole, self.m.constant(f"{node.name}/begin", np.array([0, pad[0], pad[1], 0], np.int32)),
                                          self.m.constant(f"{node.name}/end", np.array([n, pad[0] + oh, pad[1] + ow, full[3]], np.int32)),
                                          self.m.constant(f"{node.name}/strides", np.ones(4, np.int32))], [out],
                       options_type=w.OPTIONS.StridedSliceOptions, options=w.strided_slice_options())
        self.values[node.output] = _Value(out, True)

    def _pool(self, node: Node, opcode: int, kernel: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int] = (0, 0)) -> None:
        v = self._image_input(node)
        index, padding = self._pool_input(node, v.index, kernel, stride, pad)  # explicit PAD where SAME/VALID cannot say it
        n, h, wd, c = self.m.shape_of(index)
        shape = (n, _out_size(h, kernel[0], stride[0], 1, padding), _out_size(wd, kernel[1], stride[1], 1, padding), c)
        # TFLite int8 pooling requires identical input and output quantization; where the plan
        # gives the output its own parameters, one requantization follows.
        out = self._new(node.output, shape, like=index)
        self._emit(opcode, [index], [out], options_type=w.OPTIONS.Pool2DOptions, options=w.pool_options(kernel, stride, padding))
        self.values[node.output] = _Value(self._follow_plan(node.output, out), True)

    def _pool_attrs(self, node: Node) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        a = node.attrs
        kernel = _pair(a["kernel_size"])
        return kernel, _pair(a.get("stride") or kernel), _pair(a.get("padding", 0))

    def _op_max_pool2d(self, node: Node) -> None:
        self._pool(node, OP.MAX_POOL_2D, *self._pool_attrs(node))

    def _op_avg_pool2d(self, node: Node) -> None:
        self._pool(node, OP.AVERAGE_POOL_2D, *self._pool_attrs(node))

    def _op_adaptive_avg_pool2d(self, node: Node) -> None:
        v = self._image_input(node)
        n, h, wd, c = self.m.shape_of(v.index)
        oh, ow = _pair(node.attrs["output_size"])
        if (oh, ow) == (h, wd):
            self.values[node.output] = v
        elif (oh, ow) == (1, 1):
            out = self._new(node.output, (n, 1, 1, c))
            axes = self.m.constant(f"{node.name}/axes", np.array([1, 2], np.int32))
            self._emit(OP.MEAN, [v.index, axes], [out], options_type=w.OPTIONS.ReducerOptions, options=w.reducer_options(True))
            self.values[node.output] = _Value(out, True)
        elif h % oh == 0 and wd % ow == 0:
            self._pool(node, OP.AVERAGE_POOL_2D, (h // oh, wd // ow), (h // oh, wd // ow))
        else:
            raise UnsupportedOperationError(f"layer {node.name!r} (adaptive_avg_pool2d {oh}x{ow} of {h}x{wd}): only 1x1 or divisible sizes are expressible")

    def _op_flatten(self, node: Node) -> None:
        v = self._get(node)
        shape = self.m.shape_of(v.index)
        start = int(node.attrs.get("start_dim", 1)) % len(shape)
        end = int(node.attrs.get("end_dim", -1)) % len(shape)
        if start != 1 or end != len(shape) - 1:
            self._reshape_to(node, self.specs[node.output].shape)  # any other span: RESHAPE in the core's layout
            return
        flat = (shape[0], int(np.prod(shape[1:])))
        out = self._new(node.output, flat, like=v.index)
        self._emit(OP.RESHAPE, [v.index, self._shape_const(f"{node.name}/shape", flat)], [out],
                   options_type=w.OPTIONS.ReshapeOptions, options=w.reshape_options(flat))
        order = None
        if v.nhwc and shape[3] > 1 and shape[1] * shape[2] > 1:
            order = (shape[3], shape[1], shape[2])
        self.values[node.output] = _Value(out, False, order)

    def _op_dropout(self, node: Node) -> None:
        self._alias(node)  # identity at inference

    def _op_identity(self, node: Node) -> None:
        self._alias(node)

    def _op_constant(self, node: Node) -> None:
        # Written as a constant tensor where it is used, in the layout its consumer needs.
        self.consts[node.output] = np.asarray(node.params["value"])

    def _op_relu(self, node: Node) -> None:
        v = self._get(node)
        out = self._new(node.output, self.m.shape_of(v.index))
        self._emit(OP.RELU, [v.index], [out])
        self.values[node.output] = _Value(out, v.nhwc)

    def _op_softmax(self, node: Node) -> None:
        v = self._get(node)
        shape = self.m.shape_of(v.index)
        axis = int(node.attrs.get("axis", -1)) % len(shape)
        stored_axis = {1: 3, 2: 1, 3: 2}.get(axis, axis) if v.nhwc else axis
        if stored_axis != len(shape) - 1:
            raise UnsupportedOperationError(f"layer {node.name!r} (softmax axis={axis}): TFLite SOFTMAX works on the channel/last axis only")
        # TFLite requires the fixed softmax output parameters whatever the plan says; the core's
        # calibration produces the same ones (softmax_output_params), so both stay bit-exact.
        out = self._new(node.output, shape, quant=_per_tensor(softmax_output_params(8)) if self.int8 else None)
        self._emit(OP.SOFTMAX, [v.index], [out], options_type=w.OPTIONS.SoftmaxOptions, options=w.softmax_options(1.0))
        self.values[node.output] = _Value(out, v.nhwc)

    def _float_only(self, node: Node) -> None:
        if self.int8:
            raise UnsupportedOperationError(
                f"layer {node.name!r} ({node.op}) has no int8 form in the Edge TPU writer; "
                "compile with precision='fp32' or replace the layer"
            )

    def _op_batch_norm2d(self, node: Node) -> None:
        self._float_only(node)
        v = self._image_input(node)  # the per-channel scale broadcasts over NHWC's last axis
        p = node.params
        scale = np.asarray(p["weight"], np.float64) / np.sqrt(np.asarray(p["running_var"], np.float64) + float(node.attrs.get("eps", 1e-5)))
        shift = np.asarray(p["bias"], np.float64) - np.asarray(p["running_mean"], np.float64) * scale
        shape = self.m.shape_of(v.index)
        mid = self._new(f"{node.name}/scaled", shape)
        self._emit(OP.MUL, [v.index, self.m.constant(f"{node.name}/scale", scale.astype(np.float32))], [mid],
                   options_type=w.OPTIONS.MulOptions, options=w.mul_options(ACT.NONE))
        out = self._new(node.output, shape)
        self._emit(OP.ADD, [mid, self.m.constant(f"{node.name}/shift", shift.astype(np.float32))], [out],
                   options_type=w.OPTIONS.AddOptions, options=w.add_options(ACT.NONE))
        self.values[node.output] = _Value(out, v.nhwc)


_HANDLED: Final = frozenset(n[4:] for n in dir(_Lowerer) if n.startswith("_op_"))
_OP_NAMES: Final = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


def lower(graph: Graph, precision: str = "fp32", plan: QuantizationPlan | None = None, *, io: str = "float",
          stem: str = "plain") -> Lowered:
    """Write ``graph`` as a TFLite model; int8 needs the core's ``QuantizationPlan``.

    ``io="float"``: float32 NCHW inputs/outputs with QUANTIZE/TRANSPOSE/DEQUANTIZE in the model;
    ``io="int8"``: int8 (or float32 for fp32) NHWC inputs/outputs, edges done by the host.
    ``stem="space_to_depth"`` rewrites the int8 stems ``lower_s2d.py`` matches (the same
    integers out); the compile option's ``"auto"`` is decided before (``lower_s2d.choose_stem``).
    """
    if stem not in ("space_to_depth", "plain"):
        raise CompilationError(f"edgetpu writer: stem must be 'space_to_depth' or 'plain', got {stem!r}")
    if io not in IO_KINDS:
        raise CompilationError(f"edgetpu: io must be one of {', '.join(IO_KINDS)}, got {io!r}")
    if precision not in PRECISIONS:
        raise CompilationError(f"edgetpu compiles precision 'int8' (Edge TPU) or 'fp32' (LiteRT CPU), not {precision!r}")
    if not graph.inputs:
        # A partition segment holding only constants: the core then keeps it on the CPU.
        raise UnsupportedOperationError("edgetpu: a graph without inputs (constants only) has nothing to run on the device")
    if precision == "int8" and plan is None:
        raise QuantizationError("precision='int8' on edgetpu needs calibration: pass calibration=... to nx.compile")
    if precision == "int8" and plan is not None and (plan.bits != 8 or plan.dynamic):
        raise QuantizationError(f"the Edge TPU runs static full-integer int8 models; got a {plan.bits}-bit plan (dynamic={plan.dynamic})")
    return _Lowerer(graph, precision, plan, io, stem=stem).run()


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _dilated(weight: np.ndarray, dilation: tuple[int, int]) -> np.ndarray:
    """A (C, O, kh, kw) kernel with ``dilation - 1`` zeros between taps: the same transposed
    convolution for a runtime without dilation."""
    if dilation == (1, 1):
        return weight
    c, o, kh, kw = weight.shape
    out = np.zeros((c, o, (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1), weight.dtype)
    out[:, :, ::dilation[0], ::dilation[1]] = weight
    return out


def _to_nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[2], shape[3], shape[1])


def _to_nchw(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[3], shape[1], shape[2])


def _out_size(size: int, k: int, s: int, d: int, padding: int) -> int:
    eff = (k - 1) * d + 1
    if padding == PAD_SAME:
        return -(-size // s)
    return (size - eff) // s + 1
