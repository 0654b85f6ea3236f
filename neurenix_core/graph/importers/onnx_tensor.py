"""ONNX import handlers: Shape, indexing, scatter and generator ops (ONNX's tensor and generator families).

Operands that fix an output's shape (Tile's repeats, TopK's k, OneHot's depth, Pad's pads and
axes, a window's size) are read as constants. Ops whose output shape depends on their input's
values (NonZero, Unique, Compress's condition) need that input constant too; the result is then
folded at import. Handlers that compute attributes from an input's sizes (CenterCropPad,
SpaceToDepth, Size ...) refuse a dynamic size with NotSymbolicError, which makes the importer
fall back to the example's static shapes with a warning, instead of baking one size in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, const, fail, ints, outputs_used
from neurenix_core.graph.ir.symbolic import NotSymbolicError, SymDim

__all__ = ["HANDLERS"]


def _static_shape(b: GraphBuilder, n: OnnxNode, i: int = 0, axes: Sequence[int] | None = None) -> tuple[int, ...]:
    """Input ``i``'s shape, refused (NotSymbolicError) where the model keeps one of its sizes on
    ``axes`` (None: all) dynamic: an attribute computed from it would hold the example's size."""
    shape = b.spec(n.inputs[i]).shape  # type: ignore[arg-type]
    if any(s.dynamic for s in b.inputs) and not isinstance(n.inputs[i], Const):
        sym = getattr(b, "onnx_sym_shapes", {}).get(n.proto.input[i])
        picked = None if sym is None else [sym[a] for a in (range(len(sym)) if axes is None else axes)]
        if picked is None or any(d is None or isinstance(d, SymDim) for d in picked):
            raise NotSymbolicError(f"node {n.name!r} ({n.op}) computes its attributes from the sizes of {n.proto.input[i]!r}, which are dynamic")
    return tuple(int(d) for d in shape)


def _onnx_dtype(code: int) -> str:
    from onnx import helper

    return str(np.dtype(helper.tensor_dtype_to_np_dtype(int(code))))


def _scalar(b: GraphBuilder, n: OnnxNode, i: int, what: str) -> int:
    arr = const(b, n, i, what)
    if arr is None or arr.size != 1:
        raise fail(b, n, f"needs a single {what}, got {None if arr is None else arr.shape}")
    return int(arr.reshape(-1)[0])


def _per_output(b: GraphBuilder, n: OnnxNode, op: str, inputs: list[Value], attrs: dict[str, Any]) -> list[Value | None]:
    """One ``op`` node per ONNX output the model uses (attr ``output``); None for unused ones."""
    return [b.emit(f"{n.name}.{k}" if k else n.name, op, inputs, attrs | {"output": k}) if used else None
            for k, used in enumerate(outputs_used(n))]


# ----------------------------------------------------------------------------- shape
def _flatten(b: GraphBuilder, n: OnnxNode) -> Value:
    """Flatten to 2-D at ``axis`` (negative counts from the end). Built from shape-agnostic
    ``flatten`` / ``unsqueeze`` nodes so a dynamic batch stays dynamic."""
    x = n.inputs[0]
    rank = len(b.spec(x).shape)  # type: ignore[arg-type]
    axis = int(n.attrs.get("axis", 1))
    if not -rank <= axis <= rank:
        raise fail(b, n, f"has axis {axis} outside [-{rank}, {rank}] for a rank-{rank} input")
    axis = axis + rank if axis < 0 else axis
    if rank == 0:
        return b.emit(n.name, "reshape", [x], {"shape": (1, 1)})  # type: ignore[list-item]
    if axis in (0, rank):
        flat = b.emit(n.name + ".all", "flatten", [x], {"start_dim": 0, "end_dim": -1})  # type: ignore[list-item]
        return b.emit(n.name, "unsqueeze", [flat], {"axes": (0 if axis == 0 else 1,)})
    if axis == 1:  # PyTorch's flatten(x, 1), the common case: one node
        op, attrs = ("identity", {}) if rank == 2 else ("flatten", {"start_dim": 1, "end_dim": -1})
        return b.emit(n.name, op, [x], attrs)  # type: ignore[list-item]
    inner = x if axis == rank - 1 else b.emit(n.name + ".inner", "flatten", [x], {"start_dim": axis, "end_dim": -1})  # type: ignore[list-item]
    return b.emit(n.name, "flatten", [inner], {"start_dim": 0, "end_dim": axis - 1})  # type: ignore[list-item]


