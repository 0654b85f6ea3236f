"""The ground truth: a float64 NumPy interpreter for graphs, and the integer reference.

``run_graph(graph, *inputs)`` evaluates every node in float64 with the CPU kernels of
``backends/cpu_nn.py``; every plugin's tests compare against it. With ``plan=`` it simulates a
quantized model (fake quantization of weights and activations). ``run_quantized(graph, plan,
*inputs)`` runs the integer arithmetic a TFLite int8 / 16x8 runtime performs, bit for bit, for
linear, conv2d (fused ReLU), relu, pooling, spatial means (TFLite's MEAN, requantized to the
output's own parameters) and reshapes; other ops run dequantize -> float64 ->
quantize, as a runtime without an integer kernel for them would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from neurenix_core.backends import cpu_nn as K
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

    p = {k: cast(v) for k, v in (node.params if params is None else params).items() if v is not None}
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


def _int_layer(node: Node, xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams, plan: QuantizationPlan) -> np.ndarray:
    """linear / conv2d: (x - zp) * w_q + bias_q in int32 (int64 for 16x8), then requantize."""
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


def _int_matmul(node: Node, xs: list[np.ndarray], held: list[bool], plan: QuantizationPlan) -> np.ndarray | None:
    """matmul/gemm in integers, or None when it runs the float path.

    A constant right-hand side (``plan.weights[node.name]``) is a fully connected layer:
    ``(x - zp) @ w_q + bias_q`` in int32 (int64 for 16x8), requantized per output channel with
    ``s_x * s_w[c] / s_out`` (TFLite FULLY_CONNECTED). Two activations (attention's q @ k^T and
    p @ v) multiply per tensor: ``(a - zp_a) @ (b - zp_b)`` requantized with ``s_a * s_b / s_out``
    (TFLite BATCH_MATMUL)."""
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


def _dynamic_linear(node: Node, x: np.ndarray, plan: QuantizationPlan) -> np.ndarray:
    """Dynamic quantization: the input is quantized per call (affine int8 from its own range),
    int32 accumulation against int8 weights, then a float rescale and float bias."""
    in_qp = Q.activation_params(float(x.min()), float(x.max()), 8)
    wqp = plan.weights[node.name]
    xq = Q.quantize(x, in_qp).astype(np.int64) - _zp(in_qp)
    wq = Q.quantize_weight(np.asarray(node.params["weight"]), wqp).astype(np.int64)
    acc = xq @ wq.T
    out = acc * (_s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64))
    bias = node.params.get("bias")
    return out if bias is None else out + np.asarray(bias, np.float64)


def run_quantized(graph: Graph, plan: QuantizationPlan, *inputs: Any, dequantize: bool = True, return_values: bool = False) -> Any:
    """Run ``graph`` as an integer runtime would with ``plan``.

    Static plans: inputs are quantized with their parameters, integer kernels run where TFLite
    has them, and the output is dequantized (``dequantize=False`` returns the raw integers).
    Dynamic plans: Linear layers run int8 x int8 -> int32 with per-call input quantization,
    everything else in float64.
    """
    _check_inputs(graph, inputs)
    graph = specialized(graph, inputs)
    Q.check_plan(graph, plan)
    if plan.dynamic:
        return _run_dynamic(graph, plan, inputs, return_values)
    acts = plan.activations
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
            out = _int_matmul(node, xs, [i in quantized for i in node.inputs], plan)
            if out is not None:
                values[node.output] = out
                quantized.add(node.output)
                continue
        if node.output in acts and all(i in quantized for i in node.inputs) and (
                node.op in Q.INTEGER_OPS or Q.is_spatial_mean(node, xs[0].ndim)):
            values[node.output] = _int_node(node, xs, plan)
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
