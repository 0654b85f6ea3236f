"""The ground truth: a float64 NumPy interpreter for graphs, and the integer reference.

``run_graph(graph, *inputs)`` evaluates every node in float64 with the CPU kernels of
``backends/cpu_nn.py``; every plugin's tests compare against it. With ``plan=`` it simulates a
quantized model (fake quantization of weights and activations). ``run_quantized(graph, plan,
*inputs)`` runs the integer arithmetic a TFLite int8 / 16x8 runtime performs, bit for bit, for
linear, conv2d (fused ReLU), relu, pooling, spatial means (TFLite's MEAN, requantized to the
output's own parameters) and reshapes; other ops run dequantize -> float64 ->
quantize, as a runtime without an integer kernel for them would. A linear / conv2d whose output
a mixed plan leaves in float accumulates in integers and dequantizes the accumulator
(``qmath.FLOAT_OUTPUT_OPS``).

How the integer reference computes (the integers are those of the plain int64 arithmetic it
replaced; tests/test_integer_kernels_fast.py keeps that and compares): each layer is prepared
once (integer weights, folded bias, multipliers: ``_Layer``, cached); its products are float
GEMMs on the integers, exact by construction (float32 over depth chunks whose partial sums stay
below 2**24, else float64), an output block at a time, requantized in cache and split across
threads; elementwise ops between quantized values use tables of their own float path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

import numpy as np

from neurenix_core.backends import cpu_nn as K
from neurenix_core.backends import cpu_threads
from neurenix_core.errors import ShapeError
from neurenix_core.graph import opset
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams
from neurenix_core.graph.ir import qmath as Q
from neurenix_core.graph.reference.interpreter import input_array as _input_array
from neurenix_core.graph.reference.interpreter import run_planned, specialized

__all__ = ["eval_node", "run_graph", "run_quantized", "specialized"]

Arrays = list[np.ndarray]


def _flatten(n: Node, x: Arrays, p: Mapping[str, np.ndarray]) -> np.ndarray:
    return opset.evaluate("flatten", n.attrs, x, p)


def eval_node(node: Node, inputs: Arrays, params: Mapping[str, np.ndarray] | None = None, *, float_dtype: Any = np.float64) -> np.ndarray:
    """One node with the opset's reference semantics: floats in ``float_dtype`` (float64 for the
    reference), integers and bools as they are; ``float_dtype=None`` keeps every value's own
    dtype (the CPU backend: a float16 or float64 model computes in its dtype). ``params``
    overrides the node's own (e.g. fake-quantized weights)."""
    def cast(a: Any) -> Any:
        if a is None or isinstance(a, list):  # an empty optional, a sequence (its tensors one by one)
            return a if a is None else [cast(v) for v in a]
        arr = np.asarray(a)
        return arr.astype(float_dtype, copy=False) if float_dtype is not None and arr.dtype.kind == "f" else arr

    given = node.params if params is None else params
    # An embedding only picks rows of its table: looked up in the table's own dtype, its rows cast
    # below are the same numbers, without converting the whole table on every call (BERT-tiny's
    # 30,522 x 128 words: 31 MB of float64 a call, a sixth of its integer reference's time).
    p = {k: (v if node.op == "embedding" else cast(v)) for k, v in given.items() if v is not None}
    try:
        out = opset.evaluate(node.op, node.attrs, [cast(a) for a in inputs], p)
    except ValueError as exc:
        shapes = [f"sequence of {len(a)}" if isinstance(a, list) else tuple(np.shape(a)) for a in inputs]
        raise ShapeError(f"layer {node.name!r} ({node.op}) cannot take input shape(s) {shapes}: {exc}") from exc
    if out is None or isinstance(out, list):
        return out if float_dtype is None else cast(out)
    return out.astype(float_dtype, copy=False) if float_dtype is not None and out.dtype.kind == "f" else out


def _check_inputs(graph: Graph, inputs: tuple[Any, ...]) -> None:
    if len(inputs) != len(graph.inputs):
        raise ShapeError(f"the graph takes {len(graph.inputs)} input(s) ({[s.name for s in graph.inputs]}), got {len(inputs)}")


def _fq_params(node: Node, plan: QuantizationPlan) -> Mapping[str, np.ndarray] | None:
    qp = plan.weights.get(node.name)
    if qp is None or "weight" not in node.params:  # matmul/gemm: the weight is input 1 (run_graph)
        return None
    return dict(node.params) | {"weight": Q.fake_quantize(np.asarray(node.params["weight"]), qp)}


def run_graph(graph: Graph, *inputs: Any, plan: QuantizationPlan | None = None, return_values: bool = False,
              float_dtype: Any = np.float64) -> Any:
    """Evaluate ``graph`` with the opset's semantics, floats in ``float_dtype`` (float64: the
    reference; None: every value in the dtype the graph declares, as the CPU backend runs it). Returns the output (a tuple for several
    outputs), or every value by name with ``return_values=True``. With ``plan`` (static), weights
    and activations are fake-quantized as an integer runtime would represent them."""
    _check_inputs(graph, inputs)
    if float_dtype is None and plan is None and not return_values:
        # The CPU backend's path: planned once per graph (attributes, weights, fusion), then run.
        return run_planned(graph, inputs)
    graph = specialized(graph, inputs)
    values: dict[str, np.ndarray] = {}
    quantized = plan is not None and not plan.dynamic
    for spec, x in zip(graph.inputs, inputs):
        arr = _input_array(x, spec.dtype, float_dtype)
        values[spec.name] = Q.fake_quantize(arr, plan.activations[spec.name]) if quantized and spec.name in plan.activations else arr  # type: ignore[union-attr]
    for node in graph.nodes:
        xs = [values[i] for i in node.inputs]
        if quantized and node.op in ("matmul", "gemm") and node.name in plan.weights:  # type: ignore[union-attr]
            xs[1] = Q.fake_quantize(xs[1], plan.weights[node.name])  # type: ignore[union-attr]
        out = eval_node(node, xs, None if plan is None else _fq_params(node, plan), float_dtype=float_dtype)
        if quantized and node.output in plan.activations:  # type: ignore[union-attr]
            out = Q.fake_quantize(out, plan.activations[node.output])  # type: ignore[union-attr]
        values[node.output] = out
    if return_values:
        return values
    outs = tuple(values[o] for o in graph.outputs)
    return outs[0] if len(outs) == 1 else outs


# ----------------------------------------------------------------------------- integer reference
def _zp(qp: QuantParams) -> int:
    return int(np.asarray(qp.zero_point).ravel()[0])


