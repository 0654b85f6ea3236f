"""Weight-only quantization: int8 per output channel, int4 in groups along the input axis.

``nx.compile(..., quantize="int8-weights" | "int4-weights")`` plans it once here and every
backend lowers the same numbers. Only the weights of ``linear`` layers are quantized; activations
stay in the model's float precision (what language-model runtimes call weight compression).

* int8: symmetric per output channel, codes in [-127, 127], ``scale[c] = max|w[c]| / 127``.
* int4: symmetric per group of ``g`` consecutive input features, codes in [-7, 7],
  ``scale[c, k] = max|w[c, k*g:(k+1)*g]| / 7``. Symmetric because the Intel NPU's compressed
  weights are; ``g`` is the first of 64, 32, 128, 16 that divides the input width (a width none
  divides gets one group: per channel). The last linear layer (a language model's output head)
  stays int8 per channel, as NNCF's int4 default does.
* Embedding tables (``embedding``): int8 per row in every scheme (a row is what one token reads),
  as NNCF keeps them int8 in its int4 modes; at 135M parameters the f32 table was 113 MB of the
  int8 model's 239 MB.

``"int8-weights-int8-activations"`` / ``"int4-weights-int8-activations"``: the same weights, and
each planned layer's input quantized to int8 at run time per row in groups of 32 features
(``activation_groups.py``; the plan's ``dynamic`` is True). Only layers whose input width is a
multiple of 32 are planned; the others stay float. A language model's prompt is faster on CPUs
with integer dot products, and the result further from float: ``CausalLM.check_quantization``
measures it.

A plan is a :class:`QuantizationPlan` with ``method="weights"`` whose ``weights`` hold each
layer's :class:`QuantParams` (a 2-D ``scale (out, groups)`` for int4). Its meaning is
:func:`dequantized`: the float model whose weights are ``codes * scale``. A plugin that lowers
the scheme natively (it lists ``"int8-weights"`` / ``"int4-weights"`` in
``Capabilities.quantization``) computes the same codes with :func:`weight_codes` and keeps them
in its own compressed form; on every other device ``nx.compile`` runs the dequantized model,
which has the quantized model's values and fp32's memory and speed, and says so (with the
activation schemes, the graph of :func:`activation_groups.with_quantized_inputs` too).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from neurenix_core.errors import QuantizationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams
from neurenix_core.graph.quantization.activation_groups import ACTIVATION_GROUP, groups_fit, with_quantized_inputs

__all__ = ["ACTIVATION_SCHEMES", "GROUP_SIZES", "WEIGHT_SCHEMES", "dequantize", "dequantized", "group_size", "is_weight_plan",
           "quantizes_activations", "scheme_of", "tables", "weight_codes", "weight_plan"]

#: ``quantize=`` values of weight quantization, and their weights' bit widths.
WEIGHT_SCHEMES: Final = {"int8-weights": 8, "int4-weights": 4, "int8-weights-int8-activations": 8, "int4-weights-int8-activations": 4}
#: The schemes whose layers also quantize their input at run time (activation_groups.py).
ACTIVATION_SCHEMES: Final = frozenset({"int8-weights-int8-activations", "int4-weights-int8-activations"})
#: int4 group sizes, in order of preference (the first that divides the input width).
GROUP_SIZES: Final = (64, 32, 128, 16)
_RANGE: Final = {8: 127, 4: 7}


def is_weight_plan(plan: QuantizationPlan | None) -> bool:
    """Whether ``plan`` is a weight-only plan (this module's)."""
    return plan is not None and plan.method == "weights"


def quantizes_activations(plan: QuantizationPlan | None) -> bool:
    """Whether ``plan`` is a weight plan whose layers quantize their input at run time too."""
    return plan is not None and is_weight_plan(plan) and plan.dynamic


def scheme_of(plan: QuantizationPlan) -> str:
    """The scheme name ("int8-weights", "int4-weights-int8-activations", ...) of a weight plan."""
    return next(name for name, bits in WEIGHT_SCHEMES.items()
                if bits == plan.bits and (name in ACTIVATION_SCHEMES) == bool(plan.dynamic))


def group_size(in_features: int, multiple: int = 1) -> int:
    """The int4 group size for an input width (the width itself when no preferred size divides it),
    among sizes that are a multiple of ``multiple`` (the activation group, where activations are
    quantized too: OpenVINO's CPU device leaves them in float under smaller weight groups)."""
    return next((g for g in GROUP_SIZES if in_features % g == 0 and in_features > g and g % multiple == 0), in_features)


def _params(w: np.ndarray, bits: int, multiple: int = 1) -> QuantParams:
    """Symmetric parameters of one ``(out, in)`` weight: per channel (int8) or per group (int4,
    groups a multiple of ``multiple`` wide)."""
    top = _RANGE[bits]
    # |w| and its maximum are exact in the weight's own float type: no float64 copy (226 MB for a
    # 49,152 x 576 output head); the scale is divided in float64 as before.
    wv = np.asarray(w)
    if wv.dtype not in (np.float32, np.float64):
        wv = wv.astype(np.float64)
    out, width = wv.shape
    groups = 1 if bits == 8 else width // group_size(width, multiple)
    bound = np.abs(wv.reshape(out, groups, -1)).max(axis=2).astype(np.float64)
    step = (bound / top).astype(np.float32)
    # An all-zero (or denormal) group quantizes to zeros with scale 1, as weight_params does.
    scale = np.where(step >= np.finfo(np.float32).tiny, step, np.float32(1.0)).astype(np.float32)
    scale = scale[:, 0] if bits == 8 else scale
    return QuantParams(scale, np.zeros(scale.shape, np.int64), bits, 0, -top, top)


def weight_plan(graph: Graph, scheme: str) -> QuantizationPlan:
    """The plan of ``scheme`` (a :data:`WEIGHT_SCHEMES` name) for every 2-D float linear weight
    (with int8 activations: those whose input width is a whole number of activation groups)."""
    bits = WEIGHT_SCHEMES.get(scheme)
    if bits is None:
        raise QuantizationError(f"weight quantization {scheme!r}; use one of {', '.join(WEIGHT_SCHEMES)}")
    activations = scheme in ACTIVATION_SCHEMES
    linears = [n for n in graph.nodes if _quantizable(n, "linear")]
    head = linears[-1] if len(linears) > 1 else None
    layers = [n for n in linears if not activations or groups_fit(n.params["weight"].shape[1])]
    if not layers:
        widths = f" whose input width is a multiple of {ACTIVATION_GROUP}" if activations else ""
        raise QuantizationError(f"{scheme} quantizes the weights of linear layers{widths}, and this model has none")
    # int4 keeps the last linear layer (a language model's output head) at int8 per channel, as
    # NNCF's and OpenVINO GenAI's int4 do by default: its error reaches every logit directly.
    multiple = ACTIVATION_GROUP if activations else 1
    weights = {n.name: _params(np.asarray(n.params["weight"]), 8 if n is head else bits, multiple) for n in layers}
    # Embedding tables: int8 per row (per token), their rows gathered, never multiplied.
    weights.update({n.name: _params(np.asarray(n.params["weight"]), 8) for n in graph.nodes if _quantizable(n, "embedding")})
    return QuantizationPlan(bits=bits, activations={}, weights=weights, method="weights", dynamic=activations)


def tables(graph: Graph, plan: QuantizationPlan) -> list[str]:
    """The embedding tables ``plan`` quantizes (the rest of a weight plan is linear layers)."""
    return [n.name for n in graph.nodes if n.op == "embedding" and n.name in plan.weights]


def _quantizable(node: Node, op: str) -> bool:
    w = node.params.get("weight")
    return node.op == op and isinstance(w, np.ndarray) and w.ndim == 2 and w.dtype.kind == "f" and w.size > 0


def _groups(shape: tuple[int, ...], q: QuantParams) -> tuple[tuple[int, int, int], np.ndarray]:
    """An ``(out, in)`` weight's shape as ``(out, groups, group)`` and its scale as
    ``(out, groups, 1)``: per channel is one group per row."""
    scale = np.asarray(q.scale, np.float32).reshape(shape[0], -1, 1)
    return (shape[0], scale.shape[1], shape[1] // scale.shape[1]), scale


def weight_codes(weight: Any, q: QuantParams) -> np.ndarray:
    """The integer codes (int8 storage, in ``[q.qmin, q.qmax]``) of an ``(out, in)`` weight:
    ``rint(w / scale)`` per channel, or per group when ``q.scale`` is ``(out, groups)``."""
    w = np.asarray(weight, np.float32)
    grouped, scale = _groups(w.shape, q)
    return np.clip(np.rint(w.reshape(grouped) / scale), q.qmin, q.qmax).astype(np.int8).reshape(w.shape)


def dequantize(codes: np.ndarray, q: QuantParams) -> np.ndarray:
    """``codes * scale`` as float32, the weight the quantized model computes with."""
    grouped, scale = _groups(codes.shape, q)
    return (codes.reshape(grouped) * scale).reshape(codes.shape).astype(np.float32)


def dequantized(graph: Graph, plan: QuantizationPlan) -> Graph:
    """The float graph a weight plan means: each planned weight replaced by ``codes * scale`` (and,
    where the plan quantizes activations, each planned layer's input by groups first)."""
    from dataclasses import replace

    nodes = []
    for node in graph.nodes:
        q = plan.weights.get(node.name)
        if q is not None:
            w = np.asarray(node.params["weight"])
            node = replace(node, params={**node.params, "weight": dequantize(weight_codes(w, q), q).astype(w.dtype)})
        nodes.append(node)
    out = replace(graph, nodes=tuple(nodes))
    if not quantizes_activations(plan):
        return out
    return with_quantized_inputs(out, [n.name for n in graph.nodes if n.op == "linear" and n.name in plan.weights])
