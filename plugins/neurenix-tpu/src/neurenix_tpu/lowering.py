"""Core Graph -> one pure JAX function ``fn(params, *inputs)`` that ``jax.jit`` fuses into one XLA program.

The driver: it checks that every node has a handler in :mod:`neurenix_tpu.optable` (the whole
opset), lays the weights out for the TPU once on the host, and builds the function that walks the
graph while jit traces it. Convolutions run NHWC with HWIO kernels (the layout the MXU tiles
natively; XLA then needs no per-call transposes between layers); in the default ``bf16`` mode
matmul/conv weights and float constants are stored as bfloat16 with float32 accumulation.
``fp32`` keeps float32 everywhere and asks for ``Precision.HIGHEST`` (no silent bf16 passes).

Integer values stay integers of their graph dtype: the backend enables ``jax_enable_x64`` when
it starts, so int64 token ids and indices are int64 on the device, not silently int32.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import jax
import jax.numpy as jnp
import numpy as np

from neurenix_core.contract import Graph, Node, QuantizationPlan, QuantParams, infer_values
from neurenix_core.errors import CompilationError, UnsupportedOperationError
from neurenix_tpu.modes import MODES, QUANT_MODES, Mode, resolve_mode
from neurenix_tpu.optable import LOWERINGS, Value, nchw

__all__ = ["LOWERINGS", "MODES", "QUANT_MODES", "Lowered", "Mode", "lower_graph", "on_leaves", "resolve_mode"]

Array = Any

#: Constants up to this many elements are written into the program as literals, so XLA folds
#: them (a scale, an epsilon, gather indices); larger ones are device-resident parameters.
INLINE_CONSTANT_MAX: Final = 64

# Parameters multiplied on the MXU (and embedding tables, whose rows are activations): stored in
# the compute dtype. Everything else (biases, normalisation statistics) stays float32; the
# handlers upcast where it matters.
_MXU_PARAMS: Final = {
    "linear": ("weight",), "conv2d": ("weight",), "conv1d": ("weight",), "embedding": ("weight",),
    "multihead_attention": ("in_proj_weight", "out_proj_weight"),
}


def _constant_value(value: Any, mode: Mode) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind == "f":
        return np.asarray(arr, dtype=np.float32).astype(mode.compute)  # floats flow in the compute dtype
    return arr  # ints keep their width (x64 is on), bools stay bool


def _layout_params(node: Node, mode: Mode, weight_qp: QuantParams | None = None) -> dict[str, np.ndarray]:
    if node.op == "constant":
        # np.asarray, not ascontiguousarray: the latter turns a 0-d constant (a gather index) into 1-d.
        return {"value": np.asarray(_constant_value(node.params["value"], mode), order="C")}
    out: dict[str, np.ndarray] = {}
    for key, value in node.params.items():
        if value is None:  # an absent bias is absent, not NaN
            continue
        arr = np.asarray(value, dtype=np.float32)
        if key == "weight" and weight_qp is not None:
            from neurenix_core.contract import quantize_weight

            arr = quantize_weight(arr, weight_qp)  # int8/int16, quantized once by the core's math
            out["weight_scale"] = np.asarray(weight_qp.scale, np.float32).reshape(-1)
        if node.op == "conv2d" and key == "weight":
            arr = arr.transpose(2, 3, 1, 0)  # OIHW -> HWIO, the TPU convolution layout
        if key in _MXU_PARAMS.get(node.op, ()) and weight_qp is None:
            arr = arr.astype(mode.compute)
        out[key] = np.asarray(arr, order="C")
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


def on_leaves(fn: Callable[..., Any], treedef: Any) -> Callable[..., Any]:
    """``fn(params, *xs)`` as a function of the flat weight tuple: the dict is rebuilt while jit
    traces, so the XLA program is the same and only the per-call argument flattening shrinks.
    Here, beside :class:`Lowered`, because every caller of a lowering (compiled.py, the
    persistent cache's export, the XLA:CPU host runtime) jits it this way."""

    def program(leaves: tuple[Any, ...], *xs: Any) -> Any:
        return fn(jax.tree_util.tree_unflatten(treedef, leaves), *xs)

    return program


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


def _split_params(graph: Graph, mode: Mode, plan: QuantizationPlan | None) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, np.ndarray]]]:
    """(device-resident params, small constants inlined into the program), per node name."""
    weights = {} if plan is None else dict(plan.weights)
    params: dict[str, dict[str, np.ndarray]] = {}
    inline: dict[str, dict[str, np.ndarray]] = {}
    for n in graph.nodes:
        if not n.params:
            continue
        laid = _layout_params(n, mode, weights.get(n.name))
        small = n.op == "constant" and laid["value"].size <= INLINE_CONSTANT_MAX
        (inline if small else params)[n.name] = laid
    return params, inline


def _output_dtypes(graph: Graph) -> tuple[Any, ...]:
    specs = infer_values(graph)
    return tuple(jnp.bool_ if specs[name].dtype == "bool" else jnp.dtype(specs[name].dtype) for name in graph.outputs)


def lower_graph(graph: Graph, precision: str | None, plan: QuantizationPlan | None = None) -> Lowered:
    """Build the traced function once per graph structure; XLA compiles it per input shape."""
    _check_ops(graph)
    mode, _ = resolve_mode(precision, plan)
    nodes, inputs, outputs = graph.nodes, graph.inputs, graph.outputs
    acts = {} if plan is None or plan.dynamic else dict(plan.activations)
    out_dtypes = _output_dtypes(graph)
    params, inline = _split_params(graph, mode, plan)

    def quantized(name: str, v: Value) -> Value:
        qp = acts.get(name)
        return v if qp is None else Value(_fake_quantize(v.array, qp), v.nhwc)

    def fn(device_params: Mapping[str, Mapping[str, Array]], *xs: Array) -> Any:
        merged = {**device_params, **inline}
        env: dict[str, Value] = {}
        for spec, x in zip(inputs, xs):
            env[spec.name] = quantized(spec.name, Value(x.astype(mode.compute) if jnp.issubdtype(x.dtype, jnp.floating) else x))
        for node in nodes:
            env[node.output] = quantized(node.output, _run_node(node, merged, env, mode))
        # Results come back in the graph's dtypes (float32 out, whatever the compute dtype).
        outs = tuple(nchw(env[name]).astype(dt) for name, dt in zip(outputs, out_dtypes))
        return outs[0] if len(outs) == 1 else outs

    has_conv = any(n.op in ("conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "batch_norm2d") for n in nodes)
    return Lowered(fn, params, mode, len(nodes), has_conv)
