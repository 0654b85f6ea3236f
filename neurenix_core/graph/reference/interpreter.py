"""The CPU backend's fast path through the opset interpreter: a graph planned once, run per call.

``run_graph(graph, *inputs, float_dtype=None)`` (every value in the dtype the graph declares: what
cpu:0 runs when no host runtime is installed) used to redo per call what depends on the graph
alone: completing each node's attributes with the opset defaults, casting its weights, looking
its op up. A :class:`Plan` does that once: each node becomes a step (a callable on its input
arrays, the slots it reads and writes, the slots that die after it, so large activations are
freed as soon as nothing reads them). Where the semantics allow it, float32 steps are fused:

- ``conv2d`` absorbs a ``batch_norm2d`` that is its only reader (the affine folded into the
  weight and bias in float64, then cast once), then a ``relu`` or ``hardswish`` that is the only
  reader of that, computed in place while the output is in cache (``cpu_nn.conv2d_f32``); a
  convolution whose only reader is a channels-last depthwise one writes channels-last;
- ``linear`` and ``batch_norm2d`` keep their weights pre-cast, ``gelu`` runs in float32 (erfc
  form, no cancellation in the negative tail) instead of through float64; attention runs one
  batch item at a time.

A fused step checks its input's dtype at run time and runs its nodes' plain opset references
otherwise, so a float16 or float64 graph computes exactly as before. The float64 reference mode
(``float_dtype=np.float64``, quantization and verification) never uses a plan.

``Plan.run(inputs, threads)`` (``nx.compile(..., threads=N)``) splits each large step across N
cores through ``backends/cpu_threads.py``: the kernels ask ``cpu_threads.current()`` and write
disjoint slices of one preallocated output.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from neurenix_core.backends import cpu_nn as K
from neurenix_core.backends import cpu_threads
from neurenix_core.errors import ShapeError
from neurenix_core.graph import opset
from neurenix_core.graph.ir import Graph, Node
from neurenix_core.graph.opset.schema import VALUE_KINDS

__all__ = ["Plan", "build_plan", "input_array", "plan_for", "run_planned", "specialized"]

Arrays = list[Any]
StepFn = Callable[[Arrays], Any]

_F32: Final = np.dtype(np.float32)
#: Categories whose ops may return a sequence (list) or an empty optional (None): run through
#: ``eval_node`` as they are (their per-call cost is not what the fast path is for).
_VALUE_CATEGORIES: Final = frozenset({"sequence", "control"})
#: How many planned graphs are kept (a compiled model holds one graph per input shape).
_CACHE_SIZE: Final = 64
#: Plans kept per dynamic graph (one per input shape seen).
_SHAPES_PER_GRAPH: Final = 16
#: Elements per shard at least when a step is split across interpreter threads: below it the
#: pool's hand-off and the GIL taken back after each call cost more than the second core saves
#: (32K-element ufunc calls on 2 threads ran 1.08x faster than on 1, large ones 1.5-1.8x).
_SPLIT_MIN: Final = 131072


@dataclass(frozen=True, slots=True)
class _Step:
    """One call: ``fn`` on the values in ``ins`` writes slot ``out``; ``free`` slots die after it.
    ``nodes`` are the graph nodes it computes (several when fused), for error messages."""

    fn: StepFn
    ins: tuple[int, ...]
    out: int
    free: tuple[int, ...]
    nodes: tuple[Node, ...]


# ----------------------------------------------------------------------------- per-node steps
def _node_params(node: Node) -> dict[str, Any]:
    """``eval_node``'s parameter view with ``float_dtype=None``: arrays as they are, None dropped."""
    return {k: ([np.asarray(e) for e in v] if isinstance(v, list) else np.asarray(v)) for k, v in node.params.items() if v is not None}


def _cast(a: Any) -> Any:
    """``eval_node``'s input view with ``float_dtype=None``: arrays as arrays, sequences element by element."""
    if a is None or isinstance(a, list):
        return a if a is None else [_cast(v) for v in a]
    return np.asarray(a)


def _generic(node: Node) -> StepFn:
    """``opset.evaluate`` with the attributes completed once (the same ref, the same result)."""
    d = opset.OPSET[node.op]
    if d.category in _VALUE_CATEGORIES or node.op == "identity" or any(isinstance(v, list) for v in node.params.values()):
        # Sequences and optionals (lists, None): evaluate() as eval_node calls it, inputs cast per call.
        op, attrs, params = node.op, node.attrs, _node_params(node)
        return lambda xs: opset.evaluate(op, attrs, [_cast(a) for a in xs], params)
    attrs, params, ref = opset.attrs_of(node.op, node.attrs), _node_params(node), d.ref
    return lambda xs: np.asarray(ref(attrs, xs, params))


