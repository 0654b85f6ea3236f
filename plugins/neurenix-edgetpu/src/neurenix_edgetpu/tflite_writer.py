"""A small TFLite flatbuffer writer on the ``tflite`` package's generated builder functions.

``ModelBuilder`` collects tensors (with their constant data and quantization) and operators as
plain Python data, then serialises everything bottom-up at ``finish()`` (flatbuffers need children
written before their parents). The output carries the "TFL3" file identifier, schema version 3,
one subgraph and a ``serving_default`` signature def.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import flatbuffers
import numpy as np
import tflite

from neurenix_core.errors import UnsupportedOperationError

__all__ = ["FILE_IDENTIFIER", "OPTIONS", "SCHEMA_VERSION", "ModelBuilder", "TensorQuant"]

FILE_IDENTIFIER: Final = b"TFL3"
SCHEMA_VERSION: Final = 3

_TYPES: Final = {
    np.dtype(np.float32): tflite.TensorType.FLOAT32,
    np.dtype(np.int8): tflite.TensorType.INT8,
    np.dtype(np.int32): tflite.TensorType.INT32,
    np.dtype(np.uint8): tflite.TensorType.UINT8,
    np.dtype(np.int64): tflite.TensorType.INT64,
    np.dtype(np.bool_): tflite.TensorType.BOOL,
}


@dataclass(frozen=True, slots=True)
class TensorQuant:
    """TFLite affine quantization of one tensor: per-tensor, or per-channel along ``axis``."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0

    @classmethod
    def per_tensor(cls, scale: float, zero_point: int) -> TensorQuant:
        return cls(np.array([scale], np.float32), np.array([zero_point], np.int64))


@dataclass(slots=True)
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    buffer: int
    quant: TensorQuant | None


@dataclass(slots=True)
class _Op:
    opcode: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options_type: int
    options: Callable[[flatbuffers.Builder], int] | None


