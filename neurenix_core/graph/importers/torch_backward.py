"""ATen's gradient ops that no decomposition of PyTorch's removes, in the opset's forward ops.

AOTAutograd's backward graphs (``torch.compile`` training, neurenix_core.torch_compile.training)
are core ATen after ``core_aten_decompositions``; what remains beyond the forward ops is
``convolution_backward``. Its three results are convolutions again:

- grad_input: the transposed convolution of grad_output with the same weight, stride, padding,
  dilation and groups, with the output padding that gives the input's size back;
- grad_weight: a convolution of the input (batch and channel axes swapped) with grad_output
  (likewise) as the kernel, stride and dilation exchanged, cut to the kernel's size; per group
  by moving the group axis next to the batch, so one grouped convolution computes every group;
- grad_bias: grad_output summed over every axis but the channels.

Each is built only where the graph reads it (``output_mask`` and the users of the node).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from neurenix_core.graph.importers.builder import Value
from neurenix_core.graph.importers.torch_ops import Unavailable

__all__ = ["HANDLERS"]


def _ints(v: Any, nd: int) -> tuple[int, ...]:
    values = tuple(int(i) for i in v) if isinstance(v, (list, tuple)) else (int(v),)
    return values * nd if len(values) == 1 else values


def _wanted(n: Any, i: int, mask: Any) -> bool:
    return bool(mask[i]) and any(u.target is operator.getitem and int(u.args[1]) == i for u in n.users)


def _static_shape(c: Any, n: Any, v: Value) -> tuple[int, ...]:
    shape = c.b.spec(v).shape
    if not all(isinstance(d, int) for d in shape):
        raise c.fail(n, "differentiates a convolution with dynamic sizes; compile the training step with torch.compile(dynamic=False)")
    return tuple(shape)


def _convolution_backward(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Any]:
    grad, x, w = a[0], a[1], a[2]
    if a[7]:  # transposed
        raise c.fail(n, "differentiates a transposed convolution, which the import does not map yet")
    gshape, xshape, wshape = _static_shape(c, n, grad), _static_shape(c, n, x), _static_shape(c, n, w)
    nd = len(wshape) - 2
    stride, padding, dilation = _ints(a[4], nd), _ints(a[5], nd), _ints(a[6], nd)
    groups, mask = int(a[9]), a[10]
    name = c.name(n)
    out: list[Any] = []
    builders: list[Callable[[], Value]] = [
        lambda: _grad_input(c, name, grad, w, xshape, gshape, wshape, stride, padding, dilation, groups),
        lambda: _grad_weight(c, name, grad, x, xshape, gshape, wshape, stride, padding, dilation, groups),
        lambda: c.b.emit(f"{name}.grad_bias", "reduce_sum", [grad], {"axes": (0,) + tuple(range(2, nd + 2)), "keepdims": False}),
    ]
    for i, build in enumerate(builders):
        out.append(build() if _wanted(n, i, mask) else Unavailable(f"convolution_backward result {i}, which output_mask leaves out"))
    return out


def _grad_input(c: Any, name: str, grad: Value, w: Value, xshape: tuple[int, ...], gshape: tuple[int, ...],
                wshape: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...],
                groups: int) -> Value:
    nd = len(stride)
    # the transposed convolution's natural size, and what the forward's floor division dropped
    natural = [(gshape[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (wshape[2 + i] - 1) + 1 for i in range(nd)]
    extra = tuple(xshape[2 + i] - natural[i] for i in range(nd))
    attrs = {"strides": stride, "pads": padding + padding, "dilations": dilation, "group": groups, "output_padding": extra}
    return c.b.emit(f"{name}.grad_input", "conv_transpose", [grad, w], attrs)


def _grad_weight(c: Any, name: str, grad: Value, x: Value, xshape: tuple[int, ...], gshape: tuple[int, ...],
                 wshape: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...], dilation: tuple[int, ...],
                 groups: int) -> Value:
    nd = len(stride)
    batch, channels, out_channels = xshape[0], xshape[1], gshape[1]
    cg, og = channels // groups, out_channels // groups
    spatial = tuple(range(3, 3 + nd))
    # input (N, G*Cg, *S) -> (Cg, G*N, *S): the batch becomes the channels each group sums over
    xs = c.b.emit(f"{name}.gw.x5", "reshape", [x], {"shape": (batch, groups, cg) + xshape[2:]})
    xs = c.b.emit(f"{name}.gw.xt", "transpose", [xs], {"perm": (2, 1, 0) + spatial})
    xs = c.b.emit(f"{name}.gw.xin", "reshape", [xs], {"shape": (cg, groups * batch) + xshape[2:]})
    # grad_output (N, G*Og, *O) -> (G*Og, N, *O): the kernel, one filter per output channel
    gs = c.b.emit(f"{name}.gw.g5", "reshape", [grad], {"shape": (batch, groups, og) + gshape[2:]})
    gs = c.b.emit(f"{name}.gw.gt", "transpose", [gs], {"perm": (1, 2, 0) + spatial})
    gs = c.b.emit(f"{name}.gw.gk", "reshape", [gs], {"shape": (groups * og, batch) + gshape[2:]})
    attrs = {"strides": dilation, "pads": padding + padding, "dilations": stride, "group": groups}
    full = c.b.emit(f"{name}.gw.conv", "conv", [xs, gs], attrs)  # (Cg, G*Og, *K'), K' >= K
    kernel = wshape[2:]
    cut = c.b.emit(f"{name}.gw.cut", "slice", [full], {"starts": (0,) * nd, "ends": kernel, "axes": tuple(range(2, 2 + nd)),
                                                       "steps": (1,) * nd})
    return c.b.emit(f"{name}.grad_weight", "transpose", [cut], {"perm": (1, 0) + tuple(range(2, 2 + nd))})


HANDLERS: dict[str, Callable[[Any, Any, list[Any], dict[str, Any]], Any]] = {
    "convolution_backward": _convolution_backward,
}
