"""Attention variants and rotary embeddings (ONNX's Attention, RotaryEmbedding).

``attention`` is ONNX Attention (opsets 23 to 25) with its four results: one node per result the
model uses, selected by the ``output`` attribute (0 ``Y``, 1 ``present_key``, 2 ``present_value``,
3 ``qk_matmul_output``). Its optional inputs are named by flags (``has_mask``, ``has_past``,
``has_nonpad``) because a node's inputs are positional: a model may pass a past cache without a
mask. The arithmetic follows ONNX's reference step by step in the input dtype (scale split as
``sqrt(scale)`` on both Q and K, softcap before the mask, softmax in ``softmax_precision``, a
query row whose every key is masked giving zeros), so float16 and bfloat16 models round where
ONNX rounds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from neurenix_core.graph.opset.schema import Arrays, Attrs, Params, Shape, _broadcast, _def, _is_float, _np_dtype

__all__: list[str] = []

#: the results of ONNX Attention, in its output order (the ``output`` attribute indexes it)
ATTENTION_OUTPUTS = ("Y", "present_key", "present_value", "qk_matmul_output")


# ----------------------------------------------------------------------------- attention
def _operands(a: Attrs, x: list[Any]) -> tuple[Any, Any, Any, Any, Any, Any, Any]:
    """q, k, v, mask, past_key, past_value, nonpad_kv_seqlen (None where the node has none)."""
    rest = list(x[3:])
    mask = rest.pop(0) if a["has_mask"] else None
    past_k, past_v = (rest.pop(0), rest.pop(0)) if a["has_past"] else (None, None)
    nonpad = rest.pop(0) if a["has_nonpad"] else None
    if rest:
        raise ValueError(f"got {len(x)} inputs, more than the has_mask/has_past/has_nonpad flags name")
    return x[0], x[1], x[2], mask, past_k, past_v, nonpad


def _heads(a: Attrs, q: Shape, k: Shape, v: Shape) -> tuple[int, int]:
    """(query heads, key/value heads); for 3-D inputs the attributes say, for 4-D axis 1."""
    if len(q) == 3:
        hq, hkv = int(a["q_num_heads"] or 0), int(a["kv_num_heads"] or 0)
        if hq < 1 or hkv < 1:
            raise ValueError("3-D q, k, v need the q_num_heads and kv_num_heads attributes")
        if q[2] % hq or k[2] % hkv or v[2] % hkv:
            raise ValueError(f"hidden sizes {q[2]}, {k[2]}, {v[2]} are not multiples of the head counts {hq}, {hkv}")
        return hq, hkv
    if k[1] != v[1]:
        raise ValueError(f"k and v have {k[1]} and {v[1]} heads")
    return q[1], k[1]


def _as_4d(t: Shape, heads: int) -> Shape:
    """(batch, heads, length, head size) of a 3-D (batch, length, hidden) or 4-D operand."""
    return t if len(t) == 4 else (t[0], heads, t[1], t[2] // heads)


def _attention_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    q, k, v, mask, pk, pv, nonpad = _operands(a, s)
    dq, dk, dv, dmask, *_ = _operands(a, d)
    if not (len(q) == len(k) == len(v) and len(q) in (3, 4)):
        raise ValueError(f"expects q, k, v all 3-D or all 4-D, got {q}, {k}, {v}")
    if not (_is_float(dq) and dk == dq and dv == dq):
        raise ValueError(f"expects q, k, v of one floating-point dtype, got {dq}, {dk}, {dv}")
    hq, hkv = _heads(a, q, k, v)
    if hq % hkv:
        raise ValueError(f"{hq} query heads are not a multiple of {hkv} key/value heads")
    q4, k4, v4 = _as_4d(q, hq), _as_4d(k, hkv), _as_4d(v, hkv)
    if not (q4[0] == k4[0] == v4[0]) or q4[3] != k4[3] or k4[2] != v4[2]:
        raise ValueError(f"q {q}, k {k}, v {v} do not agree on batch, head size or key length")
    if pk is not None:
        if len(pk) != 4 or len(pv) != 4 or pk[:2] != k4[:2] or pv[:2] != v4[:2] or pk[3] != k4[3] or pv[3] != v4[3] or pk[2] != pv[2]:
            raise ValueError(f"past_key {pk} / past_value {pv} do not match k {k4[:2]}+(P, {k4[3]}) / v (..., {v4[3]})")
        if nonpad is not None:
            raise ValueError("nonpad_kv_seqlen cannot be combined with a past key/value cache")
    total = k4[2] + (pk[2] if pk is not None else 0)
    scores = (q4[0], hq, q4[2], total)
    if mask is not None:
        if dmask != "bool" and dmask != dq:
            raise ValueError(f"attn_mask must be bool or {dq}, got {dmask}")
        if not mask or mask[-1] > total:
            raise ValueError(f"attn_mask {mask} is longer than the {total} keys")
        if _broadcast([scores, mask[:-1] + (total,)]) != scores:
            raise ValueError(f"attn_mask {mask} does not broadcast to the scores {scores}")
    if nonpad is not None and (nonpad != (q4[0],) or d[-1] not in ("int64", "int32")):
        raise ValueError(f"nonpad_kv_seqlen must be ({q4[0]},) integers, got {nonpad} {d[-1]}")
    out = a["output"]
    if out == 0:
        return ((q4[0], hq, q4[2], v4[3]) if len(q) == 4 else (q[0], q[1], hq * v4[3])), dq
    if out in (1, 2):
        t = k4 if out == 1 else v4
        return (t[0], t[1], total, t[3]), dq
    if out == 3:
        return scores, dq
    raise ValueError(f"output {out} is not one of 0..3 {ATTENTION_OUTPUTS}")


def _split_heads(t: np.ndarray, heads: int) -> np.ndarray:
    b, n, hidden = t.shape
    return t.reshape(b, n, heads, hidden // heads).transpose(0, 2, 1, 3)


def _causal_allowed(q_len: int, kv_len: int, offset: np.ndarray | int, left: int = -1, right: int = -1,
                    causal: bool = True) -> np.ndarray:
    """Where query i may attend key j, bottom-right aligned: ``j <= i + offset`` (causal) and
    within the window around ``i + offset``; ``offset`` is a scalar or per batch ``(B,)``, the
    result ``(q, kv)`` or ``(B, 1, q, kv)``."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    per_batch = np.ndim(offset) > 0
    pos = i + (np.reshape(offset, (-1, 1, 1)) if per_batch else int(offset))
    diff = pos - j
    allowed = diff >= 0 if causal else np.ones(diff.shape, bool)
    if left >= 0:
        allowed = allowed & (diff <= left)
    if right >= 0:
        allowed = allowed & (-diff <= right)
    return allowed.reshape(allowed.shape[0], 1, q_len, kv_len) if per_batch else allowed