@dataclass(slots=True)
class ModelBuilder:
    """Collects one subgraph; ``finish(...)`` returns the .tflite bytes."""

    description: str = "neurenix"
    tensors: list[_Tensor] = field(default_factory=list)
    buffers: list[bytes] = field(default_factory=lambda: [b""])  # buffer 0 is the empty sentinel
    ops: list[_Op] = field(default_factory=list)
    opcodes: dict[tuple[int, int, str], int] = field(default_factory=dict)

    def tensor(self, name: str, shape: Sequence[int], dtype: Any, *, quant: TensorQuant | None = None) -> int:
        """A runtime tensor (activation); returns its index."""
        return self._add(name, shape, np.dtype(dtype), 0, quant)

    def constant(self, name: str, data: np.ndarray, *, quant: TensorQuant | None = None) -> int:
        """A constant tensor holding ``data`` (weights, bias, shapes); returns its index."""
        # Not np.ascontiguousarray: it makes a 0-d scalar 1-d, and the model's tensor (a graph
        # output, say) must keep the graph's shape.
        array = np.asarray(data)
        if not array.flags.c_contiguous:
            array = np.array(array, order="C")
        self.buffers.append(array.tobytes())
        return self._add(name, array.shape, array.dtype, len(self.buffers) - 1, quant)

    def _add(self, name: str, shape: Sequence[int], dtype: np.dtype[Any], buffer: int, quant: TensorQuant | None) -> int:
        if dtype not in _TYPES:
            # Typed, at write time: the core then runs the segment on cpu:0 (LiteRT never sees it).
            raise UnsupportedOperationError(f"tensor {name!r}: TFLite writer has no type for {dtype}")
        self.tensors.append(_Tensor(name, tuple(int(d) for d in shape), dtype, buffer, quant))
        return len(self.tensors) - 1

    def op(
        self,
        opcode: int,
        inputs: Sequence[int],
        outputs: Sequence[int],
        *,
        version: int = 1,
        options_type: int = 0,
        options: Callable[[flatbuffers.Builder], int] | None = None,
        custom: str = "",
    ) -> None:
        """Append an operator; ``custom`` names a CUSTOM op (``opcode`` must then be CUSTOM)."""
        index = self.opcodes.setdefault((opcode, version, custom), len(self.opcodes))
        self.ops.append(_Op(index, tuple(inputs), tuple(outputs), options_type, options))

    def shape_of(self, index: int) -> tuple[int, ...]:
        return self.tensors[index].shape

    def quant_of(self, index: int) -> TensorQuant | None:
        return self.tensors[index].quant

    # ------------------------------------------------------------------ serialisation
    def finish(self, inputs: Sequence[int], outputs: Sequence[int], *, signature_key: str = "serving_default") -> bytes:
        b = flatbuffers.Builder(1024 + sum(len(x) for x in self.buffers))
        buffers = [self._buffer(b, data) for data in self.buffers]
        tensors = [self._tensor(b, t) for t in self.tensors]
        operators = [self._operator(b, o) for o in self.ops]
        subgraph = self._subgraph(b, tensors, operators, inputs, outputs)
        codes = [self._opcode(b, *key) for key, _ in sorted(self.opcodes.items(), key=lambda kv: kv[1])]
        signature = self._signature(b, signature_key, inputs, outputs)
        description = b.CreateString(self.description)
        vectors = {
            "codes": _offsets(b, tflite.ModelStartOperatorCodesVector, codes),
            "subgraphs": _offsets(b, tflite.ModelStartSubgraphsVector, [subgraph]),
            "buffers": _offsets(b, tflite.ModelStartBuffersVector, buffers),
            "signatures": _offsets(b, tflite.ModelStartSignatureDefsVector, [signature]),
        }
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, SCHEMA_VERSION)
        tflite.ModelAddOperatorCodes(b, vectors["codes"])
        tflite.ModelAddSubgraphs(b, vectors["subgraphs"])
        tflite.ModelAddDescription(b, description)
        tflite.ModelAddBuffers(b, vectors["buffers"])
        tflite.ModelAddSignatureDefs(b, vectors["signatures"])
        b.Finish(tflite.ModelEnd(b), file_identifier=FILE_IDENTIFIER)
        return bytes(b.Output())

    @staticmethod
    def _buffer(b: flatbuffers.Builder, data: bytes) -> int:
        vec = None
        if data:
            # 16-byte alignment lets the interpreter use constant data in place (no copy).
            b.StartVector(1, len(data), 16)
            b.head = b.head - len(data)
            b.Bytes[b.head : b.head + len(data)] = data
            vec = b.EndVector()
        tflite.BufferStart(b)
        if vec is not None:
            tflite.BufferAddData(b, vec)
        return tflite.BufferEnd(b)

    def _tensor(self, b: flatbuffers.Builder, t: _Tensor) -> int:
        name = b.CreateString(t.name)
        shape = _ints(b, tflite.TensorStartShapeVector, t.shape)
        quant = self._quant(b, t.quant) if t.quant is not None else None
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, _TYPES[t.dtype])
        tflite.TensorAddBuffer(b, t.buffer)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        return tflite.TensorEnd(b)

    @staticmethod
    def _quant(b: flatbuffers.Builder, q: TensorQuant) -> int:
        scale = _floats(b, tflite.QuantizationParametersStartScaleVector, q.scale)
        zero = _longs(b, tflite.QuantizationParametersStartZeroPointVector, q.zero_point)
        tflite.QuantizationParametersStart(b)
        tflite.QuantizationParametersAddScale(b, scale)
        tflite.QuantizationParametersAddZeroPoint(b, zero)
        tflite.QuantizationParametersAddQuantizedDimension(b, q.axis)
        return tflite.QuantizationParametersEnd(b)

    @staticmethod
    def _operator(b: flatbuffers.Builder, o: _Op) -> int:
        options = o.options(b) if o.options is not None else None
        ins = _ints(b, tflite.OperatorStartInputsVector, o.inputs)
        outs = _ints(b, tflite.OperatorStartOutputsVector, o.outputs)
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, o.opcode)
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options is not None:
            tflite.OperatorAddBuiltinOptionsType(b, o.options_type)
            tflite.OperatorAddBuiltinOptions(b, options)
        return tflite.OperatorEnd(b)

    @staticmethod
    def _subgraph(b: flatbuffers.Builder, tensors: list[int], ops: list[int], inputs: Sequence[int], outputs: Sequence[int]) -> int:
        tvec = _offsets(b, tflite.SubGraphStartTensorsVector, tensors)
        ivec = _ints(b, tflite.SubGraphStartInputsVector, inputs)
        ovec = _ints(b, tflite.SubGraphStartOutputsVector, outputs)
        opvec = _offsets(b, tflite.SubGraphStartOperatorsVector, ops)
        name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tvec)
        tflite.SubGraphAddInputs(b, ivec)
        tflite.SubGraphAddOutputs(b, ovec)
        tflite.SubGraphAddOperators(b, opvec)
        tflite.SubGraphAddName(b, name)
        return tflite.SubGraphEnd(b)

    @staticmethod
    def _opcode(b: flatbuffers.Builder, code: int, version: int, custom: str) -> int:
        name = b.CreateString(custom) if custom else None
        tflite.OperatorCodeStart(b)
        if name is not None:
            tflite.OperatorCodeAddCustomCode(b, name)
        # Codes above 127 live only in builtin_code; deprecated_builtin_code holds the reserved value 127.
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
        tflite.OperatorCodeAddBuiltinCode(b, code)
        tflite.OperatorCodeAddVersion(b, version)
        return tflite.OperatorCodeEnd(b)

    def _signature(self, b: flatbuffers.Builder, key: str, inputs: Sequence[int], outputs: Sequence[int]) -> int:
        ins = [self._tensor_map(b, i) for i in inputs]
        outs = [self._tensor_map(b, i) for i in outputs]
        ivec = _offsets(b, tflite.SignatureDefStartInputsVector, ins)
        ovec = _offsets(b, tflite.SignatureDefStartOutputsVector, outs)
        skey = b.CreateString(key)
        tflite.SignatureDefStart(b)
        tflite.SignatureDefAddInputs(b, ivec)
        tflite.SignatureDefAddOutputs(b, ovec)
        tflite.SignatureDefAddSignatureKey(b, skey)
        tflite.SignatureDefAddSubgraphIndex(b, 0)
        return tflite.SignatureDefEnd(b)

    def _tensor_map(self, b: flatbuffers.Builder, index: int) -> int:
        name = b.CreateString(self.tensors[index].name)
        tflite.TensorMapStart(b)
        tflite.TensorMapAddName(b, name)
        tflite.TensorMapAddTensorIndex(b, index)
        return tflite.TensorMapEnd(b)


