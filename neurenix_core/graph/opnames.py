"""The names of the op-level opset (``opset.OPSET``), as data that costs nothing to import.

Plugin manifests load at ``import neurenix_core``, where the opset module itself (reference
kernels, shape rules) is too heavy to import. A plugin whose ``neurenix_compile`` lowers the whole
opset declares ``Capabilities(graph_ops=OPSET_NAMES)`` and keeps a test that its lowering table
covers exactly these; ``tests/test_graph_opset.py`` keeps this tuple equal to ``opset.OPSET``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OPSET_NAMES"]

#: Every op of ``opset.OPSET``, sorted.
OPSET_NAMES: Final[tuple[str, ...]] = (
    "abs", "adaptive_avg_pool2d", "adaptive_max_pool2d", "add", "argmax", "argmin", "avg_pool2d", "batch_norm2d", "cast",
    "ceil", "clip", "concat", "constant", "conv1d", "conv2d", "conv_transpose2d", "cos", "div", "dropout", "embedding",
    "equal", "erf", "exp", "expand", "flatten", "floor", "gather", "gather_elements", "gather_nd", "gelu", "gemm",
    "global_avg_pool", "global_max_pool", "greater", "greater_equal", "hardsigmoid", "hardswish", "identity", "isnan",
    "layer_norm", "leaky_relu", "less", "less_equal", "linear", "log", "log_softmax", "logical_and", "logical_not",
    "logical_or", "matmul", "max_pool2d", "maximum", "minimum", "mul", "multihead_attention", "neg", "not_equal", "pad",
    "pow", "reciprocal", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "relu", "reshape", "rsqrt",
    "scaled_dot_product_attention", "sigmoid", "sign", "silu", "sin", "slice", "softmax", "split", "sqrt", "squeeze", "sub",
    "tanh", "transpose", "unsqueeze", "where",
)