def _where_bias(allowed: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    # select, not multiply: 0 * -inf would be NaN at the allowed places
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def _bias(a: Attrs, mask: np.ndarray | None, q_len: int, kv_len: int, past: int | None, nonpad: np.ndarray | None,
          dtype: np.dtype[Any]) -> np.ndarray:
    """The additive bias on the scores: mask (bool -> 0 / -inf, padded with -inf to the keys),
    causal frontier, sliding window and the padding after ``nonpad_kv_seqlen``, as ONNX composes
    them (the causal and window offsets are the past length or ``nonpad - q_len`` per batch)."""
    left, right = int(a["left_window_size"]), int(a["right_window_size"])
    window = left >= 0 or right >= 0
    offset: np.ndarray | int = past if past is not None else (0 if nonpad is None else nonpad.reshape(-1) - q_len)
    bias = np.zeros((q_len, kv_len), dtype)
    if mask is not None:
        pad = kv_len - mask.shape[-1]
        if pad > 0:
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=False if mask.dtype == np.bool_ else -np.inf)
        bias = bias + (_where_bias(mask, dtype) if mask.dtype == np.bool_ else mask)
    if a["is_causal"]:
        bias = bias + _where_bias(_causal_allowed(q_len, kv_len, offset), bias.dtype)
    if window:
        bias = bias + _where_bias(_causal_allowed(q_len, kv_len, offset, left, right, causal=False), bias.dtype)
    if nonpad is not None:
        keep = np.arange(kv_len) < nonpad.reshape(-1, 1)
        bias = bias + _where_bias(keep, bias.dtype).reshape(-1, 1, 1, kv_len)
    return bias


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # NumPy multiplies bfloat16 into float32; ONNX rounds the product back to the input dtype
    return np.matmul(a, b).astype(a.dtype, copy=False)