def _s(qp: QuantParams) -> np.float64:
    return np.float64(np.asarray(qp.scale, np.float32).ravel()[0])


# Prepared layers. A linear / conv2d / constant-weight matmul needs, every call, its integer
# weight, its int32 bias and its per-channel requantization multipliers: all functions of the
# float weights and the plan alone. They are computed once and kept here, keyed by the identity
# of the arrays and parameter objects they come from (held by the entry, so no id is reused while
# cached; a graph's weights are not mutated in place after compile, as the float interpreter's
# pre-cast plans assume too). Held per layer: the weight as float32 integers (4 bytes per weight;
# float64 where float32 could not sum it exactly), int64 vectors per output channel. The cache is
# bounded by those bytes, least recently used out first: a model larger than the bound prepares
# its layers on every call, as every call did before the cache.
_CACHE_BYTES: Final = 1 << 30
#: Accumulator elements per block: a layer's output is computed and requantized a block at a
#: time, so the int64 passes of the output stage run in cache (about 1.7x faster per element
#: than over a whole MobileNet-sized activation).
_BLOCK: Final = 32768
#: Depth chunks (float32 GEMMs per block) at most before a layer multiplies in float64 instead.
_MAX_CHUNKS: Final = 8


@dataclass(frozen=True, slots=True)
class _Layer:
    """One layer's per-call constants.

    ``weight``: integers in float32 or float64, as BLAS multiplies them: ``(O, K)`` for a GEMM
    (conv2d: ``K = C/groups * kh * kw`` in im2col order; linear / matmul: ``K`` inputs), or the
    taps ``(kh * kw, C)`` of a depthwise conv2d. ``chunks``: depth ranges whose partial sums are
    exact in ``weight.dtype`` (``Q.FLOAT32_EXACT``; one range in float64); empty where even
    float64 is not exact (the int64 kernels run). ``bias``: ``bias_q - zp_in * sum_k w_q`` (int64,
    per channel): the input's zero point folded in, so the GEMM multiplies the raw integers
    (``|q| <= 128`` for int8, half of ``|q - zp|``'s 255) and padding is with ``zp_in``.
    ``stage``: the output stage; ``check``: whether an int32 accumulator could overflow (8-bit
    inputs whose ``max |q - zp| * sum |w| + |bias|`` reaches 2**31: checked on each block).
    ``dtype``: the input integer type it was prepared for. ``folded``: the bias folded into the
    output stage's multiply (``Q.fold_bias``), or None (added to the accumulators first)."""

    kind: str  # "gemm", "depthwise", "grouped", "dynamic"
    weight: np.ndarray
    chunks: tuple[tuple[int, int], ...]
    bias: np.ndarray
    stage: Q.OutputStage | None
    check: bool
    dtype: np.dtype[Any]
    folded: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return int(self.weight.nbytes + self.bias.nbytes + (0 if self.stage is None else 4 * self.stage.mult.nbytes))


_lock = threading.Lock()
#: (kind, ids of the source objects) -> (the source objects, the layer or table); LRU order.
_layers: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = OrderedDict()
_held = [0]  # bytes held by _layers
_T = TypeVar("_T", _Layer, np.ndarray)


def _prepared(kind: Hashable, sources: tuple[Any, ...], make: Callable[[], _T]) -> _T:
    """What ``make`` builds from ``sources`` (arrays and parameter objects, compared by identity)
    for a layer or table of this ``kind`` (hashable), cached."""
    ident = (kind, *(id(k) for k in sources))
    with _lock:
        hit = _layers.get(ident)
        if hit is not None and all(a is b for a, b in zip(hit[0], sources)):
            _layers.move_to_end(ident)
            found: _T = hit[1]
            return found
    made = make()
    if made.nbytes > _CACHE_BYTES:
        return made
    with _lock:
        old = _layers.pop(ident, None)
        _held[0] -= 0 if old is None else int(old[1].nbytes)
        _layers[ident] = (sources, made)
        _held[0] += int(made.nbytes)
        while _held[0] > _CACHE_BYTES:
            _held[0] -= int(_layers.popitem(last=False)[1][1].nbytes)
    return made


def clear_prepared() -> None:
    """Drop every prepared layer and elementwise table."""
    with _lock:
        _layers.clear()
        _held[0] = 0


def _raw_bound(dtype: np.dtype[Any], zp: int) -> int:
    """The largest ``|q|`` the GEMM multiplies: any value of ``dtype``, or the zero point it pads with."""
    info = np.iinfo(dtype)
    return max(-int(info.min), int(info.max), abs(zp))


def _chunks(w: np.ndarray, xmax: int, limit: int, most: int) -> tuple[tuple[int, int], ...]:
    """At most ``most`` consecutive depth ranges of ``w`` ((O, K) integers) over which every
    output channel's ``xmax * sum |w|`` stays within ``limit``, so that each range's dot
    products are exact (see ``Q.FLOAT64_EXACT``); empty when more would be needed (or a single
    term exceeds it). Running sums are taken over blocks of channels (memory: a few MB)."""
    o, k = w.shape
    rows = max(1, (1 << 19) // max(1, k))
    out: list[tuple[int, int]] = []
    k0 = 0
    while k0 < k:
        if len(out) == most:
            return ()
        widest = np.zeros(k - k0, np.int64)  # max over channels of sum |w[c, k0:k0 + j + 1]|
        for c0 in range(0, o, rows):
            np.maximum(widest, np.cumsum(np.absolute(w[c0:c0 + rows, k0:], dtype=np.int64), axis=1).max(axis=0), out=widest)
        fits = widest * xmax <= limit  # non-increasing: the first False ends the range
        n = k - k0 if fits.all() else int(np.argmin(fits))
        if n == 0:
            return ()
        out.append((k0, k0 + n))
        k0 += n
    return tuple(out)


def _gemm_dtype(w: np.ndarray, xmax: int) -> tuple[Any, tuple[tuple[int, int], ...]]:
    """float32 with its depth chunks when a few suffice, else float64 (one chunk), else no
    exact float type (empty chunks: the int64 kernels run)."""
    chunks = _chunks(w, xmax, Q.FLOAT32_EXACT, _MAX_CHUNKS)
    return (np.float32, chunks) if chunks else (np.float64, _chunks(w, xmax, Q.FLOAT64_EXACT, 1))


def _make_layer(kind: str, wq: np.ndarray, bias_q: np.ndarray, in_qp: QuantParams, wqp: QuantParams,
                out_qp: QuantParams) -> _Layer:
    """A layer from its integer weight ``wq`` (``(O, ...)``, output channels first) and bias."""
    o = wq.shape[0]
    w2 = wq.reshape(o, -1)
    zp, dtype = _zp(in_qp), in_qp.dtype
    abs_sum = np.absolute(w2, dtype=np.int64).sum(axis=1)  # (in int64: an int8 -128 has no int8 absolute value)
    bias_q = bias_q.astype(np.int64)
    bias = bias_q - zp * w2.sum(axis=1, dtype=np.int64)  # conv(q - zp) + b == conv(q padded with zp) + b - zp * sum(w)
    # |acc| <= max|q - zp| * sum|w| + |bias_q| for every output: the int32 check and the output stage's bound
    bound = int((Q.centered_bound(dtype, zp) * abs_sum + np.abs(bias_q)).max(initial=0))
    wide = in_qp.bits == 16
    mult, shift = Q.quantize_multiplier(_s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64) / _s(out_qp))
    xmax = _raw_bound(dtype, zp)
    shape: tuple[int, ...]  # how the output stage's per-channel vectors lie in the blocks
    if kind == "depthwise":  # one sum of kh*kw taps per channel, accumulated tap by tap: taps (kh*kw, C), channels last
        ftype, chunks = _gemm_dtype(abs_sum.reshape(-1, 1), xmax)
        weight, shape = np.ascontiguousarray(w2.T).astype(ftype), (-1,)
        chunks = ((0, weight.shape[0]),) if chunks else ()
    elif kind == "grouped":  # K.conv2d_nobias's stacked float64 matmul: exact while one chunk covers all
        ftype, chunks = np.float64, _chunks(w2, xmax, Q.FLOAT64_EXACT, 1)
        weight, shape = wq.astype(np.float64), (1, -1, 1, 1)
    else:
        ftype, chunks = _gemm_dtype(w2, xmax)
        weight, shape = w2.astype(ftype), (-1, 1)
    stage = Q.output_stage(mult, shift, out_qp, wide, shape, bound)
    check = not wide and bound > np.iinfo(np.int32).max
    folded = None if check else Q.fold_bias(stage, bias, int(xmax * abs_sum.max(initial=0)))  # |GEMM| <= xmax * sum|w|
    return _Layer(kind, weight, chunks, bias, stage, check, dtype, folded)


