"""from_onnx on cpu:0: one-node models of ONNX's Attention, RotaryEmbedding and the two losses,
each compared with a NumPy expectation of ONNX's semantics, exact dtype and shape.

Several ONNX outputs (Attention's Y / present_key / present_value / qk_matmul_output,
SoftmaxCrossEntropyLoss's loss / log_prob, LinearAttention's output / present_state) are one
graph node each; an output the model leaves out ("") is not computed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixError

RNG = np.random.default_rng(11)


def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[str], attrs: dict[str, Any] | None = None,
           version: int = 23, order: list[str] | None = None) -> Any:
    node = helper.make_node(op, order if order is not None else list(inputs), outputs, **(attrs or {}))
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs if o])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])


def run(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **kw: Any) -> list[np.ndarray]:
    compiled = nx.compile(nn.from_onnx(_model(op, inputs, outputs, **kw)), device="cpu:0", precision="fp32", outputs="host",
                          progress=False)
    out = compiled(*inputs.values())
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def check(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def randn(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------- attention
def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | float = 0.0, scale: float | None = None,
         softcap: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Y, raw scores, probabilities) in float64 over (B, H, L, E) operands; rows with no
    attendable key give zeros."""
    q, k, v = (t.astype(np.float64) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    logits = scores + bias
    top = logits.max(-1, keepdims=True)
    dead = np.isneginf(top)
    e = np.exp(logits - np.where(dead, 0.0, top))
    probs = np.where(dead, 0.0, e / np.where(dead, 1.0, e.sum(-1, keepdims=True)))
    return probs @ v, scores, probs


def test_attention_4d_matches_scaled_dot_product_attention() -> None:
    q, k, v = randn(2, 3, 4, 8), randn(2, 3, 6, 8), randn(2, 3, 6, 5)
    (y,) = run("Attention", {"Q": q, "K": k, "V": v}, ["Y"])
    check(y, sdpa(q, k, v)[0].astype(np.float32))


def test_attention_float_mask_scale_and_softcap() -> None:
    q, k, v = randn(1, 2, 3, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4)
    mask = randn(3, 5)
    (y,) = run("Attention", {"Q": q, "K": k, "V": v, "attn_mask": mask}, ["Y"], attrs={"scale": 0.3, "softcap": 2.0})
    check(y, sdpa(q, k, v, mask, scale=0.3, softcap=2.0)[0].astype(np.float32))


def test_attention_3d_gqa_causal_with_past_gives_all_four_outputs() -> None:
    b, lq, lk, past, hq, hkv, e = 2, 3, 3, 2, 4, 2, 4
    q, k, v = randn(b, lq, hq * e), randn(b, lk, hkv * e), randn(b, lk, hkv * e)
    pk, pv = randn(b, hkv, past, e), randn(b, hkv, past, e)
    y, present_k, present_v, qk = run(
        "Attention", {"Q": q, "K": k, "V": v, "past_key": pk, "past_value": pv},
        ["Y", "present_key", "present_value", "qk"], order=["Q", "K", "V", "", "past_key", "past_value"],
        attrs={"q_num_heads": hq, "kv_num_heads": hkv, "is_causal": 1})
    heads = lambda t, h: t.reshape(b, -1, h, e).transpose(0, 2, 1, 3)
    k4 = np.concatenate([pk, heads(k, hkv)], axis=2)
    v4 = np.concatenate([pv, heads(v, hkv)], axis=2)
    # query i sits at position past + i: it sees keys 0 .. past + i (bottom-right causal)
    allowed = np.arange(past + lk)[None, :] <= (past + np.arange(lq))[:, None]
    want_y, scores, _ = sdpa(heads(q, hq), np.repeat(k4, hq // hkv, axis=1), np.repeat(v4, hq // hkv, axis=1),
                             np.where(allowed, 0.0, -np.inf))
    check(present_k, k4)
    check(present_v, v4)
    check(qk, scores.astype(np.float32))
    check(y, want_y.transpose(0, 2, 1, 3).reshape(b, lq, hq * e).astype(np.float32))


def test_attention_bool_mask_fully_masked_row_is_zero_and_unused_outputs_are_skipped() -> None:
    q, k, v = randn(1, 2, 2, 8), randn(1, 2, 2, 8), randn(1, 2, 2, 8)
    mask = np.array([[True, False], [False, False]])  # the second query attends nothing
    y, probs = run("Attention", {"Q": q, "K": k, "V": v, "attn_mask": mask}, ["Y", "", "", "qk"],
                   attrs={"qk_matmul_output_mode": 3})
    want_y, _, want_p = sdpa(q, k, v, np.where(mask, 0.0, -np.inf))
    assert not np.isnan(y).any() and np.all(y[:, :, 1] == 0)
    check(y, want_y.astype(np.float32))
    check(probs, want_p.astype(np.float32))


def test_attention_float16_stays_float16() -> None:
    q, k, v = randn(1, 2, 4, 8, dtype="float16"), randn(1, 2, 6, 8, dtype="float16"), randn(1, 2, 6, 8, dtype="float16")
    (y,) = run("Attention", {"Q": q, "K": k, "V": v}, ["Y"], attrs={"is_causal": 1})
    allowed = np.arange(6)[None, :] <= np.arange(4)[:, None]
    check(y, sdpa(q, k, v, np.where(allowed, 0.0, -np.inf))[0].astype(np.float16), rtol=5e-3, atol=5e-3)


def test_attention_bfloat16_stays_bfloat16() -> None:
    import ml_dtypes

    q, k, v = (randn(1, 2, 3, 4).astype(ml_dtypes.bfloat16) for _ in range(3))
    (y,) = run("Attention", {"Q": q, "K": k, "V": v}, ["Y"])
    check(y, sdpa(q, k, v)[0].astype(ml_dtypes.bfloat16), rtol=3e-2, atol=3e-2)


def test_attention_nonpad_kv_seqlen_masks_the_padding_per_batch() -> None:
    q, k, v = randn(2, 1, 2, 4), randn(2, 1, 5, 4), randn(2, 1, 5, 4)
    lens = np.array([3, 5], np.int64)
    (y,) = run("Attention", {"Q": q, "K": k, "V": v, "nonpad_kv_seqlen": lens}, ["Y"], order=["Q", "K", "V", "", "", "", "nonpad_kv_seqlen"],
               version=24)
    bias = np.where(np.arange(5)[None, :] < lens[:, None], 0.0, -np.inf)[:, None, None, :]
    check(y, sdpa(q, k, v, bias)[0].astype(np.float32))


def test_attention_sliding_window() -> None:
    q, k, v = randn(1, 1, 5, 2), randn(1, 1, 5, 2), randn(1, 1, 5, 2)
    (y,) = run("Attention", {"Q": q, "K": k, "V": v}, ["Y"], attrs={"left_window_size": 1, "right_window_size": 2}, version=25)
    d = np.arange(5)[:, None] - np.arange(5)[None, :]
    check(y, sdpa(q, k, v, np.where((d <= 1) & (-d <= 2), 0.0, -np.inf))[0].astype(np.float32))


def test_attention_3d_without_head_counts_is_refused() -> None:
    q = randn(1, 2, 8)
    with pytest.raises(NeurenixError, match="q_num_heads"):
        run("Attention", {"Q": q, "K": q, "V": q}, ["Y"])


# ----------------------------------------------------------------------------- rotary embedding
def rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool, rot: int) -> np.ndarray:
    """(B, H, S, D) rotated with (B, S, rot/2) caches, written as complex multiplication."""
    part = x[..., :rot].astype(np.float64)
    re, im = (part[..., 0::2], part[..., 1::2]) if interleaved else (part[..., : rot // 2], part[..., rot // 2 :])
    z = (re + 1j * im) * (cos + 1j * sin)[:, None]
    turned = np.stack([z.real, z.imag], -1).reshape(part.shape) if interleaved else np.concatenate([z.real, z.imag], -1)
    return np.concatenate([turned, x[..., rot:]], -1).astype(x.dtype)


@pytest.mark.parametrize("interleaved, rot", [(0, 0), (1, 0), (0, 4), (1, 4)])
def test_rotary_embedding_with_position_ids(interleaved: int, rot: int) -> None:
    x = randn(2, 3, 4, 8)
    ids = np.array([[0, 5, 2, 9], [1, 1, 7, 3]], np.int64)
    half = (rot or 8) // 2
    cos, sin = randn(10, half), randn(10, half)
    (y,) = run("RotaryEmbedding", {"x": x, "cos": cos, "sin": sin, "ids": ids}, ["y"],
               attrs={"interleaved": interleaved, "rotary_embedding_dim": rot})
    check(y, rotary(x, cos[ids], sin[ids], bool(interleaved), rot or 8))


def test_rotary_embedding_3d_input_with_num_heads() -> None:
    x = randn(2, 3, 2 * 4)
    cos, sin = randn(2, 3, 2), randn(2, 3, 2)
    (y,) = run("RotaryEmbedding", {"x": x, "cos": cos, "sin": sin}, ["y"], attrs={"num_heads": 2})
    x4 = x.reshape(2, 3, 2, 4).transpose(0, 2, 1, 3)
    check(y, rotary(x4, cos, sin, False, 4).transpose(0, 2, 1, 3).reshape(2, 3, 8))


# ----------------------------------------------------------------------------- losses
def nll(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None, ignore: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-element weighted loss and weights (float64), ignored targets weighted 0."""
    c = logp.shape[1]
    moved = np.moveaxis(logp.astype(np.float64), 1, -1).reshape(-1, c)
    flat = target.reshape(-1)
    keep = flat != ignore if ignore is not None else np.ones(flat.shape, bool)
    w = np.where(keep, (np.ones(c) if weight is None else weight.astype(np.float64))[np.where(keep, flat, 0)], 0.0)
    loss = -moved[np.arange(flat.size), np.where(keep, flat, 0)] * w
    return loss.reshape(target.shape), w.reshape(target.shape)


def test_nll_loss_none_with_weight_and_ignore_index() -> None:
    x, target, w = randn(3, 5, 4), RNG.integers(0, 5, (3, 4)), RNG.random(5).astype(np.float32)
    target[0, 1] = 2
    (y,) = run("NegativeLogLikelihoodLoss", {"x": x, "t": target, "w": w}, ["y"], attrs={"reduction": "none", "ignore_index": 2},
               version=22)
    check(y, nll(x, target, w, 2)[0].astype(np.float32))
    assert np.all(y[target == 2] == 0)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_nll_loss_reductions_are_0d(reduction: str) -> None:
    x, target, w = randn(3, 5, 2, 2), RNG.integers(0, 5, (3, 2, 2)), RNG.random(5).astype(np.float32)
    target[1, 0, 0] = 4
    (y,) = run("NegativeLogLikelihoodLoss", {"x": x, "t": target, "w": w}, ["y"],
                     attrs={"reduction": reduction, "ignore_index": 4}, version=22)
    loss, weights = nll(x, target, w, 4)
    check(y, np.float32(loss.sum() / weights.sum() if reduction == "mean" else loss.sum()))


def test_nll_loss_target_out_of_range_is_refused() -> None:
    x, target = randn(2, 3), np.array([0, 3], np.int64)
    with pytest.raises(NeurenixError, match="outside the 3 classes"):
        run("NegativeLogLikelihoodLoss", {"x": x, "t": target}, ["y"], attrs={"reduction": "none"}, version=22)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(1, keepdims=True))


def test_softmax_cross_entropy_gives_loss_and_log_prob() -> None:
    x, target = randn(3, 5, 2), RNG.integers(0, 5, (3, 2))
    loss, logp = run("SoftmaxCrossEntropyLoss", {"x": x, "t": target}, ["loss", "log_prob"], attrs={"reduction": "none"}, version=22)
    check(logp, log_softmax(x).astype(np.float32))
    check(loss, nll(log_softmax(x), target, None, None)[0].astype(np.float32))


def test_softmax_cross_entropy_mean_without_weight_counts_only_kept_targets() -> None:
    x, target = randn(4, 3), np.array([0, 2, 1, 2], np.int64)
    (loss,) = run("SoftmaxCrossEntropyLoss", {"x": x, "t": target}, ["loss"], attrs={"ignore_index": 2}, version=22)
    per, weights = nll(log_softmax(x), target, None, 2)
    check(loss, np.float32(per.sum() / weights.sum()))


# ----------------------------------------------------------------------------- SwiGLU, LinearAttention
@pytest.mark.parametrize("dtype, alpha", [("float32", 1.0), ("float32", 0.5), ("float16", 1.0)])
def test_swiglu(dtype: str, alpha: float) -> None:
    a, b = randn(2, 5, dtype=dtype), randn(2, 5, dtype=dtype)
    (y,) = run("SwiGLU", {"a": a, "b": b}, ["y"], attrs={"alpha": alpha}, version=28)
    a64 = a.astype(np.float64)
    check(y, (a64 / (1 + np.exp(-alpha * a64)) * b).astype(dtype), rtol=2e-3 if dtype == "float16" else 1e-6)


def linear_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, hq: int, hkv: int, state: np.ndarray,
                     decay: np.ndarray | None, beta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The recurrence written per batch, head and step (float64); decay per key dim, beta per head."""
    b, n, _ = q.shape
    dk, dv = k.shape[2] // hkv, v.shape[2] // hkv
    out = np.zeros((b, n, hq, dv))
    state = state.astype(np.float64).copy()
    for bi in range(b):
        for h in range(hkv):
            for t in range(n):
                kt, vt = k[bi, t, h * dk:(h + 1) * dk], v[bi, t, h * dv:(h + 1) * dv]
                s = state[bi, h]
                if decay is not None:
                    s *= np.exp(decay[bi, t, h * dk:(h + 1) * dk])[:, None]
                if beta is not None:
                    vt = beta[bi, t, h] * (vt - s.T @ kt)
                s += np.outer(kt, vt)
                for g in range(hq // hkv):
                    qh = h * (hq // hkv) + g
                    out[bi, t, qh] = q[bi, t, qh * dk:(qh + 1) * dk] @ s / math.sqrt(dk)
    return out.reshape(b, n, hq * dv), state


def test_linear_attention_gated_delta_gqa_with_past() -> None:
    b, n, hq, hkv, dk = 2, 3, 4, 2, 4
    q, k, v = randn(b, n, hq * dk), randn(b, n, hkv * dk) / 2, randn(b, n, hkv * dk)
    past, decay, beta = randn(b, hkv, dk, dk), -RNG.random((b, n, hkv * dk)).astype(np.float32), RNG.random((b, n, hkv)).astype(np.float32)
    y, present = run("LinearAttention", {"q": q, "k": k, "v": v, "past": past, "decay": decay, "beta": beta}, ["y", "present"],
                     attrs={"q_num_heads": hq, "kv_num_heads": hkv}, version=27)
    want_y, want_state = linear_attention(q, k, v, hq, hkv, past, decay, beta)
    check(y, want_y.astype(np.float32), rtol=1e-4, atol=1e-5)
    check(present, want_state.astype(np.float32), rtol=1e-4, atol=1e-5)


def test_linear_attention_linear_rule_refuses_a_decay() -> None:
    q = randn(1, 2, 4)
    with pytest.raises(NeurenixError, match="takes no decay"):
        run("LinearAttention", {"q": q, "k": q, "v": q, "decay": q}, ["y"], order=["q", "k", "v", "", "decay"],
            attrs={"q_num_heads": 1, "kv_num_heads": 1, "update_rule": "linear"}, version=27)