def _softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row of -inf gives zeros instead of NaN."""
    top = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - np.where(np.isneginf(top), x.dtype.type(0), top))
    total = np.sum(e, axis=-1, keepdims=True)
    return e / np.where(total == 0, x.dtype.type(1), total)


def _attention_all(a: Attrs, x: Arrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    q, k, v, mask, past_k, past_v, nonpad = _operands(a, x)
    dtype = q.dtype
    rank = q.ndim
    hq, hkv = _heads(a, q.shape, k.shape, v.shape)
    if rank == 3:
        q, k, v = _split_heads(q, hq), _split_heads(k, hkv), _split_heads(v, hkv)
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[3])
    root = dtype.type(math.sqrt(scale))  # ONNX scales q and k by sqrt(scale) each, in the input dtype
    if past_k is not None:
        k, v = np.concatenate((past_k, k), axis=2), np.concatenate((past_v, v), axis=2)
    present_k, present_v = k, v
    bias = _bias(a, mask, q.shape[2], k.shape[2], None if past_k is None else past_k.shape[2], nonpad, dtype)
    if hq != hkv:  # grouped-query attention: each key/value head serves hq/hkv consecutive query heads
        k, v = np.repeat(k, hq // hkv, axis=1), np.repeat(v, hq // hkv, axis=1)
    scores = _matmul(q * root, np.swapaxes(k, -1, -2) * root)
    cap = float(a["softcap"])
    if cap > 0:  # before the mask, so that -inf stays -inf
        scores = np.tanh(scores / dtype.type(cap)) * dtype.type(cap)
    biased = scores + bias
    qk = biased if a["qk_matmul_output_mode"] == 2 else scores
    precision = a["softmax_precision"]
    probs = _softmax(biased if precision is None else biased.astype(_np_dtype(precision)))
    # a query row with no attendable key (decided on the bias, not on possibly NaN scores) is 0
    probs = np.where(np.isneginf(np.max(bias, axis=-1, keepdims=True)), probs.dtype.type(0), probs)
    if a["qk_matmul_output_mode"] == 3:
        qk = probs
    y = _matmul(probs.astype(dtype, copy=False), v)
    if rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y, present_k, present_v, np.broadcast_to(qk, biased.shape).astype(dtype)


def _attention_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    return np.ascontiguousarray(_attention_all(a, x)[a["output"]])


def _attention_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    q, k = s[0], s[1]
    lq, lk, e = (q[1], k[1], q[2]) if len(q) == 3 else (q[2], k[2], q[1] * q[3])
    return 4 * q[0] * lq * lk * e


_def("attention", "attention",
     "ONNX Attention: softmax(softcap(q*sqrt(scale) @ (k*sqrt(scale))^T) + mask/causal/window/padding bias) @ v over "
     "3-D (heads from q_num_heads/kv_num_heads) or 4-D q, k, v, grouped-query heads, past cache concatenated on the "
     "key axis; output selects Y / present_key / present_value / qk_matmul_output (one node per ONNX output); "
     "has_mask/has_past/has_nonpad name which optional inputs follow",
     ("q", "k", "v", "mask?", "past_key?", "past_value?", "nonpad_kv_seqlen?"), _attention_rule, _attention_ref,
     attrs={"output": 0, "has_mask": False, "has_past": False, "has_nonpad": False, "is_causal": False, "scale": None,
            "q_num_heads": None, "kv_num_heads": None, "softcap": 0.0, "softmax_precision": None,
            "qk_matmul_output_mode": 0, "left_window_size": -1, "right_window_size": -1},
     flops=_attention_flops)


# ----------------------------------------------------------------------------- rotary embedding
def _rotary_dims(a: Attrs, x: Shape) -> tuple[int, int, int]:
    """(heads, head size, rotated size) of a (B, H, S, D) or (B, S, H*D) input."""
    if len(x) == 4:
        heads, size = x[1], x[3]
    elif len(x) == 3:
        heads = int(a["num_heads"] or 0)
        if heads < 1 or x[2] % heads:
            raise ValueError(f"a 3-D input needs num_heads dividing its hidden size {x[2]}, got {a['num_heads']}")
        size = x[2] // heads
    else:
        raise ValueError(f"expects a 3-D (batch, seq, hidden) or 4-D (batch, heads, seq, head) input, got {x}")
    rot = int(a["rotary_embedding_dim"]) or size
    if rot > size or rot % 2:
        raise ValueError(f"rotary_embedding_dim {rot} must be even and at most the head size {size}")
    return heads, size, rot


def _rotary_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, cos, sin = s[:3]
    _, _, rot = _rotary_dims(a, x)
    batch, seq = x[0], (x[2] if len(x) == 4 else x[1])
    if cos != sin or not cos or cos[-1] != rot // 2:
        raise ValueError(f"cos_cache {cos} and sin_cache {sin} must match, last axis rotary_embedding_dim/2 = {rot // 2}")
    if len(s) > 3:
        if s[3] != (batch, seq) or len(cos) != 2 or d[3] not in ("int64", "int32"):
            raise ValueError(f"position_ids must be ({batch}, {seq}) integers over a 2-D cache, got {s[3]} {d[3]}, cache {cos}")
    elif cos != (batch, seq, rot // 2):
        raise ValueError(f"without position_ids the caches must be ({batch}, {seq}, {rot // 2}), got {cos}")
    if not _is_float(d[0]):
        raise ValueError(f"expects a floating-point input, got {d[0]}")
    return x, d[0]


def _rotary_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t, cos, sin = x[:3]
    heads, size, rot = _rotary_dims(a, t.shape)
    bshd = t.transpose(0, 2, 1, 3) if t.ndim == 4 else t.reshape(t.shape[0], t.shape[1], heads, size)
    if len(x) > 3:
        ids = x[3]
        if ids.size and (ids.min() < 0 or ids.max() >= cos.shape[0]):
            raise ValueError(f"position_ids outside the cache's {cos.shape[0]} positions")
        cos, sin = cos[ids], sin[ids]
    cos, sin = cos[:, :, None, :].astype(t.dtype, copy=False), sin[:, :, None, :].astype(t.dtype, copy=False)
    part = bshd[..., :rot]
    x1, x2 = (part[..., 0::2], part[..., 1::2]) if a["interleaved"] else (part[..., : rot // 2], part[..., rot // 2 :])
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    turned = np.stack((real, imag), axis=-1).reshape(part.shape) if a["interleaved"] else np.concatenate((real, imag), axis=-1)
    out = np.concatenate((turned, bshd[..., rot:]), axis=-1)
    return np.ascontiguousarray(out.transpose(0, 2, 1, 3) if t.ndim == 4 else out.reshape(t.shape))


_def("rotary_embedding", "attention",
     "ONNX RotaryEmbedding: rotate the first rotary_embedding_dim (0 = all) channels of each head by the cos/sin caches "
     "(indexed by position_ids when given), halves or interleaved pairs; input (B, H, S, D) or (B, S, H*D) with num_heads",
     ("x", "cos_cache", "sin_cache", "position_ids?"), _rotary_rule, _rotary_ref,
     attrs={"interleaved": False, "rotary_embedding_dim": 0, "num_heads": None},
     flops=lambda a, s, o, p: 6 * math.prod(o))



# ----------------------------------------------------------------------------- transformer blocks
def _swiglu_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if s[0] != s[1] or d[0] != d[1] or not _is_float(d[0]):
        raise ValueError(f"expects a and b of one shape and floating-point dtype (no broadcasting), got {s[0]} {d[0]} and {s[1]} {d[1]}")
    return s[0], d[0]


def _swiglu_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t, gate = x
    alpha = t.dtype.type(a["alpha"])
    # the sigmoid is rounded to the input dtype before the products, as ONNX's Swish does
    sig = (1 / (1 + np.exp(-alpha * t))).astype(t.dtype, copy=False)
    return (t * sig * gate).astype(t.dtype, copy=False)


_def("swiglu", "activation", "ONNX SwiGLU: a * sigmoid(alpha * a) * b, a and b of one shape", ("a", "b"), _swiglu_rule, _swiglu_ref,
     attrs={"alpha": 1.0}, flops=lambda a, s, o, p: 5 * math.prod(o))


_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _linear_operands(a: Attrs, x: list[Any]) -> tuple[Any, Any, Any, Any, Any, Any]:
    """query, key, value, past_state, decay, beta (None where the node has none)."""
    rest = list(x[3:])
    past = rest.pop(0) if a["has_past"] else None
    decay = rest.pop(0) if a["has_decay"] else None
    beta = rest.pop(0) if a["has_beta"] else None
    if rest:
        raise ValueError(f"got {len(x)} inputs, more than the has_past/has_decay/has_beta flags name")
    return x[0], x[1], x[2], past, decay, beta


def _linear_dims(a: Attrs, q: Shape, k: Shape, v: Shape) -> tuple[int, int, int, int]:
    """(query heads, key/value heads, key head size, value head size), checked."""
    hq, hkv = int(a["q_num_heads"] or 0), int(a["kv_num_heads"] or 0)
    if hq < 1 or hkv < 1 or hq % hkv:
        raise ValueError(f"q_num_heads ({a['q_num_heads']}) must be a positive multiple of kv_num_heads ({a['kv_num_heads']})")
    if not (len(q) == len(k) == len(v) == 3) or not (q[:2] == k[:2] == v[:2]):
        raise ValueError(f"expects query, key, value (B, T, heads*size) of one batch and length, got {q}, {k}, {v}")
    if q[2] % hq or k[2] % hkv or v[2] % hkv or q[2] // hq != k[2] // hkv:
        raise ValueError(f"hidden sizes {q[2]}, {k[2]}, {v[2]} do not split into {hq} / {hkv} heads of one key size")
    return hq, hkv, q[2] // hq, v[2] // hkv


def _linear_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    q, k, v, past, decay, beta = _linear_operands(a, s)
    dq, _, _, dpast, _, _ = _linear_operands(a, d)
    if not _is_float(dq) or len(set(d[:3])) != 1:
        raise ValueError(f"expects query, key, value of one floating-point dtype, got {d[:3]}")
    hq, hkv, dk, dv = _linear_dims(a, q, k, v)
    rule = a["update_rule"]
    if rule not in _UPDATE_RULES:
        raise ValueError(f"update_rule {rule!r} is not one of {_UPDATE_RULES}")
    if (decay is None) == (rule in ("gated", "gated_delta")) or (beta is None) == (rule in ("delta", "gated_delta")):
        raise ValueError(f"update_rule {rule!r} takes {'decay' if 'gated' in rule else 'no decay'} and "
                         f"{'beta' if 'delta' in rule else 'no beta'}")
    state = (q[0], hkv, dk, dv)
    if past is not None and past != state:
        raise ValueError(f"past_state {past} must be {state}")
    if decay is not None and (decay[:2] != q[:2] or len(decay) != 3 or decay[2] not in (hkv, hkv * dk)):
        raise ValueError(f"decay {decay} must be ({q[0]}, {q[1]}, {hkv} or {hkv * dk})")
    if beta is not None and (beta[:2] != q[:2] or len(beta) != 3 or beta[2] not in (hkv, 1)):
        raise ValueError(f"beta {beta} must be ({q[0]}, {q[1]}, {hkv} or 1)")
    if a["output"] == 0:
        return (q[0], q[1], hq * dv), dq
    if a["output"] == 1:
        return state, dpast or dq
    raise ValueError(f"output {a['output']} is not 0 (output) or 1 (present_state)")


def _per_step(t: np.ndarray, b: int, n: int, heads: int) -> np.ndarray:
    """(B, T, heads*size) -> (B, heads, T, size) in float32, the recurrence's precision."""
    return t.reshape(b, n, heads, -1).transpose(0, 2, 1, 3).astype(np.float32)