def _pad(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.inputs[0]
    rank = len(b.spec(x).shape)  # type: ignore[arg-type]
    pads = ints(const(b, n, 1, "pads"))
    value = const(b, n, 2, "constant value")
    axes_arr = const(b, n, 3, "axes")
    axes = tuple(range(rank)) if axes_arr is None else tuple(a % rank if -rank <= a < rank else a for a in ints(axes_arr))
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise fail(b, n, f"has axes {ints(axes_arr)} that are out of range or repeated for a rank-{rank} input")
    if len(pads) != 2 * len(axes):
        raise fail(b, n, f"has {len(pads)} pads for {len(axes)} axes (it needs a begin and an end per axis)")
    pairs = [(0, 0)] * rank
    for k, a in enumerate(axes):
        pairs[a] = (pads[k], pads[len(axes) + k])
    mode = n.attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise fail(b, n, f"uses pad mode {mode!r}; ONNX defines constant, reflect, edge and wrap")
    fill: Any = 0 if value is None or value.size == 0 else value.reshape(-1)[0].item()  # a Python int for integer data: no float rounding
    if any(lo < 0 or hi < 0 for lo, hi in pairs):
        # A negative pad removes elements: a slice first (ends counted from the end, so a dynamic size stays dynamic).
        crop = [(a, max(-lo, 0), hi if hi < 0 else 2**62) for a, (lo, hi) in enumerate(pairs) if lo < 0 or hi < 0]
        x = b.emit(n.name + ".crop", "slice", [x], {"starts": tuple(c[1] for c in crop), "ends": tuple(c[2] for c in crop),  # type: ignore[list-item]
                                                    "axes": tuple(c[0] for c in crop)})
        pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if all(p == (0, 0) for p in pairs):
        return b.emit(n.name, "identity", [x])  # type: ignore[list-item]
    return b.emit(n.name, "pad", [x], {"pads": tuple(pairs), "mode": mode, "value": fill})  # type: ignore[list-item]


def _tile(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "tile", [n.inputs[0]], {"repeats": ints(const(b, n, 1, "repeats"))})  # type: ignore[list-item]


def _trilu(b: GraphBuilder, n: OnnxNode) -> Value:
    k = 0 if n.input(1) is None else _scalar(b, n, 1, "diagonal offset k")
    return b.emit(n.name, "trilu", [n.inputs[0]], {"upper": bool(n.attrs.get("upper", 1)), "k": k})  # type: ignore[list-item]


def _space_to_depth(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.required(b)
    bs = int(n.attrs["blocksize"])
    _, c, h, w = _static_shape(b, n, axes=(1, 2, 3))  # the batch is copied (0), so it may stay dynamic
    if h % bs or w % bs:
        raise fail(b, n, f"has height {h} / width {w} that blocksize {bs} does not divide")
    # 0 copies the batch dimension, so a dynamic batch stays dynamic.
    mode = n.attrs.get("mode", "DCR")
    perm = {"DCR": (0, 3, 5, 1, 2, 4), "CRD": (0, 1, 3, 5, 2, 4)}.get(mode)
    if perm is None:
        raise fail(b, n, f"uses mode {mode!r}; ONNX defines DCR and CRD")
    t = b.emit(n.name + ".split", "reshape", [x], {"shape": (0, c, h // bs, bs, w // bs, bs)})
    t = b.emit(n.name + ".move", "transpose", [t], {"perm": perm})
    return b.emit(n.name, "reshape", [t], {"shape": (0, c * bs * bs, h // bs, w // bs)})


def _depth_to_space(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.required(b)
    bs = int(n.attrs["blocksize"])
    _, c, h, w = _static_shape(b, n, axes=(1, 2, 3))
    if c % (bs * bs):
        raise fail(b, n, f"has {c} channels, which blocksize {bs}^2 does not divide")
    mode = n.attrs.get("mode", "DCR")
    if mode == "DCR":
        split, perm = (0, bs, bs, c // (bs * bs), h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        split, perm = (0, c // (bs * bs), bs, bs, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise fail(b, n, f"uses mode {mode!r}; ONNX defines DCR and CRD")
    t = b.emit(n.name + ".split", "reshape", [x], {"shape": split})
    t = b.emit(n.name + ".move", "transpose", [t], {"perm": perm})
    return b.emit(n.name, "reshape", [t], {"shape": (0, c // (bs * bs), h * bs, w * bs)})


def _center_crop_pad(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.required(b)
    rank = len(b.spec(x).shape)
    target = ints(const(b, n, 1, "target shape"))
    axes = tuple(int(a) % rank for a in n.attrs.get("axes", range(rank)))
    shape = _static_shape(b, n, axes=axes)
    if len(target) != len(axes):
        raise fail(b, n, f"has {len(target)} target sizes for {len(axes)} axes")
    starts, ends, crop_axes, pads = [], [], [], [(0, 0)] * rank
    for a, want in zip(axes, target):
        have = shape[a]
        if want < have:  # crop: the extra element of an odd difference comes off the end
            lo = (have - want) // 2
            starts.append(lo)
            ends.append(lo + want)
            crop_axes.append(a)
        elif want > have:  # pad: likewise, the extra zero goes at the end
            lo = (want - have) // 2
            pads[a] = (lo, want - have - lo)
    out = x
    if crop_axes:
        out = b.emit(n.name + ".crop", "slice", [out], {"starts": tuple(starts), "ends": tuple(ends), "axes": tuple(crop_axes)})
    if any(p != (0, 0) for p in pads):
        out = b.emit(n.name + ".pad", "pad", [out], {"pads": tuple(pads)})
    return out if out is not x else b.emit(n.name, "identity", [x])


# ----------------------------------------------------------------------------- indexing and scatter
def _gather_nd(b: GraphBuilder, n: OnnxNode) -> Value:
    """GatherND; ``batch_dims`` > 0 becomes batch_dims 0 with the batch position prepended to
    every coordinate tuple (a constant grid), so backends that lower only batch_dims 0 stay right."""
    data, idx = n.required(b, 0), n.required(b, 1)
    nb = int(n.attrs.get("batch_dims", 0))
    if nb == 0:
        return b.emit(n.name, "gather_nd", [data, idx], {"batch_dims": 0})
    ishape = _static_shape(b, n, 1)
    dshape = _static_shape(b, n, 0, axes=range(nb))
    if not 0 < nb < len(ishape) or ishape[:nb] != dshape[:nb]:
        raise fail(b, n, f"has batch_dims {nb} for data {dshape} and indices {ishape}, whose leading dimensions must match")
    grid = np.stack(np.meshgrid(*(np.arange(d) for d in ishape[:nb]), indexing="ij"), axis=-1)  # (batch..., nb)
    grid = grid.reshape(ishape[:nb] + (1,) * (len(ishape) - 1 - nb) + (nb,))
    grid = np.broadcast_to(grid, ishape[:-1] + (nb,)).astype(b.spec(idx).dtype)
    full = b.emit(n.name + ".coords", "concat", [Const(np.ascontiguousarray(grid)), idx], {"axis": -1})
    return b.emit(n.name, "gather_nd", [data, full], {"batch_dims": 0})


def _scatter_elements(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "scatter_elements", n.inputs[:3],  # type: ignore[arg-type]
                  {"axis": int(n.attrs.get("axis", 0)), "reduction": n.attrs.get("reduction", "none")})


def _scatter_nd(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "scatter_nd", n.inputs[:3], {"reduction": n.attrs.get("reduction", "none")})  # type: ignore[arg-type]


def _tensor_scatter(b: GraphBuilder, n: OnnxNode) -> Value:
    ins = [v for v in n.inputs[:3] if v is not None]
    return b.emit(n.name, "tensor_scatter", ins, {"mode": n.attrs.get("mode", "linear"), "axis": int(n.attrs.get("axis", -2))})


def _one_hot(b: GraphBuilder, n: OnnxNode) -> Value:
    arr = const(b, n, 1, "depth")
    if arr is None or arr.size != 1:
        raise fail(b, n, "needs a single depth value")
    depth = int(arr.reshape(-1)[0].item())  # a float depth truncates, as ONNX says
    if depth < 0:
        raise fail(b, n, f"has a negative depth {depth}")
    return b.emit(n.name, "one_hot", [n.required(b, 0), n.required(b, 2)], {"depth": depth, "axis": int(n.attrs.get("axis", -1))})


def _topk(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    k = _scalar(b, n, 1, "k")
    attrs = {"k": k, "axis": int(n.attrs.get("axis", -1)), "largest": bool(n.attrs.get("largest", 1)), "sorted": bool(n.attrs.get("sorted", 1))}
    return _per_output(b, n, "topk", [n.inputs[0]], attrs)  # type: ignore[list-item]


def _unique(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    x = Const(const(b, n, 0, "input (its unique values fix the output shape)"))  # type: ignore[arg-type]
    axis = n.attrs.get("axis")
    return _per_output(b, n, "unique", [x], {"axis": None if axis is None else int(axis), "sorted": bool(n.attrs.get("sorted", 1))})


def _nonzero(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "nonzero", [Const(const(b, n, 0, "input (its non-zero count fixes the output shape)"))])  # type: ignore[arg-type]


def _compress(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.required(b)
    cond = const(b, n, 1, "condition (it fixes the output shape)")
    assert cond is not None
    axis = n.attrs.get("axis")
    if axis is None:
        x = b.emit(n.name + ".flat", "reshape", [x], {"shape": (-1,)})
        axis = 0
    size = b.spec(x).shape[int(axis)]
    keep = np.flatnonzero(cond.reshape(-1).astype(bool))
    if keep.size and keep[-1] >= size:
        raise fail(b, n, f"has a condition longer ({cond.size}) than the {size} slices it selects from, with a True past the end")
    return b.emit(n.name, "gather", [x, Const(keep.astype(np.int64))], {"axis": int(axis)})


def _reverse_sequence(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "reverse_sequence", n.inputs[:2],  # type: ignore[arg-type]
                  {"batch_axis": int(n.attrs.get("batch_axis", 1)), "time_axis": int(n.attrs.get("time_axis", 0))})


# ----------------------------------------------------------------------------- generators and shape queries
def _eye_like(b: GraphBuilder, n: OnnxNode) -> Value:
    dtype = _onnx_dtype(n.attrs["dtype"]) if "dtype" in n.attrs else None
    return b.emit(n.name, "eye_like", [n.inputs[0]], {"k": int(n.attrs.get("k", 0)), "dtype": dtype})  # type: ignore[list-item]


def _size(b: GraphBuilder, n: OnnxNode) -> Value:
    return Const(np.asarray(math.prod(_static_shape(b, n)), np.int64))


def _window(kind: str) -> Handler:
    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        size = _scalar(b, n, 0, "window size")
        dtype = _onnx_dtype(n.attrs.get("output_datatype", 1))
        return b.emit(n.name, "window", [], {"kind": kind, "size": size, "periodic": bool(n.attrs.get("periodic", 1)), "dtype": dtype})

    return run


HANDLERS: dict[str, Handler] = {
    "Flatten": _flatten, "Pad": _pad, "GatherND": _gather_nd, "Tile": _tile, "Trilu": _trilu,
    "SpaceToDepth": _space_to_depth, "DepthToSpace": _depth_to_space, "CenterCropPad": _center_crop_pad,
    "ScatterElements": _scatter_elements, "Scatter": _scatter_elements, "ScatterND": _scatter_nd, "TensorScatter": _tensor_scatter,
    "OneHot": _one_hot, "TopK": _topk, "Unique": _unique, "NonZero": _nonzero, "Compress": _compress,
    "ReverseSequence": _reverse_sequence, "EyeLike": _eye_like, "Size": _size,
    "HannWindow": _window("hann"), "HammingWindow": _window("hamming"), "BlackmanWindow": _window("blackman"),
}
