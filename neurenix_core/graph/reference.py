"""The ground truth: a float64 NumPy interpreter for graphs, and the integer reference.

``run_graph(graph, *inputs)`` evaluates every node in float64 with the CPU kernels of
``backends/cpu_nn.py``; every plugin's tests compare against it. With ``plan=`` it simulates a
quantized model (fake quantization of weights and activations). ``run_quantized(graph, plan,
*inputs)`` runs the integer arithmetic a TFLite int8 / 16x8 runtime performs, bit for bit, for
linear, conv2d (fused ReLU), relu, pooling and reshapes; other ops run dequantize -> float64 ->
quantize, as a runtime without an integer kernel for them would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from neurenix_core.graph import qmath as Q
from neurenix_core.backends import cpu_nn as K
from neurenix_core.errors import ShapeError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams

__all__ = ["run_graph", "run_quantized", "eval_node"]

Arrays = list[np.ndarray]


def _attention(n: Node, x: Arrays, p: Mapping[str, np.ndarray]) -> np.ndarray:
    q, k, v = x
    if not n.attrs.get("batch_first", False):
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
    e, h = n.attrs["embed_dim"], n.attrs["num_heads"]
    d = e // h
    w, b = p["in_proj_weight"], p.get("in_proj_bias")
    bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e : 2 * e], b[2 * e :])

    def heads(t: np.ndarray) -> np.ndarray:
        return t.reshape(t.shape[0], t.shape[1], h, d).transpose(0, 2, 1, 3)

    qh, kh, vh = heads(K.linear(q, w[:e], bq)), heads(K.linear(k, w[e : 2 * e], bk)), heads(K.linear(v, w[2 * e :], bv))
    att = K.softmax(qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(d), -1)
    ctx = (att @ vh).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    out = K.linear(ctx, p["out_proj_weight"], p.get("out_proj_bias"))
    return out if n.attrs.get("batch_first", False) else out.transpose(1, 0, 2)


def _flatten(n: Node, x: Arrays, p: Mapping[str, np.ndarray]) -> np.ndarray:
    t = x[0]
    s, e = n.attrs["start_dim"] % t.ndim, n.attrs["end_dim"] % t.ndim
    return t.reshape(t.shape[:s] + (-1,) + t.shape[e + 1 :])


_FLOAT: dict[str, Callable[[Node, Arrays, Mapping[str, np.ndarray]], np.ndarray]] = {
    "linear": lambda n, x, p: K.linear(x[0], p["weight"], p.get("bias")),
    "conv2d": lambda n, x, p: K.conv2d(x[0], p["weight"], p.get("bias"), n.attrs["stride"], n.attrs["padding"], n.attrs["dilation"], n.attrs["groups"]),
    "relu": lambda n, x, p: K.relu(x[0]),
    "gelu": lambda n, x, p: K.gelu(x[0], n.attrs.get("approximate", "none")),
    "sigmoid": lambda n, x, p: K.sigmoid(x[0]),
    "tanh": lambda n, x, p: K.tanh(x[0]),
    "softmax": lambda n, x, p: K.softmax(x[0], n.attrs["axis"]),
    "max_pool2d": lambda n, x, p: K.max_pool2d(x[0], n.attrs["kernel_size"], n.attrs["stride"], n.attrs["padding"]),
    "avg_pool2d": lambda n, x, p: K.avg_pool2d(x[0], n.attrs["kernel_size"], n.attrs["stride"], n.attrs["padding"], n.attrs.get("count_include_pad", True)),
    "adaptive_avg_pool2d": lambda n, x, p: K.adaptive_avg_pool2d(x[0], n.attrs["output_size"]),
    "flatten": _flatten,
    "batch_norm2d": lambda n, x, p: K.batch_norm(x[0], p["running_mean"], p["running_var"], p.get("weight"), p.get("bias"), n.attrs["eps"]),
    "layer_norm": lambda n, x, p: K.layer_norm(x[0], n.attrs["normalized_shape"], p.get("weight"), p.get("bias"), n.attrs["eps"]),
    "dropout": lambda n, x, p: x[0],
    "multihead_attention": _attention,
    "add": lambda n, x, p: x[0] + x[1],
    "mul": lambda n, x, p: x[0] * x[1],
}


def eval_node(node: Node, inputs: Arrays, params: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """One node in float64 (``params`` overrides the node's own, e.g. fake-quantized weights)."""
    p = {k: np.asarray(v, np.float64) for k, v in (node.params if params is None else params).items()}
    try:
        return _FLOAT[node.op](node, [np.asarray(a, np.float64) for a in inputs], p)
    except ValueError as exc:
        shapes = [tuple(np.shape(a)) for a in inputs]
        raise ShapeError(f"layer {node.name!r} ({node.op}) cannot take input shape(s) {shapes}: {exc}") from exc


def _check_inputs(graph: Graph, inputs: tuple[Any, ...]) -> None:
    if len(inputs) != len(graph.inputs):
        raise ShapeError(f"the graph takes {len(graph.inputs)} input(s) ({[s.name for s in graph.inputs]}), got {len(inputs)}")


def _fq_params(node: Node, plan: QuantizationPlan) -> Mapping[str, np.ndarray] | None:
    qp = plan.weights.get(node.name)
    if qp is None:
        return None
    return dict(node.params) | {"weight": Q.fake_quantize(np.asarray(node.params["weight"]), qp)}


def run_graph(graph: Graph, *inputs: Any, plan: QuantizationPlan | None = None, return_values: bool = False) -> Any:
    """Evaluate ``graph`` in float64. Returns the output (a tuple for several outputs), or every
    value by name with ``return_values=True``. With ``plan`` (static), weights and activations
    are fake-quantized as an integer runtime would represent them."""
    _check_inputs(graph, inputs)
    values: dict[str, np.ndarray] = {}
    for spec, x in zip(graph.inputs, inputs):
        arr = np.asarray(x, np.float64)
        values[spec.name] = arr if plan is None or plan.dynamic else Q.fake_quantize(arr, plan.activations[spec.name])
    for node in graph.nodes:
        out = eval_node(node, [values[i] for i in node.inputs], None if plan is None else _fq_params(node, plan))
        if plan is not None and not plan.dynamic:
            out = Q.fake_quantize(out, plan.activations[node.output])
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
        a = node.attrs
        # Zero padding of (x - zp) is TFLite's padding with the input zero point.
        acc = K.conv2d(x, wq, None, a["stride"], a["padding"], a["dilation"], a["groups"]) + bias.reshape(1, -1, 1, 1)
        axis = 1
    wide = in_qp.bits == 16
    if not wide and (acc.min() < np.iinfo(np.int32).min or acc.max() > np.iinfo(np.int32).max):
        raise OverflowError(f"layer {node.name!r}: int32 accumulator overflow")
    real = _s(in_qp) * np.asarray(wqp.scale, np.float32).astype(np.float64) / _s(out_qp)
    return Q.requantize(acc, real, out_qp, axis, wide)


def _int_relu(xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams) -> np.ndarray:
    if in_qp is out_qp or (_s(in_qp) == _s(out_qp) and _zp(in_qp) == _zp(out_qp)):
        return np.maximum(xq, _zp(out_qp)).astype(out_qp.dtype)
    # TFLite's ReluQuantized: rescale (x - zp_in), add zp_out, clamp below at zp_out.
    out = Q.requantize(xq.astype(np.int64) - _zp(in_qp), np.array([_s(in_qp) / _s(out_qp)]), out_qp, None, in_qp.bits == 16)
    return np.maximum(out, _zp(out_qp)).astype(out_qp.dtype)


def _int_avg(node: Node, xq: np.ndarray, qp: QuantParams) -> np.ndarray:
    """TFLite's integer AveragePool: sum of raw values, divide rounding half away from zero."""
    a = node.attrs
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
    if node.op == "relu":
        return _int_relu(xq, in_qp, out_qp)
    if node.op == "max_pool2d":
        a = node.attrs
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
    Q.check_plan(graph, plan)
    if plan.dynamic:
        return _run_dynamic(graph, plan, inputs, return_values)
    acts = plan.activations
    values: dict[str, np.ndarray] = {s.name: Q.quantize(np.asarray(x, np.float64), acts[s.name]) for s, x in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        xs = [values[i] for i in node.inputs]
        if node.op in Q.INTEGER_OPS:
            values[node.output] = _int_node(node, xs, plan)
        else:
            real = [Q.dequantize(x, acts[i]) for x, i in zip(xs, node.inputs)]
            values[node.output] = Q.quantize(eval_node(node, real), acts[node.output])
    if return_values:
        return values
    outs = tuple(Q.dequantize(values[o], acts[o]) if dequantize else values[o] for o in graph.outputs)
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
