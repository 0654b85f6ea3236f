"""Shape and indexing ops -> opset16: reshape, flatten, transpose, squeeze, unsqueeze, expand,
concat, split, slice, gather, gather_elements, gather_nd, scatter_elements, embedding, where and pad.

Shapes are static, so reshape-like ops reshape to the output shape the opset infers (one rule,
the core's) instead of re-deriving ONNX's 0 / -1 conventions here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Node
from neurenix_npu_openvino.lower_types import Handler, LoweringContext, axis_of, output

__all__ = ["HANDLERS"]

Attrs = Mapping[str, Any]


def _reshape_to_spec(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    source, target = lw.shape(x[0]), lw.spec_of(node).shape
    if source == target:
        return x[0]
    return lw.op.reshape(x[0], lw.const(reshape_pattern(source, target), np.int64), True)


def _unsqueeze(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    # Unsqueeze, not a Reshape to the output shape: the same value without a size in it, and the
    # form OpenVINO's CPU fusions read (a grouped-query attention's repeated keys over a stateful
    # cache are Unsqueeze -> Broadcast -> Reshape in its fused key/value-cache attention's pattern).
    rank = len(lw.spec_of(node).shape)
    return lw.op.unsqueeze(x[0], lw.const(sorted(axis_of(int(v), rank) for v in a["axes"]), np.int64))


def reshape_pattern(source: tuple[int, ...], target: tuple[int, ...]) -> list[int]:
    """``target`` as a Reshape pattern with ``special_zero``: 0 where it keeps the input's size at
    the same position, -1 for the largest size left (inferred), the other sizes as they are. The
    same reshape at this shape (the result is never empty here: Lowering._empty), written without
    the sizes an input carries through, so the model lowered at another batch or length is the same
    model and one compiled model serves both (shape_sharing.py)."""
    pattern = [0 if k < len(source) and size == source[k] else int(size) for k, size in enumerate(target)]
    left = [k for k, size in enumerate(pattern) if size != 0]
    if left:
        pattern[max(left, key=lambda k: pattern[k])] = -1
    return pattern


def _transpose(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    ndim = len(lw.shape(x[0]))
    perm = list(reversed(range(ndim))) if a["perm"] is None else [axis_of(int(v), ndim) for v in a["perm"]]
    return lw.op.transpose(x[0], lw.const(perm, np.int64))


def _expand(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    source, target = lw.shape(x[0]), lw.spec_of(node).shape
    if source == target:
        # Nothing to broadcast; a Broadcast to a 0-d shape (an empty target) crashes OpenVINO
        # 2026.4's CPU plugin (a segfault at the first inference: expand_as of two scalars).
        return x[0]
    # NumPy's rule (BIDIRECTIONAL) with 1 where the input already has the target's size: the same
    # result, without the sizes the input carries through (see reshape_pattern).
    offset = len(target) - len(source)
    pattern = [1 if k >= offset and source[k - offset] == size else int(size) for k, size in enumerate(target)]
    return lw.op.broadcast(x[0], lw.const(pattern, np.int64), broadcast_spec="BIDIRECTIONAL")


def _concat(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    dtype = lw.spec_of(node).dtype
    return lw.op.concat([lw.to_dtype(v, dtype) for v in x], int(a["axis"]))


def _slice_axis(lw: LoweringContext, value: Any, axis: int, start: int, stop: int, step: int = 1) -> Any:
    return lw.op.slice(value, lw.axes([start]), lw.axes([stop]), lw.axes([step]), lw.axes([axis]))


def _split(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    shape = lw.shape(x[0])
    axis = axis_of(int(a["axis"]), len(shape))
    sizes = [int(s) for s in a["sizes"]]
    start = sum(sizes[: int(a["index"])])
    return _slice_axis(lw, x[0], axis, start, start + sizes[int(a["index"])])


#: The largest slice bound passed on: past any axis size, and far from int64's ends.
_BOUND: Final = 2**62


def _slice(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    shape = lw.shape(x[0])
    axes = a["axes"] if a["axes"] is not None else tuple(range(len(a["starts"])))
    steps = a["steps"] if a["steps"] is not None else (1,) * len(axes)
    starts, stops, steps_out, axes_out = [], [], [], []
    for ax, st, en, sp in zip(axes, a["starts"], a["ends"], steps):
        ax = axis_of(int(ax), len(shape))
        n = shape[ax]
        if int(sp) > 0:
            # OpenVINO's Slice reads a positive step's bounds as Python does (negative from the
            # end, clamped to the axis): kept as the graph gives them, so the lowered model holds
            # no axis size it was not given and one compiled model can serve other sizes (host.py).
            lo, hi, step = (int(max(min(v, _BOUND), -_BOUND)) for v in (st, en, sp))
        else:
            # Python's slice semantics (clamped, as ONNX clamps); a negative step that runs past
            # index 0 stops "before the first element", which OpenVINO spells as -n - 1.
            lo, hi, step = slice(int(max(min(st, n), -n - 1)), int(max(min(en, n), -n - 1)), int(sp)).indices(n)
            if hi < 0:
                hi = -n - 1
        starts.append(lo), stops.append(hi), steps_out.append(step), axes_out.append(ax)
    if all(lo == 0 and hi == _BOUND and step == 1 for lo, hi, step in zip(starts, stops, steps_out, strict=True)):
        # From the start to the end of every axis (what an export leaves of ``x[:, :, None]``):
        # nothing to lower. A Slice there would sit between a cache's join and the attention
        # reading it, where OpenVINO's fused key/value-cache attention looks for neither.
        return x[0]
    return lw.op.slice(x[0], lw.axes(starts), lw.axes(stops), lw.axes(steps_out), lw.axes(axes_out))


def _gather(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    axis = axis_of(int(a["axis"]), len(lw.shape(x[0])))
    return lw.op.gather(x[0], x[1], lw.const(axis, np.int64))


def _wrapped(lw: LoweringContext, indices: Any, sizes: Any) -> Any:
    """Negative indices counted from the end (the opset's rule), made explicit: OpenVINO's
    GatherElements / GatherND specs leave negative indices to the plugin."""
    zero = lw.scalar_like(indices, 0)
    return lw.op.select(lw.op.less(indices, zero), lw.op.add(indices, sizes), indices)


def _gather_elements(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    shape, idx_shape = lw.shape(x[0]), lw.shape(x[1])
    axis = axis_of(int(a["axis"]), len(shape))
    data = x[0]
    if any(i != n for k, (i, n) in enumerate(zip(idx_shape, shape)) if k != axis):
        # torch.gather lets indices be smaller than data outside ``axis``; GatherElements wants
        # equal sizes there, so crop data to the indices' extent first (what the reference does).
        # StridedSlice, not Slice: OpenVINO 2026.4's CPU plugin drops a Slice feeding
        # GatherElements during its transformations and then fails shape validation.
        ends = [n if k == axis else i for k, (i, n) in enumerate(zip(idx_shape, shape))]
        zeros = [0] * len(shape)
        data = lw.op.strided_slice(data, lw.axes(zeros), lw.axes(ends), lw.axes([1] * len(shape)), zeros, zeros)
    indices = _wrapped(lw, x[1], lw.scalar_like(x[1], shape[axis]))
    return lw.op.gather_elements(data, indices, axis)


def _gather_nd(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    k = lw.shape(x[1])[-1]
    dims = np.asarray(lw.shape(x[0])[:k], output(x[1]).get_element_type().to_dtype())
    return lw.op.gather_nd(x[0], _wrapped(lw, x[1], lw.op.constant(dims)), int(a["batch_dims"]))


#: The opset's scatter reductions -> ScatterElementsUpdate's. Under "none" a repeated index is
#: undefined in ONNX; OpenVINO's CPU device keeps the last update, as the reference does.
_SCATTER_REDUCTIONS: Final = {"none": "none", "add": "sum", "mul": "prod", "max": "max", "min": "min"}


def _scatter_elements(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    dtype = lw.spec_of(node).dtype
    axis = axis_of(int(a["axis"]), len(lw.shape(x[0])))
    # The reference casts updates to data's dtype before writing. Indices go in as they are:
    # ScatterElementsUpdate counts negative indices from the end (its spec), as the opset does,
    # and takes updates smaller than data outside ``axis``. use_init_val: a reduction combines
    # the updates with data's values (ONNX's, and torch's include_self=True, rule).
    return lw.op.scatter_elements_update(lw.to_dtype(x[0], dtype), x[1], lw.to_dtype(x[2], dtype), lw.const(axis, np.int64),
                                         _SCATTER_REDUCTIONS[str(a["reduction"])], True)


def _embedding(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    # A weight plan's table is compressed (int8 rows and their scales): OpenVINO's CPU device
    # gathers from the integer rows, never holding the f32 table.
    return lw.op.gather(lw.weight(node), x[0], lw.const(0, np.int64))


def _where(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    dtype = lw.spec_of(node).dtype
    return lw.op.select(lw.to_dtype(x[0], "bool"), lw.to_dtype(x[1], dtype), lw.to_dtype(x[2], dtype))


_PAD_MODES: Final = {"constant": "constant", "reflect": "reflect", "edge": "edge"}


def _pad(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    pads = [(int(lo), int(hi)) for lo, hi in a["pads"]]
    if a["mode"] == "wrap":
        return _wrap(lw, x[0], pads)
    begin, end = lw.axes([lo for lo, _ in pads]), lw.axes([hi for _, hi in pads])
    if a["mode"] == "constant":
        return lw.op.pad(x[0], begin, end, "constant", lw.scalar_like(x[0], a["value"]))
    return lw.op.pad(x[0], begin, end, _PAD_MODES[a["mode"]])


def _wrap(lw: LoweringContext, value: Any, pads: list[tuple[int, int]]) -> Any:
    # OpenVINO's Pad has no wrap mode: gather the periodic indices along each padded axis.
    shape = lw.shape(value)
    for axis, (lo, hi) in enumerate(pads):
        if lo or hi:
            indices = np.arange(-lo, shape[axis] + hi) % shape[axis]
            value = lw.op.gather(value, lw.const(indices, np.int64), lw.const(axis, np.int64))
    return value


HANDLERS: Final[dict[str, Handler]] = {
    "reshape": _reshape_to_spec,
    "flatten": _reshape_to_spec,
    "squeeze": _reshape_to_spec,
    "unsqueeze": _unsqueeze,
    "transpose": _transpose,
    "expand": _expand,
    "concat": _concat,
    "split": _split,
    "slice": _slice,
    "gather": _gather,
    "gather_elements": _gather_elements,
    "gather_nd": _gather_nd,
    "scatter_elements": _scatter_elements,
    "embedding": _embedding,
    "where": _where,
    "pad": _pad,
}
