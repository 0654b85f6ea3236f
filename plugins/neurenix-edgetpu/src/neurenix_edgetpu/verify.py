"""Checking a .tflite flatbuffer in Python before the native interpreter ever sees it.

LiteRT aborts or crashes on some malformed files; the flatbuffers Python runtime has no verifier,
so this walks every table the interpreter will touch, with bounds checks, and turns any failure
into a ``ModelFormatError`` that names the file (the parser's exception stays as ``__cause__``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import tflite

from neurenix_core.errors import ModelFormatError, ShapeError

__all__ = ["EDGETPU_CUSTOM_OP", "ModelInfo", "TensorInfo", "inspect_model"]

#: The custom op edgetpu_compiler puts in place of the ops it mapped to the Edge TPU.
EDGETPU_CUSTOM_OP: Final = "edgetpu-custom-op"
_TYPES: Final = {
    tflite.TensorType.FLOAT32: np.float32, tflite.TensorType.INT8: np.int8, tflite.TensorType.UINT8: np.uint8,
    tflite.TensorType.INT32: np.int32, tflite.TensorType.INT64: np.int64, tflite.TensorType.INT16: np.int16,
    tflite.TensorType.BOOL: np.bool_, tflite.TensorType.FLOAT16: np.float16,
}
_OP_NAMES: Final = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    index: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    quant: tuple[float, int] | None  # per-tensor (scale, zero_point) of inputs/outputs


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the file holds: model inputs/outputs, op names, how many ops run on the Edge TPU."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    ops: tuple[str, ...]
    edgetpu_ops: int
    signatures: tuple[str, ...]
    version: int

    @property
    def compiled_for_edgetpu(self) -> bool:
        return self.edgetpu_ops > 0


def inspect_model(data: bytes, source: str = "<bytes>") -> ModelInfo:
    """Verify ``data`` as a TFLite model and describe it; ModelFormatError/ShapeError when unusable."""
    if len(data) < 8:
        raise ModelFormatError(f"{source}: {len(data)} bytes is too short for a TFLite flatbuffer (truncated file?)")
    if data[4:8] != b"TFL3":
        raise ModelFormatError(
            f"{source}: not a TFLite model (file identifier {bytes(data[4:8])!r}, expected b'TFL3'); "
            "export the model as .tflite or compile it with neurenix"
        )
    try:
        info = _walk(data)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError, TypeError) as exc:
        raise ModelFormatError(f"{source}: corrupted or truncated TFLite flatbuffer ({type(exc).__name__}: {exc}); re-export the model") from exc
    _check_static(info, source)
    return info


def _walk(data: bytes) -> ModelInfo:
    size = len(data)
    root = struct.unpack_from("<I", data, 0)[0]
    if root + 4 > size:
        raise ValueError(f"root table offset {root} is past the end of the {size}-byte file")
    model = tflite.Model.GetRootAsModel(data, 0)
    n_buffers = _count(model.BuffersLength(), size, "buffers")
    for i in range(n_buffers):
        _check_buffer(model.Buffers(i), size, i)
    codes = [model.OperatorCodes(i) for i in range(_count(model.OperatorCodesLength(), size, "operator codes"))]
    names = [_code_name(c) for c in codes]
    if _count(model.SubgraphsLength(), size, "subgraphs") < 1:
        raise ValueError("model has no subgraph")
    graph = model.Subgraphs(0)
    n_tensors = _count(graph.TensorsLength(), size, "tensors")
    tensors = [graph.Tensors(i) for i in range(n_tensors)]
    for t in tensors:
        _check_index(t.Buffer(), n_buffers, "buffer")
        _count(t.ShapeLength(), size, "shape")
    ops = []
    for i in range(_count(graph.OperatorsLength(), size, "operators")):
        op = graph.Operators(i)
        _check_index(op.OpcodeIndex(), len(codes), "opcode")
        for j in (*_vector(op.InputsAsNumpy()), *_vector(op.OutputsAsNumpy())):
            if j != -1:
                _check_index(int(j), n_tensors, "tensor")
        ops.append(names[op.OpcodeIndex()])
    inputs = tuple(_tensor_info(tensors, int(i), n_tensors) for i in _vector(graph.InputsAsNumpy()))
    outputs = tuple(_tensor_info(tensors, int(i), n_tensors) for i in _vector(graph.OutputsAsNumpy()))
    sigs = tuple(model.SignatureDefs(i).SignatureKey().decode() for i in range(_count(model.SignatureDefsLength(), size, "signatures")))
    return ModelInfo(inputs, outputs, tuple(ops), ops.count(EDGETPU_CUSTOM_OP), sigs, model.Version())


def _count(n: int, size: int, what: str) -> int:
    # A garbage length would make us loop for billions of iterations; no vector is longer than the file.
    if n < 0 or n > size:
        raise ValueError(f"{what} vector claims {n} entries in a {size}-byte file")
    return n


def _check_index(i: int, n: int, what: str) -> None:
    if not 0 <= i < n:
        raise IndexError(f"{what} index {i} out of range 0..{n - 1}")


def _check_buffer(buf: Any, size: int, i: int) -> None:
    if buf.Offset() > 0:  # models over 2 GiB keep data after the flatbuffer
        if buf.Offset() + buf.Size() > size:
            raise ValueError(f"buffer {i} ends at {buf.Offset() + buf.Size()}, past the {size}-byte file")
        return
    _count(buf.DataLength(), size, f"buffer {i}")


def _code_name(code: Any) -> str:
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    if builtin == tflite.BuiltinOperator.CUSTOM:
        custom = code.CustomCode()
        return custom.decode() if custom else "CUSTOM"
    return _OP_NAMES.get(builtin, f"BUILTIN_{builtin}")


def _vector(v: Any) -> Sequence[int]:
    return [] if isinstance(v, int) else [int(x) for x in v]  # the generated code returns 0 for absent vectors


def _tensor_info(tensors: list[Any], i: int, n: int) -> TensorInfo:
    _check_index(i, n, "input/output tensor")
    t = tensors[i]
    sig = _vector(t.ShapeSignatureAsNumpy())
    shape = tuple(sig) if sig else tuple(_vector(t.ShapeAsNumpy()))
    q = t.Quantization()
    quant = None
    if q is not None and q.ScaleLength() >= 1:
        quant = (float(q.Scale(0)), int(q.ZeroPoint(0)) if q.ZeroPointLength() else 0)
    if t.Type() not in _TYPES:
        raise ValueError(f"tensor {i} has TFLite type {t.Type()}, which neurenix does not map")
    return TensorInfo((t.Name() or b"").decode(), i, shape, np.dtype(_TYPES[t.Type()]), quant)


def _check_static(info: ModelInfo, source: str) -> None:
    for t in (*info.inputs, *info.outputs):
        if any(d < 0 for d in t.shape):
            raise ShapeError(
                f"{source}: tensor {t.name!r} has a dynamic shape {t.shape}; the Edge TPU runs static shapes only. "
                "Re-export the model with fixed input shapes."
            )
