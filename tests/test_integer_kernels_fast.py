"""The integer reference's fast kernels against the implementation they replaced, bit for bit.

``run_quantized`` is the reference every plugin's int8 / 16x8 output is verified against, so its
speed-ups (float GEMMs on integers where provably exact, weights prepared once per layer, output
stages computed a block at a time, ONNX ConvInteger as im2col) must not change one output
integer. The previous kernels are kept below verbatim (neurenix_core at 94c4ea4: int64 NumPy
loops, the weight quantized on every call, ``requantize`` through the three gemmlowp functions
that ``test_quantization_math`` checks against plain Python) and every comparison is
``np.array_equal`` on the integers (and their dtype), over random layers and whole models.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neurenix_core import nn
from neurenix_core.backends import cpu_nn as K
from neurenix_core.graph import opset
from neurenix_core.graph import quantization as Quant
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams, TensorSpec
from neurenix_core.graph.ir import qmath as Q
from neurenix_core.graph.opset import quantization as onnx_quant
from neurenix_core.graph.reference import run as R


# ----------------------------------------------------------------------------- the previous kernels, verbatim
def old_requantize(acc: np.ndarray, real_multiplier: np.ndarray, out_qp: QuantParams, channel_axis: int | None, wide: bool) -> np.ndarray:
    mult, shift = Q.quantize_multiplier(real_multiplier)
    if channel_axis is not None and mult.size > 1:
        shape = [1] * acc.ndim
        shape[channel_axis] = -1
        mult, shift = mult.reshape(shape), shift.reshape(shape)
    fn = Q.multiply_by_quantized_multiplier_int64 if wide else Q.multiply_by_quantized_multiplier
    out = fn(acc, mult, shift) + int(np.asarray(out_qp.zero_point)[0])
    return np.clip(out, out_qp.qmin, out_qp.qmax).astype(out_qp.dtype)


def _zp(qp: QuantParams) -> int:
    return int(np.asarray(qp.zero_point).ravel()[0])


def _s(qp: QuantParams) -> np.float64:
    return np.float64(np.asarray(qp.scale, np.float32).ravel()[0])


def old_int_layer(node: Node, xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams, plan: QuantizationPlan) -> np.ndarray:
    wqp = plan.weights[node.name]
    wq = Q.quantize_weight(np.asarray(node.params["weight"]), wqp).astype(np.int64)
    bias = Q.quantize_bias(node.params.get("bias"), in_qp, wqp, wq.shape[0]).astype(np.int64)
    x = xq.astype(np.int64) - _zp(in_qp)
    if node.op == "linear":
        acc, axis = x @ wq.T + bias, xq.ndim - 1
    else:
        a = opset.attrs_of(node.op, node.attrs)
        acc = K.conv2d(x, wq, None, a["stride"], a["padding"], a["dilation"], a["groups"]) + bias.reshape(1, -1, 1, 1)
        axis = 1
    wide = in_qp.bits == 16
    if not wide and (acc.min() < np.iinfo(np.int32).min or acc.max() > np.iinfo(np.int32).max):
        raise OverflowError(f"layer {node.name!r}: int32 accumulator overflow")
    real = _s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64) / _s(out_qp)
    return old_requantize(acc, real, out_qp, axis, wide)


def old_int_matmul(node: Node, xs: list[np.ndarray], held: list[bool], plan: QuantizationPlan, *_: Any) -> np.ndarray | None:
    acts = plan.activations
    out_qp = acts[node.output]
    wqp = plan.weights.get(node.name)
    trans_a = node.op == "gemm" and bool(node.attrs.get("trans_a"))
    if not held[0] or (wqp is None and not (node.op == "matmul" and held[1])):
        return None
    in_qp = acts[node.inputs[0]]
    a = xs[0].astype(np.int64) - _zp(in_qp)
    a = a.T if trans_a else a
    wide = in_qp.bits == 16
    if wqp is not None:
        wq = Q.quantize_weight(np.asarray(xs[1]), wqp).astype(np.int64)
        w = wq.T if wqp.axis == 0 else wq
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
    return old_requantize(acc, real, out_qp, axis, wide)


def old_dynamic_linear(node: Node, x: np.ndarray, plan: QuantizationPlan) -> np.ndarray:
    in_qp = Q.activation_params(float(x.min()), float(x.max()), 8)
    wqp = plan.weights[node.name]
    xq = Q.quantize(x, in_qp).astype(np.int64) - _zp(in_qp)
    wq = Q.quantize_weight(np.asarray(node.params["weight"]), wqp).astype(np.int64)
    acc = xq @ wq.T
    out = acc * (_s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64))
    bias = node.params.get("bias")
    return out if bias is None else out + np.asarray(bias, np.float64)


def old_int_conv(a: dict[str, Any], x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """ONNX ConvInteger's previous reference: one einsum per kernel tap, in int64."""
    nd = x.ndim - 2
    strides, dil = tuple(a["strides"] or (1,) * nd), tuple(a["dilations"] or (1,) * nd)
    pads = tuple(a["pads"] or (0,) * 2 * nd)
    out_shape = onnx_quant._conv_shape(a, x.shape, w.shape)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)])
    g = a["group"]
    n, cg, mg = x.shape[0], w.shape[1], w.shape[0] // g
    xg = xp.reshape((n, g, cg) + xp.shape[2:])
    wg = w.reshape((g, mg, cg) + w.shape[2:])
    out = np.zeros((n, g, mg) + out_shape[2:], np.int64)
    for k in np.ndindex(*w.shape[2:]):
        window = tuple(slice(k[i] * dil[i], k[i] * dil[i] + (out_shape[2 + i] - 1) * strides[i] + 1, strides[i]) for i in range(nd))
        patch = xg[(slice(None), slice(None), slice(None)) + window]
        out += np.einsum("ngc...,gmc->ngm...", patch, wg[(slice(None), slice(None), slice(None)) + k])
    return out.reshape(out_shape)