def _chain(fns: Sequence[StepFn]) -> StepFn:
    """Several single-input steps one after the other (a fused step's exact fallback)."""
    def run(xs: Arrays) -> Any:
        out = fns[0](xs)
        for fn in fns[1:]:
            out = fn([out])
        return out

    return run


def _f32(v: Any) -> np.ndarray:
    """``v`` as contiguous float32: a float32 weight is used as it is (every input shape's plan of
    a model shares one buffer, not a copy each), anything else goes through float64 (as exact)."""
    if isinstance(v, np.ndarray) and v.dtype == _F32 and v.flags.c_contiguous:
        return v
    return np.ascontiguousarray(np.asarray(v, np.float64).astype(np.float32))


def _bn_affine(bn: Node) -> tuple[np.ndarray, np.ndarray]:
    """A batch_norm2d node as y = x * scale + shift per channel, in float64."""
    p, eps = bn.params, float(opset.attrs_of(bn.op, bn.attrs)["eps"])
    scale = 1.0 / np.sqrt(np.asarray(p["running_var"], np.float64) + eps)
    if p.get("weight") is not None:
        scale = scale * np.asarray(p["weight"], np.float64)
    shift = -np.asarray(p["running_mean"], np.float64) * scale
    if p.get("bias") is not None:
        shift = shift + np.asarray(p["bias"], np.float64)
    return scale, shift


def _conv_step(conv: Node, bn: Node | None, act: str | None, fallback: StepFn, channels_last: bool = False) -> StepFn:
    """conv2d [+ batch_norm2d] [+ relu or hardswish] on float32: weights (BN folded in float64) cast once."""
    a = opset.attrs_of(conv.op, conv.attrs)
    w = np.asarray(conv.params["weight"], np.float64)
    b = np.zeros(w.shape[0]) if conv.params.get("bias") is None else np.asarray(conv.params["bias"], np.float64)
    if bn is not None:
        scale, shift = _bn_affine(bn)
        w, b = w * scale.reshape(-1, 1, 1, 1), b * scale + shift
    has_bias = bn is not None or conv.params.get("bias") is not None
    weight, bias = _f32(w), (_f32(b) if has_bias else None)
    stride, padding, dilation, groups = K._pair(a["stride"]), K._pair(a["padding"]), K._pair(a["dilation"]), int(a["groups"])
    cg = weight.shape[1]

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32 or x.ndim != 4 or x.shape[1] != cg * groups:
            return fallback(xs)  # another dtype, or a shape error the reference words
        return K.conv2d_f32(x, weight, bias, padding, stride, dilation, groups, act, channels_last and groups == 1)

    return run


def _linear_step(node: Node, fallback: StepFn) -> StepFn:
    weight_t = _f32(node.params["weight"]).T  # x @ W.T: BLAS reads the transposed view as it is
    bias = None if node.params.get("bias") is None else _f32(node.params["bias"])

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32 or x.ndim == 0 or x.shape[-1] != weight_t.shape[0]:
            return fallback(xs)
        if x.ndim > 2 and x.flags.c_contiguous:
            # One GEMM over every row: a 3-D @ 2-D matmul is one BLAS call per leading index
            # (measured 15-25% slower at ViT sizes, batch 32).
            rows = x.reshape(-1, x.shape[-1])
            if cpu_threads.current() > 1 and rows.shape[0] >= 2 * _LINEAR_SPLIT_ROWS:
                return _linear_rows(rows, weight_t, bias).reshape(*x.shape[:-1], weight_t.shape[1])
            out = cpu_threads.matmul(rows, weight_t).reshape(*x.shape[:-1], weight_t.shape[1])
        elif x.ndim == 2 and cpu_threads.current() > 1 and x.shape[0] >= 2 * _LINEAR_SPLIT_ROWS:
            return _linear_rows(x, weight_t, bias)
        else:
            out = cpu_threads.matmul(x, weight_t)
        if bias is not None:
            out += bias
        return out

    return run


#: Rows per shard at least, for a linear layer split across interpreter threads. Fewer rows (a
#: transformer at batch 1: 128-197) run as one GEMM on BLAS's own threads, which measured faster
#: than row shards on single-threaded BLAS there (ViT-Tiny, 2 threads: 49 against 59 ms).
_LINEAR_SPLIT_ROWS: Final = 512