def _offsets(b: flatbuffers.Builder, start: Callable[[flatbuffers.Builder, int], Any], items: Sequence[int]) -> int:
    start(b, len(items))
    for item in reversed(items):
        b.PrependUOffsetTRelative(item)
    return b.EndVector()


def _ints(b: flatbuffers.Builder, start: Callable[[flatbuffers.Builder, int], Any], items: Sequence[int]) -> int:
    start(b, len(items))
    for item in reversed(items):
        b.PrependInt32(int(item))
    return b.EndVector()


def _longs(b: flatbuffers.Builder, start: Callable[[flatbuffers.Builder, int], Any], items: Any) -> int:
    values = [int(v) for v in np.asarray(items).ravel()]
    start(b, len(values))
    for item in reversed(values):
        b.PrependInt64(item)
    return b.EndVector()


def _floats(b: flatbuffers.Builder, start: Callable[[flatbuffers.Builder, int], Any], items: Any) -> int:
    values = [float(v) for v in np.asarray(items, np.float32).ravel()]
    start(b, len(values))
    for item in reversed(values):
        b.PrependFloat32(item)
    return b.EndVector()


# ---------------------------------------------------------------------- builtin options
def _one_field_options(start: Any, add: Any, end: Any, value: Any) -> Callable[[flatbuffers.Builder], int]:
    """An options table with one field set (a fused activation, a block size, a flag)."""
    def build(b: flatbuffers.Builder) -> int:
        start(b)
        add(b, value)
        return end(b)

    return build


def conv_options(stride: tuple[int, int], dilation: tuple[int, int], padding: int, act: int) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.Conv2DOptionsStart(b)
        tflite.Conv2DOptionsAddPadding(b, padding)
        tflite.Conv2DOptionsAddStrideH(b, stride[0])
        tflite.Conv2DOptionsAddStrideW(b, stride[1])
        tflite.Conv2DOptionsAddDilationHFactor(b, dilation[0])
        tflite.Conv2DOptionsAddDilationWFactor(b, dilation[1])
        tflite.Conv2DOptionsAddFusedActivationFunction(b, act)
        return tflite.Conv2DOptionsEnd(b)

    return build


def transpose_conv_options(stride: tuple[int, int], padding: int) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.TransposeConvOptionsStart(b)
        tflite.TransposeConvOptionsAddPadding(b, padding)
        tflite.TransposeConvOptionsAddStrideH(b, stride[0])
        tflite.TransposeConvOptionsAddStrideW(b, stride[1])
        return tflite.TransposeConvOptionsEnd(b)

    return build


def depthwise_options(stride: tuple[int, int], dilation: tuple[int, int], padding: int, multiplier: int, act: int) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.DepthwiseConv2DOptionsStart(b)
        tflite.DepthwiseConv2DOptionsAddPadding(b, padding)
        tflite.DepthwiseConv2DOptionsAddStrideH(b, stride[0])
        tflite.DepthwiseConv2DOptionsAddStrideW(b, stride[1])
        tflite.DepthwiseConv2DOptionsAddDepthMultiplier(b, multiplier)
        tflite.DepthwiseConv2DOptionsAddDilationHFactor(b, dilation[0])
        tflite.DepthwiseConv2DOptionsAddDilationWFactor(b, dilation[1])
        tflite.DepthwiseConv2DOptionsAddFusedActivationFunction(b, act)
        return tflite.DepthwiseConv2DOptionsEnd(b)

    return build


