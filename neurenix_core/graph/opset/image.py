"""Resizing and sampling: ``resize``, ``grid_sample``, ``affine_grid``, ``roi_align`` (ONNX's image-style ops).

Semantics are ONNX's (Resize-19, GridSample-22, AffineGrid-20, RoiAlign-16), checked against the
reference implementation in ``onnx/reference/ops``; the implementations here are vectorised.
``resize`` is separable: every resized axis is one gather per kernel tap plus a weighted sum, so an
upsampling layer costs a few passes over its output. PyTorch's ``interpolate`` family maps onto the
same attributes (mode, coordinate transformation, per-axis output size or scale).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from neurenix_core.graph.opset.schema import REQUIRED, Arrays, Attrs, Params, Shape, _axis, _def, _is_float

RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
GRID_MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")


# ----------------------------------------------------------------------------- shared
def _work_dtype(dtype: np.dtype[Any]) -> type:
    """What a weighted sum over ``dtype`` values is computed in: float64 stays float64, integers
    go through float64 (rounded back, as ONNX's saturating cast does), every other float through float32."""
    return np.float64 if dtype == np.float64 or dtype.kind in "iu" else np.float32


def _saturate(v: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``v`` in ``dtype``; integers round half to even and clip to the type's range (ONNX's saturate_cast)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(v), info.min, info.max).astype(dtype)
    return v.astype(dtype, copy=False)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with coefficient ``a`` at distances ``t`` (0 beyond 2)."""
    t = np.abs(t)
    inner = ((a + 2) * t - (a + 3)) * t * t + 1
    outer = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, inner, np.where(t < 2, outer, 0.0))


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates outside [lo, hi] back in, mirroring at the borders as often as needed."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dist = np.where(below, lo - x, np.where(above, x - hi, 0))
    flips = np.trunc(dist / span)
    rest = dist - flips * span
    even = flips % 2 == 0
    from_below = np.where(even, lo + rest, hi - rest)
    from_above = np.where(even, hi - rest, lo + rest)
    return np.where(below, from_below, np.where(above, from_above, x)).astype(x.dtype, copy=False)


# ----------------------------------------------------------------------------- resize
def _resize_axes(a: Attrs, ndim: int) -> tuple[int, ...]:
    axes = tuple(range(ndim)) if a["axes"] is None else tuple(_axis(int(v), ndim) for v in a["axes"])
    if len(set(axes)) != len(axes):
        raise ValueError(f"resize axes {tuple(a['axes'])} name an axis twice")
    return axes


def _resize_size(a: Attrs, k: int, n: int) -> int:
    """Output length of the ``k``-th resized axis of input length ``n``: ``sizes`` when given,
    else floor(n * scale) (ONNX computes it in float64 from the float32 scale)."""
    if a["sizes"] is not None:
        return int(a["sizes"][k])
    return int(float(a["scales"][k]) * n)


def _resize_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    axes = _resize_axes(a, len(x))
    for key in ("sizes", "scales"):
        if a[key] is not None and len(a[key]) != len(axes):
            raise ValueError(f"resize {key} {tuple(a[key])} needs one entry per resized axis ({len(axes)})")
    if a["sizes"] is None and a["scales"] is None:
        raise ValueError("resize needs sizes or scales")
    if a["scales"] is not None and any(float(v) <= 0 for v in a["scales"]):
        raise ValueError(f"resize scales {tuple(a['scales'])} must be positive")
    if a["mode"] not in RESIZE_MODES:
        raise ValueError(f"resize mode {a['mode']!r} is not one of {RESIZE_MODES}")
    if a["coordinate_transformation_mode"] not in COORDINATE_MODES:
        raise ValueError(f"coordinate_transformation_mode {a['coordinate_transformation_mode']!r} is not one of {COORDINATE_MODES}")
    if a["nearest_mode"] not in NEAREST_MODES:
        raise ValueError(f"nearest_mode {a['nearest_mode']!r} is not one of {NEAREST_MODES}")
    if a["antialias"] and a["mode"] == "nearest":
        raise ValueError("antialias applies to the linear and cubic modes only")
    if a["coordinate_transformation_mode"] == "tf_crop_and_resize" and (a["roi"] is None or len(a["roi"]) != 2 * len(axes)):
        raise ValueError(f"tf_crop_and_resize needs a roi of (starts, ends) for the {len(axes)} resized axes")
    if d[0] == "bool":
        raise ValueError("resize takes numeric values, not bool")
    out = list(x)
    for k, ax in enumerate(axes):
        out[ax] = _resize_size(a, k, x[ax])
        if out[ax] < 0 or (x[ax] == 0 and out[ax] > 0):
            raise ValueError(f"resize cannot make axis {ax} of length {x[ax]} into length {out[ax]}")
    return tuple(out), d[0]


def _source_coords(a: Attrs, out_n: int, in_n: int, scale: float, roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Where each output index samples the input axis (ONNX's coordinate transformations, in
    float64 and in the reference's order of operations), and for tf_crop_and_resize which
    outputs fall outside the input (they get extrapolation_value)."""
    mode = a["coordinate_transformation_mode"]
    y = np.arange(out_n, dtype=np.float64)
    width = scale * in_n  # the output length before flooring: ONNX's formulas use this one
    if mode == "align_corners":
        return (np.zeros(out_n) if width == 1 else y * (in_n - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale, None
    if mode == "pytorch_half_pixel":
        return (np.full(out_n, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = in_n / 2 * (1 - out_n / width)  # centres the floored output on the input
        return offset + (y + 0.5) / scale - 0.5, None
    assert roi is not None
    start, end = roi
    x = np.full(out_n, (end - start) * (in_n - 1) / 2) if width == 1 else y * (end - start) * (in_n - 1) / (width - 1)
    x = x + start * (in_n - 1)
    return x, (x < 0) | (x > in_n - 1)


def _nearest_index(x: np.ndarray, rule: str, in_n: int) -> np.ndarray:
    # A coordinate that is mathematically a whole or half pixel (floor/ceil and rounding ties)
    # can come out a few ulps off (half_pixel_symmetric with float32 scales): snap it, so the
    # rule decides on the exact value, as ONNX Runtime's answers do.
    halves = np.round(x * 2) / 2
    x = np.where(np.abs(x - halves) <= 1e-9 * np.maximum(np.abs(x), 1), halves, x)
    lo = np.floor(x)
    frac = x - lo
    up = {"round_prefer_floor": frac > 0.5, "round_prefer_ceil": frac >= 0.5, "floor": np.zeros_like(frac, bool), "ceil": frac > 0}[rule]
    return np.clip(lo + up, 0, in_n - 1).astype(np.intp)


def _taps(a: Attrs, x: np.ndarray, scale: float, in_n: int) -> tuple[np.ndarray, np.ndarray]:
    """Input indices and weights (out, taps) of the linear or cubic kernel at coordinates ``x``.

    ONNX anchors the window at ``base = ceil(x) - 1`` with ``ratio = x - base`` in (0, 1] and
    replicates the edge pixels; antialias widens the kernel by 1/scale when downsampling."""
    base = np.ceil(x) - 1
    ratio = x - base
    cubic = a["mode"] == "cubic"
    coeff = float(a["cubic_coeff_a"])
    if a["antialias"]:
        s = min(scale, 1.0)
        start = math.floor((-2 if cubic else -1) / s) + 1
        offsets = np.arange(start, 2 - start, dtype=np.float64)
        t = (offsets[None, :] - ratio[:, None]) * s
        w = _cubic(t, coeff) if cubic else np.clip(1 - np.abs(t), 0, 1)
        w = w / w.sum(axis=1, keepdims=True)
    elif cubic:
        offsets = np.arange(-1, 3, dtype=np.float64)
        w = _cubic(offsets[None, :] - ratio[:, None], coeff)
    else:
        offsets = np.arange(0, 2, dtype=np.float64)
        w = np.stack([1 - ratio, ratio], axis=1)
    idx = base[:, None] + offsets[None, :]
    if a["exclude_outside"]:
        w = np.where((idx < 0) | (idx >= in_n), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_n - 1).astype(np.intp), w


def _resize_one_axis(a: Attrs, x: np.ndarray, axis: int, out_n: int, scale: float, roi: tuple[float, float] | None,
                     fill: np.ndarray) -> np.ndarray:
    in_n = x.shape[axis]
    coords, outside = _source_coords(a, out_n, in_n, scale, roi)
    shape = tuple(-1 if i == axis else 1 for i in range(x.ndim))
    if a["mode"] == "nearest":
        out = np.take(x, _nearest_index(coords, a["nearest_mode"], in_n), axis=axis)
    else:
        idx, w = _taps(a, coords, scale, in_n)
        w = w.astype(x.dtype)
        used = [k for k in range(idx.shape[1]) if np.any(w[:, k])] or [0]  # a tap weighing zero everywhere costs nothing
        out = np.take(x, idx[:, used[0]], axis=axis)
        out *= w[:, used[0]].reshape(shape)
        buf = np.empty_like(out)
        for k in used[1:]:  # in place: one gather, one scale and one add per tap, no temporaries
            np.take(x, idx[:, k], axis=axis, out=buf)
            buf *= w[:, k].reshape(shape)
            out += buf
    if outside is not None and outside.any():
        out = np.where(outside.reshape(shape), fill, out)
    return out


def _resize_ref(a: Attrs, xs: Arrays, p: Params) -> np.ndarray:
    x = xs[0]
    axes = _resize_axes(a, x.ndim)
    nearest = a["mode"] == "nearest"
    out = x if nearest else x.astype(_work_dtype(x.dtype), copy=False)
    fill = _saturate(np.asarray(float(a["extrapolation_value"]), np.float64), out.dtype)
    crop = a["coordinate_transformation_mode"] == "tf_crop_and_resize"
    # Each axis is resized independently: shrinking axes first keeps the intermediate small, and of
    # the growing ones the innermost goes first, as gathering along it is the slow (element-wise) case.
    def cost(k: int) -> tuple[bool, float]:
        ratio = _resize_size(a, k, x.shape[axes[k]]) / max(x.shape[axes[k]], 1)
        return (ratio >= 1, -axes[k] if ratio >= 1 else ratio)

    order = sorted(range(len(axes)), key=cost)
    for k in order:
        ax = axes[k]
        in_n = x.shape[ax]
        out_n = _resize_size(a, k, in_n)
        scale = float(a["scales"][k]) if a["scales"] is not None else out_n / in_n if in_n else 1.0
        roi = (float(a["roi"][k]), float(a["roi"][k + len(axes)])) if crop else None
        identity = roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))
        if math.isclose(scale, 1.0) and out_n == in_n and identity:
            continue  # ONNX leaves such an axis untouched
        out = _resize_one_axis(a, out, ax, out_n, scale, roi, fill)
    return out if nearest else _saturate(out, x.dtype)


_def("resize", "image",
     "ONNX Resize: nearest | linear | cubic interpolation of the axes in `axes` (None: all) to `sizes` (one per axis) "
     "or floor(length * `scales`); `scales` (when given) also drives the coordinate transformation, else "
     "out/in; roi = (starts, ends) for tf_crop_and_resize; antialias widens linear/cubic kernels when downsampling",
     ("x",), _resize_rule, _resize_ref,
     attrs={"sizes": None, "scales": None, "axes": None, "mode": "nearest", "coordinate_transformation_mode": "half_pixel",
            "nearest_mode": "round_prefer_floor", "cubic_coeff_a": -0.75, "exclude_outside": False, "extrapolation_value": 0.0,
            "antialias": False, "roi": None})


# ----------------------------------------------------------------------------- grid_sample
def _grid_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, g = s
    if len(x) < 3 or len(g) != len(x) or g[0] != x[0] or g[-1] != len(x) - 2:
        raise ValueError(f"expects X (N, C, *spatial) and grid (N, *out, {len(x) - 2}), got {x} and {g}")
    if a["mode"] not in GRID_MODES or a["padding_mode"] not in PADDING_MODES:
        raise ValueError(f"mode {a['mode']!r} / padding_mode {a['padding_mode']!r} not in {GRID_MODES} / {PADDING_MODES}")
    if not _is_float(d[1]):
        raise ValueError(f"grid must be floating-point, got {d[1]}")
    if d[0] == "bool":
        raise ValueError("grid_sample takes numeric values, not bool")
    return x[:2] + g[1:-1], d[0]


def _grid_axis(a: Attrs, g: np.ndarray, n: int) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Taps along one spatial axis of length ``n`` for normalised coordinates ``g``:
    (indices, weights, in-range masks), following PyTorch's grid_sampler."""
    align, pad, mode = a["align_corners"], a["padding_mode"], a["mode"]
    x = (g + 1) / 2.0 * (n - 1) if align else ((g + 1) * n - 1) / 2.0
    lo, hi = (0.0, n - 1.0) if align else (-0.5, n - 0.5)
    if mode == "nearest":
        x = np.rint(x)  # half to even, as PyTorch rounds
    out = (x < lo) | (x > hi)
    if pad == "border":
        x = np.where(out, np.clip(x, 0, n - 1), x)
    elif pad == "reflection":
        x = np.where(out, _reflect(x, lo, hi), x)
    if mode == "nearest":
        taps, weights = [np.trunc(x)], [np.ones_like(x)]
    else:
        x0 = np.floor(x)
        t = x - x0
        if mode == "linear":
            taps, weights = [x0, x0 + 1], [1 - t, t]
        else:
            taps = [x0 - 1, x0, x0 + 1, x0 + 2]
            weights = list(_cubic(np.stack([t + 1, t, 1 - t, 2 - t]), -0.75))
    idx, ok = [], []
    for i in taps:
        if pad == "reflection":
            i = np.trunc(_reflect(i, lo, hi))
        inside = (i >= 0) & (i <= n - 1)
        idx.append(np.clip(i, 0, n - 1).astype(np.intp))
        ok.append(inside if pad == "zeros" else np.ones_like(inside))
    return idx, weights, ok


def _grid_ref(a: Attrs, xs: Arrays, p: Params) -> np.ndarray:
    x, grid = xs
    spatial = x.shape[2:]
    nd = len(spatial)
    work = _work_dtype(x.dtype)
    out_shape = x.shape[:2] + grid.shape[1:-1]
    if 0 in out_shape or 0 in spatial:
        return np.zeros(out_shape, x.dtype)
    g = grid.astype(np.float64 if grid.dtype == np.float64 else np.float32)
    flat_x: np.ndarray = x.astype(work).reshape(x.shape[0], x.shape[1], -1)
    strides = [int(np.prod(spatial[d + 1:])) for d in range(nd)]
    # grid's last axis lists coordinates innermost-first: (x, y[, z]) for (..., H, W)
    per_axis = [_grid_axis(a, g[..., nd - 1 - d], spatial[d]) for d in range(nd)]
    acc: np.ndarray = np.zeros((x.shape[0], x.shape[1], int(np.prod(grid.shape[1:-1]))), work)
    for combo in itertools.product(*(range(len(t[0])) for t in per_axis)):
        flat: np.ndarray = sum(per_axis[d][0][k] * strides[d] for d, k in enumerate(combo))  # type: ignore[assignment]  # nd >= 1 terms: never the start 0
        w = np.ones(grid.shape[:-1], np.float64)
        for d, k in enumerate(combo):
            w = w * np.where(per_axis[d][2][k], per_axis[d][1][k], 0)
        vals = np.take_along_axis(flat_x, flat.reshape(x.shape[0], 1, -1), axis=2)
        acc += vals * w.reshape(x.shape[0], 1, -1).astype(work)
    return _saturate(acc.reshape(out_shape), x.dtype)


_def("grid_sample", "image",
     "ONNX GridSample / PyTorch grid_sample: sample X (N, C, *spatial) at grid (N, *out, nd) normalised coordinates "
     "((x, y[, z]) in [-1, 1]); mode linear | nearest | cubic, padding_mode zeros | border | reflection",
     ("x", "grid"), _grid_rule, _grid_ref, attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": False})


# ----------------------------------------------------------------------------- affine_grid
def _affine_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    theta, size = s[0], tuple(int(v) for v in a["size"])
    nd = len(size) - 2
    if nd not in (2, 3) or theta != (size[0], nd, nd + 1):
        raise ValueError(f"expects size (N, C, H, W) or (N, C, D, H, W) and theta (N, {nd}, {nd + 1}); got size {size}, theta {theta}")
    if not _is_float(d[0]):
        raise ValueError(f"theta must be floating-point, got {d[0]}")
    return (size[0],) + size[2:] + (nd,), d[0]


def _affine_line(n: int, align: bool) -> np.ndarray:
    """Normalised pixel positions along an axis of length ``n`` (pixel centres unless align_corners)."""
    if n <= 1:
        return np.zeros(n)  # PyTorch's affine_grid puts a single pixel at the centre
    if align:
        return np.linspace(-1.0, 1.0, n)
    return (2 * np.arange(n, dtype=np.float64) + 1) / n - 1


def _affine_ref(a: Attrs, xs: Arrays, p: Params) -> np.ndarray:
    theta = xs[0]
    spatial = tuple(int(v) for v in a["size"])[2:]
    lines = [_affine_line(n, bool(a["align_corners"])) for n in spatial]
    mesh = np.meshgrid(*lines, indexing="ij")
    # homogeneous coordinates innermost-first: (x, y[, z], 1)
    base = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1)
    out = np.einsum("...k,nik->n...i", base, theta.astype(np.float64))
    return out.astype(theta.dtype)


_def("affine_grid", "image",
     "ONNX AffineGrid / PyTorch affine_grid: the sampling grid (N, *spatial, nd) of affine matrices theta (N, nd, nd+1) "
     "over an output of `size` (N, C, *spatial)", ("theta",), _affine_rule, _affine_ref,
     attrs={"size": REQUIRED, "align_corners": False})


# ----------------------------------------------------------------------------- roi_align
def _roi_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, rois, idx = s
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or idx != (rois[0],):
        raise ValueError(f"expects X (N, C, H, W), rois (R, 4) and batch_indices (R,), got {x}, {rois}, {idx}")
    if a["mode"] not in ("avg", "max") or a["coordinate_transformation_mode"] not in ("half_pixel", "output_half_pixel"):
        raise ValueError(f"mode {a['mode']!r} / coordinate_transformation_mode {a['coordinate_transformation_mode']!r} "
                         "not in (avg, max) / (half_pixel, output_half_pixel)")
    if not _is_float(d[0]) or not _is_float(d[1]) or d[2] not in ("int64", "int32"):
        raise ValueError(f"expects float X and rois and integer batch_indices, got {d}")
    if a["output_height"] < 1 or a["output_width"] < 1:
        raise ValueError(f"output size ({a['output_height']}, {a['output_width']}) must be positive")
    return (rois[0], x[1], int(a["output_height"]), int(a["output_width"])), d[0]


def _roi_taps(start: np.floating[Any], bin_size: np.floating[Any], grid: int, pooled: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Bilinear taps (pooled, grid, 2) of the sample points of each bin along one axis of length
    ``n``: indices and weights; a sample outside [-1, n] weighs nothing."""
    p = np.arange(pooled)[:, None]
    g = np.arange(grid)[None, :]
    c = start + p * bin_size + (g + 0.5) * bin_size / grid
    valid = (c >= -1.0) & (c <= n)
    c = np.maximum(c, 0)
    low = np.floor(c).astype(np.intp)
    end = low >= n - 1
    low = np.where(end, n - 1, low)
    high = np.where(end, n - 1, low + 1)
    c = np.where(end, low, c)
    frac = c - low
    weights = np.stack([1 - frac, frac], axis=-1) * valid[..., None]
    return np.stack([low, high], axis=-1), weights


def _roi_one(a: Attrs, image: np.ndarray, roi: np.ndarray) -> np.ndarray:
    ph, pw = int(a["output_height"]), int(a["output_width"])
    h, w = image.shape[1:]
    offset = 0.5 if a["coordinate_transformation_mode"] == "half_pixel" else 0.0
    x0, y0, x1, y1 = (roi * roi.dtype.type(a["spatial_scale"]) - roi.dtype.type(offset))
    rw, rh = x1 - x0, y1 - y0
    if offset == 0.0:  # output_half_pixel (RoiAlign-10) forces malformed rois to 1x1
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    ratio = int(a["sampling_ratio"])
    gh = ratio if ratio > 0 else int(np.ceil(rh / ph))
    gw = ratio if ratio > 0 else int(np.ceil(rw / pw))
    yi, yw = _roi_taps(y0, rh / ph, gh, ph, h)
    xi, xw = _roi_taps(x0, rw / pw, gw, pw, w)
    if a["mode"] == "avg":
        rows = np.einsum("cpgaw,pga->cpw", image[:, yi, :], yw.astype(image.dtype))
        return np.einsum("cpqgb,qgb->cpq", rows[:, :, xi], xw.astype(image.dtype)) / max(gh * gw, 1)
    if gh * gw == 0:
        return np.zeros((image.shape[0], ph, pw), image.dtype)
    # max mode: the largest weighted corner value over every sample of the bin (ONNX / ORT)
    vals = image[:, yi[:, :, :, None, None, None], xi[None, None, None, :, :, :]]
    weighted = vals * (yw[:, :, :, None, None, None] * xw[None, None, None, :, :, :]).astype(image.dtype)
    return weighted.max(axis=(2, 3, 5, 6))


def _roi_ref(a: Attrs, xs: Arrays, p: Params) -> np.ndarray:
    x, rois, idx = xs
    work = _work_dtype(x.dtype)
    rois = rois.astype(np.float64 if rois.dtype == np.float64 else np.float32)
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= x.shape[0]):
        raise ValueError(f"roi_align: batch_indices {idx.tolist()} out of range for a batch of {x.shape[0]}")
    out: np.ndarray = np.zeros((rois.shape[0], x.shape[1], int(a["output_height"]), int(a["output_width"])), work)
    for r in range(rois.shape[0]):
        out[r] = _roi_one(a, x[idx[r]].astype(work), rois[r])
    return out.astype(x.dtype)


_def("roi_align", "image",
     "ONNX RoiAlign: bilinear-sampled avg | max pooling of X (N, C, H, W) over rois (R, 4) = (x1, y1, x2, y2) of "
     "image batch_indices (R,) into (R, C, output_height, output_width)", ("x", "rois", "batch_indices"), _roi_rule, _roi_ref,
     attrs={"mode": "avg", "output_height": 1, "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0,
            "coordinate_transformation_mode": "half_pixel"})