def _linear_rows(rows: np.ndarray, weight_t: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    out = np.empty((rows.shape[0], weight_t.shape[1]), _F32)

    def part(lo: int, hi: int) -> None:
        np.matmul(rows[lo:hi], weight_t, out=out[lo:hi])
        if bias is not None:
            out[lo:hi] += bias

    cpu_threads.split(rows.shape[0], part, min_items=_LINEAR_SPLIT_ROWS)
    return out


def _bn_step(node: Node, fallback: StepFn) -> StepFn:
    scale, shift = (_f32(v).reshape(-1, 1, 1) for v in _bn_affine(node))

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32 or x.ndim != 4 or x.shape[1] != scale.shape[0]:
            return fallback(xs)
        out = np.multiply(x, scale)
        out += shift
        return out

    return run


# erfc(z), z >= 0: the Numerical Recipes fit cpu_nn.erf uses (fractional error < 1.2e-7), in float32.
_ERFC_COEF32: Final = tuple(np.float32(c) for c in reversed(K._ERFC_COEF))


#: Elements per block of ``_gelu32``: its five scratch arrays (640 KB) stay in L2 across the ~30
#: passes; 32K measured 9-11% faster than 16K at BERT-tiny and ViT-tiny sizes (fewer ufunc calls).
_GELU_BLOCK: Final = 32768


def _gelu32(x: np.ndarray) -> np.ndarray:
    """0.5 * x * erfc(-x / sqrt(2)) in float32. erfc is evaluated at |z| and reflected
    (erfc(-z) = 2 - erfc(z)), so the negative tail, where 1 + erf(z) would cancel, keeps its
    relative precision. The ~35 ufunc passes run block by block on scratch arrays that stay in
    cache, and the reflection is arithmetic, not a masked ufunc (``where=`` ran 5x slower than
    the arithmetic): 2.5x faster than whole-array passes at ViT sizes, the same bits."""
    block = cpu_threads.block(_GELU_BLOCK, x.size, _SPLIT_MIN)
    return _sharded_flat(x, lambda src, dst: _gelu_range(src, dst, block))


def _gelu_range(flat: np.ndarray, out: np.ndarray, block: int) -> None:
    size = min(block, flat.size)
    z, t, poly, negative, sign = (np.empty(size, np.float32) for _ in range(5))
    for start in range(0, flat.size, block):
        xb = flat[start : start + block]
        m = xb.size
        _gelu_block(xb, out[start : start + m], z[:m], t[:m], poly[:m], negative[:m], sign[:m])


def _gelu_block(x: np.ndarray, out: np.ndarray, z: np.ndarray, t: np.ndarray, poly: np.ndarray, negative: np.ndarray,
                sign: np.ndarray) -> None:
    np.multiply(x, np.float32(-1.0 / math.sqrt(2.0)), out=z)  # z = -x / sqrt(2); gelu = 0.5 x erfc(z)
    np.less(z, 0, out=negative)  # 1.0 where z < 0, else 0.0
    np.abs(z, out=z)
    np.multiply(z, np.float32(0.5), out=t)
    t += np.float32(1.0)
    np.reciprocal(t, out=t)
    poly.fill(_ERFC_COEF32[0])
    for c in _ERFC_COEF32[1:]:
        poly *= t
        poly += c
    np.multiply(z, z, out=z)
    np.subtract(poly, z, out=poly)
    np.exp(poly, out=poly)
    poly *= t  # e = erfc(|z|)
    # erfc(z) = e * (1 - 2n) + 2n: e where n = 0, and exactly 2 - e where n = 1 (z < 0).
    np.multiply(negative, np.float32(-2.0), out=sign)
    sign += np.float32(1.0)
    poly *= sign
    negative *= np.float32(2.0)
    poly += negative
    np.multiply(poly, x, out=out)
    out *= np.float32(0.5)


def _gelu_step(node: Node, fallback: StepFn) -> StepFn:
    if opset.attrs_of(node.op, node.attrs)["approximate"] != "none":
        return fallback
    return lambda xs: _gelu32(xs[0]) if xs[0].dtype == _F32 else fallback(xs)


#: Elements per block of the last-axis softmax / layer norm steps: the block stays in cache.
_ROW_BLOCK_ELEMENTS: Final = 16384


def _softmax_step(node: Node, fallback: StepFn) -> StepFn:
    """Softmax over the last axis of float32, block by block of rows, in place in its output:
    the reference's operations (max, subtract, exp, sum, divide) row by row, so the same bits,
    without its three output-sized temporaries."""
    axis = int(opset.attrs_of(node.op, node.attrs)["axis"])

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32 or x.ndim == 0 or axis not in (-1, x.ndim - 1) or x.size == 0:
            return fallback(xs)
        rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        out = np.empty_like(rows)
        min_rows = max(1, _SPLIT_MIN // rows.shape[1])
        step = max(1, cpu_threads.block(_ROW_BLOCK_ELEMENTS, rows.shape[0], min_rows) // rows.shape[1])

        def part(lo: int, hi: int) -> None:
            for b in range(lo, hi, step):
                xb = rows[b : min(hi, b + step)]
                ob = out[b : b + xb.shape[0]]
                np.subtract(xb, xb.max(axis=-1, keepdims=True), out=ob)
                np.exp(ob, out=ob)
                ob /= ob.sum(axis=-1, keepdims=True)

        cpu_threads.split(rows.shape[0], part, min_items=min_rows)
        return out.reshape(x.shape)

    return run


def _layer_norm_step(node: Node, fallback: StepFn) -> StepFn:
    """Layer norm over the last axis of float32, block by block of rows: the reference's
    operations row by row (mean, centre, mean of squares, divide by the root, scale, shift), so
    the same bits, with the centred values computed once and no output-sized temporaries."""
    a = opset.attrs_of(node.op, node.attrs)
    shape = a["normalized_shape"]
    dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    eps = a["eps"]
    weight = None if node.params.get("weight") is None else np.asarray(node.params["weight"]).astype(_F32)
    bias = None if node.params.get("bias") is None else np.asarray(node.params["bias"]).astype(_F32)

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32 or len(dims) != 1 or x.ndim == 0 or x.shape[-1] != dims[0] or x.size == 0:
            return fallback(xs)
        rows = np.ascontiguousarray(x).reshape(-1, dims[0])
        out = np.empty_like(rows)
        min_rows = max(1, _SPLIT_MIN // dims[0])
        step = max(1, cpu_threads.block(_ROW_BLOCK_ELEMENTS, rows.shape[0], min_rows) // dims[0])

        def part(lo: int, hi: int) -> None:
            for b in range(lo, hi, step):
                xb = rows[b : min(hi, b + step)]
                ob = out[b : b + xb.shape[0]]
                np.subtract(xb, xb.mean(axis=-1, keepdims=True), out=ob)
                var = np.square(ob).mean(axis=-1, keepdims=True)
                ob /= np.sqrt(var + eps)
                if weight is not None:
                    ob *= weight
                if bias is not None:
                    ob += bias

        cpu_threads.split(rows.shape[0], part, min_items=min_rows)
        return out.reshape(x.shape)

    return run


def _hardswish_step(fallback: StepFn) -> StepFn:
    """x * clip(x / 6 + 0.5, 0, 1) on float32, block by block in its output: the reference's
    operations (clip as maximum then minimum: the same values, NaN included), so the same bits,
    without its four output-sized temporaries."""

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32:
            return fallback(xs)
        block = cpu_threads.block(_ROW_BLOCK_ELEMENTS, x.size, _SPLIT_MIN)
        return _sharded_flat(x, lambda src, dst: _hardswish_range(src, dst, block))

    return run


def _hardswish_range(flat: np.ndarray, out: np.ndarray, block: int) -> None:
    for b in range(0, flat.size, block):
        xb = flat[b : b + block]
        ob = out[b : b + xb.size]
        np.divide(xb, 6, out=ob)
        ob += 0.5
        np.maximum(ob, 0, out=ob)
        np.minimum(ob, 1, out=ob)
        ob *= xb


def _relu_step(fallback: StepFn) -> StepFn:
    zero = np.float32(0)

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32:
            return fallback(xs)
        if cpu_threads.current() == 1 or x.size < 2 * _SPLIT_MIN:
            return np.maximum(x, zero)
        return _sharded_flat(x, lambda src, dst: np.maximum(src, zero, out=dst))

    return run


_BINARY: Final = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def _binary_step(node: Node, fallback: StepFn) -> StepFn:
    """float32 (op) float32 is float32 in the opset's promotion: call the ufunc directly (with
    interpreter threads, on shards of the output's first axis longer than 1)."""
    fn = _BINARY[node.op]

    def run(xs: Arrays) -> Any:
        a, b = xs
        if a.dtype != _F32 or b.dtype != _F32:
            return fallback(xs)
        with np.errstate(all="ignore"):  # overflow is inf, as in the opset's binary reference
            if cpu_threads.current() == 1 or max(a.size, b.size) < 2 * _SPLIT_MIN:
                return fn(a, b)
            return _sharded_broadcast(fn, a, b)

    return run


def _sharded_broadcast(fn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fn(a, b)`` (a binary ufunc, NumPy broadcasting) into a fresh output, split along its first
    axis longer than 1 (an operand of length 1 there, or without that axis, is read whole)."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    out = np.empty(shape, _F32)
    axis = next((k for k, d in enumerate(shape) if d > 1), None)
    if axis is None:
        return fn(a, b)

    def along(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
        k = axis - (len(shape) - v.ndim)
        return v if k < 0 or v.shape[k] == 1 else v[(slice(None),) * k + (slice(lo, hi),)]

    inner = out.size // shape[axis]
    cpu_threads.split(shape[axis], lambda lo, hi: fn(along(a, lo, hi), along(b, lo, hi), out=along(out, lo, hi)),
                      min_items=max(1, _SPLIT_MIN // inner))
    return out


def _matmul_step(fallback: StepFn) -> StepFn:
    """float32 batched matmul (attention's scores and mixes) with interpreter threads: shards of
    the leading batch axis, each its own single-threaded BLAS calls."""

    def run(xs: Arrays) -> Any:
        a, b = xs
        if (a.dtype != _F32 or b.dtype != _F32 or cpu_threads.current() == 1 or a.ndim < 3 or b.ndim < 2
                or b.ndim > a.ndim or (b.ndim == a.ndim and b.shape[0] not in (1, a.shape[0])) or a.shape[-1] != b.shape[-2]):
            return fallback(xs)
        if a.shape[0] == 1:
            return fallback(xs)
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        out = np.empty(shape, _F32)

        def part(lo: int, hi: int) -> None:
            bb = b if b.ndim < a.ndim or b.shape[0] == 1 else b[lo:hi]
            np.matmul(a[lo:hi], bb, out=out[lo:hi])

        cpu_threads.split(a.shape[0], part)
        return out

    return run


def _sdpa_step(node: Node, fallback: StepFn) -> StepFn:
    """scaled_dot_product_attention on float32 q, k, v (not causal; a bool or float mask or none)
    a few batch items at a time (about 128K scores): they stay in cache through the mask and the softmax, computed
    in place with the reference's operations (scale, mask, subtract the row maximum, exp, divide
    by the row sum), so the same bits; the items are split across interpreter threads. Anything
    else runs the reference."""
    a = opset.attrs_of(node.op, node.attrs)

    def run(xs: Arrays) -> Any:
        if len(xs) not in (3, 4) or a["is_causal"]:
            return fallback(xs)
        q, k, v = xs[:3]
        mask = xs[3] if len(xs) == 4 else None
        if (q.dtype != _F32 or k.dtype != _F32 or v.dtype != _F32 or q.ndim < 3 or not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
                or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or not _item_mask_fits(mask, q.shape[:-1] + (k.shape[-2],))):
            return fallback(xs)
        if mask is not None:
            mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)  # one leading axis per q axis
        scale = np.float32(a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1]))
        out = np.empty(q.shape[:-1] + (v.shape[-1],), _F32)

        # Items: batch entries, or (batch, head) pairs where the batch alone is too short to split.
        depth = 2 if q.shape[0] < cpu_threads.current() and q.ndim >= 4 else 1
        heads = q.shape[1] if depth == 2 else 1

        # Batch entries in groups of about _ATTENTION_GROUP score elements: BERT-tiny's items (2
        # heads of 128x128) are small enough that one ufunc call per item cost more in calls
        # (and GIL hand-offs on several threads) than the group's scores cost in cache.
        per_item = math.prod(q.shape[depth:-1]) * k.shape[-2]
        group = max(1, _ATTENTION_GROUP // max(1, per_item)) if depth == 1 else 1
        whole = slice(0, 1) if depth == 1 else 0  # a mask axis of length 1: broadcast over the group's (or taken at the pair's) index

        def part(lo: int, hi: int) -> None:
            for j in range(lo, hi, group):
                i: tuple[Any, ...] = divmod(j, heads) if depth == 2 else (slice(j, min(hi, j + group)),)
                scores = np.matmul(q[i], np.swapaxes(k[i], -1, -2))
                scores *= scale
                if mask is not None:
                    item = mask[tuple(whole if mask.shape[d] == 1 else i[d] for d in range(depth))]
                    if item.dtype == np.bool_:
                        np.copyto(scores, np.float32(-np.inf), where=~item)
                    else:
                        scores += item.astype(_F32, copy=False)
                np.subtract(scores, scores.max(axis=-1, keepdims=True), out=scores)
                np.exp(scores, out=scores)
                scores /= scores.sum(axis=-1, keepdims=True)
                np.matmul(scores, v[i], out=out[i])

        # Shards of at least _SPLIT_MIN score elements: at batch 1 a ViT's or BERT's heads are too
        # small to split (measured: the hand-offs made threads=2 slower than 1 there).
        cpu_threads.split(q.shape[0] * heads, part, min_items=max(1, -(-_SPLIT_MIN // max(1, per_item))))
        return out

    return run


#: Score elements per group of attention items (512 KB of float32: in L2 with its mask).
_ATTENTION_GROUP: Final = 131072


def _item_mask_fits(mask: Any, scores: tuple[int, ...]) -> bool:
    """A mask the per-item loop applies as the reference does: none, or a bool / float array that
    broadcasts to the scores without growing them."""
    if mask is None:
        return True
    if not isinstance(mask, np.ndarray) or mask.dtype.kind not in "bf" or mask.ndim > len(scores):
        return False
    try:
        return np.broadcast_shapes(mask.shape, scores) == scores
    except ValueError:
        return False


def _transpose_step(node: Node, fallback: StepFn) -> StepFn:
    """transpose (a contiguous copy, as the reference makes) with interpreter threads: the copy in
    shards of the output's first axis longer than 1 (attention's head splits and merges)."""
    perm_attr = opset.attrs_of(node.op, node.attrs)["perm"]

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if cpu_threads.current() == 1 or not isinstance(x, np.ndarray) or x.size < 2 * _SPLIT_MIN:
            return fallback(xs)
        if perm_attr is not None and any(not -x.ndim <= int(p) < x.ndim for p in perm_attr):
            return fallback(xs)  # the reference words the error
        perm = tuple(reversed(range(x.ndim))) if perm_attr is None else tuple(int(p) % x.ndim for p in perm_attr)
        if sorted(perm) != list(range(x.ndim)):
            return fallback(xs)
        view = x.transpose(perm)
        out = np.empty(view.shape, x.dtype)
        axis = next(k for k, d in enumerate(view.shape) if d > 1)
        inner = out.size // view.shape[axis]

        def part(lo: int, hi: int) -> None:
            at = (slice(None),) * axis + (slice(lo, hi),)
            np.copyto(out[at], view[at])

        cpu_threads.split(view.shape[axis], part, min_items=max(1, _SPLIT_MIN // inner))
        return out

    return run


def _max_pool_step(node: Node, fallback: StepFn) -> StepFn:
    """max_pool2d on float32: the reference's running maximum over strided taps, in shards of
    samples (or of channels, with fewer samples than threads) written into one output."""
    a = opset.attrs_of(node.op, node.attrs)
    k = K._pair(a["kernel_size"])
    s = k if a["stride"] is None else K._pair(a["stride"])
    pad = K._pair(a["padding"])

    def run(xs: Arrays) -> Any:
        x = xs[0]
        if x.dtype != _F32 or x.ndim != 4 or cpu_threads.current() == 1:
            return fallback(xs)
        xp = K._pad(x, pad, -np.inf)
        if xp.shape[2] < k[0] or xp.shape[3] < k[1]:
            return fallback(xs)  # the reference words the error
        size = ((xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1)
        out = np.empty(x.shape[:2] + size, _F32)
        by_sample = x.shape[0] >= cpu_threads.current()

        def part(lo: int, hi: int) -> None:
            src, dst = (xp[lo:hi], out[lo:hi]) if by_sample else (xp[:, lo:hi], out[:, lo:hi])
            np.copyto(dst, K._tap(src, 0, 0, size, s))
            for t in range(1, k[0] * k[1]):
                np.maximum(dst, K._tap(src, *divmod(t, k[1]), size, s), out=dst)

        cpu_threads.split(x.shape[0] if by_sample else x.shape[1], part)
        return out

    return run


def _sharded_flat(x: np.ndarray, kernel: Callable[[np.ndarray, np.ndarray], Any]) -> np.ndarray:
    """``kernel(src, dst)`` (elementwise) over float32 ``x`` flattened, into a fresh array of its
    shape: in shards of at least :data:`_SPLIT_MIN` elements across the interpreter's threads."""
    if not (x.flags.c_contiguous or x.flags.f_contiguous or _dense(x)):
        x = np.ascontiguousarray(x)
    out = np.empty_like(x)  # a dense input's layout (a channels-last view stays one): memory order on both sides
    flat, dst = x.ravel(order="K"), out.ravel(order="K")
    cpu_threads.split(flat.size, lambda lo, hi: kernel(flat[lo:hi], dst[lo:hi]), min_items=_SPLIT_MIN)
    return out


def _dense(x: np.ndarray) -> bool:
    """Whether ``x`` fills its memory without gaps in some axis order (a transposed contiguous array)."""
    order = sorted(range(x.ndim), key=lambda k: x.strides[k])
    size = x.itemsize
    for k in order:
        if x.shape[k] != 1 and x.strides[k] != size:
            return False
        size *= x.shape[k]
    return True


# ----------------------------------------------------------------------------- inputs and shapes
def input_array(x: Any, dtype: str, float_dtype: Any) -> Any:
    """A graph input as the interpreter holds it: a host array in the declared dtype (floats in
    ``float_dtype`` when given), a sequence as a list of arrays, an empty optional as None."""
    if dtype in VALUE_KINDS:  # a sequence (list of arrays) or optional (array or None)
        return x if x is None else [np.asarray(v) for v in x] if isinstance(x, (list, tuple)) else np.asarray(x)
    arr = np.asarray(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x)
    if dtype.startswith(("float", "bfloat")) and float_dtype is not None:
        return arr.astype(float_dtype, copy=False)
    return arr.astype(opset._np_dtype(dtype), copy=False)


def _shapes(graph: Graph, inputs: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
    return tuple(() if s.dtype in VALUE_KINDS else tuple(np.shape(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x))
                 for s, x in zip(graph.inputs, inputs))


def specialized(graph: Graph, inputs: Sequence[Any]) -> Graph:
    """A graph with dynamic input axes at these inputs' shapes: SymDims resolved and the
    constants they built folded (what nx.compile lowers; the same value names)."""
    if not graph.dynamic:
        return graph
    from neurenix_core.graph.ir.specialize import fold_size_constants  # what nx.compile runs: same value names

    return fold_size_constants(graph.with_input_shapes(*_shapes(graph, inputs)))


# ----------------------------------------------------------------------------- the plan
def _readers(graph: Graph) -> dict[str, int]:
    """How many times each value is read (a graph output counts as a reader)."""
    count: dict[str, int] = {}
    for node in graph.nodes:
        for i in node.inputs:
            count[i] = count.get(i, 0) + 1
    for o in graph.outputs:
        count[o] = count.get(o, 0) + 1
    return count


def _fusible_tail(graph: Graph, by_input: Mapping[str, Node], readers: Mapping[str, int], value: str, op: str) -> Node | None:
    """The node of kind ``op`` that is the only reader of ``value``, else None."""
    node = by_input.get(value)
    return node if node is not None and node.op == op and readers.get(value) == 1 and node.inputs == (value,) else None


def _feeds_channels_last_depthwise(graph: Graph, by_input: Mapping[str, Node], readers: Mapping[str, int], value: str) -> bool:
    """Whether ``value``'s only reader is a convolution that runs channels-last (depthwise, float
    weights, 64+ channels): then its producer writes channels-last and no layout copy happens."""
    node = _fusible_tail(graph, by_input, readers, value, "conv2d")
    if node is None or not _plain_weights(node, "weight"):
        return False
    w = node.params["weight"]
    groups = int(opset.attrs_of(node.op, node.attrs)["groups"])
    return bool(w.ndim == 4 and w.shape[1] == 1 and groups == w.shape[0] >= K._DEPTHWISE_NHWC_MIN_CHANNELS and w.shape[2:] != (1, 1))


def _plain_weights(node: Node, *names: str) -> bool:
    return all(isinstance(node.params.get(k), np.ndarray) and node.params[k].dtype.kind == "f" for k in names)


@dataclass(frozen=True, slots=True)
class Plan:
    """A static graph ready to run: steps over numbered value slots."""

    graph: Graph
    steps: tuple[_Step, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    slots: int

    def run(self, inputs: Sequence[Any], threads: int | None = None) -> Any:
        """The outputs for ``inputs``; ``threads`` as :func:`cpu_threads.using` takes it."""
        if threads is None:
            return self._run(inputs)
        with cpu_threads.using(threads):
            return self._run(inputs)

    def _run(self, inputs: Sequence[Any]) -> Any:
        env: list[Any] = [None] * self.slots
        for slot, spec, x in zip(self.inputs, self.graph.inputs, inputs):
            env[slot] = input_array(x, spec.dtype, None)
        step = None
        try:
            for step in self.steps:
                env[step.out] = step.fn([env[i] for i in step.ins])
                for f in step.free:
                    env[f] = None
        except ValueError as exc:
            assert step is not None
            first = step.nodes[0]
            xs = [env[i] for i in step.ins]
            shapes = [f"sequence of {len(a)}" if isinstance(a, list) else tuple(np.shape(a)) for a in xs]
            raise ShapeError(f"layer {first.name!r} ({first.op}) cannot take input shape(s) {shapes}: {exc}") from exc
        outs = tuple(env[o] for o in self.outputs)
        return outs[0] if len(outs) == 1 else outs


def _fused(node: Node, graph: Graph, by_input: Mapping[str, Node], readers: Mapping[str, int]) -> tuple[StepFn, tuple[Node, ...]]:
    """The step computing ``node`` (and the readers it absorbs), with the nodes it covers."""
    plain = _generic(node)
    if node.op == "conv2d" and _plain_weights(node, "weight"):
        nodes = [node]
        bn = _fusible_tail(graph, by_input, readers, node.output, "batch_norm2d")
        if bn is not None and _plain_weights(bn, "running_mean", "running_var"):
            nodes.append(bn)
        act = (_fusible_tail(graph, by_input, readers, nodes[-1].output, "relu")
               or _fusible_tail(graph, by_input, readers, nodes[-1].output, "hardswish"))
        if act is not None:
            nodes.append(act)
        channels_last = _feeds_channels_last_depthwise(graph, by_input, readers, nodes[-1].output)
        return _conv_step(node, bn if len(nodes) > 1 and nodes[1] is bn else None, None if act is None else act.op,
                          _chain([_generic(n) for n in nodes]), channels_last), tuple(nodes)
    if node.op == "linear" and _plain_weights(node, "weight"):
        return _linear_step(node, plain), (node,)
    if node.op == "batch_norm2d" and _plain_weights(node, "running_mean", "running_var"):
        return _bn_step(node, plain), (node,)
    if node.op == "gelu":
        return _gelu_step(node, plain), (node,)
    if node.op == "softmax":
        return _softmax_step(node, plain), (node,)
    if node.op == "layer_norm" and not any(isinstance(v, list) for v in node.params.values()):
        return _layer_norm_step(node, plain), (node,)
    if node.op == "relu":
        return _relu_step(plain), (node,)
    if node.op == "hardswish":
        return _hardswish_step(plain), (node,)
    if node.op in _BINARY and len(node.inputs) == 2:
        return _binary_step(node, plain), (node,)
    if node.op == "matmul" and len(node.inputs) == 2:
        return _matmul_step(plain), (node,)
    if node.op == "max_pool2d":
        return _max_pool_step(node, plain), (node,)
    if node.op == "transpose" and len(node.inputs) == 1:
        return _transpose_step(node, plain), (node,)
    if node.op == "scaled_dot_product_attention":
        return _sdpa_step(node, plain), (node,)
    return plain, (node,)


def build_plan(graph: Graph) -> Plan:
    """Plan a static graph: one step per node or fused group, each value a numbered slot."""
    slot: dict[str, int] = {}

    def at(name: str) -> int:
        return slot.setdefault(name, len(slot))

    inputs = tuple(at(s.name) for s in graph.inputs)
    readers = _readers(graph)
    by_input: dict[str, Node] = {}
    for node in graph.nodes:
        for i in node.inputs:
            by_input.setdefault(i, node)  # with one reader (all fusion asks for) this is that reader
    absorbed: set[int] = set()
    raw: list[tuple[StepFn, tuple[Node, ...]]] = []
    for node in graph.nodes:
        if id(node) in absorbed:
            continue
        fn, covered = _fused(node, graph, by_input, readers)
        absorbed.update(id(n) for n in covered[1:])
        raw.append((fn, covered))
    # Liveness: a value dies after the last step that reads it, unless the graph returns it.
    last: dict[str, int] = {}
    for k, (_, covered) in enumerate(raw):
        for i in covered[0].inputs:
            last[i] = k
    keep = set(graph.outputs)
    dying: dict[int, list[str]] = {}
    for name, k in last.items():
        if name not in keep:
            dying.setdefault(k, []).append(name)
    steps = tuple(_Step(fn, tuple(at(i) for i in covered[0].inputs), at(covered[-1].output),
                        tuple(slot[n] for n in dying.get(k, ()) if n != covered[-1].output), covered)
                  for k, (fn, covered) in enumerate(raw))
    return Plan(graph, steps, inputs, tuple(at(o) for o in graph.outputs), len(slot))


# ----------------------------------------------------------------------------- the cache
_lock = threading.Lock()
#: id(graph) -> (graph, {input shapes: plan}); the graph is held so its id is never reused while cached.
_plans: OrderedDict[int, tuple[Graph, dict[tuple[Any, ...], Plan]]] = OrderedDict()


def plan_for(graph: Graph, inputs: Sequence[Any]) -> Plan:
    """The plan of ``graph`` at these inputs' shapes (a dynamic graph is specialized per shape
    first, as ``run_graph`` does), built on first use and kept for the next call."""
    key = _shapes(graph, inputs) if graph.dynamic else ()
    with _lock:
        entry = _plans.get(id(graph))
        if entry is not None and entry[0] is graph:
            _plans.move_to_end(id(graph))
            plan = entry[1].get(key)
            if plan is not None:
                return plan
    plan = build_plan(specialized(graph, inputs))
    with _lock:
        entry = _plans.get(id(graph))
        if entry is None or entry[0] is not graph:
            entry = (graph, {})
            _plans[id(graph)] = entry
        if len(entry[1]) >= _SHAPES_PER_GRAPH:  # a model called at ever new shapes: keep the recent ones only
            entry[1].pop(next(iter(entry[1])))
        entry[1][key] = plan
        while len(_plans) > _CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


def forget(graph: Graph) -> None:
    """Drop ``graph``'s cached plans (they hold its weights): for a graph run once, such as the
    dequantized copy a compile measures host runtimes against."""
    with _lock:
        entry = _plans.get(id(graph))
        if entry is not None and entry[0] is graph:
            del _plans[id(graph)]


def run_planned(graph: Graph, inputs: Sequence[Any], threads: int | None = None) -> Any:
    """``run_graph(graph, *inputs, float_dtype=None)`` through the cached plan, its steps split
    across ``threads`` cores (None: as the process is set up; see ``backends/cpu_threads.py``)."""
    return plan_for(graph, inputs).run(inputs, threads)
