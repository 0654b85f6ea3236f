"""ONNX import handlers: Attention, LinearAttention, rotary embeddings, SwiGLU and losses.

Attention, LinearAttention and SoftmaxCrossEntropyLoss have several outputs: each emits one node per output the
model names (attribute ``output``), and None for an optional output left out ("").
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import helper

from neurenix_core.graph.importers.builder import GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, fail, outputs_used

__all__ = ["HANDLERS"]


def _dtype_name(b: GraphBuilder, n: OnnxNode, code: int) -> str:
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(code)))
    except (KeyError, ValueError, TypeError) as exc:
        raise fail(b, n, f"has softmax_precision {code}, which is not a tensor dtype") from exc


def _per_output(b: GraphBuilder, n: OnnxNode, op: str, inputs: list[Value], attrs: dict[str, Any], names: tuple[str, ...]) -> list[Value | None]:
    used = outputs_used(n)
    if len(used) > len(names):
        raise fail(b, n, f"has {len(used)} outputs; ONNX {n.op} has at most {len(names)}")
    return [b.emit(n.name if i == 0 else f"{n.name}.{names[i]}", op, inputs, attrs | {"output": i}) if u else None
            for i, u in enumerate(used)]


def _attention(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    q, k, v, mask, past_k, past_v, nonpad = (n.input(i) for i in range(7))
    if (past_k is None) != (past_v is None):
        raise fail(b, n, "has only one of past_key and past_value; ONNX takes both or neither")
    a = n.attrs
    precision = a.get("softmax_precision")
    attrs: dict[str, Any] = {
        "has_mask": mask is not None, "has_past": past_k is not None, "has_nonpad": nonpad is not None,
        "is_causal": bool(a.get("is_causal", 0)), "scale": None if a.get("scale") is None else float(a["scale"]),
        "q_num_heads": a.get("q_num_heads"), "kv_num_heads": a.get("kv_num_heads"), "softcap": float(a.get("softcap", 0.0)),
        "softmax_precision": None if precision is None else _dtype_name(b, n, int(precision)),
        "qk_matmul_output_mode": int(a.get("qk_matmul_output_mode", 0)),
        "left_window_size": int(a.get("left_window_size", -1)), "right_window_size": int(a.get("right_window_size", -1)),
    }
    if attrs["qk_matmul_output_mode"] not in (0, 1, 2, 3):
        raise fail(b, n, f"has qk_matmul_output_mode {attrs['qk_matmul_output_mode']}; ONNX defines 0 to 3")
    inputs = [t for t in (q, k, v, mask, past_k, past_v, nonpad) if t is not None]
    return _per_output(b, n, "attention", inputs, attrs, ("Y", "present_key", "present_value", "qk_matmul_output"))


def _rotary(b: GraphBuilder, n: OnnxNode) -> Value:
    a = n.attrs
    attrs = {"interleaved": bool(a.get("interleaved", 0)), "rotary_embedding_dim": int(a.get("rotary_embedding_dim", 0)),
             "num_heads": a.get("num_heads")}
    return b.emit(n.name, "rotary_embedding", [t for t in n.inputs if t is not None], attrs)


def _swiglu(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "swiglu", [t for t in n.inputs if t is not None], {"alpha": float(n.attrs.get("alpha", 1.0))})


def _linear_attention(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    q, k, v, past, decay, beta = (n.input(i) for i in range(6))
    a = n.attrs
    scale = a.get("scale")
    attrs: dict[str, Any] = {
        "has_past": past is not None, "has_decay": decay is not None, "has_beta": beta is not None,
        "q_num_heads": a.get("q_num_heads"), "kv_num_heads": a.get("kv_num_heads"),
        "scale": None if scale is None else float(scale), "update_rule": str(a.get("update_rule", "gated_delta")),
    }  # chunk_size is a tuning hint of ONNX's; it does not change the result
    inputs = [t for t in (q, k, v, past, decay, beta) if t is not None]
    return _per_output(b, n, "linear_attention", inputs, attrs, ("output", "present_state"))


def _loss_attrs(n: OnnxNode) -> dict[str, Any]:
    ignore = n.attrs.get("ignore_index")
    reduction = n.attrs.get("reduction", "mean")
    return {"reduction": reduction.decode() if isinstance(reduction, bytes) else str(reduction),
            "ignore_index": None if ignore is None else int(ignore)}


def _nll(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "nll_loss", [t for t in n.inputs if t is not None], _loss_attrs(n))


def _sce(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    inputs = [t for t in n.inputs if t is not None]
    return _per_output(b, n, "softmax_cross_entropy", inputs, _loss_attrs(n), ("loss", "log_prob"))


HANDLERS: dict[str, Handler] = {
    "Attention": _attention,
    "RotaryEmbedding": _rotary,
    "SwiGLU": _swiglu,
    "LinearAttention": _linear_attention,
    "NegativeLogLikelihoodLoss": _nll,
    "SoftmaxCrossEntropyLoss": _sce,
}