def _layer_of(node: Node, in_qp: QuantParams, out_qp: QuantParams, plan: QuantizationPlan, groups: int) -> _Layer:
    """A linear / conv2d node's prepared layer."""
    wqp = plan.weights[node.name]
    weight, bias = node.params["weight"], node.params.get("bias")
    w_shape = np.shape(weight)
    if node.op == "linear" or groups == 1:
        kind = "gemm"
    else:
        kind = "depthwise" if w_shape[1] == 1 and groups == w_shape[0] else "grouped"

    def make() -> _Layer:
        wq = Q.quantize_weight(np.asarray(weight), wqp)
        bq = Q.quantize_bias(bias, in_qp, wqp, wq.shape[0])
        return _make_layer(kind, wq, bq, in_qp, wqp, out_qp)

    return _prepared(kind, (weight, bias, wqp, in_qp, out_qp), make)


def _check_block(node: Node, acc: np.ndarray) -> None:
    if acc.size and (int(acc.min()) < np.iinfo(np.int32).min or int(acc.max()) > np.iinfo(np.int32).max):
        raise OverflowError(f"layer {node.name!r}: int32 accumulator overflow")


def _exact_gemm(layer: _Layer, cols: np.ndarray, c0: int, c1: int) -> np.ndarray:
    """``layer.weight[c0:c1] @ cols`` (cols ``(K, B)`` in the weight's float type), exact: one
    GEMM per depth chunk, their sum in float64 (exact: far below 2**53)."""
    w = layer.weight[c0:c1]
    if len(layer.chunks) == 1:
        return w @ cols
    acc = np.zeros((w.shape[0], cols.shape[1]), np.float64)
    for k0, k1 in layer.chunks:
        acc += w[:, k0:k1] @ cols[k0:k1]
    return acc


#: ``columns(sample, first, stop)``: the im2col columns ``(K, stop - first)`` of these output
#: positions of one sample.
Columns = Callable[[int, int, int], np.ndarray]
#: Output channels per shard at least, where a layer's channels are split across threads.
_MIN_SHARD_CHANNELS: Final = 16
#: Multiply-accumulates a thread's shard of a GEMM layer holds at least.
_MIN_SHARD_MACS: Final = 1 << 24


