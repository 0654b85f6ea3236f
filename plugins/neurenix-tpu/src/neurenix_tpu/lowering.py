"""Core Graph -> one pure JAX function ``fn(params, *inputs)`` that ``jax.jit`` fuses into one XLA program.

Weights are laid out for the TPU once, on the host: convolutions run NHWC with HWIO kernels (the
layout the MXU tiles natively; XLA then needs no per-call transposes between layers), and in the
default ``bf16`` mode matmul/conv weights are stored as bfloat16 with float32 accumulation.
``fp32`` keeps float32 everywhere and asks for ``Precision.HIGHEST`` (no silent bf16 passes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from neurenix_core.errors import CompilationError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams

from neurenix_tpu import kernels

__all__ = ["Mode", "MODES", "resolve_mode", "Lowered", "lower_graph", "LOWERINGS"]

Array = Any


@dataclass(frozen=True, slots=True)
class Mode:
    """A precision mode: activation/weight dtype, the MXU precision flag and the accumulation dtype."""

    name: str
    compute: Any
    precision: Any
    acc: Any
    note: str


MODES: Mapping[str, Mode] = {
    "bf16": Mode("bf16", jnp.bfloat16, lax.Precision.DEFAULT, jnp.float32,
                 "bfloat16 weights and activations, float32 accumulation"),
    "fp32": Mode("fp32", jnp.float32, lax.Precision.HIGHEST, jnp.float32,
                 "float32 weights and activations, Precision.HIGHEST"),
}


# Quantized modes: weights live on the device as int8/int16 with per-channel float32 scales and
# are dequantized inside the fused program; every activation the plan names is
# quantize-dequantized (round half away from zero, clip) as the core's reference does. The
# arithmetic between boundaries is float32: this reproduces integer numerics, it does not drive
# the int8 MXU path.
_QUANT_NOTE = "{bits}-bit weights (per-channel scales) and quantize-dequantize at every activation from the core's plan, float32 arithmetic"
QUANT_MODES: Mapping[str, Mode] = {
    f"int{b}": Mode(f"int{b}", jnp.float32, lax.Precision.HIGHEST, jnp.float32, _QUANT_NOTE.format(bits=b)) for b in (8, 16)
}


def resolve_mode(precision: str | None, plan: QuantizationPlan | None = None) -> tuple[Mode, bool]:
    """The mode for ``precision`` and whether it was the default (None -> bf16, as on TPU)."""
    if plan is not None:
        return QUANT_MODES[f"int{plan.bits}"], False
    if precision in QUANT_MODES:
        raise CompilationError(
            f"tpu (plugin neurenix-tpu): precision {precision!r} needs a quantization plan: "
            f"nx.compile(model, device='tpu:0', quantize={precision!r}, calibration=[batches...])"
        )
    if precision is None:
        return MODES["bf16"], True
    mode = MODES.get(precision)
    if mode is None:
        raise CompilationError(
            f"tpu (plugin neurenix-tpu): precision {precision!r} is not supported; TPUs compute in "
            f"{' or '.join(repr(m) for m in MODES)} (pass precision='fp32' for float32 results), or int8/int16 with quantize="
        )
    return mode, False


class Value(NamedTuple):
    """A traced value and whether it is a 4-D tensor held as NHWC (its logical layout is NCHW)."""

    array: Array
    nhwc: bool = False


def nhwc(v: Value) -> Array:
    return v.array if v.nhwc or v.array.ndim != 4 else v.array.transpose(0, 2, 3, 1)


def nchw(v: Value) -> Array:
    return v.array.transpose(0, 3, 1, 2) if v.nhwc else v.array


Lowering = Callable[[Node, Mapping[str, Array], Sequence[Value], Mode], Value]


def _linear(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    return Value(kernels.linear(nchw(ins[0]), p["weight"], p.get("bias"), mode.precision, mode.acc))


def _conv2d(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    a = node.attrs
    y = kernels.conv2d(
        nhwc(ins[0]), p["weight"], p.get("bias"), a.get("stride", 1), a.get("padding", 0), a.get("dilation", 1),
        int(a.get("groups", 1)), layout=kernels.NHWC, precision=mode.precision, acc=mode.acc,
    )
    return Value(y, True)


def _pointwise(fn: Callable[[Array], Array]) -> Lowering:
    def lower(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
        return Value(fn(ins[0].array), ins[0].nhwc)  # layout-agnostic: keep whatever layout came in

    return lower


def _gelu(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    return Value(kernels.gelu(ins[0].array, node.attrs.get("approximate", "none")), ins[0].nhwc)


def _softmax(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    return Value(kernels.softmax(nchw(ins[0]), int(node.attrs.get("axis", -1))))


def _max_pool(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    a = node.attrs
    return Value(kernels.max_pool2d(nhwc(ins[0]), a["kernel_size"], a.get("stride"), a.get("padding", 0), nhwc=True), True)


def _avg_pool(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    a = node.attrs
    y = kernels.avg_pool2d(nhwc(ins[0]), a["kernel_size"], a.get("stride"), a.get("padding", 0), bool(a.get("count_include_pad", True)), nhwc=True)
    return Value(y, True)


def _adaptive(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    return Value(kernels.adaptive_avg_pool2d(nhwc(ins[0]), node.attrs["output_size"], nhwc=True), True)


def _flatten(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    x = nchw(ins[0])  # flatten order is defined on the logical NCHW layout
    start = int(node.attrs.get("start_dim", 1)) % x.ndim
    end = int(node.attrs.get("end_dim", -1)) % x.ndim
    return Value(x.reshape(x.shape[:start] + (-1,) + x.shape[end + 1 :]))


def _batch_norm(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    v = ins[0]
    x, axis, flag = (nhwc(v), 3, True) if v.array.ndim == 4 else (v.array, 1, False)
    y = kernels.batch_norm(x, p["running_mean"], p["running_var"], p.get("weight"), p.get("bias"), float(node.attrs.get("eps", 1e-5)), axis=axis)
    return Value(y, flag)


def _layer_norm(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    a = node.attrs
    return Value(kernels.layer_norm(nchw(ins[0]), a["normalized_shape"], p.get("weight"), p.get("bias"), float(a.get("eps", 1e-5))))


def _attention(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
    q, k, v = (nchw(ins[0]),) * 3 if len(ins) == 1 else tuple(nchw(i) for i in ins[:3])
    a = node.attrs
    y = kernels.attention(
        q, k, v, p["in_proj_weight"], p.get("in_proj_bias"), p["out_proj_weight"], p.get("out_proj_bias"),
        int(a["num_heads"]), bool(a.get("batch_first", False)), mode.precision, mode.acc,
    )
    return Value(y)


def _binary(fn: Callable[[Array, Array], Array]) -> Lowering:
    def lower(node: Node, p: Mapping[str, Array], ins: Sequence[Value], mode: Mode) -> Value:
        a, b = ins
        if a.nhwc and b.nhwc:
            return Value(fn(a.array, b.array), True)
        return Value(fn(nchw(a), nchw(b)))  # broadcasting is defined on the logical layout

    return lower


LOWERINGS: dict[str, Lowering] = {
    "linear": _linear,
    "conv2d": _conv2d,
    "relu": _pointwise(lambda x: jnp.maximum(x, 0)),
    "sigmoid": _pointwise(lambda x: kernels.jax.nn.sigmoid(x)),
    "tanh": _pointwise(jnp.tanh),
    "dropout": _pointwise(lambda x: x),  # identity at inference
    "gelu": _gelu,
    "softmax": _softmax,
    "max_pool2d": _max_pool,
    "avg_pool2d": _avg_pool,
    "adaptive_avg_pool2d": _adaptive,
    "flatten": _flatten,
    "batch_norm2d": _batch_norm,
    "layer_norm": _layer_norm,
    "multihead_attention": _attention,
    "add": _binary(jnp.add),
    "mul": _binary(jnp.multiply),
}

# Parameters multiplied on the MXU: stored in the compute dtype. Everything else (biases,
# normalisation statistics) stays float32; the kernels upcast where it matters.
_MXU_PARAMS = {"weight", "in_proj_weight", "out_proj_weight"}


def _layout_params(node: Node, mode: Mode, weight_qp: QuantParams | None = None) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, value in node.params.items():
        if value is None:  # an absent bias is absent, not NaN
            continue
        arr = np.asarray(value, dtype=np.float32)
        if key == "weight" and weight_qp is not None:
            from neurenix_core.graph import quantization as Q

            arr = Q.quantize_weight(arr, weight_qp)  # int8/int16, quantized once by the core's math
            out["weight_scale"] = np.asarray(weight_qp.scale, np.float32).reshape(-1)
        if node.op == "conv2d" and key == "weight":
            arr = arr.transpose(2, 3, 1, 0)  # OIHW -> HWIO, the TPU convolution layout
        if key in _MXU_PARAMS and node.op in ("linear", "conv2d", "multihead_attention") and weight_qp is None:
            arr = arr.astype(mode.compute)
        out[key] = np.ascontiguousarray(arr)
    return out


def _dequantized(node: Node, p: Mapping[str, Array]) -> Mapping[str, Array]:
    scale = p.get("weight_scale")
    if scale is None:
        return p
    # Output channels are axis 0 of (out, in) linear weights and the last axis of HWIO kernels.
    shape = (1, 1, 1, -1) if node.op == "conv2d" else (-1,) + (1,) * (p["weight"].ndim - 1)
    return {**p, "weight": p["weight"].astype(jnp.float32) * scale.reshape(shape)}


def _fake_quantize(x: Array, qp: QuantParams) -> Array:
    """quantize then dequantize with per-tensor parameters, rounding half away from zero."""
    scale = float(np.asarray(qp.scale, np.float32).ravel()[0])
    zp = float(np.asarray(qp.zero_point).ravel()[0])
    r = x.astype(jnp.float32) / scale
    q = jnp.clip(jnp.sign(r) * jnp.floor(jnp.abs(r) + 0.5) + zp, qp.qmin, qp.qmax)
    return ((q - zp) * scale).astype(x.dtype)


@dataclass(frozen=True, slots=True)
class Lowered:
    """A graph as a pure function of (params, *inputs) plus its host parameters in TPU layout."""

    fn: Callable[..., Any]
    params: dict[str, dict[str, np.ndarray]]
    mode: Mode
    node_count: int
    conv_layout: bool


def _check_ops(graph: Graph) -> None:
    for node in graph.nodes:
        if node.op not in LOWERINGS:
            raise UnsupportedOperationError(
                f"tpu (plugin neurenix-tpu): layer {node.name!r} ({node.op}) has no JAX lowering; run the model eagerly with model.to('tpu:0')"
            )


def _run_node(node: Node, params: Mapping[str, Mapping[str, Array]], env: dict[str, Value], mode: Mode) -> Value:
    try:
        return LOWERINGS[node.op](node, _dequantized(node, params.get(node.name, {})), [env[i] for i in node.inputs], mode)
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise CompilationError(f"tpu (plugin neurenix-tpu): cannot lower layer {node.name!r} ({node.op}): {type(exc).__name__}: {exc}") from exc


def lower_graph(graph: Graph, precision: str | None, plan: QuantizationPlan | None = None) -> Lowered:
    """Build the traced function once per graph structure; XLA compiles it per input shape."""
    _check_ops(graph)
    mode, _ = resolve_mode(precision, plan)
    nodes, inputs, outputs = graph.nodes, graph.inputs, graph.outputs
    acts = {} if plan is None or plan.dynamic else dict(plan.activations)

    def quantized(name: str, v: Value) -> Value:
        qp = acts.get(name)
        return v if qp is None else Value(_fake_quantize(v.array, qp), v.nhwc)

    def fn(params: Mapping[str, Mapping[str, Array]], *xs: Array) -> Any:
        env: dict[str, Value] = {}
        for spec, x in zip(inputs, xs):
            env[spec.name] = quantized(spec.name, Value(x.astype(mode.compute) if jnp.issubdtype(x.dtype, jnp.floating) else x))
        for node in nodes:
            env[node.output] = quantized(node.output, _run_node(node, params, env, mode))
        # Results come back in the dtype the caller gave (float32 in -> float32 out).
        outs = tuple(nchw(env[name]).astype(xs[0].dtype) for name in outputs)
        return outs[0] if len(outs) == 1 else outs

    weights = {} if plan is None else dict(plan.weights)
    params = {n.name: _layout_params(n, mode, weights.get(n.name)) for n in nodes if n.params}
    has_conv = any(n.op in ("conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm2d") for n in nodes)
    return Lowered(fn, params, mode, len(nodes), has_conv)
