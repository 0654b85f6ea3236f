"""Attention -> OpenVINO's ScaledDotProductAttention (opset13+), which the CPU/NPU plugins run as
one fused kernel instead of matmul -> softmax -> matmul.

Mask semantics are the opset's (PyTorch's): a bool mask keeps the positions that are True, any
other mask is added to the scores. OpenVINO's SDPA reads a boolean mask the same way and adds a
float one; an integer mask is converted to f32 first (added, as the opset's reference does).
OpenVINO ignores ``attention_mask`` when ``causal`` is set, so a causal node with a mask gets
the triangle folded into the mask here. Ranks below 3, or q/k/v of different ranks, which the
op does not take, are lowered as matmul -> softmax -> matmul with the same semantics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Node
from neurenix_npu_openvino.lower_types import Handler, LoweringContext, output

__all__ = ["HANDLERS", "attention"]

Attrs = Mapping[str, Any]


def attention(lw: LoweringContext, q: Any, k: Any, v: Any, mask: Any | None, mask_dtype: str | None, scale: float | None, causal: bool) -> Any:
    """softmax(q @ k^T * scale + mask) @ v on f32 q, k, v (the opset's semantics)."""
    q_shape, k_shape = lw.shape(q), lw.shape(k)
    default_scale = scale is None
    scale = 1.0 / math.sqrt(q_shape[-1]) if scale is None else float(scale)
    if mask is not None and mask_dtype != "bool":
        mask = lw.to_dtype(mask, "float32")
    if causal and mask is not None:
        mask = _with_causal(lw, mask, mask_dtype == "bool", q_shape[-2], k_shape[-2])
        causal = False
    ranks = {len(q_shape), len(k_shape), len(lw.shape(v))}
    if len(ranks) == 1 and min(ranks) >= 3:
        if mask is None and default_scale:
            # No mask and the default scale: the three-input form. Given a scale, the node gets a
            # zero scalar for a mask, which OpenVINO 2026.4's fused key/value-cache attention
            # (stateful.py) reads as the output's shape: a batch of 0.
            return lw.op.scaled_dot_product_attention(q, k, v, causal=causal)
        return lw.op.scaled_dot_product_attention(q, k, v, mask, lw.const(scale), causal)
    return _composed(lw, q, k, v, mask, mask_dtype == "bool", scale, causal)


def _with_causal(lw: LoweringContext, mask: Any, boolean: bool, length: int, source: int) -> Any:
    keep = np.tril(np.ones((length, source), bool))
    if boolean:
        return lw.op.logical_and(mask, lw.op.constant(keep))
    return lw.op.add(mask, lw.const(np.where(keep, 0.0, -np.inf)))


def _composed(lw: LoweringContext, q: Any, k: Any, v: Any, mask: Any | None, boolean: bool, scale: float, causal: bool) -> Any:
    scores = output(lw.op.multiply(lw.op.matmul(q, k, False, True), lw.const(scale)))
    if causal:
        shape = lw.shape(scores)
        mask, boolean = lw.op.constant(np.tril(np.ones(shape[-2:], bool))), True
    if mask is not None:
        scores = lw.op.select(mask, scores, lw.const(-np.inf)) if boolean else lw.op.add(scores, mask)
    return lw.op.matmul(lw.op.softmax(scores, -1), v, False, False)


def _sdpa(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    q, k, v = (lw.to_dtype(t, "float32") for t in x[:3])
    mask = x[3] if len(x) > 3 else None
    mask_dtype = lw.specs[node.inputs[3]].dtype if len(x) > 3 else None
    return attention(lw, q, k, v, mask, mask_dtype, a["scale"], bool(a["is_causal"]))


def _multihead_attention(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    p, op = node.params, lw.op
    e, h = int(np.shape(p["out_proj_weight"])[0]), int(a["num_heads"])
    q_in, k_in, v_in = (x[0], x[0], x[0]) if len(x) == 1 else x[:3]  # one input: the first release's self-attention
    for value in (q_in, k_in, v_in):
        lw.expect(node, value, 3, -1, e, f"3-D inputs with embed_dim={e} last")
    if not a["batch_first"]:  # (L, N, E) -> (N, L, E)
        q_in, k_in, v_in = (op.transpose(t, lw.const([1, 0, 2], np.int64)) for t in (q_in, k_in, v_in))
    w = np.asarray(p["in_proj_weight"], np.float32)
    bias = p.get("in_proj_bias")

    def heads(t: Any, j: int) -> Any:
        out = op.matmul(t, lw.const(w[j * e : (j + 1) * e]), False, True)
        if bias is not None:
            out = op.add(out, lw.const(np.asarray(bias, np.float32)[j * e : (j + 1) * e]))
        n, length, _ = lw.shape(output(out))
        split = op.reshape(out, lw.const([n, length, h, e // h], np.int64), False)
        return op.transpose(split, lw.const([0, 2, 1, 3], np.int64))

    mask = x[3] if len(x) > 3 else None
    mask_dtype = lw.specs[node.inputs[3]].dtype if len(x) > 3 else None
    ctx = output(attention(lw, heads(q_in, 0), heads(k_in, 1), heads(v_in, 2), mask, mask_dtype, None, False))  # (N, H, L, D)
    n, length = lw.shape(ctx)[0], lw.shape(ctx)[2]
    merged = op.reshape(op.transpose(ctx, lw.const([0, 2, 1, 3], np.int64)), lw.const([n, length, e], np.int64), False)
    out = op.matmul(merged, lw.const(p["out_proj_weight"]), False, True)
    if p.get("out_proj_bias") is not None:
        out = op.add(out, lw.const(p["out_proj_bias"]))
    if not a["batch_first"]:
        out = op.transpose(out, lw.const([1, 0, 2], np.int64))
    return out


HANDLERS: Final[dict[str, Handler]] = {
    "scaled_dot_product_attention": _sdpa,
    "multihead_attention": _multihead_attention,
}
