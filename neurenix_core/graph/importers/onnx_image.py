"""ONNX import handlers: Resize, GridSample, AffineGrid, RoiAlign (ONNX's image-style ops).

Resize's roi / scales / sizes operands must be static (``const``); they become attributes of one
``resize`` node. keep_aspect_ratio_policy is resolved here into explicit sizes and scales, and an
axis Resize leaves as it is (scale 1, its own length) is not listed in ``axes``, so a dynamic batch
or channel axis stays free.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.graph.importers.builder import GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, const, dims, fail, ints
from neurenix_core.graph.ir.symbolic import SymDim
from neurenix_core.graph.opset.image import COORDINATE_MODES, GRID_MODES, NEAREST_MODES, PADDING_MODES, RESIZE_MODES

__all__ = ["HANDLERS"]


def _text(n: OnnxNode, name: str, default: str) -> str:
    return str(n.attrs.get(name, default))


def _operand(b: GraphBuilder, n: OnnxNode, i: int, what: str) -> np.ndarray | None:
    """A static optional operand; an empty tensor means "not given", as ONNX allows."""
    v = const(b, n, i, what)
    return None if v is None or v.size == 0 else np.asarray(v).ravel()


def _resize_axes(b: GraphBuilder, n: OnnxNode, rank: int) -> list[int]:
    if "axes" not in n.attrs:
        return list(range(rank))
    axes = [int(v) for v in n.attrs["axes"]]
    if any(not -rank <= v < rank for v in axes) or len({v % rank for v in axes}) != len(axes):
        raise fail(b, n, f"has axes {axes}, which are out of range or repeated for a {rank}-D input")
    return [v % rank for v in axes]


def _resize_plan(b: GraphBuilder, n: OnnxNode, shape: tuple[int, ...], axes: list[int]) -> tuple[list[Any], list[float] | None]:
    """Output length per axis in ``axes`` (an int or a SymDim) and the scales driving the
    coordinate transformation (None: out / in)."""
    scales, sizes = _operand(b, n, 2, "scales"), _operand(b, n, 3, "sizes")
    if (scales is None) == (sizes is None):
        raise fail(b, n, "needs exactly one of its scales and sizes operands")
    given = scales if scales is not None else sizes
    assert given is not None
    if len(given) != len(axes):
        raise fail(b, n, f"has {len(given)} {'scales' if scales is not None else 'sizes'} for {len(axes)} axes")
    if scales is not None:
        factors = [float(v) for v in scales]  # the float32 values, exactly
        if any(not f > 0 for f in factors):
            raise fail(b, n, f"has scales {factors}; they must be positive")
        return [int(f * shape[ax]) for f, ax in zip(factors, axes)], factors
    out = list(dims(sizes))  # a size computed from a dynamic axis (Shape of another value) stays symbolic
    policy = _text(n, "keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
        return out, None
    if policy not in ("not_larger", "not_smaller"):
        raise fail(b, n, f"has keep_aspect_ratio_policy {policy!r}; ONNX defines stretch, not_larger and not_smaller")
    if any(isinstance(v, SymDim) for v in out):
        raise fail(b, n, "keeps the aspect ratio of sizes that depend on a dynamic axis; export it with static sizes")
    ratios = [o / shape[ax] for o, ax in zip(out, axes)]
    s = min(ratios) if policy == "not_larger" else max(ratios)
    return [int(s * shape[ax] + 0.5) for ax in axes], [s] * len(axes)  # round half up, as ONNX does


def _resize(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.inputs[0]
    assert x is not None
    shape = tuple(int(d) for d in b.spec(x).shape)
    axes = _resize_axes(b, n, len(shape))
    if 0 in (shape[ax] for ax in axes):
        raise fail(b, n, f"resizes an empty axis of shape {shape}")
    sizes, scales = _resize_plan(b, n, shape, axes)
    coord = _text(n, "coordinate_transformation_mode", "half_pixel")
    attrs: dict[str, Any] = {
        "mode": _text(n, "mode", "nearest"), "coordinate_transformation_mode": coord,
        "nearest_mode": _text(n, "nearest_mode", "round_prefer_floor"), "cubic_coeff_a": float(n.attrs.get("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(n.attrs.get("exclude_outside", 0)), "extrapolation_value": float(n.attrs.get("extrapolation_value", 0.0)),
        "antialias": bool(n.attrs.get("antialias", 0)),
    }
    for key, allowed in (("mode", RESIZE_MODES), ("coordinate_transformation_mode", COORDINATE_MODES), ("nearest_mode", NEAREST_MODES)):
        if attrs[key] not in allowed:
            raise fail(b, n, f"has {key} {attrs[key]!r}; supported: {', '.join(allowed)}")
    roi = None
    if coord == "tf_crop_and_resize":
        given = _operand(b, n, 1, "roi")
        if given is None or len(given) != 2 * len(axes):
            raise fail(b, n, f"uses tf_crop_and_resize and needs a roi of {2 * len(axes)} values (starts, ends)")
        roi = [float(v) for v in given]
    # Axes left as they are (their own length, scale 1, whole roi) are not resized: drop them.
    keep = [k for k, ax in enumerate(axes) if not (
        sizes[k] == shape[ax] and (scales is None or scales[k] == 1.0) and (roi is None or (roi[k], roi[k + len(axes)]) == (0.0, 1.0)))]
    if not keep:
        return b.emit(n.name, "identity", [x])
    attrs["axes"] = tuple(axes[k] for k in keep)
    if scales is None or any(sizes[k] != int(scales[k] * shape[axes[k]]) for k in keep):
        attrs["sizes"] = tuple(sizes[k] for k in keep)
    if scales is not None:
        attrs["scales"] = tuple(scales[k] for k in keep)
    if roi is not None:
        attrs["roi"] = tuple(roi[k] for k in keep) + tuple(roi[k + len(axes)] for k in keep)
    return b.emit(n.name, "resize", [x], attrs)


_GRID_MODE_NAMES = {"bilinear": "linear", "bicubic": "cubic"}  # GridSample-16's names for the same modes


def _grid_sample(b: GraphBuilder, n: OnnxNode) -> Value:
    mode = _text(n, "mode", "linear")
    mode = _GRID_MODE_NAMES.get(mode, mode)
    pad = _text(n, "padding_mode", "zeros")
    if mode not in GRID_MODES or pad not in PADDING_MODES:
        raise fail(b, n, f"has mode {mode!r} / padding_mode {pad!r}; supported: {GRID_MODES} / {PADDING_MODES}")
    return b.emit(n.name, "grid_sample", n.inputs[:2],  # type: ignore[arg-type]
                  {"mode": mode, "padding_mode": pad, "align_corners": bool(n.attrs.get("align_corners", 0))})


def _affine_grid(b: GraphBuilder, n: OnnxNode) -> Value:
    size = ints(const(b, n, 1, "size"))
    if len(size) not in (4, 5) or min(size) < 0:
        raise fail(b, n, f"has size {size}; it must be (N, C, H, W) or (N, C, D, H, W)")
    return b.emit(n.name, "affine_grid", [n.inputs[0]],  # type: ignore[list-item]
                  {"size": size, "align_corners": bool(n.attrs.get("align_corners", 0))})


def _roi_align(b: GraphBuilder, n: OnnxNode) -> Value:
    coord = n.attrs.get("coordinate_transformation_mode")
    if coord is None:
        # RoiAlign-10 (opsets 10-15) had no attribute and sampled output_half_pixel; RoiAlign-16 defaults to half_pixel.
        opset = getattr(b, "onnx_opset", None)
        if opset is None:
            raise fail(b, n, "leaves coordinate_transformation_mode unset and the model's opset, which decides its default, is unknown")
        coord = "half_pixel" if opset >= 16 else "output_half_pixel"
    mode = _text(n, "mode", "avg")
    if mode not in ("avg", "max") or coord not in ("half_pixel", "output_half_pixel"):
        raise fail(b, n, f"has mode {mode!r} / coordinate_transformation_mode {coord!r}")
    attrs = {"mode": mode, "coordinate_transformation_mode": str(coord), "output_height": int(n.attrs.get("output_height", 1)),
             "output_width": int(n.attrs.get("output_width", 1)), "sampling_ratio": int(n.attrs.get("sampling_ratio", 0)),
             "spatial_scale": float(n.attrs.get("spatial_scale", 1.0))}
    return b.emit(n.name, "roi_align", n.inputs[:3], attrs)  # type: ignore[arg-type]


HANDLERS: dict[str, Handler] = {
    "Resize": _resize, "GridSample": _grid_sample, "AffineGrid": _affine_grid, "RoiAlign": _roi_align,
}
