"""Graphs of ONNX Conv / ConvTranspose with the weight and bias as graph inputs (opset ``conv`` /
``conv_transpose``: the convolutions of training graphs, whose weights are values), for the
plugins that lower them (cuda, tpu): compare with
``neurenix_core.graph.reference.run.run_graph(graph, *inputs)``.

``CASES`` covers 1-3 spatial axes, strides, dilations, asymmetric pads, groups, bias and none,
auto_pad, output_padding (also beyond the stride) and output_shape; ``chain_graph`` is a small
training-style graph (conv -> relu -> conv_transpose -> conv whose weight is computed in the graph).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.graph.ir import Graph, Node, TensorSpec

__all__ = ["CASES", "Case", "case_graph", "chain_graph"]

_RNG = np.random.default_rng(23)


def _f(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


#: (id, op, x shape, weight shape, bias?, attrs). conv weights are (O, C/group, *k), conv_transpose
#: weights (C, O/group, *k).
Case = tuple[str, str, tuple[int, ...], tuple[int, ...], bool, dict[str, Any]]

CASES: list[Case] = [
    ("conv1d_stride_dilation_asym_groups", "conv", (2, 4, 11), (6, 2, 3), True,
     {"strides": (2,), "dilations": (2,), "pads": (1, 2), "group": 2}),
    ("conv1d_valid_no_bias", "conv", (2, 3, 9), (5, 3, 4), False, {"auto_pad": "VALID"}),
    ("conv2d_asym_pads", "conv", (2, 3, 9, 8), (4, 3, 3, 2), True, {"strides": (2, 1), "dilations": (1, 2), "pads": (0, 1, 2, 0)}),
    ("conv2d_depthwise_same_upper", "conv", (1, 3, 7, 8), (6, 1, 3, 3), True, {"strides": (2, 2), "auto_pad": "SAME_UPPER", "group": 3}),
    ("conv2d_same_lower_no_bias", "conv", (2, 2, 6, 5), (3, 2, 2, 3), False, {"auto_pad": "SAME_LOWER", "dilations": (2, 1)}),
    ("conv2d_defaults", "conv", (1, 2, 5, 5), (3, 2, 3, 3), False, {}),
    ("conv3d_asym_pads", "conv", (1, 2, 5, 6, 4), (4, 2, 2, 3, 2), True, {"strides": (1, 2, 1), "pads": (1, 0, 1, 0, 1, 1)}),
    ("conv3d_groups_no_bias", "conv", (2, 4, 4, 4, 4), (2, 2, 3, 1, 2), False,
     {"group": 2, "dilations": (1, 1, 2), "pads": (1, 0, 0, 1, 0, 1)}),
    ("conv_t1d_output_padding_groups", "conv_transpose", (2, 4, 5), (4, 3, 3), True,
     {"strides": (2,), "pads": (1, 0), "output_padding": (1,), "group": 2}),
    ("conv_t1d_no_bias", "conv_transpose", (1, 3, 6), (3, 2, 4), False, {"strides": (3,), "dilations": (2,)}),
    ("conv_t2d_asym_pads", "conv_transpose", (2, 4, 5, 4), (4, 2, 3, 3), True,
     {"strides": (2, 3), "dilations": (1, 2), "pads": (1, 2, 0, 1), "output_padding": (1, 0), "group": 2}),
    # Pads wider than the kernel's extent: cropped after the transposed convolution.
    ("conv_t2d_pads_beyond_kernel", "conv_transpose", (1, 2, 6, 6), (2, 3, 3, 3), True, {"strides": (2, 2), "pads": (3, 0, 3, 4)}),
    # output_padding not below the stride: zeros (then the bias) appended.
    ("conv_t2d_output_padding_beyond_stride", "conv_transpose", (1, 2, 4, 5), (2, 2, 2, 2), True,
     {"output_padding": (2, 1), "pads": (0, 1, 0, 0)}),
    ("conv_t2d_output_shape", "conv_transpose", (1, 3, 4, 4), (3, 2, 3, 3), True,
     {"strides": (2, 2), "output_shape": (8, 9), "auto_pad": "SAME_UPPER"}),
    ("conv_t2d_output_shape_larger", "conv_transpose", (1, 3, 3, 3), (3, 2, 2, 2), False, {"strides": (2, 2), "output_shape": (9, 7)}),
    ("conv_t2d_same_lower", "conv_transpose", (2, 2, 3, 5), (2, 4, 3, 2), True, {"strides": (2, 3), "auto_pad": "SAME_LOWER"}),
    ("conv_t3d", "conv_transpose", (1, 2, 3, 4, 3), (2, 3, 2, 3, 2), True,
     {"strides": (2, 1, 2), "pads": (0, 1, 0, 1, 0, 0), "output_padding": (1, 0, 0)}),
]


def case_graph(case: Case, static: bool = True) -> tuple[Graph, list[np.ndarray]]:
    """One node whose weight (and bias) are graph inputs, and inputs for it; ``static=False``:
    input specs without shapes (a model lowered before its input shapes are known)."""
    _, op, x, w, bias, attrs = case
    out_ch = w[0] if op == "conv" else w[1] * int(attrs.get("group", 1))
    shapes = {"x": x, "w": w, **({"b": (out_ch,)} if bias else {})}
    specs = tuple(TensorSpec(n, s if static else ()) for n, s in shapes.items())
    graph = Graph(specs, (Node("n", op, tuple(shapes), "y", attrs),), ("y",))
    return graph, [_f(*s) for s in shapes.values()]


def chain_graph() -> tuple[Graph, list[np.ndarray]]:
    """conv -> relu -> conv_transpose -> conv with every weight an input, the last one computed in
    the graph by a conv (as a weight gradient is), and inputs for it."""
    values = {"x": _f(2, 3, 8, 8), "w1": _f(4, 3, 3, 3), "b1": _f(4), "w2": _f(4, 2, 3, 3), "src": _f(2, 3, 3, 3), "k": _f(2, 3, 1, 1)}
    nodes = (
        Node("c1", "conv", ("x", "w1", "b1"), "h", {"strides": (2, 2), "pads": (1, 1, 1, 1)}),
        Node("act", "relu", ("h",), "r"),
        Node("up", "conv_transpose", ("r", "w2"), "u", {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 1)}),
        Node("gw", "conv", ("src", "k"), "wk", {}),  # (2, 2, 3, 3): computed, then used as a weight
        Node("c2", "conv", ("u", "wk"), "y", {"pads": (1, 1, 1, 1)}),
    )
    graph = Graph(tuple(TensorSpec(n, a.shape) for n, a in values.items()), nodes, ("y",))
    return graph, list(values.values())
