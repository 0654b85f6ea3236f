"""Layer ops -> opset16: linear/matmul/gemm, conv1d/conv2d (groups, dilation, padding),
conv_transpose2d (ConvolutionBackpropData, grouped or not), pooling
and normalisation.

These are the layers a QuantizationPlan quantizes: the driver puts FakeQuantize on their
activation inputs, ``Lowering.weight`` on their weights (per output channel), and
``Lowering.constant_operand`` on a matmul/gemm operand that is a weight constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Node
from neurenix_npu_openvino.lower_types import Handler, LoweringContext, pair

__all__ = ["HANDLERS"]

Attrs = Mapping[str, Any]


def _linear(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    in_features = int(np.shape(node.params["weight"])[1])
    lw.expect(node, x[0], None, -1, in_features, f"a last dimension of {in_features} (in_features)")
    out = lw.op.matmul(x[0], lw.weight(node), False, True)
    b = lw.bias(node)
    return out if b is None else lw.op.add(out, lw.const(b))


def _matmul(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    dtype = lw.spec_of(node).dtype
    left, right = (lw.to_dtype(v, dtype) for v in x)
    right_rank = len(lw.shape(right))
    left = lw.constant_operand(node, 0, left, None)
    right = lw.constant_operand(node, 1, right, right_rank - 1 if right_rank > 1 else None)  # output columns
    return lw.op.matmul(left, right, False, False)


def _gemm(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    dtype = lw.spec_of(node).dtype
    left, right = (lw.to_dtype(v, dtype) for v in x[:2])
    left = lw.constant_operand(node, 0, left, None)
    right = lw.constant_operand(node, 1, right, 0 if a["trans_b"] else 1)
    out = lw.op.matmul(left, right, bool(a["trans_a"]), bool(a["trans_b"]))
    if float(a["alpha"]) != 1.0:
        out = lw.op.multiply(out, lw.scalar_like(out, a["alpha"]))
    if len(x) > 2:
        c = lw.to_dtype(x[2], dtype)
        out = lw.op.add(out, c if float(a["beta"]) == 1.0 else lw.op.multiply(c, lw.scalar_like(c, a["beta"])))
    return out


def _conv(nd: int) -> Handler:
    layout = "NCHW" if nd == 2 else "N,C,L"

    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        groups = int(a["groups"])
        w_shape = np.shape(node.params["weight"])
        in_channels = int(w_shape[1] * groups)
        lw.expect(node, x[0], nd + 2, 1, in_channels, f"{layout} input with {in_channels} channels")
        stride, pad, dil = pair(a["stride"], nd), pair(a["padding"], nd), pair(a["dilation"], nd)
        w = lw.weight(node)
        if groups == 1:
            out = lw.op.convolution(x[0], w, stride, pad, pad, dil)
        else:
            grouped = lw.op.reshape(w, lw.const([groups, w_shape[0] // groups, *w_shape[1:]], np.int64), False)
            out = lw.op.group_convolution(x[0], grouped, stride, pad, pad, dil)
        b = lw.bias(node)
        return out if b is None else lw.op.add(out, lw.const(b.reshape((1, -1) + (1,) * nd)))

    return lower


def _conv_transpose2d(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    # The opset's weight is (C_in, C_out/groups, kh, kw): ConvolutionBackpropData's filter layout,
    # and GroupConvolutionBackpropData's once split to (groups, C_in/groups, C_out/groups, kh, kw).
    groups = int(a["groups"])
    w_shape = np.shape(node.params["weight"])
    lw.expect(node, x[0], 4, 1, int(w_shape[0]), f"NCHW input with {w_shape[0]} channels")
    stride, pad, dil, extra = pair(a["stride"]), pair(a["padding"]), pair(a["dilation"]), pair(a["output_padding"])
    w = lw.const(node.params["weight"])
    if groups == 1:
        out = lw.op.convolution_backprop_data(x[0], w, stride, None, pad, pad, dil, "explicit", extra)
    else:
        grouped = lw.op.reshape(w, lw.const([groups, w_shape[0] // groups, *w_shape[1:]], np.int64), False)
        out = lw.op.group_convolution_backprop_data(x[0], grouped, stride, None, pad, pad, dil, "explicit", extra)
    b = lw.bias(node)
    return out if b is None else lw.op.add(out, lw.const(b.reshape(1, -1, 1, 1)))


def _pool_args(a: Attrs) -> tuple[list[int], list[int], list[int]]:
    k = pair(a["kernel_size"])
    s = pair(a["stride"] if a["stride"] is not None else a["kernel_size"])
    return k, s, pair(a["padding"])


def _max_pool2d(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    lw.expect_rank(node, x[0], 4, "an NCHW input")
    k, s, p = _pool_args(a)
    return lw.op.max_pool(x[0], s, [1, 1], p, p, k, "floor").output(0)


def _avg_pool2d(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    lw.expect_rank(node, x[0], 4, "an NCHW input")
    k, s, p = _pool_args(a)
    # opset16 AvgPool has dilations; leaving them None crashes OpenVINO 2026.4 at compile time.
    return lw.op.avg_pool(x[0], s, p, p, k, not bool(a["count_include_pad"]), "floor", dilations=[1, 1])


def _adaptive_avg_pool2d(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    lw.expect_rank(node, x[0], 4, "an NCHW input")
    return lw.op.adaptive_avg_pool(x[0], lw.const(pair(a["output_size"]), np.int64))


def _adaptive_max_pool2d(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    lw.expect_rank(node, x[0], 4, "an NCHW input")
    # i32 indices: OpenVINO's CPU plugin runs no i64 output through oneDNN (the indices are unused).
    return lw.op.adaptive_max_pool(x[0], lw.const(pair(a["output_size"]), np.int64), "i32").output(0)


def _batch_norm2d(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    p = node.params
    c = int(np.shape(p["running_mean"])[0])
    lw.expect(node, x[0], None, 1, c, f"{c} channels on axis 1 (num_features)")
    gamma, beta = p.get("weight"), p.get("bias")
    return lw.op.batch_norm_inference(
        x[0],
        lw.const(np.ones(c) if gamma is None else gamma),
        lw.const(np.zeros(c) if beta is None else beta),
        lw.const(p["running_mean"]),
        lw.const(p["running_var"]),
        float(a["eps"]),
    )


def _layer_norm(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    shape = tuple(int(d) for d in a["normalized_shape"])
    got = lw.shape(x[0])
    if got[len(got) - len(shape) :] != shape:
        lw.shape_error(node, got, f"trailing dimensions {shape} (normalized_shape)")
    axes = lw.const(np.arange(-len(shape), 0), np.int64)
    out = lw.op.mvn(x[0], axes, True, float(a["eps"]), "inside_sqrt")
    if node.params.get("weight") is not None:
        out = lw.op.multiply(out, lw.const(node.params["weight"]))
    if node.params.get("bias") is not None:
        out = lw.op.add(out, lw.const(node.params["bias"]))
    return out


HANDLERS: Final[dict[str, Handler]] = {
    "linear": _linear,
    "matmul": _matmul,
    "gemm": _gemm,
    "conv1d": _conv(1),
    "conv2d": _conv(2),
    "conv_transpose2d": _conv_transpose2d,
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "adaptive_max_pool2d": _adaptive_max_pool2d,
    "batch_norm2d": _batch_norm2d,
    "layer_norm": _layer_norm,
}