@contextlib.contextmanager
def previous_kernels() -> Iterator[None]:
    """``run_quantized`` (and everything calling it: compiled models) on the previous kernels."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(R, "_int_layer", old_int_layer)
        mp.setattr(R, "_int_matmul", old_int_matmul)
        mp.setattr(R, "_dynamic_linear", old_dynamic_linear)
        mp.setattr(Q, "requantize", old_requantize)
        if hasattr(R, "_int_lookup"):  # elementwise ops through tables: the float path instead
            mp.setattr(R, "_int_lookup", lambda *args: None)
        yield


def same(new: Any, old: Any) -> None:
    """Identical integers (or floats), dtypes and shapes."""
    new, old = np.asarray(new), np.asarray(old)
    assert new.dtype == old.dtype and new.shape == old.shape
    assert np.array_equal(new, old), f"{np.count_nonzero(new != old)} of {new.size} values differ"


def outcome(fn: Any, *args: Any) -> Any:
    """The result, or the type of the error raised (both implementations must agree on either)."""
    try:
        return fn(*args)
    except (OverflowError, ValueError) as exc:
        return type(exc)


def agree(new: Any, old: Any) -> None:
    if isinstance(old, type):
        assert new is old
    else:
        same(new, old)


# ----------------------------------------------------------------------------- random layers
def _act(rng: np.random.Generator, bits: int) -> QuantParams:
    lo, hi = -rng.uniform(0.0, 4.0), rng.uniform(0.01, 6.0)
    return Q.activation_params(lo, hi, bits)


def _ints(rng: np.random.Generator, shape: tuple[int, ...], qp: QuantParams, extreme: bool) -> np.ndarray:
    """Random integers of ``qp``'s type; ``extreme``: only its end points (the largest accumulators)."""
    if extreme:
        return rng.choice(np.array([qp.qmin, qp.qmax]), shape).astype(qp.dtype)
    return rng.integers(qp.qmin, qp.qmax + 1, shape).astype(qp.dtype)


