"""The portable opset's names and attributes, and the array API's function names, as data that
costs nothing to import.

The portable opset is the 83 ops of release 0.2 that every whole-model plugin lowers; the opset
(``opset.OPSET``) has grown since to ONNX's default domain, and ops beyond the portable ones run
on cpu:0 unless a plugin declares them by name. Plugin manifests load at ``import neurenix_core``,
where the opset package itself (reference kernels, shape rules) is too heavy to import. A plugin
whose ``neurenix_compile`` lowers the whole portable opset declares
``Capabilities(graph_ops=OPSET_NAMES)`` and keeps a test that its lowering table covers exactly
these. ``PORTABLE_ATTRS`` are the attributes those ops had then: an attribute a portable op gained
later (``argmax``'s ``select_last_index`` ...) is one no plugin lowered, so placement sends a node
that sets it to something other than its default to cpu:0 (``graph.placement``).
``tests/test_graph_opset.py`` keeps both in step with ``opset.OPSET``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ARRAY_API_FUNCTIONS", "OPSET_NAMES", "PORTABLE_ATTRS"]

#: The portable ops, sorted.
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

#: op -> the attributes it had in the portable opset (release 0.2).
PORTABLE_ATTRS: Final[dict[str, tuple[str, ...]]] = {
    "abs": (), "adaptive_avg_pool2d": ('output_size',), "adaptive_max_pool2d": ('output_size',), "add": (),
    "argmax": ('axis', 'keepdims'), "argmin": ('axis', 'keepdims'),
    "avg_pool2d": ('kernel_size', 'stride', 'padding', 'count_include_pad'), "batch_norm2d": ('num_features', 'eps'),
    "cast": ('to',), "ceil": (), "clip": ('min', 'max'), "concat": ('axis',), "constant": (),
    "conv1d": ('stride', 'padding', 'dilation', 'groups'),
    "conv2d": ('in_channels', 'out_channels', 'kernel_size', 'stride', 'padding', 'dilation', 'groups'),
    "conv_transpose2d": ('in_channels', 'out_channels', 'kernel_size', 'stride', 'padding', 'output_padding', 'dilation', 'groups'),
    "cos": (), "div": (), "dropout": ('p',), "embedding": (), "equal": (), "erf": (), "exp": (), "expand": ('shape',),
    "flatten": ('start_dim', 'end_dim'), "floor": (), "gather": ('axis',), "gather_elements": ('axis',),
    "gather_nd": ('batch_dims',), "gelu": ('approximate',), "gemm": ('alpha', 'beta', 'trans_a', 'trans_b'),
    "global_avg_pool": (), "global_max_pool": (), "greater": (), "greater_equal": (), "hardsigmoid": ('alpha', 'beta'),
    "hardswish": (), "identity": (), "isnan": (), "layer_norm": ('normalized_shape', 'eps'), "leaky_relu": ('alpha',),
    "less": (), "less_equal": (), "linear": ('in_features', 'out_features'), "log": (), "log_softmax": ('axis',),
    "logical_and": (), "logical_not": (), "logical_or": (), "matmul": (), "max_pool2d": ('kernel_size', 'stride', 'padding'),
    "maximum": (), "minimum": (), "mul": (), "multihead_attention": ('embed_dim', 'num_heads', 'batch_first'), "neg": (),
    "not_equal": (), "pad": ('pads', 'mode', 'value'), "pow": (), "reciprocal": (), "reduce_max": ('axes', 'keepdims'),
    "reduce_mean": ('axes', 'keepdims'), "reduce_min": ('axes', 'keepdims'), "reduce_prod": ('axes', 'keepdims'),
    "reduce_sum": ('axes', 'keepdims'), "relu": (), "reshape": ('shape',), "rsqrt": (),
    "scaled_dot_product_attention": ('scale', 'is_causal'), "sigmoid": (), "sign": (), "silu": (), "sin": (),
    "slice": ('starts', 'ends', 'axes', 'steps'), "softmax": ('axis',), "split": ('axis', 'sizes', 'index'), "sqrt": (),
    "squeeze": ('axes',), "sub": (), "tanh": (), "transpose": ('perm',), "unsqueeze": ('axes',), "where": (),
}

#: Function names of the array API standard (2024.12) that a namespace maps one to one (the op
#: tables of ``plugins.backend``). Here rather than there: ``nx.__all__`` lists the array API
#: functions at import (``tensor/op_names.py``) without loading the backend base classes.
ARRAY_API_FUNCTIONS: tuple[str, ...] = (
    # elementwise
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_left_shift", "bitwise_invert", "bitwise_or", "bitwise_right_shift", "bitwise_xor",
    "ceil", "clip", "conj", "copysign", "cos", "cosh", "divide", "equal", "exp", "expm1", "floor",
    "floor_divide", "greater", "greater_equal", "hypot", "imag", "isfinite", "isinf", "isnan",
    "less", "less_equal", "log", "log1p", "log2", "log10", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative",
    "nextafter", "not_equal", "positive", "pow", "real", "reciprocal", "remainder", "round",
    "sign", "signbit", "sin", "sinh", "square", "sqrt", "subtract", "tan", "tanh", "trunc",
    # linear algebra
    "matmul", "matrix_transpose", "tensordot", "vecdot",
    # manipulation
    "broadcast_arrays", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis", "permute_dims",
    "repeat", "reshape", "roll", "squeeze", "stack", "tile", "unstack",
    # searching, sorting, sets, statistics, utilities
    "argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where", "argsort", "sort",
    "unique_all", "unique_counts", "unique_inverse", "unique_values", "cumulative_prod",
    "cumulative_sum", "max", "mean", "min", "prod", "std", "sum", "var", "all", "any", "diff",
    "astype", "take", "take_along_axis",
    # creation (called with device=)
    "arange", "asarray", "empty", "empty_like", "eye", "full", "full_like", "linspace",
    "meshgrid", "ones", "ones_like", "tril", "triu", "zeros", "zeros_like", "from_dlpack",
)