def _gemm_blocks(node: Node, layer: _Layer, out: np.ndarray, columns: Columns, unit: int = 1) -> None:
    """``out`` ((N, O, P) integers, any view) = requantize(weight @ columns + bias), a block of
    output positions (a multiple of ``unit``: whole output rows of a convolution) at a time:
    its columns, GEMM, bias and output stage run while they are in cache. The blocks are split
    across the run's threads, and a layer with fewer blocks than threads (a deep layer's few
    positions) splits its output channels too: every GEMM runs on one BLAS thread."""
    n, o, p = out.shape
    # at least 64 positions: a GEMM per few columns would read a wide layer's weights once per block
    width = min(p, max(unit * max(1, 64 // unit), cpu_threads.block(_BLOCK, n * o * p) // max(1, o) // unit * unit))
    per = -(-p // width)
    # Threads worth their start: a shard of at least _MIN_SHARD_MACS. Split thinner, the shards'
    # Python steps contend for the interpreter lock (BERT-tiny's 128-wide layers ran slower on
    # two threads than on one).
    threads = min(cpu_threads.current(), max(1, n * o * p * int(layer.weight.shape[1]) // _MIN_SHARD_MACS))
    groups = max(1, min(-(-threads // (n * per)), o // _MIN_SHARD_CHANNELS))
    rows = -(-o // groups)

    def run(first: int, last: int) -> None:
        scratch = np.empty((min(rows, o), width), np.int64)
        for b in range(first, last):
            g, at = divmod(b, n * per)
            i, p0 = divmod(at, per)
            c0, c1, p0 = g * rows, min(o, g * rows + rows), p0 * width
            p1 = min(p, p0 + width)
            acc = scratch[: c1 - c0, : p1 - p0]
            np.copyto(acc, _exact_gemm(layer, columns(i, p0, p1), c0, c1), casting="unsafe")  # integers: exact
            _finish_block(node, layer, acc, out[i, c0:c1, p0:p1], (c0, c1))

    cpu_threads.split(n * per * groups, run, -(-(n * per * groups) // threads))


def _finish_block(node: Node, layer: _Layer, acc: np.ndarray, out: np.ndarray, channels: tuple[int, int] | None = None) -> None:
    """The bias (folded into the output stage where it can be), the int32 check where an
    overflow is possible, and the output stage of one block (of these output ``channels``
    of a GEMM layer, whose per-channel vectors are ``(O, 1)``; all of them by default)."""
    assert layer.stage is not None
    stage, bias, folded = layer.stage, layer.bias.reshape(layer.stage.mult.shape), layer.folded
    if channels is not None and channels != (0, layer.bias.shape[0]):
        stage, bias, folded = _channel_rows(stage, *channels), bias[channels[0]:channels[1]], (
            None if folded is None else folded[channels[0]:channels[1]])
    if folded is not None:
        Q.apply_output_stage(stage, acc, out, folded)
        return
    acc += bias
    if layer.check:
        _check_block(node, acc)
    Q.apply_output_stage(stage, acc, out)


def _channel_rows(stage: Q.OutputStage, c0: int, c1: int) -> Q.OutputStage:
    """``stage`` for output channels ``c0:c1`` of its first axis."""
    def rows(v: np.ndarray | None) -> np.ndarray | None:
        return None if v is None else v[c0:c1]

    return replace(stage, mult=stage.mult[c0:c1], shift=stage.shift[c0:c1], left=rows(stage.left), right=stage.right[c0:c1],
                   half=stage.half[c0:c1], offset=stage.offset[c0:c1], rounds=rows(stage.rounds), offset32=rows(stage.offset32),
                   right32=rows(stage.right32))


def _padded(xq: np.ndarray, pad: tuple[int, int], value: int, dtype: Any, channels_last: bool = False) -> np.ndarray:
    """``xq`` (NCHW integers) in the float ``dtype`` (exact), padded on H and W with ``value``
    (the input zero point: TFLite's padding); NHWC with ``channels_last``."""
    if not channels_last and pad == (0, 0):
        return xq.astype(dtype)  # keeps the layout (an NCHW view of channels-last memory stays one)
    n, c, h, w = xq.shape
    ph, pw = pad
    shape = (n, h + 2 * ph, w + 2 * pw, c) if channels_last else (n, c, h + 2 * ph, w + 2 * pw)
    out = np.empty(shape, dtype)
    hw = (1, 2) if channels_last else (2, 3)
    inner = [slice(None)] * 4
    inner[hw[0]], inner[hw[1]] = slice(ph, ph + h), slice(pw, pw + w)
    for axis, p, size in ((hw[0], ph, h), (hw[1], pw, w)):
        if p:
            edge = [slice(None)] * 4
            edge[axis] = slice(0, p)
            out[tuple(edge)] = value
            edge[axis] = slice(p + size, None)
            out[tuple(edge)] = value
    np.copyto(out[tuple(inner)], xq.transpose(0, 2, 3, 1) if channels_last else xq)
    return out


def _out_size(size: int, k: int, stride: int, dilation: int) -> int:
    return (size - dilation * (k - 1) - 1) // stride + 1


def _conv_gemm(node: Node, xq: np.ndarray, layer: _Layer, a: Mapping[str, Any], zp: int, out_dtype: Any) -> np.ndarray:
    """An ungrouped conv2d: im2col of a block of output rows, then one GEMM (per depth chunk),
    per block (``_gemm_blocks``); a 1x1 kernel at stride 1 reads its input as the columns."""
    o, kh, kw = layer.weight.shape[0], *np.shape(node.params["weight"])[2:]
    (sh, sw), (dh, dw), pad = _pair(a["stride"]), _pair(a["dilation"]), _pair(a["padding"])
    xf = _padded(xq, pad, zp, layer.weight.dtype)
    n, c, h, w = xf.shape
    oh, ow = _out_size(h, kh, sh, dh), _out_size(w, kw, sw, dw)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv2d: input spatial size {(h, w)} (after padding) is smaller than the kernel extent")
    if (kh, kw) == (1, 1):
        strided = xf[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw]

        def columns(i: int, p0: int, p1: int) -> np.ndarray:  # whole rows: a view at stride 1
            return strided[i, :, p0 // ow : p1 // ow].reshape(c, p1 - p0)
    else:
        span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
        win = np.lib.stride_tricks.sliding_window_view(xf, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]  # N, C, OH, OW, kh, kw

        def columns(i: int, p0: int, p1: int) -> np.ndarray:  # rows in the weight's (c, i, j) order
            return win[i, :, p0 // ow : p1 // ow, :ow].transpose(0, 3, 4, 1, 2).reshape(c * kh * kw, p1 - p0)

    out = np.empty((n, o, oh * ow), out_dtype)
    _gemm_blocks(node, layer, out, columns, ow)
    return out.reshape(n, o, oh, ow)


def _conv_depthwise(node: Node, xq: np.ndarray, layer: _Layer, a: Mapping[str, Any], zp: int, out_dtype: Any) -> np.ndarray:
    """A depthwise conv2d channels-last: one multiply-add per kernel tap whose inner loop runs
    along the channels (as ``cpu_nn.depthwise_channels_last``), a block of output rows at a
    time, requantized in cache, the blocks split across the run's threads. Returns an NCHW
    view of NHWC memory (the next 1x1 conv's GEMM reads it as a transposed operand, no copy)."""
    kh, kw = np.shape(node.params["weight"])[2:]
    (sh, sw), (dh, dw) = _pair(a["stride"]), _pair(a["dilation"])
    xh = _padded(xq, _pair(a["padding"]), zp, layer.weight.dtype, channels_last=True)
    n, hp, wp, c = xh.shape
    oh, ow = _out_size(hp, kh, sh, dh), _out_size(wp, kw, sw, dw)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv2d: input spatial size {(hp, wp)} (after padding) is smaller than the kernel extent")
    taps = layer.weight
    out = np.empty((n, oh, ow, c), out_dtype)
    rows = max(1, min(oh, cpu_threads.block(_BLOCK, n * oh * ow * c) // (ow * c)))
    per = -(-oh // rows)

    def run(first: int, last: int) -> None:
        fsum, ftmp = np.empty((rows, ow, c), taps.dtype), np.empty((rows, ow, c), taps.dtype)
        scratch = np.empty((rows, ow, c), np.int64)
        for b in range(first, last):
            s, r0 = divmod(b, per)
            r0 *= rows
            r1 = min(oh, r0 + rows)
            acc, tmp = fsum[: r1 - r0], ftmp[: r1 - r0]
            for t in range(kh * kw):
                i, j = divmod(t, kw)
                i, j = i * dh + r0 * sh, j * dw
                view = xh[s, i : i + (r1 - r0 - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw]
                if t == 0:
                    np.multiply(view, taps[0], out=acc)
                else:  # each partial sum an integer below FLOAT32_EXACT (or 2**53): exact
                    np.multiply(view, taps[t], out=tmp)
                    acc += tmp
            block = scratch[: r1 - r0]
            np.copyto(block, acc, casting="unsafe")  # integers: exact
            _finish_block(node, layer, block, out[s, r0:r1])

    cpu_threads.split(n * per, run)
    return out.transpose(0, 3, 1, 2)


def _conv_grouped(node: Node, xq: np.ndarray, layer: _Layer, a: Mapping[str, Any], zp: int, out_dtype: Any) -> np.ndarray:
    """A grouped (not depthwise) conv2d: ``cpu_nn.conv2d_nobias``'s stacked float64 matmul (exact),
    then the output stage over the whole output."""
    xf = _padded(xq, _pair(a["padding"]), zp, np.float64)
    prod = K.conv2d_nobias(xf, layer.weight, _pair(a["stride"]), _pair(a["dilation"]), int(a["groups"]))
    acc = prod.astype(np.int64)  # integers: exact
    out = np.empty(acc.shape, out_dtype)
    _finish_block(node, layer, acc, out)
    return out


def _threads() -> int | None:
    """How many shards an integer kernel splits its blocks into (``cpu_threads.using``): the
    caller's run's where it set one (None: it stands), else as many threads as the process
    gave BLAS (its environment), BLAS then held at one thread per shard as the float
    interpreter's steps hold it (small GEMMs on BLAS's own threads ran several times slower,
    a hand-off each). Only the integer kernels run so: the float path keeps BLAS as it is."""
    if cpu_threads.asked() is not None:  # a caller's threads= stands, 1 included (nx.compile's threads=1)
        return None
    blas = cpu_threads.blas_threads()
    return blas if blas is not None and blas > 1 else None


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    a, b = v
    return int(a), int(b)


def _linear_gemm(node: Node, x: np.ndarray, layer: _Layer, out_dtype: Any) -> np.ndarray:
    """``x @ W^T`` (any leading axes; ``W`` (O, K)) through ``_gemm_blocks`` on the transposed
    operands: blocks of rows of ``x``, the output written through its transpose."""
    k, o = x.shape[-1], layer.weight.shape[0]
    cols = x.reshape(-1, k).astype(layer.weight.dtype).T
    out = np.empty((cols.shape[1], o), out_dtype)
    _gemm_blocks(node, layer, out.T[None], lambda i, p0, p1: cols[:, p0:p1])
    return out.reshape(x.shape[:-1] + (o,))


def _int_layer(node: Node, xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams, plan: QuantizationPlan) -> np.ndarray:
    """linear / conv2d: (x - zp) * w_q + bias_q in int32 (int64 for 16x8), then requantize.

    The products are float GEMMs on the integers, exact (see ``_Layer``): one per block of the
    output (per depth chunk), im2col for a convolution, channels-last taps for a depthwise one;
    each block requantized while in cache. A layer no float type sums exactly runs the int64
    kernels (``_int_layer_int64``)."""
    a = opset.attrs_of(node.op, node.attrs) if node.op == "conv2d" else {}  # with the opset defaults
    groups = int(a.get("groups", 1))
    layer = _layer_of(node, in_qp, out_qp, plan, groups)
    if not (layer.chunks and xq.dtype == layer.dtype and _takes(node, xq, groups)):
        return _int_layer_int64(node, xq, in_qp, out_qp, plan)  # (and K.conv2d's / matmul's shape errors)
    with cpu_threads.using(_threads()):
        if node.op == "linear":
            return _linear_gemm(node, xq, layer, out_qp.dtype)
        conv = {"gemm": _conv_gemm, "depthwise": _conv_depthwise, "grouped": _conv_grouped}[layer.kind]
        return conv(node, xq, layer, a, _zp(in_qp), out_qp.dtype)


def _takes(node: Node, xq: np.ndarray, groups: int) -> bool:
    """Whether ``xq``'s shape fits the layer (else the int64 kernels raise their shape errors)."""
    w_shape = np.shape(node.params["weight"])
    if node.op == "linear":
        return xq.ndim > 0 and xq.shape[-1] == w_shape[1]
    return xq.ndim == 4 and xq.shape[1] == w_shape[1] * groups


def _int_layer_int64(node: Node, xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams, plan: QuantizationPlan) -> np.ndarray:
    """``_int_layer`` in int64 arithmetic (NumPy's integer loops): for accumulators beyond
    float64's exact range."""
    wqp = plan.weights[node.name]
    wq = Q.quantize_weight(np.asarray(node.params["weight"]), wqp).astype(np.int64)
    bias = Q.quantize_bias(node.params.get("bias"), in_qp, wqp, wq.shape[0]).astype(np.int64)
    x = xq.astype(np.int64) - _zp(in_qp)
    if node.op == "linear":
        acc, axis = x @ wq.T + bias, xq.ndim - 1
    else:
        a = opset.attrs_of(node.op, node.attrs)  # with the opset defaults
        # Zero padding of (x - zp) is TFLite's padding with the input zero point.
        acc = K.conv2d(x, wq, None, a["stride"], a["padding"], a["dilation"], a["groups"]) + bias.reshape(1, -1, 1, 1)
        axis = 1
    wide = in_qp.bits == 16
    if not wide and (acc.min() < np.iinfo(np.int32).min or acc.max() > np.iinfo(np.int32).max):
        raise OverflowError(f"layer {node.name!r}: int32 accumulator overflow")
    real = _s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64) / _s(out_qp)
    return Q.requantize(acc, real, out_qp, axis, wide)


def _matmul_layer(node: Node, b: np.ndarray, c: np.ndarray | None, sources: tuple[Any, Any], in_qp: QuantParams,
                  out_qp: QuantParams, wqp: QuantParams) -> _Layer:
    """A matmul/gemm's constant right-hand side ``b`` (and a gemm's constant ``c``) prepared as a
    linear layer: cached by the constant nodes' arrays they come from (``sources``), else built
    for this call."""

    def make() -> _Layer:
        wq = Q.quantize_weight(np.asarray(b), wqp)
        w = wq if wqp.axis == 0 else wq.T  # (N, K): output channels first, as a linear layer's
        # a gemm's c (a constant: calibration checked it has one value per output channel)
        bias = np.broadcast_to(np.asarray(c, np.float64).ravel(), (w.shape[0],)) if c is not None else None
        return _make_layer("gemm", w, Q.quantize_bias(bias, in_qp, wqp, w.shape[0]), in_qp, wqp, out_qp)

    if sources[0] is None or (c is not None and sources[1] is None):
        return make()
    return _prepared(node.op, (*sources, wqp, in_qp, out_qp), make)


def _int_matmul(node: Node, xs: list[np.ndarray], held: list[bool], plan: QuantizationPlan,
                constants: Mapping[str, Node] | None = None) -> np.ndarray | None:
    """matmul/gemm in integers, or None when it runs the float path.

    A constant right-hand side (``plan.weights[node.name]``) is a fully connected layer:
    ``(x - zp) @ w_q + bias_q`` in int32 (int64 for 16x8), requantized per output channel with
    ``s_x * s_w[c] / s_out`` (TFLite FULLY_CONNECTED). Two activations (attention's q @ k^T and
    p @ v) multiply per tensor: ``(a - zp_a) @ (b - zp_b)`` requantized with ``s_a * s_b / s_out``
    (TFLite BATCH_MATMUL). Products are float GEMMs where exact (see ``_Layer``; float64 for
    two activations), else int64. ``constants``: the graph's constant nodes by output, whose
    arrays key the cached prepared weights."""
    acts = plan.activations
    out_qp = acts[node.output]
    wqp = plan.weights.get(node.name)
    trans_a = node.op == "gemm" and bool(node.attrs.get("trans_a"))
    if not held[0] or (wqp is None and not (node.op == "matmul" and held[1])):
        return None
    in_qp = acts[node.inputs[0]]
    zp, wide = _zp(in_qp), in_qp.bits == 16
    if wqp is not None:
        consts = constants or {}
        sources = tuple(_const_value(consts, node.inputs[i]) if len(node.inputs) > i else None for i in (1, 2))
        layer = _matmul_layer(node, xs[1], xs[2] if len(xs) > 2 else None, (sources[0], sources[1]), in_qp, out_qp, wqp)
        a = xs[0].T if trans_a else xs[0]
        if not layer.chunks or a.dtype != layer.dtype or a.ndim == 0 or a.shape[-1] != layer.weight.shape[1]:
            return _int_matmul_int64(node, xs, plan)
        with cpu_threads.using(_threads()):
            return _linear_gemm(node, a, layer, out_qp.dtype)
    b_qp = acts[node.inputs[1]]
    zb = _zp(b_qp)
    wide = wide or b_qp.bits == 16
    depth = xs[0].shape[-1] if xs[0].ndim else 1
    if not (xs[0].dtype.kind in "iu" and xs[1].dtype.kind in "iu"
            and Q.exact_in_float64(depth, Q.centered_bound(xs[0].dtype, zp), Q.centered_bound(xs[1].dtype, zb))):
        return _int_matmul_int64(node, xs, plan)
    acc = np.asarray(np.matmul(np.subtract(xs[0], float(zp), dtype=np.float64), np.subtract(xs[1], float(zb), dtype=np.float64)))
    acc = acc.astype(np.int64)
    if not wide:
        _check_block(node, acc)
    mult, shift = Q.quantize_multiplier(np.array([_s(in_qp) * _s(b_qp) / _s(out_qp)]))
    return Q.requantize_fixed(acc, mult, shift, out_qp, None, wide, overwrite=True)


def _const_value(constants: Mapping[str, Node], name: str) -> Any:
    """The array a constant node holds (the identity a prepared weight is cached by), or None."""
    node = constants.get(name)
    return None if node is None else node.params.get("value")


def _int_matmul_int64(node: Node, xs: list[np.ndarray], plan: QuantizationPlan) -> np.ndarray:
    """``_int_matmul`` in int64 arithmetic (NumPy's integer loops), for accumulators beyond
    float64's exact range."""
    acts = plan.activations
    out_qp = acts[node.output]
    wqp = plan.weights.get(node.name)
    trans_a = node.op == "gemm" and bool(node.attrs.get("trans_a"))
    in_qp = acts[node.inputs[0]]
    a = xs[0].astype(np.int64) - _zp(in_qp)
    a = a.T if trans_a else a
    wide = in_qp.bits == 16
    if wqp is not None:
        wq = Q.quantize_weight(np.asarray(xs[1]), wqp).astype(np.int64)
        w = wq.T if wqp.axis == 0 else wq  # (K, N): output channels last
        # a gemm's c (a constant: calibration checked it has one value per output channel)
        bias = np.broadcast_to(np.asarray(xs[2], np.float64).ravel(), (w.shape[1],)) if len(xs) > 2 else None
        acc = a @ w + Q.quantize_bias(bias, in_qp, wqp, w.shape[1]).astype(np.int64)
        real = _s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64) / _s(out_qp)
        axis: int | None = acc.ndim - 1
    else:
        b_qp = acts[node.inputs[1]]
        acc = np.matmul(a, xs[1].astype(np.int64) - _zp(b_qp))
        real = np.array([_s(in_qp) * _s(b_qp) / _s(out_qp)])
        axis, wide = None, wide or b_qp.bits == 16
    if not wide and (acc.min() < np.iinfo(np.int32).min or acc.max() > np.iinfo(np.int32).max):
        raise OverflowError(f"layer {node.name!r}: int32 accumulator overflow")
    return Q.requantize(acc, real, out_qp, axis, wide)


# Elementwise tables. An op in these sets, between quantized values, runs the float path:
# dequantize, the op in float64, quantize to its output's parameters. Per element that is a
# function of the input integer(s) alone: each op computes element i from element i only (the
# references are NumPy ufuncs, np.where and np.clip of them, whose float64 loops compute an element
# by one routine wherever it lies in the array: SIMD lanes and masked tails run the same code), and
# dequantize / quantize are per element too. So running that same float path once on every code
# of the input type (256 for int8, 65536 for int16; 65536 pairs for two int8 inputs) gives a table
# whose lookup is what the float path computes, integer for integer (tests/test_integer_kernels_fast.py
# compares both over every code in several layouts): TFLite's own int8 kernels for these ops are
# tables too. Ops with weights, run-time bounds or anything beyond their element are not here.
_UNARY_TABLES: Final = frozenset({"clip", "hardswish", "hardsigmoid", "sigmoid", "silu", "tanh", "gelu", "leaky_relu", "elu",
                                  "selu", "celu", "softplus", "softsign", "mish", "exp", "erf", "neg", "abs"})
_BINARY_TABLES: Final = frozenset({"add", "sub", "mul", "maximum", "minimum"})
_TABLE_TYPES: Final[dict[np.dtype[Any], np.dtype[Any]]] = {np.dtype(np.int8): np.dtype(np.uint8), np.dtype(np.int16): np.dtype(np.uint16)}


def _codes(dtype: np.dtype[Any]) -> np.ndarray:
    """Every value of the integer ``dtype``, in the order of its unsigned view (0, 1, ..., -1)."""
    unsigned = _TABLE_TYPES[dtype]
    return np.arange(np.iinfo(unsigned).max + 1, dtype=unsigned).view(dtype)


def _attrs_key(attrs: Mapping[str, Any]) -> Hashable | None:
    try:
        key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _int_lookup(node: Node, xs: list[np.ndarray], plan: QuantizationPlan) -> np.ndarray | None:
    """An elementwise op of quantized values through its table (see above), or None: not such
    an op, or inputs the tables do not cover (the float path runs)."""
    acts = plan.activations
    qps = [acts[i] for i in node.inputs]
    out_qp = acts[node.output]
    if any(q.axis is not None or x.dtype != q.dtype for q, x in zip(qps, xs)) or node.params:
        return None
    if node.op in _UNARY_TABLES and len(xs) == 1 and xs[0].dtype in _TABLE_TYPES:
        dtype = xs[0].dtype

        def unary() -> np.ndarray:
            return Q.quantize(eval_node(node, [Q.dequantize(_codes(dtype), qps[0])]), out_qp)

        return np.take(_table(node, qps, out_qp, unary), xs[0].view(_TABLE_TYPES[dtype]), mode="clip")  # every index in range
    if node.op in _BINARY_TABLES and len(xs) == 2 and xs[0].dtype == xs[1].dtype == np.int8:
        try:
            np.broadcast_shapes(xs[0].shape, xs[1].shape)
        except ValueError:
            return None  # the float path raises its shape error

        def binary() -> np.ndarray:
            codes = _codes(np.dtype(np.int8))
            real = [Q.dequantize(codes[:, None], qps[0]), Q.dequantize(codes[None, :], qps[1])]
            return Q.quantize(eval_node(node, real), out_qp).ravel()  # [a << 8 | b] for the unsigned views

        index = np.left_shift(xs[0].view(np.uint8), 8, dtype=np.uint16)
        index = np.bitwise_or(index, xs[1].view(np.uint8), dtype=np.uint16)
        return np.take(_table(node, qps, out_qp, binary), index, mode="clip")  # every index in range
    return None


def _table(node: Node, qps: list[QuantParams], out_qp: QuantParams, make: Callable[[], np.ndarray]) -> np.ndarray:
    """``node``'s table for these parameters: cached by the op, its attributes (by value) and the
    parameter objects (a graph specialized per call keeps its plan's)."""
    key = _attrs_key(node.attrs)
    return make() if key is None else _prepared(("table", node.op, key), (*qps, out_qp), make)


def _int_relu(xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams) -> np.ndarray:
    if in_qp is out_qp or (_s(in_qp) == _s(out_qp) and _zp(in_qp) == _zp(out_qp)):
        return np.maximum(xq, _zp(out_qp)).astype(out_qp.dtype)
    # TFLite's ReluQuantized: rescale (x - zp_in), add zp_out, clamp below at zp_out.
    out = Q.requantize(xq.astype(np.int64) - _zp(in_qp), np.array([_s(in_qp) / _s(out_qp)]), out_qp, None, in_qp.bits == 16)
    return np.maximum(out, _zp(out_qp)).astype(out_qp.dtype)


def _int_avg(node: Node, xq: np.ndarray, qp: QuantParams) -> np.ndarray:
    """TFLite's integer AveragePool: sum of raw values, divide rounding half away from zero."""
    a = opset.attrs_of(node.op, node.attrs)  # with the opset defaults
    if node.op == "adaptive_avg_pool2d":
        h, w = xq.shape[2:]
        oh, ow = a["output_size"]
        if h % oh or w % ow:
            raise ValueError(f"layer {node.name!r}: integer adaptive pooling needs sizes divisible by {a['output_size']}")
        k, s, p, include = (h // oh, w // ow), (h // oh, w // ow), (0, 0), True
    else:
        k, s, p, include = tuple(a["kernel_size"]), tuple(a["stride"]), tuple(a["padding"]), a.get("count_include_pad", True)
    x = xq.astype(np.int64)
    ph, pw = p
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=_zp(qp)) if include else np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    win = np.lib.stride_tricks.sliding_window_view(padded, k, axis=(2, 3))[:, :, :: s[0], :: s[1]]
    acc = win.sum(axis=(4, 5))
    if include or p == (0, 0):
        count = np.full(acc.shape[2:], k[0] * k[1], np.int64)
    else:
        ones = np.pad(np.ones(x.shape[2:], np.int64), ((ph, ph), (pw, pw)))
        count = np.lib.stride_tricks.sliding_window_view(ones, k)[:: s[0], :: s[1]].sum(axis=(2, 3))
    half = count // 2
    out = np.where(acc > 0, (acc + half) // count, -((-acc + half) // count))
    return np.clip(out, qp.qmin, qp.qmax).astype(qp.dtype)


def _int_node(node: Node, xs: list[np.ndarray], plan: QuantizationPlan) -> np.ndarray:
    acts = plan.activations
    in_qp, out_qp = acts[node.inputs[0]], acts[node.output]
    xq = xs[0]
    if node.op in ("linear", "conv2d"):
        return _int_layer(node, xq, in_qp, out_qp, plan)
    if Q.is_spatial_mean(node, xq.ndim):  # 1x1 kept: global_avg_pool, adaptive (1, 1), reduce_mean keepdims
        return Q.integer_mean(xq, in_qp, out_qp)
    if node.op == "relu":
        return _int_relu(xq, in_qp, out_qp)
    if node.op == "max_pool2d":
        a = opset.attrs_of(node.op, node.attrs)  # with the opset defaults
        return K.max_pool2d(xq, a["kernel_size"], a["stride"], a["padding"])
    if node.op in ("avg_pool2d", "adaptive_avg_pool2d"):
        return _int_avg(node, xq, in_qp)
    if node.op == "flatten":
        return _flatten(node, [xq], {})
    return xq  # dropout


def _float_output_layer(node: Node, xq: np.ndarray, in_qp: QuantParams, plan: QuantizationPlan) -> np.ndarray:
    """linear / conv2d whose output the plan leaves in float (``Q.FLOAT_OUTPUT_OPS``): ``(x - zp) *
    w_q`` accumulated in int32 (int64 for 16x8), then ``acc * s_in * s_w[c] + bias`` in float64
    (``Q.dequantize_accumulator``), no output rounding. The products are one float64 GEMM (or
    convolution) of the integers where every sum is exact (``Q.exact_in_float64``), else int64."""
    wqp = plan.weights[node.name]
    weight, bias = node.params["weight"], node.params.get("bias")
    zp = _zp(in_qp)
    wq = _prepared(("float_out", node.op), (weight, wqp), lambda: Q.quantize_weight(np.asarray(weight), wqp).astype(np.int64))
    depth = int(np.prod(wq.shape[1:]))
    exact = Q.exact_in_float64(depth, Q.centered_bound(xq.dtype, zp), int(np.abs(wq).max(initial=0)))
    ctype: Any = np.float64 if exact else np.int64
    x = np.subtract(xq, zp, dtype=ctype)  # zero padding of (x - zp) is TFLite's padding with the zero point
    if node.op == "linear":
        acc, axis = x @ wq.T.astype(ctype), xq.ndim - 1
    else:
        a = opset.attrs_of(node.op, node.attrs)  # with the opset defaults
        acc, axis = K.conv2d(x, wq.astype(ctype), None, a["stride"], a["padding"], a["dilation"], a["groups"]), 1
    if in_qp.bits == 8:
        _check_block(node, acc)
    return Q.dequantize_accumulator(acc, in_qp, wqp, axis, None if bias is None else np.asarray(bias))


def _dynamic_linear(node: Node, x: np.ndarray, plan: QuantizationPlan) -> np.ndarray:
    """Dynamic quantization: the input is quantized per call (affine int8 from its own range),
    int32 accumulation against int8 weights, then a float rescale and float bias."""
    in_qp = Q.activation_params(float(x.min()), float(x.max()), 8)
    wqp = plan.weights[node.name]
    weight = node.params["weight"]
    layer = _prepared("dynamic", (weight, wqp), lambda: _dynamic_layer(Q.quantize_weight(np.asarray(weight), wqp)))
    xq = Q.quantize(x, in_qp)
    if layer.chunks and xq.ndim and xq.shape[-1] == layer.weight.shape[1]:
        # The zero point changes per call: the GEMM multiplies q - zp (|q - zp| <= 255, as prepared).
        rows = np.subtract(xq.reshape(-1, xq.shape[-1]), float(_zp(in_qp)), dtype=layer.weight.dtype)
        acc = _exact_gemm(layer, rows.T, 0, layer.weight.shape[0]).T.astype(np.int64).reshape(xq.shape[:-1] + (layer.weight.shape[0],))
    else:
        acc = (xq.astype(np.int64) - _zp(in_qp)) @ Q.quantize_weight(np.asarray(weight), wqp).astype(np.int64).T
    out = acc * (_s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64))
    bias = node.params.get("bias")
    return out if bias is None else out + np.asarray(bias, np.float64)


def _dynamic_layer(wq: np.ndarray) -> _Layer:
    """A dynamic linear's weight (no bias or output stage: it rescales in float), for inputs
    ``q - zp`` of any int8 zero point."""
    w2 = wq.reshape(wq.shape[0], -1)
    ftype, chunks = _gemm_dtype(w2, Q.centered_bound(np.int8, -128))  # |q - zp| <= 255 for any int8 zero point
    return _Layer("dynamic", w2.astype(ftype), chunks, np.zeros(0, np.int64), None, False, np.dtype(np.int8))


def run_quantized(graph: Graph, plan: QuantizationPlan, *inputs: Any, dequantize: bool = True, return_values: bool = False,
                  float_inputs: bool = False) -> Any:
    """Run ``graph`` as an integer runtime would with ``plan``.

    Static plans: inputs are quantized with their parameters, integer kernels run where TFLite
    has them, and the output is dequantized (``dequantize=False`` returns the raw integers).
    Dynamic plans: Linear layers run int8 x int8 -> int32 with per-call input quantization,
    everything else in float64. ``float_inputs``: ``graph`` is a segment of a model, and an
    input the plan has no parameters for arrives and stays float (``qmath.check_plan``).
    """
    _check_inputs(graph, inputs)
    graph = specialized(graph, inputs)
    Q.check_plan(graph, plan, float_inputs=float_inputs)
    if plan.dynamic:
        return _run_dynamic(graph, plan, inputs, return_values)
    acts = plan.activations
    constants = {n.output: n for n in graph.nodes if n.op == "constant"}  # matmul weights: their prepared layers' keys
    values: dict[str, np.ndarray] = {}
    quantized: set[str] = set()  # values held as integers; the others are float (or int/bool data)
    for spec, x in zip(graph.inputs, inputs):
        arr = _input_array(x, spec.dtype, np.float64)
        if spec.name in acts:
            arr = Q.quantize(arr, acts[spec.name])
            quantized.add(spec.name)
        values[spec.name] = arr
    for node in graph.nodes:
        xs = [values[i] for i in node.inputs]
        if node.op in ("matmul", "gemm") and node.output in acts:
            out = _int_matmul(node, xs, [i in quantized for i in node.inputs], plan, constants)
            if out is not None:
                values[node.output] = out
                quantized.add(node.output)
                continue
        if node.op in Q.FLOAT_OUTPUT_OPS and node.output not in acts and node.inputs[0] in quantized:
            values[node.output] = _float_output_layer(node, xs[0], acts[node.inputs[0]], plan)  # a float value
            continue
        if node.output in acts and all(i in quantized for i in node.inputs) and (
                node.op in Q.INTEGER_OPS or Q.is_spatial_mean(node, xs[0].ndim)):
            values[node.output] = _int_node(node, xs, plan)
            quantized.add(node.output)
            continue
        if node.output in acts and node.inputs and all(i in quantized for i in node.inputs):
            table_out = _int_lookup(node, xs, plan)
            if table_out is not None:
                values[node.output] = table_out
                quantized.add(node.output)
                continue
        # No integer kernel: dequantize explicitly, run the float op, quantize its output.
        real = [Q.dequantize(x, acts[i]) if i in quantized else x for x, i in zip(xs, node.inputs)]
        out = eval_node(node, real)
        if node.output in acts:
            out = Q.quantize(out, acts[node.output])
            quantized.add(node.output)
        values[node.output] = out
    if return_values:
        return values
    outs = tuple(Q.dequantize(values[o], acts[o]) if dequantize and o in quantized else values[o] for o in graph.outputs)
    return outs[0] if len(outs) == 1 else outs


def _run_dynamic(graph: Graph, plan: QuantizationPlan, inputs: tuple[Any, ...], return_values: bool) -> Any:
    values: dict[str, np.ndarray] = {s.name: np.asarray(x, np.float64) for s, x in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        xs = [values[i] for i in node.inputs]
        values[node.output] = _dynamic_linear(node, xs[0], plan) if node.op == "linear" else eval_node(node, xs)
    if return_values:
        return values
    outs = tuple(values[o] for o in graph.outputs)
    return outs[0] if len(outs) == 1 else outs