def pool_options(kernel: tuple[int, int], stride: tuple[int, int], padding: int) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.Pool2DOptionsStart(b)
        tflite.Pool2DOptionsAddPadding(b, padding)
        tflite.Pool2DOptionsAddStrideH(b, stride[0])
        tflite.Pool2DOptionsAddStrideW(b, stride[1])
        tflite.Pool2DOptionsAddFilterHeight(b, kernel[0])
        tflite.Pool2DOptionsAddFilterWidth(b, kernel[1])
        tflite.Pool2DOptionsAddFusedActivationFunction(b, 0)
        return tflite.Pool2DOptionsEnd(b)

    return build


def fc_options(act: int, keep_num_dims: bool = False) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.FullyConnectedOptionsStart(b)
        tflite.FullyConnectedOptionsAddFusedActivationFunction(b, act)
        # keep_num_dims: a (B, L, in) input gives (B, L, out) instead of a flattened (B*L, out).
        tflite.FullyConnectedOptionsAddKeepNumDims(b, keep_num_dims)
        return tflite.FullyConnectedOptionsEnd(b)

    return build


def sub_options(act: int) -> Callable[[flatbuffers.Builder], int]:
    return _one_field_options(tflite.SubOptionsStart, tflite.SubOptionsAddFusedActivationFunction, tflite.SubOptionsEnd, act)


def div_options(act: int) -> Callable[[flatbuffers.Builder], int]:
    return _one_field_options(tflite.DivOptionsStart, tflite.DivOptionsAddFusedActivationFunction, tflite.DivOptionsEnd, act)


def batch_matmul_options(adj_x: bool = False, adj_y: bool = False) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.BatchMatMulOptionsStart(b)
        tflite.BatchMatMulOptionsAddAdjX(b, adj_x)
        tflite.BatchMatMulOptionsAddAdjY(b, adj_y)
        return tflite.BatchMatMulOptionsEnd(b)

    return build


def gather_options(axis: int) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.GatherOptionsStart(b)
        tflite.GatherOptionsAddAxis(b, axis)
        tflite.GatherOptionsAddBatchDims(b, 0)
        return tflite.GatherOptionsEnd(b)

    return build


def strided_slice_options() -> Callable[[flatbuffers.Builder], int]:
    # Begin/end/strides are explicit for every axis (no masks): what the Edge TPU compiler takes.
    def build(b: flatbuffers.Builder) -> int:
        tflite.StridedSliceOptionsStart(b)
        return tflite.StridedSliceOptionsEnd(b)

    return build


def gelu_options(approximate: bool) -> Callable[[flatbuffers.Builder], int]:
    return _one_field_options(tflite.GeluOptionsStart, tflite.GeluOptionsAddApproximate, tflite.GeluOptionsEnd, approximate)


def empty_options(start: Any, end: Any) -> Callable[[flatbuffers.Builder], int]:
    """Options tables without fields (TransposeOptions, HardSwishOptions, ...): written for the converter's layout."""
    def build(b: flatbuffers.Builder) -> int:
        start(b)
        return end(b)

    return build


def add_options(act: int) -> Callable[[flatbuffers.Builder], int]:
    return _one_field_options(tflite.AddOptionsStart, tflite.AddOptionsAddFusedActivationFunction, tflite.AddOptionsEnd, act)


def mul_options(act: int) -> Callable[[flatbuffers.Builder], int]:
    return _one_field_options(tflite.MulOptionsStart, tflite.MulOptionsAddFusedActivationFunction, tflite.MulOptionsEnd, act)


def concat_options(axis: int) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.ConcatenationOptionsStart(b)
        tflite.ConcatenationOptionsAddAxis(b, axis)
        tflite.ConcatenationOptionsAddFusedActivationFunction(b, 0)
        return tflite.ConcatenationOptionsEnd(b)

    return build


def space_to_depth_options(block: int) -> Callable[[flatbuffers.Builder], int]:
    return _one_field_options(tflite.SpaceToDepthOptionsStart, tflite.SpaceToDepthOptionsAddBlockSize, tflite.SpaceToDepthOptionsEnd, block)


def reshape_options(shape: Sequence[int]) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        vec = _ints(b, tflite.ReshapeOptionsStartNewShapeVector, shape)
        tflite.ReshapeOptionsStart(b)
        tflite.ReshapeOptionsAddNewShape(b, vec)
        return tflite.ReshapeOptionsEnd(b)

    return build


def softmax_options(beta: float = 1.0) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.SoftmaxOptionsStart(b)
        tflite.SoftmaxOptionsAddBeta(b, beta)
        return tflite.SoftmaxOptionsEnd(b)

    return build


def reducer_options(keep_dims: bool) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tflite.ReducerOptionsStart(b)
        tflite.ReducerOptionsAddKeepDims(b, keep_dims)
        return tflite.ReducerOptionsEnd(b)

    return build


OPTIONS: Final = tflite.BuiltinOptions
