"""Compressed linear layers that read one value, lowered as one FullyConnected and a split.

A transformer layer's query, key and value projections read the same normed hidden state, and so
do its MLP's gate and up projections. Decoding one token, each of those matrix products is small
(a few hundred kilobytes of int4 weights), and OpenVINO's CPU device spends about as long
starting a FullyConnected as reading its weights. Lowered as one FullyConnected over the weights
stacked by output channel, then a VariadicSplit (as onnxruntime-genai's model builder fuses
them, ``qkv_proj``): a stack of 30 such layer sets alone took 2.8 against 3.7 ms per token (int4,
int8 activations, one thread, the 135M model's shapes); in the whole 135M step, measured in one
process against the separate layers, 8.3 against 8.9 ms per decoded token (int4 weights, int8
activations) and 10.1 against 10.5 (int8 weights), with the same tokens.

Only weight-planned layers are joined: their integer codes are computed here anyway, so stacking
them costs no copy of a float weight (a float model's layers are OpenVINO constants over the
graph's own arrays). The codes and scales are per output channel (and per group of input
features), so the stacked layer computes exactly what the separate ones do: the same codes, the
same scales, the same activations (their run-time rounding is per input row and group).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from neurenix_core.contract import Graph, Node, QuantizationPlan, QuantParams, is_weight_plan

__all__ = ["joined_params", "sibling_groups"]


def sibling_groups(graph: Graph, plan: QuantizationPlan | None) -> dict[str, tuple[Node, ...]]:
    """Each weight-planned linear layer's group (name -> the layers, in graph order) where two or
    more read the same value with weights of one input width and one quantization layout."""
    if not is_weight_plan(plan):
        return {}
    assert plan is not None
    by_input: dict[tuple[object, ...], list[Node]] = defaultdict(list)
    for node in graph.nodes:
        q = plan.weights.get(node.name)
        if node.op == "linear" and q is not None:
            by_input[(node.inputs[0], *_layout(node, q))].append(node)
    return {n.name: tuple(members) for members in by_input.values() if len(members) > 1 for n in members}


def _layout(node: Node, q: QuantParams) -> tuple[object, ...]:
    """What layers must share to be stacked: input width, bits and groups per row."""
    scale = np.asarray(q.scale)
    return int(np.shape(node.params["weight"])[1]), q.bits, q.qmin, q.qmax, scale.shape[1] if scale.ndim == 2 else 0


def joined_params(group: tuple[Node, ...], weights: Mapping[str, QuantParams]) -> tuple[np.ndarray, QuantParams]:
    """The group's weights stacked by output channel, and their parameters stacked alike."""
    w = np.concatenate([np.asarray(n.params["weight"], np.float32) for n in group])
    qs = [weights[n.name] for n in group]
    scale = np.concatenate([np.asarray(q.scale, np.float32) for q in qs])
    zero = np.concatenate([np.asarray(q.zero_point) for q in qs])
    first = qs[0]
    return w, QuantParams(scale, zero, first.bits, first.axis, first.qmin, first.qmax)
