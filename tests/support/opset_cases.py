"""One small graph per opset op (a few ops more than once: masks, causal attention, negative
axes), for the plugins' per-op tests: lower ``graph`` on a device, compare with
``neurenix_core.graph.reference.run.run_graph(graph, *inputs)``.

``every_op_case()`` yields ``(case id, Graph, inputs)``; ``COVERED`` is the set of ops the cases
cover (a test asserts it is the whole opset, so a new op needs a case here).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from neurenix_core.graph.ir import Graph, Node, TensorSpec

__all__ = ["CASES", "COVERED", "case_graph", "every_op_case"]

_RNG = np.random.default_rng(11)


def _f(*shape: int) -> np.ndarray:
    return _RNG.standard_normal(shape).astype(np.float32)


def _pos(*shape: int) -> np.ndarray:
    return (np.abs(_RNG.standard_normal(shape)) + 0.5).astype(np.float32)


def _i(high: int, *shape: int) -> np.ndarray:
    return _RNG.integers(0, high, shape).astype(np.int64)


def _b(*shape: int) -> np.ndarray:
    return _RNG.random(shape) > 0.4


# (id, op, inputs, attrs, params). Inputs are graph inputs (their dtypes: float32, int64, bool).
Case = tuple[str, str, list[np.ndarray], dict[str, Any], dict[str, np.ndarray]]

_SDPA_KEEP = np.ones((2, 2, 3, 5), bool)
_SDPA_KEEP[..., 3:] = _b(2, 2, 3, 2)

CASES: list[Case] = [
    *[(op, op, [_f(2, 3, 4), _f(3, 4)], {}, {}) for op in ("add", "sub", "mul", "maximum", "minimum")],
    ("add_int_float", "add", [_i(5, 2, 3), _f(2, 3)], {}, {}),
    ("div", "div", [_f(2, 3), _pos(2, 3)], {}, {}),
    ("div_int", "div", [_i(9, 2, 3) - 4, _i(3, 2, 3) + 1], {}, {}),
    ("pow", "pow", [_pos(2, 3), _f(2, 3)], {}, {}),
    *[(op, op, [_i(3, 2, 4), _i(3, 4)], {}, {}) for op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")],
    ("less_float", "less", [_f(2, 4), _f(2, 4)], {}, {}),
    ("logical_and", "logical_and", [_b(2, 4), _b(2, 4)], {}, {}),
    ("logical_or", "logical_or", [_b(2, 4), _b(4)], {}, {}),
    ("logical_not", "logical_not", [_b(2, 4)], {}, {}),
    *[(op, op, [_f(2, 3, 4)], {}, {}) for op in ("exp", "sin", "cos", "erf", "tanh", "sigmoid", "floor", "ceil", "neg", "abs",
                                                 "sign", "relu", "identity", "dropout", "silu", "hardswish")],
    *[(op, op, [_pos(2, 3, 4)], {}, {}) for op in ("log", "sqrt", "rsqrt", "reciprocal")],
    ("clip", "clip", [_f(2, 6)], {"min": -0.5, "max": 0.7}, {}),
    ("clip_min_only", "clip", [_f(2, 6)], {"min": 0.1}, {}),
    ("leaky_relu", "leaky_relu", [_f(2, 6)], {"alpha": 0.2}, {}),
    ("hardsigmoid", "hardsigmoid", [_f(2, 6) * 4], {"alpha": 0.2, "beta": 0.5}, {}),
    ("gelu", "gelu", [_f(2, 6)], {}, {}),
    ("gelu_tanh", "gelu", [_f(2, 6)], {"approximate": "tanh"}, {}),
    ("softmax", "softmax", [_f(2, 3, 5)], {"axis": 1}, {}),
    ("log_softmax", "log_softmax", [_f(2, 3, 5)], {"axis": -1}, {}),
    ("matmul", "matmul", [_f(2, 3, 4), _f(4, 5)], {}, {}),
    ("matmul_batched", "matmul", [_f(2, 1, 3, 4), _f(3, 4, 2)], {}, {}),
    ("gemm", "gemm", [_f(4, 3), _f(5, 4), _f(5)], {"alpha": 0.5, "beta": 2.0, "trans_a": True, "trans_b": True}, {}),
    ("linear", "linear", [_f(2, 3, 6)], {"in_features": 6, "out_features": 5}, {"weight": _f(5, 6), "bias": _f(5)}),
    ("linear_no_bias", "linear", [_f(2, 6)], {}, {"weight": _f(5, 6)}),
    ("conv2d", "conv2d", [_f(2, 4, 7, 7)], {"in_channels": 4, "out_channels": 6, "kernel_size": (3, 3), "stride": (2, 1),
                                            "padding": (1, 1), "dilation": (1, 2), "groups": 2}, {"weight": _f(6, 2, 3, 3), "bias": _f(6)}),
    ("conv1d", "conv1d", [_f(2, 3, 9)], {"stride": (2,), "padding": (1,)}, {"weight": _f(4, 3, 3), "bias": _f(4)}),
    ("max_pool2d", "max_pool2d", [_f(2, 3, 7, 7)], {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}, {}),
    ("avg_pool2d", "avg_pool2d", [_f(2, 3, 6, 6)], {"kernel_size": (2, 2), "padding": (1, 1), "count_include_pad": False}, {}),
    ("adaptive_avg_pool2d", "adaptive_avg_pool2d", [_f(2, 3, 7, 5)], {"output_size": (3, 2)}, {}),
    ("adaptive_avg_pool2d_1x1", "adaptive_avg_pool2d", [_f(2, 3, 4, 4)], {"output_size": (1, 1)}, {}),
    ("adaptive_max_pool2d", "adaptive_max_pool2d", [_f(2, 3, 6, 6)], {"output_size": (3, 3)}, {}),
    ("global_avg_pool", "global_avg_pool", [_f(2, 3, 4, 5)], {}, {}),
    ("global_max_pool", "global_max_pool", [_f(2, 3, 4, 5)], {}, {}),
    *[(op, op, [_f(2, 3, 4)], {"axes": (1, -1), "keepdims": False}, {}) for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")],
    ("reduce_prod", "reduce_prod", [_pos(2, 3, 4)], {"axes": (0, 2), "keepdims": True}, {}),
    ("reduce_mean_all", "reduce_mean", [_f(2, 3, 4)], {}, {}),
    ("argmax", "argmax", [_f(2, 5, 3)], {"axis": 1, "keepdims": False}, {}),
    ("argmin", "argmin", [_f(2, 5, 3)], {"axis": -1}, {}),
    ("reshape", "reshape", [_f(2, 3, 4)], {"shape": (0, -1, 2)}, {}),
    ("flatten", "flatten", [_f(2, 3, 4, 5)], {"start_dim": 1, "end_dim": 2}, {}),
    ("transpose", "transpose", [_f(2, 3, 4)], {"perm": (2, 0, 1)}, {}),
    ("transpose_reverse", "transpose", [_f(2, 3, 4)], {}, {}),
    ("squeeze", "squeeze", [_f(2, 1, 4, 1)], {"axes": (-1,)}, {}),
    ("squeeze_all", "squeeze", [_f(2, 1, 4, 1)], {}, {}),
    ("unsqueeze", "unsqueeze", [_f(2, 4)], {"axes": (0, -1)}, {}),
    ("expand", "expand", [_f(3, 1)], {"shape": (2, 3, 4)}, {}),
    ("concat", "concat", [_f(2, 3), _f(2, 2), _f(2, 1)], {"axis": -1}, {}),
    ("split", "split", [_f(2, 7)], {"axis": 1, "sizes": (3, 4), "index": 1}, {}),
    ("slice", "slice", [_f(4, 6, 5)], {"starts": (1, -4), "ends": (2**62, 5), "axes": (0, 1), "steps": (2, 1)}, {}),
    ("slice_negative_step", "slice", [_f(4, 6)], {"starts": (-1,), "ends": (0,), "axes": (1,), "steps": (-2,)}, {}),
    ("slice_negative_step_to_start", "slice", [_f(4, 6)], {"starts": (-2,), "ends": (-(2**62),), "axes": (1,), "steps": (-1,)}, {}),
    ("gather", "gather", [_f(5, 3), _i(5, 2, 4)], {"axis": 0}, {}),
    ("gather_scalar_negative", "gather", [_f(2, 5, 3), np.asarray(-2, np.int64)], {"axis": 1}, {}),
    ("embedding", "embedding", [_i(10, 2, 5)], {}, {"weight": _f(10, 6)}),
    ("where", "where", [_b(2, 4), _f(2, 4), _f(4)], {}, {}),
    ("pad", "pad", [_f(1, 2, 3, 4)], {"pads": ((0, 0), (0, 0), (1, 2), (0, 1)), "value": 0.5}, {}),
    ("pad_reflect", "pad", [_f(1, 2, 3, 4)], {"pads": ((0, 0), (0, 0), (1, 1), (2, 1)), "mode": "reflect"}, {}),
    ("pad_edge", "pad", [_f(1, 2, 3, 4)], {"pads": ((0, 0), (0, 0), (1, 0), (0, 2)), "mode": "edge"}, {}),
    ("cast_to_float", "cast", [_i(7, 2, 3)], {"to": "float32"}, {}),
    ("cast_to_bool", "cast", [_i(2, 2, 3)], {"to": "bool"}, {}),
    ("cast_to_int64", "cast", [_f(2, 3) * 3], {"to": "int64"}, {}),
    ("batch_norm2d", "batch_norm2d", [_f(2, 3, 4, 4)], {"num_features": 3, "eps": 1e-3},
     {"running_mean": _f(3), "running_var": _pos(3), "weight": _f(3), "bias": _f(3)}),
    ("layer_norm", "layer_norm", [_f(2, 3, 6)], {"normalized_shape": (3, 6)}, {"weight": _f(3, 6), "bias": _f(3, 6)}),
    ("sdpa", "scaled_dot_product_attention", [_f(2, 2, 3, 4), _f(2, 2, 5, 4), _f(2, 2, 5, 6)], {}, {}),
    ("sdpa_bool_mask", "scaled_dot_product_attention", [_f(2, 2, 3, 4), _f(2, 2, 5, 4), _f(2, 2, 5, 6), _SDPA_KEEP], {"scale": 0.3}, {}),
    ("sdpa_float_mask", "scaled_dot_product_attention", [_f(2, 2, 3, 4), _f(2, 2, 5, 4), _f(2, 2, 5, 6), _f(3, 5)], {}, {}),
    ("sdpa_causal", "scaled_dot_product_attention", [_f(2, 4, 4), _f(2, 4, 4), _f(2, 4, 3)], {"is_causal": True}, {}),
    ("sdpa_causal_mask", "scaled_dot_product_attention", [_f(2, 4, 4), _f(2, 4, 4), _f(2, 4, 3), np.ones((4, 4), bool) & _b(4, 4) | np.eye(4, dtype=bool)],
     {"is_causal": True}, {}),
    ("multihead_attention", "multihead_attention", [_f(2, 3, 8), _f(2, 5, 8), _f(2, 5, 8)], {"num_heads": 2, "batch_first": True},
     {"in_proj_weight": _f(24, 8) * 0.3, "in_proj_bias": _f(24), "out_proj_weight": _f(8, 8) * 0.3, "out_proj_bias": _f(8)}),
    ("multihead_attention_mask", "multihead_attention", [_f(3, 2, 8), _f(5, 2, 8), _f(5, 2, 8), _SDPA_KEEP[:, :, :, :]],
     {"num_heads": 2}, {"in_proj_weight": _f(24, 8) * 0.3, "out_proj_weight": _f(8, 8) * 0.3}),
    ("gather_elements", "gather_elements", [_f(3, 4), _i(4, 3, 2) - 2], {"axis": 1}, {}),
    ("gather_nd", "gather_nd", [_f(3, 4, 2), _i(3, 5, 2)], {}, {}),
    ("isnan", "isnan", [np.where(_b(2, 4), np.nan, _f(2, 4)).astype(np.float32)], {}, {}),
    ("conv_transpose2d", "conv_transpose2d", [_f(2, 4, 5, 5)],
     {"stride": (2, 1), "padding": (1, 0), "output_padding": (1, 0), "dilation": (1, 2), "groups": 2}, {"weight": _f(4, 3, 3, 3), "bias": _f(6)}),
]


def _dtype(a: np.ndarray) -> str:
    return "bool" if a.dtype == np.bool_ else str(a.dtype)


def case_graph(case: Case) -> tuple[Graph, list[np.ndarray]]:
    """The one-node graph of a case (its arrays are the graph's inputs)."""
    name, op, inputs, attrs, params = case
    specs = tuple(TensorSpec(f"x{i}", tuple(a.shape), _dtype(a)) for i, a in enumerate(inputs))
    nodes = [Node(name, op, tuple(s.name for s in specs), "y", attrs, params)]
    return Graph(specs, tuple(nodes), ("y",)), list(inputs)


def _constant_case() -> tuple[Graph, list[np.ndarray]]:
    x = _f(2, 3)
    nodes = (Node("c", "constant", (), "c", {}, {"value": _f(3)}), Node("k", "constant", (), "k", {}, {"value": np.asarray(2, np.int64)}),
             Node("sum", "add", ("x", "c"), "s"), Node("scaled", "mul", ("s", "k"), "y"))
    return Graph((TensorSpec("x", (2, 3)),), nodes, ("y",)), [x]


def every_op_case() -> Iterator[tuple[str, Graph, list[np.ndarray]]]:
    for case in CASES:
        graph, inputs = case_graph(case)
        yield case[0], graph, inputs
    graph, inputs = _constant_case()
    yield "constant", graph, inputs


COVERED: frozenset[str] = frozenset({c[1] for c in CASES} | {"constant"})
