"""The core's QuantizationPlan as OpenVINO FakeQuantize nodes.

The core computes every scale and zero point once (neurenix_core.graph.quantization); here they only
change form. OpenVINO's low-precision transformations then fold FakeQuantize -> Convolution /
MatMul patterns into real int8 kernels (u8 activations x i8 weights), which
``layer_precisions`` reads back from the compiled model's runtime graph.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Graph, QuantizationPlan, QuantParams
from neurenix_core.errors import QuantizationError

__all__ = ["FUSED_ACTIVATIONS", "QUANTIZED_OPS", "activation_bounds", "check_plan", "constant_weight_bounds", "cpu_placement",
           "fake_quantize", "weight_bounds"]

#: The layers whose weights get FakeQuantize (their inputs are activations the plan lists):
#: OpenVINO's low-precision pass turns FakeQuantize -> Convolution / MatMul into int8 kernels.
QUANTIZED_OPS = frozenset({"conv1d", "conv2d", "linear", "matmul", "gemm"})

#: Unary activations OpenVINO's CPU device fuses into the Convolution / FullyConnected that feeds
#: them (oneDNN eltwise post-ops): the value between the layer and the activation stays in f32
#: registers, never stored. Binary ops are not listed: only one operand of an add or mul can sit
#: in its producer's fused chain, the other is a tensor in memory, int8 only with its FakeQuantize
#: (leaving it out put f32 Reorders into ResNet-18's residual adds).
FUSED_ACTIVATIONS: Final = frozenset({"relu", "leaky_relu", "clip", "hardswish", "hardsigmoid", "sigmoid", "silu", "gelu", "tanh"})


def activation_bounds(q: QuantParams) -> tuple[np.ndarray, np.ndarray, int]:
    """(low, high, levels) of per-tensor affine parameters: real = scale * (q - zero_point)."""
    scale = np.asarray(q.scale, np.float64).reshape(())
    zp = np.asarray(q.zero_point, np.float64).reshape(())
    low = scale * (q.qmin - zp)
    high = scale * (q.qmax - zp)
    return low.astype(np.float32), high.astype(np.float32), int(q.qmax - q.qmin + 1)


def weight_bounds(q: QuantParams, ndim: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-output-channel bounds shaped to broadcast against a weight of rank ``ndim``."""
    scale = np.asarray(q.scale, np.float64).reshape(-1)
    zp = np.asarray(q.zero_point, np.float64).reshape(-1)
    shape = (-1,) + (1,) * (ndim - 1) if q.axis is not None else ()
    low = (scale * (q.qmin - zp)).reshape(shape) if shape else (scale * (q.qmin - zp)).reshape(())
    high = (scale * (q.qmax - zp)).reshape(shape) if shape else (scale * (q.qmax - zp)).reshape(())
    return low.astype(np.float32), high.astype(np.float32), int(q.qmax - q.qmin + 1)


def constant_weight_bounds(weight: np.ndarray, channel_axis: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Bounds for a weight the plan does not list (conv1d, a matmul's constant operand): the
    core's symmetric per-channel int8 parameters (qmath.weight_params) along ``channel_axis``
    (None: per tensor), shaped to broadcast against ``weight``."""
    from neurenix_core.contract import weight_params

    w = np.asarray(weight, np.float64)
    if channel_axis is None:
        q = weight_params(w.reshape(1, -1))
        return weight_bounds(QuantParams(q.scale.reshape(()), q.zero_point.reshape(()), q.bits, None, q.qmin, q.qmax), w.ndim)
    moved = np.moveaxis(w, channel_axis, 0)
    low, high, levels = weight_bounds(weight_params(moved), w.ndim)
    return np.moveaxis(low, 0, channel_axis), np.moveaxis(high, 0, channel_axis), levels


def cpu_placement(graph: Graph, plan: QuantizationPlan) -> QuantizationPlan:
    """``plan`` without the activations only fused activations read, for OpenVINO's CPU device.

    The core's plan rounds every float value, as TFLite's separate int8 ops do (CONV_2D, then
    HARD_SWISH, each requantizing). OpenVINO fuses conv -> hardswish -> FakeQuantize into one
    kernel's post-op chain, so a FakeQuantize on the conv's output is one more rounding and one
    more post-op per element inside that chain, not an int8 tensor in memory. Without them
    MobileNetV3-Small int8 took 0.91x the time and EfficientNet-B0 0.90x (docs/cpu.md); ReLU
    models are unchanged (a ReLU's producer already has the ReLU's parameters, and the
    low-precision pass folds the pair). The result is nearer float: the roundings left out are
    ones float does not make, so the device stays within ``Compiled.verify``'s bound (twice the
    plan's own rounding). Graph outputs keep theirs: the caller gets values on the plan's grid,
    and the verification's per-layer search compiles prefixes whose one output is the value it
    compares."""
    if plan.dynamic:
        return plan
    consumers: dict[str, set[str]] = defaultdict(set)
    for node in graph.nodes:
        for name in node.inputs:
            consumers[name].add(node.op)
    outputs = set(graph.outputs)
    keep = {name: q for name, q in plan.activations.items()
            if name in outputs or not consumers[name] or not consumers[name] <= FUSED_ACTIVATIONS}
    return plan if len(keep) == len(plan.activations) else dataclasses.replace(plan, activations=keep)


def fake_quantize(opset: Any, node: Any, low: np.ndarray, high: np.ndarray, levels: int) -> Any:
    lo, hi = opset.constant(low), opset.constant(high)
    return opset.fake_quantize(node, lo, hi, lo, hi, levels)


def check_plan(plan: QuantizationPlan, precision: str, device: str) -> None:
    """Refuse a plan whose bit width contradicts the requested precision, or with bad numbers."""
    want = {"int8": 8, "int16": 16}.get(precision)
    if want is None or plan.bits != want:
        raise QuantizationError(
            f"{device}: the quantization plan has {plan.bits}-bit parameters but precision={precision!r} was asked; "
            "calibrate again with the same precision"
        )
    check_plan_scales(plan, device)


def check_plan_scales(plan: QuantizationPlan, device: str) -> None:
    """Refuse a plan with a scale that is not finite and positive."""
    for name, q in [*plan.activations.items(), *plan.weights.items()]:
        scale = np.asarray(q.scale)
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            raise QuantizationError(f"{device}: quantization scale of {name!r} is not finite and positive ({scale.ravel()[:4]}); recalibrate with finite data")
