"""int8 activations quantized at run time, per row in groups of 32 input features.

The ``"int8-weights-int8-activations"`` / ``"int4-weights-int8-activations"`` schemes
(``weights.py``) quantize each planned linear layer's input on every call: every row (token) is
cut into groups of :data:`ACTIVATION_GROUP` consecutive features along the input axis, and each
group is rounded to int8 codes in [-127, 127] with its own symmetric scale ``max|x_group| / 127``.
The layer then multiplies those codes by its integer weights. This is what OpenVINO's CPU device
does for compressed weights with ``DYNAMIC_QUANTIZATION_GROUP_SIZE=32`` (measured against this
definition to within 3e-6 on the 135M model's layer shapes); onnxruntime-genai's integer-compute
kernels round in their own blocks (the weights' block of 64), which is not checked here.

Its meaning in float (what the core's reference computes and every device without native kernels
runs) is :func:`with_quantized_inputs`: each planned layer's input replaced by
``round(x / s) * s`` per group, in ops of the opset.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Final

import numpy as np

from neurenix_core.graph.ir import Graph, Node
from neurenix_core.graph.ir.core import fresh_name

__all__ = ["ACTIVATION_GROUP", "groups_fit", "quantize_groups", "with_quantized_inputs"]

#: Input features per activation scale (OpenVINO GenAI's CPU default).
ACTIVATION_GROUP: Final = 32
_TOP: Final = 127.0
# A group of zeros gets this scale instead of 0 (its codes are then 0, not 0 / 0).
_TINY: Final = float(np.finfo(np.float32).tiny)


def groups_fit(in_features: int) -> bool:
    """Whether a layer of this input width has its activations quantized: a whole number of groups
    (a layer of another width keeps float weights and activations under these schemes)."""
    return in_features >= ACTIVATION_GROUP and in_features % ACTIVATION_GROUP == 0


def quantize_groups(x: np.ndarray) -> np.ndarray:
    """``x`` (..., K) as the layer computes with it: int8 codes times each group's scale (float64)."""
    x64 = np.asarray(x, np.float64)
    grouped = x64.reshape(*x64.shape[:-1], -1, ACTIVATION_GROUP)
    scale = np.maximum(np.abs(grouped).max(axis=-1, keepdims=True) / _TOP, _TINY)
    return (np.rint(grouped / scale) * scale).reshape(x64.shape)


def with_quantized_inputs(graph: Graph, layers: Collection[str]) -> Graph:
    """``graph`` with the input of each linear node named in ``layers`` quantized by groups first
    (reshape to (..., K / 32, 32), the scale from the group's largest magnitude, round, rescale,
    reshape back): the float meaning of the schemes, runnable by every device and the reference."""
    wanted = [n for n in graph.nodes if n.name in layers and n.op == "linear"]
    if not wanted:
        return graph
    shapes = _example_shapes(graph)
    taken = {s.name for s in graph.inputs} | {n.name for n in graph.nodes} | {n.output for n in graph.nodes}
    top = Node(fresh_name("act_groups/127", taken), "constant", (), fresh_name("act_groups/127:v", taken), {},
               {"value": np.asarray(_TOP, np.float32)})
    tiny = Node(fresh_name("act_groups/tiny", taken), "constant", (), fresh_name("act_groups/tiny:v", taken), {},
                {"value": np.asarray(_TINY, np.float32)})
    nodes: list[Node] = [top, tiny]
    for node in graph.nodes:
        if node in wanted:
            x = node.inputs[0]
            quantized = _group_nodes(node.name, x, len(shapes[x]), int(shapes[x][-1]), top.output, tiny.output, taken)
            nodes.extend(quantized)
            node = replace(node, inputs=(quantized[-1].output, *node.inputs[1:]))
        nodes.append(node)
    return replace(graph, nodes=tuple(nodes))


def _example_shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    """Every value's shape at the inputs' example sizes (a dynamic graph's size attributes made
    concrete first): the rewrite needs each layer input's rank and width, which no size changes."""
    from neurenix_core.graph.ir.shapes import infer_shapes
    from neurenix_core.graph.ir.specialize import fold_size_constants

    static = fold_size_constants(graph.with_input_shapes(*(s.shape for s in graph.inputs))) if graph.dynamic else graph
    return infer_shapes(static)


def _group_nodes(layer: str, x: str, rank: int, width: int, top: str, tiny: str, taken: set[str]) -> list[Node]:
    """The ops that quantize ``x`` (rank ``rank``, last axis ``width``) by groups."""
    nodes: list[Node] = []

    def emit(suffix: str, op: str, inputs: tuple[str, ...], attrs: dict[str, object] | None = None) -> str:
        name = fresh_name(f"{layer}/act_groups/{suffix}", taken)
        nodes.append(Node(name, op, inputs, name, attrs or {}))
        return name

    keep = (0,) * (rank - 1)  # reshape's 0 copies a dimension: the leading axes may be dynamic
    grouped = emit("grouped", "reshape", (x,), {"shape": (*keep, width // ACTIVATION_GROUP, ACTIVATION_GROUP)})
    largest = emit("max", "reduce_max", (emit("abs", "abs", (grouped,)),), {"axes": (-1,), "keepdims": True})
    scale = emit("scale", "maximum", (emit("step", "div", (largest, top)), tiny))
    # |x / scale| <= 127 by construction: the codes need no clip.
    codes = emit("codes", "round", (emit("ratio", "div", (grouped, scale)),))
    emit("rows", "reshape", (emit("values", "mul", (codes, scale)),), {"shape": (*keep, width)})
    return nodes