def _linear_attention_all(a: Attrs, x: Arrays) -> tuple[np.ndarray, np.ndarray]:
    q, k, v, past, decay, beta = _linear_operands(a, x)
    hq, hkv, dk, dv = _linear_dims(a, q.shape, k.shape, v.shape)
    b, n = q.shape[:2]
    q4, k4, v4 = _per_step(q, b, n, hq), _per_step(k, b, n, hkv), _per_step(v, b, n, hkv)
    g4 = None if decay is None else _per_step(decay, b, n, hkv)  # (B, Hkv, T, 1 or dk)
    b4 = None if beta is None else _per_step(beta, b, n, beta.shape[2])  # (B, Hkv or 1, T, 1)
    state = np.zeros((b, hkv, dk, dv), np.float32) if past is None else past.astype(np.float32)
    scale = np.float32(a["scale"] if a["scale"] else 1.0 / math.sqrt(dk))
    out = np.empty((b, hq, n, dv), np.float32)
    for i in range(n):  # the state is a recurrence over time steps
        kt, vt = k4[:, :, i], v4[:, :, i]
        if g4 is not None:
            state = state * np.exp(g4[:, :, i])[..., None]
        if b4 is not None:  # delta rule: write only what the state does not already recall for k_t
            vt = b4[:, :, i] * (vt - np.einsum("bhdm,bhd->bhm", state, kt))
        state = state + kt[..., :, None] * vt[..., None, :]
        read = state if hq == hkv else np.repeat(state, hq // hkv, axis=1)
        out[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q4[:, :, i], read)
    y = out.transpose(0, 2, 1, 3).reshape(b, n, hq * dv).astype(q.dtype)
    return y, state.astype(q.dtype if past is None else past.dtype)


_def("linear_attention", "attention",
     "ONNX LinearAttention: a (B, heads, dk, dv) state updated per time step (linear: += k v^T; gated: decayed by "
     "exp(decay) first; delta: v replaced by beta * (v - S^T k)) and read by scale * q S; output 0 the output, "
     "1 present_state; has_past/has_decay/has_beta name which optional inputs follow",
     ("query", "key", "value", "past_state?", "decay?", "beta?"), _linear_rule,
     lambda a, x, p: np.ascontiguousarray(_linear_attention_all(a, x)[a["output"]]),
     attrs={"output": 0, "has_past": False, "has_decay": False, "has_beta": False, "q_num_heads": None, "kv_num_heads": None,
            "scale": None, "update_rule": "gated_delta"},
     flops=lambda a, s, o, p: 6 * math.prod(s[0]) * (s[2][2] // max(int(a["kv_num_heads"] or 1), 1)))