def _weights(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    if kind == "saturated":  # every |w_q| = 127: the largest sums, the most depth chunks
        return rng.choice(np.array([-1.0, 1.0]), shape).astype(np.float32)
    w = rng.standard_normal(shape) * rng.uniform(0.01, 1.0, (shape[0],) + (1,) * (len(shape) - 1))
    if kind == "dead":
        w[0] = 0.0  # a channel of zeros: scale 1, weights 0
    return w.astype(np.float32)


def _conv_case(rng: np.random.Generator, bits: int, *, cin: int, cout: int, kernel: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], dilation: tuple[int, int], groups: int, batch: int, hw: tuple[int, int], bias: bool,
               weights: str = "normal", extreme: bool = False) -> tuple[Node, np.ndarray, QuantParams, QuantParams, QuantizationPlan]:
    w = _weights(rng, (cout, cin // groups, *kernel), weights)
    params = {"weight": w} | ({"bias": (rng.standard_normal(cout) * 0.5).astype(np.float32)} if bias else {})
    node = Node("conv", "conv2d", ("x",), "y", {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}, params)
    in_qp, out_qp = _act(rng, bits), _act(rng, bits)
    plan = QuantizationPlan(bits, {"x": in_qp, "y": out_qp}, {"conv": Q.weight_params(w)})
    return node, _ints(rng, (batch, cin, *hw), in_qp, extreme), in_qp, out_qp, plan


def _check_layer(node: Node, xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams, plan: QuantizationPlan) -> None:
    want = outcome(old_int_layer, node, xq, in_qp, out_qp, plan)
    for _ in range(2):  # the layer prepared, then from the cache
        agree(outcome(R._int_layer, node, xq, in_qp, out_qp, plan), want)


@pytest.mark.parametrize("bits", [8, 16])
def test_random_convolutions(bits: int) -> None:
    """Kernel sizes, strides, padding, dilation, groups (depthwise, depthwise with a channel
    multiplier, grouped), batches, biases, zero points: 120 random layers."""
    rng = np.random.default_rng(bits)
    for _ in range(120):
        groups_kind = rng.choice(["dense", "depthwise", "multiplier", "grouped"])
        cin = int(rng.integers(1, 13))
        if groups_kind == "dense":
            groups, cout = 1, int(rng.integers(1, 13))
        elif groups_kind == "depthwise":
            groups, cout = cin, cin
        elif groups_kind == "multiplier":
            groups, cout = cin, cin * 2
        else:
            groups = int(rng.choice([2, 3]))
            cin, cout = cin * groups, int(rng.integers(1, 4)) * groups
        kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        dilation = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        stride = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        padding = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
        span = (dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1)
        hw = (max(1, span[0] - 2 * padding[0]) + int(rng.integers(0, 9)), max(1, span[1] - 2 * padding[1]) + int(rng.integers(0, 9)))
        case = _conv_case(rng, bits, cin=cin, cout=cout, kernel=kernel, stride=stride, padding=padding, dilation=dilation, groups=groups,
                          batch=int(rng.integers(1, 4)), hw=hw, bias=bool(rng.integers(0, 2)),
                          weights=str(rng.choice(["normal", "normal", "saturated", "dead"])), extreme=bool(rng.integers(0, 4) == 0))
        _check_layer(*case)


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("weights", ["normal", "saturated"])
def test_deep_convolutions_split_their_depth_exactly(bits: int, weights: str) -> None:
    """Depths of 4608 (512 x 3x3) and 9000: several float32 chunks, or float64, or int64, with
    the largest accumulators (inputs at their end points)."""
    rng = np.random.default_rng(7)
    for cin, kernel in ((512, (3, 3)), (1000, (3, 3))):
        case = _conv_case(rng, bits, cin=cin, cout=6, kernel=kernel, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1,
                          batch=1, hw=(4, 5), bias=True, weights=weights, extreme=True)
        _check_layer(*case)
        layer = R._layers[next(reversed(R._layers))][1]
        assert layer.chunks, "an exact float type was found"
        if bits == 8 and weights == "saturated":
            assert layer.weight.dtype == (np.float32 if cin == 512 else np.float64)
            assert len(layer.chunks) == (5 if cin == 512 else 1)


@pytest.mark.parametrize("op", ["conv2d", "linear"])
def test_float32_chunks_at_their_limit(op: str) -> None:
    """The worst case of the float32 bound: every weight +127, inputs at -128 with a few odd
    ones (-127), so each chunk's partial sums reach just below 2**24 with odd values (one more
    term per chunk, or a bound of 127 instead of 128, would round them)."""
    rng = np.random.default_rng(13)
    cin = 520
    w = np.ones((3, cin, 3, 3) if op == "conv2d" else (3, cin * 9), np.float32)
    in_qp = QuantParams(np.array([0.01], np.float32), np.array([0], np.int64), 8, None, -128, 127)
    out_qp = Q.activation_params(-300.0, 300.0)
    node = Node("l", op, ("x",), "y", {"padding": (0, 0)} if op == "conv2d" else {}, {"weight": w})
    plan = QuantizationPlan(8, {"x": in_qp, "y": out_qp}, {"l": Q.weight_params(w)})
    x = np.full((1, cin, 5, 5) if op == "conv2d" else (4, cin * 9), -128, np.int8)
    x.flat[rng.choice(x.size, x.size // 50, replace=False)] = -127
    _check_layer(node, x, in_qp, out_qp, plan)
    layer = R._layers[next(reversed(R._layers))][1]
    assert layer.weight.dtype == np.float32 and len(layer.chunks) == 5  # 4680 terms, at most 16777216 // (128 * 127) = 1032 a chunk
    assert max(k1 - k0 for k0, k1 in layer.chunks) == 1032


def test_float32_chunks_cancelling_at_their_limit() -> None:
    """Chunk sums just below 2**24, of opposite signs in the two halves of the depth and of
    different parities (one more odd term in one half): the exact accumulator is +-127 and the
    output multiplier 1, so a single rounding in any chunk (a chunk one term too long, or twice
    as long) shows in the output integers instead of cancelling."""
    rng = np.random.default_rng(17)
    depth = 4 * 1032
    w = np.concatenate([np.ones(depth // 2), -np.ones(depth // 2)]).astype(np.float32)[None].repeat(2, axis=0)
    wqp = Q.weight_params(w)
    in_qp = QuantParams(np.array([0.5], np.float32), np.array([0], np.int64), 8, None, -128, 127)
    out_qp = QuantParams(np.array([np.float32(0.5) * wqp.scale[0]], np.float32), np.array([0], np.int64), 8, None, -128, 127)
    node = Node("fc", "linear", ("x",), "y", {}, {"weight": w})
    plan = QuantizationPlan(8, {"x": in_qp, "y": out_qp}, {"fc": wqp})
    x = np.full((16, depth), -128, np.int8)
    for row in range(16):
        count = int(rng.integers(1, 40))  # a -127 is one more than a -128: the exact sum is 127 * (count difference)
        x[row, rng.choice(depth // 2, count + row % 2, replace=False)] = -127
        x[row, depth // 2 + rng.choice(depth // 2, count + 1 - row % 2, replace=False)] = -127
    want = old_int_layer(node, x, in_qp, out_qp, plan)
    assert np.array_equal(np.abs(want), np.full(want.shape, 127))
    _check_layer(node, x, in_qp, out_qp, plan)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_blocks_split_across_threads(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of positions, and a deep layer's output channels, split across 1-3 interpreter
    threads (``cpu_threads.using``, as a run with threads= sets it): the same integers. These
    layers are below the work a shard needs (``_MIN_SHARD_MACS``), so that floor is lowered to
    make them split."""
    from neurenix_core.backends import cpu_threads

    monkeypatch.setattr(R, "_MIN_SHARD_MACS", 1)
    rng = np.random.default_rng(19)
    cases = [{"cin": 64, "cout": 96, "kernel": (1, 1), "hw": (28, 28), "groups": 1},  # many blocks of positions
             {"cin": 256, "cout": 80, "kernel": (3, 3), "hw": (4, 4), "groups": 1},  # one block: output channels split
             {"cin": 32, "cout": 32, "kernel": (3, 3), "hw": (30, 30), "groups": 32},  # depthwise: blocks of rows
             {"cin": 24, "cout": 36, "kernel": (3, 3), "hw": (9, 9), "groups": 3}]  # grouped
    with cpu_threads.using(threads):
        for kw in cases:
            _check_layer(*_conv_case(rng, 8, stride=(1, 1), padding=(1, 1), dilation=(1, 1), batch=2, bias=True, **kw))
        w = _weights(rng, (200, 300), "normal")
        node = Node("fc", "linear", ("x",), "y", {}, {"weight": w, "bias": rng.standard_normal(200).astype(np.float32)})
        in_qp, out_qp = _act(rng, 8), _act(rng, 8)
        _check_layer(node, _ints(rng, (3, 300), in_qp, False), in_qp, out_qp, QuantizationPlan(8, {"x": in_qp, "y": out_qp}, {"fc": Q.weight_params(w)}))


def test_a_small_layer_runs_on_one_thread_and_a_large_one_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """At threads=2 a layer below ``_MIN_SHARD_MACS`` per shard runs whole on the caller (split in
    two, BERT-tiny's 128-wide layers ran slower than on one thread: the shards' Python steps
    contend for the interpreter lock); a layer with work for two shards still splits. The integers
    are the same either way."""
    from neurenix_core.backends import cpu_threads

    parts: list[int] = []
    real = cpu_threads.split

    def counted(total: int, fn: Any, min_items: int = 1) -> None:
        parts.append(min(cpu_threads.current(), total // max(1, min_items)))
        real(total, fn, min_items)

    monkeypatch.setattr(cpu_threads, "split", counted)
    rng = np.random.default_rng(23)
    for rows, width in ((128, 128), (512, 1024)):  # 2M and 268M multiply-accumulates
        w = _weights(rng, (width, width), "normal")
        node = Node("fc", "linear", ("x",), "y", {}, {"weight": w})
        in_qp, out_qp = _act(rng, 8), _act(rng, 8)
        with cpu_threads.using(2):
            _check_layer(node, _ints(rng, (rows, width), in_qp, False), in_qp, out_qp,
                         QuantizationPlan(8, {"x": in_qp, "y": out_qp}, {"fc": Q.weight_params(w)}))
    small, large = parts[:2], parts[2:]
    assert max(small) <= 1 and min(large) == 2, parts


def test_depthwise_layers_as_mobilenets_have_them() -> None:
    """Depthwise 3x3 and 5x5, strides 1 and 2, 16 to 144 channels (the channels-last kernel)."""
    rng = np.random.default_rng(3)
    for c, k, s, bits in itertools.product((16, 96, 144), (3, 5), (1, 2), (8, 16)):
        _check_layer(*_conv_case(rng, bits, cin=c, cout=c, kernel=(k, k), stride=(s, s), padding=(k // 2, k // 2), dilation=(1, 1),
                                 groups=c, batch=2, hw=(9, 11), bias=True))


def test_weights_reaching_minus_128() -> None:
    """A plan whose weight range is the full int8 one (an imported model's): -128 has no int8
    absolute value, and the bounds are taken in int64."""
    rng = np.random.default_rng(11)
    for groups, cin, cout in ((1, 40, 8), (8, 8, 8)):
        w = -np.abs(rng.standard_normal((cout, cin // groups, 3, 3))).astype(np.float32)
        scale = (np.abs(w).reshape(cout, -1).max(axis=1) / 128.0).astype(np.float32)
        wqp = QuantParams(scale, np.zeros(cout, np.int64), 8, 0, -128, 127)
        node = Node("conv", "conv2d", ("x",), "y", {"padding": (1, 1), "groups": groups}, {"weight": w})
        in_qp, out_qp = _act(rng, 8), _act(rng, 8)
        plan = QuantizationPlan(8, {"x": in_qp, "y": out_qp}, {"conv": wqp})
        assert Q.quantize_weight(w, wqp).min() == -128
        _check_layer(node, _ints(rng, (2, cin, 6, 6), in_qp, True), in_qp, out_qp, plan)


def test_layers_without_an_exact_float_type_run_in_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no float type sums a layer exactly (forced here: float64's bound lowered), the int64
    kernels run: same integers."""
    rng = np.random.default_rng(5)
    monkeypatch.setattr(Q, "FLOAT64_EXACT", 1000)
    monkeypatch.setattr(Q, "FLOAT32_EXACT", 1000)
    R.clear_prepared()
    for groups in (1, 4):
        _check_layer(*_conv_case(rng, 8, cin=4, cout=4, kernel=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=groups,
                                 batch=1, hw=(5, 5), bias=True))
        assert not R._layers[next(reversed(R._layers))][1].chunks
    R.clear_prepared()


def test_int32_overflow_is_refused_as_before() -> None:
    """An 8-bit layer whose accumulator leaves int32 raises, in the conv and the linear kernels."""
    rng = np.random.default_rng(9)
    w = np.ones((2, 3, 1, 1), np.float32)
    node = Node("conv", "conv2d", ("x",), "y", {}, {"weight": w, "bias": np.array([1e12, 0.0], np.float32)})
    in_qp, out_qp = Q.activation_params(0.0, 1.0), Q.activation_params(-1.0, 1.0)
    plan = QuantizationPlan(8, {"x": in_qp, "y": out_qp}, {"conv": Q.weight_params(w)})
    x = np.full((1, 3, 2, 2), 127, np.int8)
    assert outcome(old_int_layer, node, x, in_qp, out_qp, plan) is OverflowError
    _check_layer(node, x, in_qp, out_qp, plan)
    lin = Node("fc", "linear", ("x",), "y", {}, {"weight": w[:, :, 0, 0], "bias": np.array([1e12, 0.0], np.float32)})
    plan = QuantizationPlan(8, {"x": in_qp, "y": out_qp}, {"fc": Q.weight_params(w[:, :, 0, 0])})
    _check_layer(lin, x[:, :, 0, 0], in_qp, out_qp, plan)
    _check_layer(lin, rng.integers(-128, 128, (4, 3)).astype(np.int8), in_qp, out_qp, plan)


@pytest.mark.parametrize("bits", [8, 16])
def test_random_linear_layers(bits: int) -> None:
    rng = np.random.default_rng(20 + bits)
    for _ in range(60):
        fin, fout = int(rng.integers(1, 300)), int(rng.integers(1, 40))
        w = _weights(rng, (fout, fin), str(rng.choice(["normal", "saturated", "dead"])))
        params = {"weight": w} | ({"bias": rng.standard_normal(fout).astype(np.float32)} if rng.integers(0, 2) else {})
        node = Node("fc", "linear", ("x",), "y", {}, params)
        in_qp, out_qp = _act(rng, bits), _act(rng, bits)
        plan = QuantizationPlan(bits, {"x": in_qp, "y": out_qp}, {"fc": Q.weight_params(w)})
        lead = [(), (int(rng.integers(1, 50)),), (int(rng.integers(1, 4)), int(rng.integers(1, 9)))][int(rng.integers(0, 3))]
        _check_layer(node, _ints(rng, (*lead, fin), in_qp, bool(rng.integers(0, 3) == 0)), in_qp, out_qp, plan)


# ----------------------------------------------------------------------------- matmul / gemm
def _gemm_graph(rng: np.random.Generator, *, trans_a: bool, trans_b: bool, bias: bool, m: int = 5, k: int = 24, n: int = 7) -> Graph:
    b = rng.normal(0, 0.3, (n, k) if trans_b else (k, n)).astype(np.float32)
    nodes = [Node("b", "constant", (), "b", {}, {"value": b})]
    ins = ["xt" if trans_a else "input", "b"]
    if trans_a:
        nodes.append(Node("t", "transpose", ("input",), "xt", {"perm": (1, 0)}))
    if bias:
        nodes.append(Node("c", "constant", (), "c", {}, {"value": rng.normal(0, 0.2, n).astype(np.float32)}))
        ins.append("c")
    nodes.append(Node("g", "gemm", tuple(ins), "y", {"trans_a": trans_a, "trans_b": trans_b}))
    nodes.append(Node("r", "relu", ("y",), "yr"))
    nodes.append(Node("m", "matmul", ("yr", "input2"), "z"))  # two activations
    return Graph((TensorSpec("input", (m, k)), TensorSpec("input2", (n, 3))), tuple(nodes), ("z",))


def _compare_model(graph: Graph, plan: QuantizationPlan, batches: list[tuple[np.ndarray, ...]]) -> None:
    """Every value of ``run_quantized`` (integers, and the float ones between) identical."""
    for inputs in batches:
        new = R.run_quantized(graph, plan, *inputs, return_values=True)
        new_again = R.run_quantized(graph, plan, *inputs, return_values=True)  # prepared layers from the cache
        with previous_kernels():
            old = R.run_quantized(graph, plan, *inputs, return_values=True)
        assert set(new) == set(old)
        for name in old:
            same(new[name], old[name])
            same(new_again[name], old[name])
        out_new = R.run_quantized(graph, plan, *inputs)
        with previous_kernels():
            out_old = R.run_quantized(graph, plan, *inputs)
        for a, b in zip(out_new if isinstance(out_new, tuple) else (out_new,), out_old if isinstance(out_old, tuple) else (out_old,)):
            same(a, b)


@pytest.mark.parametrize("bits", [8, 16])
@pytest.mark.parametrize("trans_a, trans_b, bias", [(False, False, False), (False, True, True), (True, False, True), (True, True, False)])
def test_gemm_with_constant_weights_and_activation_matmul(bits: int, trans_a: bool, trans_b: bool, bias: bool) -> None:
    rng = np.random.default_rng(31)
    graph = _gemm_graph(rng, trans_a=trans_a, trans_b=trans_b, bias=bias)
    calib = [(rng.standard_normal((5, 24)), rng.standard_normal((7, 3))) for _ in range(6)]
    plan = Quant.calibrate(graph, calib, bits=bits, progress=False)
    assert "g" in plan.weights
    values = R.run_quantized(graph, plan, *calib[0], return_values=True)
    assert values["y"].dtype == values["z"].dtype == np.dtype(np.int8 if bits == 8 else np.int16)  # the integer kernels ran
    _compare_model(graph, plan, calib[:3] + [(rng.standard_normal((5, 24)) * 5, rng.standard_normal((7, 3)) * 5)])


def test_batched_matmul_of_two_activations() -> None:
    """Attention's q @ k^T and p @ v at 3-D (per tensor), with the float ops between."""
    nodes = (Node("t", "transpose", ("k",), "kt", {"perm": (0, 2, 1)}), Node("qk", "matmul", ("q", "kt"), "s"),
             Node("sm", "softmax", ("s",), "p", {"axis": -1}), Node("pv", "matmul", ("p", "v"), "o"))
    graph = Graph((TensorSpec("q", (2, 6, 8)), TensorSpec("k", (2, 6, 8)), TensorSpec("v", (2, 6, 8))), nodes, ("o",))
    rng = np.random.default_rng(41)
    calib = [tuple(rng.standard_normal((2, 6, 8)) for _ in range(3)) for _ in range(5)]
    for bits in (8, 16):
        plan = Quant.calibrate(graph, calib, bits=bits, progress=False)
        _compare_model(graph, plan, calib[:3])


# ----------------------------------------------------------------------------- whole models
def _cnn() -> nn.Module:
    """Conv-ReLU, a strided conv, a depthwise conv, pooling, flatten and two linear layers."""
    nn.manual_seed(1)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(16 * 4 * 4, 32), nn.ReLU(), nn.Linear(32, 10))


@pytest.mark.parametrize("bits", [8, 16])
def test_small_cnn_through_run_quantized(bits: int) -> None:
    graph = _cnn().to_graph()
    rng = np.random.default_rng(51)
    calib = [rng.standard_normal((4, 3, 16, 16)) for _ in range(4)]
    plan = Quant.calibrate(graph, calib, bits=bits, progress=False)
    _compare_model(graph, plan, [(c,) for c in calib[:2]] + [(rng.standard_normal((3, 3, 16, 16)) * 3,)])


def test_dynamic_linear_layers() -> None:
    nn.manual_seed(2)
    model = nn.Sequential(nn.Linear(40, 64), nn.ReLU(), nn.Linear(64, 8))
    graph = model.to_graph()
    plan = Quant.dynamic_plan(graph)
    rng = np.random.default_rng(61)
    for x in (rng.standard_normal((7, 40)), rng.standard_normal((1, 40)) * 100, rng.standard_normal((2, 3, 40))):
        new = R.run_quantized(graph, plan, x)
        with previous_kernels():
            old = R.run_quantized(graph, plan, x)
        same(new, old)


def _torch_models() -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    tnn = torch.nn

    class SE(tnn.Module):
        def __init__(self, c: int, gate: Any) -> None:
            super().__init__()
            self.f1, self.f2, self.gate = tnn.Conv2d(c, 8, 1), tnn.Conv2d(8, c, 1), gate()

        def forward(self, x: Any) -> Any:
            return x * self.gate(self.f2(torch.relu(self.f1(tnn.functional.adaptive_avg_pool2d(x, 1)))))

    class Inverted(tnn.Module):  # MobileNet / EfficientNet block: expand, depthwise, squeeze-excite, project, residual
        def __init__(self, c: int, exp: int, k: int, act: Any, gate: Any) -> None:
            super().__init__()
            self.m = tnn.Sequential(tnn.Conv2d(c, exp, 1, bias=False), tnn.BatchNorm2d(exp), act(),
                                    tnn.Conv2d(exp, exp, k, 1, k // 2, groups=exp, bias=False), tnn.BatchNorm2d(exp), act(),
                                    SE(exp, gate), tnn.Conv2d(exp, c, 1, bias=False), tnn.BatchNorm2d(c))

        def forward(self, x: Any) -> Any:
            return x + self.m(x)

    class Residual(tnn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.c1, self.b1 = tnn.Conv2d(c, c, 3, 1, 1, bias=False), tnn.BatchNorm2d(c)
            self.c2, self.b2 = tnn.Conv2d(c, c, 3, 1, 1, bias=False), tnn.BatchNorm2d(c)

        def forward(self, x: Any) -> Any:
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x)

    def head(c: int) -> list[Any]:
        return [tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(c, 10)]

    torch.manual_seed(0)
    return {
        "resnet": tnn.Sequential(tnn.Conv2d(3, 16, 3, 2, 1, bias=False), tnn.BatchNorm2d(16), tnn.ReLU(), tnn.MaxPool2d(3, 2, 1),
                                 Residual(16), tnn.Conv2d(16, 32, 3, 2, 1), tnn.ReLU(), Residual(32), *head(32)),
        "mobilenetv2": tnn.Sequential(tnn.Conv2d(3, 16, 3, 2, 1), tnn.ReLU6(), Inverted(16, 64, 3, tnn.ReLU6, tnn.Hardsigmoid),
                                      tnn.Conv2d(16, 24, 1), tnn.ReLU6(), *head(24)),
        "mobilenetv3": tnn.Sequential(tnn.Conv2d(3, 16, 3, 2, 1), tnn.Hardswish(), Inverted(16, 48, 5, tnn.Hardswish, tnn.Hardsigmoid),
                                      *head(16)),
        "efficientnet": tnn.Sequential(tnn.Conv2d(3, 16, 3, 2, 1), tnn.SiLU(), Inverted(16, 64, 3, tnn.SiLU, tnn.Sigmoid),
                                       Inverted(16, 32, 5, tnn.SiLU, tnn.Sigmoid), *head(16)),
    }


@pytest.mark.parametrize("name", ["resnet", "mobilenetv2", "mobilenetv3", "efficientnet"])
def test_torch_cnns_compiled_for_cpu_int8(name: str) -> None:
    """Through the public API: ``nx.compile(from_torch(model), device="cpu", quantize="int8")``
    gives the same output as on the previous kernels, and so does every value of its graph
    under ``run_quantized`` (batch-norms folded, calibrated by ``nx.compile``), int8 and 16x8."""
    torch = pytest.importorskip("torch")
    import neurenix_core as nx

    model = _torch_models()[name].eval()
    rng = np.random.default_rng(71)
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    imported = nx.nn.from_torch(model, (torch.from_numpy(x),), static=True)
    calib = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(3)]
    for quantize in ("int8", "int16"):
        compiled = nx.compile(imported, device="cpu", quantize=quantize, calibration=calib, runtime="numpy", progress=False)
        assert "integer kernels" in compiled.summary
        probe = [x, calib[0], (x * 4).astype(np.float32)]
        new = [compiled(nx.asarray(v)).numpy() for v in probe]
        with previous_kernels():
            old = [compiled(nx.asarray(v)).numpy() for v in probe]
        for a, b in zip(new, old):
            same(a, b)
        _compare_model(compiled.graph, compiled.plan, [(x,), ((x * 4).astype(np.float32),)])


# ----------------------------------------------------------------------------- elementwise tables
def _float_path(node: Node, xs: list[np.ndarray], qps: list[QuantParams], out_qp: QuantParams) -> np.ndarray:
    """What ``run_quantized`` ran for an op without an integer kernel: dequantize, float64, quantize."""
    return Q.quantize(R.eval_node(node, [Q.dequantize(x, q) for x, q in zip(xs, qps)]), out_qp)


def _layouts(rng: np.random.Generator, codes: np.ndarray) -> list[np.ndarray]:
    """Every code at many positions: shuffled 1-D (odd length), NCHW, an NCHW view of NHWC memory,
    a strided slice, and a one-element array."""
    pool = np.concatenate([codes, rng.choice(codes, 1001)])
    rng.shuffle(pool)
    n = pool.size - pool.size % 60
    nhwc = pool[:n].reshape(-1, 3, 4, 5).copy()
    return [pool, pool[:n].reshape(-1, 5, 3, 4), nhwc.transpose(0, 3, 1, 2), pool[::3], pool[:1]]


UNARY_CASES = [("clip", {"min": 0.0, "max": 6.0}), ("clip", {"min": -1.0, "max": None}), ("hardswish", {}),
               ("hardsigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}), ("sigmoid", {}), ("silu", {}), ("tanh", {}),
               ("gelu", {"approximate": "none"}), ("gelu", {"approximate": "tanh"}), ("leaky_relu", {"alpha": 0.1}), ("elu", {}),
               ("selu", {}), ("celu", {"alpha": 0.5}), ("softplus", {}), ("softsign", {}), ("mish", {}), ("exp", {}), ("erf", {}),
               ("neg", {}), ("abs", {})]


@pytest.mark.parametrize("bits", [8, 16])
def test_unary_tables_are_the_float_path(bits: int) -> None:
    """Every op with a table, every input code at many positions and layouts: its table lookup
    gives the integers the float path gives (the unary table sets all have a case here)."""
    assert {op for op, _ in UNARY_CASES} == set(R._UNARY_TABLES)
    rng = np.random.default_rng(101 + bits)
    dtype = np.dtype(np.int8 if bits == 8 else np.int16)
    codes = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype)
    for op, attrs in UNARY_CASES:
        node = Node("u", op, ("x",), "y", attrs)
        for _ in range(2):
            in_qp, out_qp = _act(rng, bits), _act(rng, bits)
            plan = QuantizationPlan(bits, {"x": in_qp, "y": out_qp}, {})
            for x in _layouts(rng, codes):
                got = R._int_lookup(node, [x], plan)
                assert got is not None, op
                same(got, _float_path(node, [x], [in_qp], out_qp))


@pytest.mark.parametrize("op", sorted(R._BINARY_TABLES))
def test_binary_tables_are_the_float_path(op: str) -> None:
    """Every pair of int8 codes, equal shapes and broadcast ones (a squeeze-excite gate, a
    scalar), in NCHW and NHWC-view layouts."""
    rng = np.random.default_rng(111)
    codes = np.arange(-128, 128).astype(np.int8)
    a = np.repeat(codes, 256).reshape(4, 64, 16, 16)
    b = np.tile(codes, 256).reshape(4, 64, 16, 16)
    node = Node("b", op, ("a", "b"), "y")
    for _ in range(3):
        qa, qb, out_qp = _act(rng, 8), _act(rng, 8), _act(rng, 8)
        plan = QuantizationPlan(8, {"a": qa, "b": qb, "y": out_qp}, {})
        gate = rng.choice(codes, (4, 64, 1, 1))
        for x, y in ((a, b), (b, a), (a.transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2), b), (a, gate), (gate, b),
                     (a, np.array(7, np.int8))):
            got = R._int_lookup(node, [x, y], plan)
            assert got is not None
            same(got, _float_path(node, [x, y], [qa, qb], out_qp))
    assert R._int_lookup(node, [a, np.zeros((3,), np.int8)], plan) is None  # no broadcast: the float path raises


def test_tables_skip_what_they_do_not_cover() -> None:
    """A per-channel input, an int16 pair, a node with parameters: the float path runs."""
    qp8, qp16 = Q.activation_params(-1.0, 1.0), Q.activation_params(-1.0, 1.0, 16)
    x8, x16 = np.zeros((2, 3), np.int8), np.zeros((2, 3), np.int16)
    plan = QuantizationPlan(8, {"a": qp16, "b": qp16, "y": qp8}, {})
    assert R._int_lookup(Node("m", "mul", ("a", "b"), "y"), [x16, x16], plan) is None
    plan = QuantizationPlan(8, {"a": qp8, "y": qp8}, {})
    assert R._int_lookup(Node("p", "prelu", ("a",), "y"), [x8], plan) is None
    assert R._int_lookup(Node("c", "clip", ("a",), "y", {"min": 0.0}), [x16], plan) is None  # not the plan's type


# ----------------------------------------------------------------------------- the output stage
def test_requantize_matches_the_gemmlowp_composition() -> None:
    """Per tensor and per channel, 8 and 16 bits, multipliers from 1e-12 to 1e3 (left shifts
    included), exact powers of two (ties in both roundings), zero multipliers, accumulators to
    the int32 limits and beyond them (the bound check falls back), 0-d accumulators."""
    rng = np.random.default_rng(81)
    for it in range(1500):
        bits = 16 if it % 4 == 0 else 8
        qmin, qmax = Q.int_range(bits)
        out_qp = QuantParams(np.array([0.1], np.float32), np.array([0 if bits == 16 else int(rng.integers(-128, 128))]), bits, None, qmin, qmax)
        c = int(rng.integers(1, 6))
        real = [10.0 ** rng.uniform(-12, 1, c), 10.0 ** rng.uniform(-3, 3, c), 2.0 ** rng.integers(-40, 8, c).astype(float),
                np.r_[0.0, 10.0 ** rng.uniform(-6, 0, c - 1)], rng.uniform(0.5, 1.0, c) * 2.0 ** rng.integers(-35, 2, c)][it % 5]
        lim = [2**31, 2**33, int(rng.integers(1, 2**20))][int(rng.integers(0, 3))]
        acc = rng.integers(-lim, lim, (3, c, 4, 5), dtype=np.int64)
        acc.flat[:4] = [lim - 1, -lim, 0, -1]
        if rng.random() < 0.3:  # multiples of powers of two: exact halves for the rounding steps
            acc = (acc >> int(rng.integers(0, 30))) << int(rng.integers(0, 30))
        axis = 1 if c > 1 or rng.random() < 0.5 else None
        r = real if axis is not None else real[:1]
        want = old_requantize(acc, r, out_qp, axis, bits == 16)
        same(Q.requantize(acc, r, out_qp, axis, bits == 16), want)
        mult, shift = Q.quantize_multiplier(r)
        bound = int(np.abs(acc).max())
        same(Q.requantize_fixed(acc.copy(), mult, shift, out_qp, axis, bits == 16, overwrite=True, acc_bound=bound), want)
    # High multiplies near the int32 limit (multipliers in [0.25, 2): exponents 1 and 0; accumulators to 2**31): the
    # int32 tail's whole range, its sign test included.
    for it in range(200):
        c = int(rng.integers(1, 5))
        real = rng.uniform(0.25, 0.5, c) if it % 2 else rng.uniform(0.5, 2.0, c)
        out_qp = QuantParams(np.array([0.1], np.float32), np.array([0]), 16, None, -(2**31), 2**31 - 1)
        acc = rng.integers(-(2**31) + 1, 2**31 if it % 2 else 2**30, (c, 257), dtype=np.int64)
        mult, shift = Q.quantize_multiplier(real)
        want = old_requantize(acc, real, out_qp, 0, False)
        same(Q.requantize_fixed(acc.copy(), mult, shift, out_qp, 0, False, overwrite=True, acc_bound=int(np.abs(acc).max())), want)
    qp8 = Q.activation_params(-1.0, 1.0)
    for acc0 in (np.int64(12345), np.asarray(-77)):
        same(Q.requantize(np.asarray(acc0), np.array([0.01]), qp8, None, False), old_requantize(np.asarray(acc0), np.array([0.01]), qp8, None, False))


# ----------------------------------------------------------------------------- ONNX ConvInteger
def test_onnx_integer_convolution_as_im2col() -> None:
    """ConvInteger / QLinearConv's exact N-D convolution (1-D, 2-D, 3-D; groups, strides,
    dilations, asymmetric pads; uint8 and int8 centred values) against the per-tap einsums."""
    rng = np.random.default_rng(91)
    for _ in range(80):
        nd = int(rng.integers(1, 4))
        group = int(rng.choice([1, 2, 3]))
        cg, mg = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        kernel = tuple(int(rng.integers(1, 4)) for _ in range(nd))
        strides = tuple(int(rng.integers(1, 3)) for _ in range(nd))
        dil = tuple(int(rng.integers(1, 3)) for _ in range(nd))
        pads = tuple(int(rng.integers(0, 3)) for _ in range(2 * nd))
        size = tuple(dil[i] * (kernel[i] - 1) + 1 + int(rng.integers(0, 5)) for i in range(nd))
        x = rng.integers(-255, 256, (int(rng.integers(1, 3)), group * cg, *size)).astype(np.int64)
        w = rng.integers(-255, 256, (group * mg, cg, *kernel)).astype(np.int64)
        attrs = {"strides": strides if rng.random() < 0.8 else None, "dilations": dil, "pads": pads, "group": group}
        same(onnx_quant._int_conv(attrs, x, w), old_int_conv(attrs, x, w))


# ----------------------------------------------------------------------------- the benchmark
def test_int8_interpreter_benchmark_quick(tmp_path: Path) -> None:
    """benchmarks/int8_interpreter.py --quick on one model, one thread: both sides timed, their
    threads read back alike, the int8 output close to fp32. No timing is asserted."""
    pytest.importorskip("torch")
    out = tmp_path / "int8.json"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "int8_interpreter.py"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--threads", "1", "--models", "mobilenetv3s", "--json", str(out)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["model"] == "mobilenetv3s" and row["neurenix_us"] > 0 and row["native_us"] > 0 and row["refused"] is None
    assert row["neurenix_config"] == row["native_config"] == {"threads": 1}
    assert 0 < row["int8_err"] < 0.1
    assert "int8_interpreter: CPU " in proc.stdout and "| mobilenetv3s | int8 / fp32 | 1 | 1 |" in proc.stdout
