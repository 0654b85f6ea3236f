"""ONNX import handlers: DFT, STFT, MelWeightMatrix (signal), NonMaxSuppression (detection),
BitCast, TfIdfVectorizer, CausalConvWithState and ImageDecoder.

Operands that fix an output's shape (DFT's dft_length and axis, STFT's frame_step and
frame_length, MelWeightMatrix's bin count, transform length and sample rate) must be static
(``const``: a small graph input there makes the model value-specialized). NonMaxSuppression's
output size depends on every input's values, so all of them must be static and the node folds at
import; a model whose boxes come from a computation is refused. ImageDecoder's output size is
the encoded image's: it takes the static shape the model declares for its output, and a decoded
image of another size is a run-time error, never a reshaped one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from neurenix_core.graph import opset
from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, const, fail, outputs_used

__all__ = ["HANDLERS"]


def _onnx_dtype(b: GraphBuilder, n: OnnxNode, code: int) -> str:
    from onnx import helper

    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(int(code))))
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(b, n, f"names TensorProto type {code}, which has no NumPy dtype") from exc


def _scalar(b: GraphBuilder, n: OnnxNode, i: int, what: str) -> int | None:
    """An optional integer operand holding one value (None when absent or empty)."""
    v = const(b, n, i, what)
    if v is None or v.size == 0:
        return None
    if v.size != 1 or v.dtype.kind not in "iu":
        raise fail(b, n, f"needs one integer {what}, got {v.dtype} of shape {v.shape}")
    return int(v.reshape(-1)[0])


def _emit(b: GraphBuilder, n: OnnxNode, name: str, op: str, inputs: Sequence[Value], attrs: dict[str, Any]) -> Value:
    """``b.emit``, with inputs that do not fit the op refused by name. Constant inputs fold: the
    op is evaluated directly, so its shape rule is checked here first (except for an op whose
    shape depends on the values, whose evaluation checks its inputs itself)."""
    specs = [b.spec(v) for v in inputs]
    try:
        if all(isinstance(v, Const) for v in inputs) and op != "non_max_suppression":
            opset.infer(op, attrs, [s.shape for s in specs], [s.dtype for s in specs], {})
        return b.emit(name, op, inputs, attrs)
    except (ValueError, IndexError) as exc:
        raise fail(b, n, f"does not take inputs {[(s.dtype, s.shape) for s in specs]} with attributes {attrs}: {exc}") from exc


# ----------------------------------------------------------------------------- signal
def _dft(b: GraphBuilder, n: OnnxNode) -> Value:
    if getattr(b, "onnx_opset", 20) >= 20:  # opset 20 moved axis from an attribute (default 1) to an input (default -2)
        axis = _scalar(b, n, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(n.attrs.get("axis", 1))
    attrs = {"axis": axis, "inverse": bool(n.attrs.get("inverse", 0)), "onesided": bool(n.attrs.get("onesided", 0)),
             "length": _scalar(b, n, 1, "dft_length")}
    return _emit(b, n, n.name, "dft", [n.inputs[0]], attrs)  # type: ignore[list-item]


def _stft(b: GraphBuilder, n: OnnxNode) -> Value:
    step = _scalar(b, n, 1, "frame_step")
    if step is None:
        raise fail(b, n, "has no frame_step")
    inputs = [n.inputs[0]] + ([n.inputs[2]] if n.input(2) is not None else [])
    attrs = {"frame_step": step, "frame_length": _scalar(b, n, 3, "frame_length"), "onesided": bool(n.attrs.get("onesided", 1))}
    return _emit(b, n, n.name, "stft", inputs, attrs)  # type: ignore[arg-type]


def _mel_weight_matrix(b: GraphBuilder, n: OnnxNode) -> Value:
    sizes = {k: _scalar(b, n, i, k) for i, k in enumerate(("num_mel_bins", "dft_length", "sample_rate"))}
    if any(v is None for v in sizes.values()):
        raise fail(b, n, f"needs num_mel_bins, dft_length and sample_rate, got {sizes}")
    edges = [n.input(3), n.input(4)]
    if any(v is None for v in edges):
        raise fail(b, n, "needs lower_edge_hertz and upper_edge_hertz")
    attrs = sizes | {"dtype": _onnx_dtype(b, n, n.attrs.get("output_datatype", 1))}
    return _emit(b, n, n.name, "mel_weight_matrix", edges, attrs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- detection
def _non_max_suppression(b: GraphBuilder, n: OnnxNode) -> Value:
    what = ("boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold")
    arrays = [const(b, n, i, f"{w} (the selected boxes' count fixes the output shape)") for i, w in enumerate(what)]
    inputs = [Const(np.asarray(a)) for a in arrays[:2]]
    # An absent optional operand before a given one is passed as an empty array (ONNX's "not given").
    last = max((i for i, a in enumerate(arrays) if a is not None), default=1)
    inputs += [Const(np.zeros((0,), np.float32) if a is None else np.asarray(a)) for a in arrays[2 : last + 1]]
    return _emit(b, n, n.name, "non_max_suppression", inputs, {"center_point_box": int(n.attrs.get("center_point_box", 0))})


# ----------------------------------------------------------------------------- misc
def _bitcast(b: GraphBuilder, n: OnnxNode) -> Value:
    if "to" not in n.attrs:
        raise fail(b, n, "has no `to` attribute")
    return _emit(b, n, n.name, "bitcast", [n.inputs[0]], {"to": _onnx_dtype(b, n, n.attrs["to"])})  # type: ignore[list-item]


def _tfidf_vectorizer(b: GraphBuilder, n: OnnxNode) -> Value:
    a = n.attrs
    if a.get("pool_strings"):
        raise fail(b, n, "counts string n-grams (pool_strings); neurenix has no string tensors")
    missing = [k for k in ("mode", "min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes") if k not in a]
    if missing:
        raise fail(b, n, f"lacks required attribute(s) {missing}")
    weights = a.get("weights")
    attrs = {"mode": str(a.get("mode", "")), "min_gram_length": int(a["min_gram_length"]), "max_gram_length": int(a["max_gram_length"]),
             "max_skip_count": int(a["max_skip_count"]), "ngram_counts": tuple(int(v) for v in a.get("ngram_counts", ())),
             "ngram_indexes": tuple(int(v) for v in a.get("ngram_indexes", ())),
             "pool": tuple(int(v) for v in a.get("pool_int64s", ())),
             "weights": None if weights is None else tuple(float(v) for v in weights)}
    return _emit(b, n, n.name, "tfidf_vectorizer", [n.inputs[0]], attrs)  # type: ignore[list-item]


def _causal_conv_with_state(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    has_bias = n.input(2) is not None
    inputs = [v for v in n.inputs[:4] if v is not None]
    attrs: dict[str, Any] = {"activation": str(n.attrs.get("activation", "none")), "has_bias": has_bias}
    return [_emit(b, n, f"{n.name}.{k}" if k else n.name, "causal_conv_with_state", inputs, attrs | {"output": k}) if used else None
            for k, used in enumerate(outputs_used(n))]


def _declared_shape(b: GraphBuilder, name: str) -> tuple[int, ...] | None:
    """The static shape the model declares for value ``name`` (graph output or value_info)."""
    proto = getattr(b, "onnx_model", None)
    if proto is None:
        return None
    for vi in [*proto.graph.output, *proto.graph.value_info]:
        if vi.name == name and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            return tuple(int(d.dim_value) for d in dims) if all(d.HasField("dim_value") for d in dims) else None
    return None


def _image_decoder(b: GraphBuilder, n: OnnxNode) -> Value:
    import importlib.util

    if importlib.util.find_spec("PIL") is None:
        raise fail(b, n, "decodes images with Pillow, which is not installed (pip install pillow)")
    shape = _declared_shape(b, n.proto.output[0])
    if shape is None:
        raise fail(b, n, "has an output whose size depends on the encoded image; the model must declare its static shape "
                         f"[H, W, C] (output {n.proto.output[0]!r})")
    attrs = {"pixel_format": str(n.attrs.get("pixel_format", "RGB")), "shape": shape}
    return _emit(b, n, n.name, "image_decoder", [n.inputs[0]], attrs)  # type: ignore[list-item]


HANDLERS: dict[str, Handler] = {
    "DFT": _dft, "STFT": _stft, "MelWeightMatrix": _mel_weight_matrix, "NonMaxSuppression": _non_max_suppression,
    "BitCast": _bitcast, "TfIdfVectorizer": _tfidf_vectorizer, "CausalConvWithState": _causal_conv_with_state,
    "ImageDecoder": _image_decoder,
}
