"""from_onnx on cpu:0: one-node models of ONNX's image-style ops (Resize, GridSample, AffineGrid,
RoiAlign), each compared with a NumPy expectation of ONNX's semantics written out plainly here
(scalar loops over output positions on tiny inputs), exact dtype and shape."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper, numpy_helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixError

RNG = np.random.default_rng(7)


def _model(op: str, inputs: dict[str, np.ndarray], attrs: dict[str, Any] | None = None,
           consts: dict[str, np.ndarray] | None = None, order: list[str] | None = None, opset: int = 22) -> Any:
    consts = consts or {}
    node = helper.make_node(op, order or list(inputs) + list(consts), ["y"], **(attrs or {}))
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(op: str, inputs: dict[str, np.ndarray], **kw: Any) -> np.ndarray:
    compiled = nx.compile(nn.from_onnx(_model(op, inputs, **kw)), device="cpu:0", precision="fp32", outputs="host", progress=False)
    return np.asarray(compiled(*inputs.values()))


def ops_of(op: str, inputs: dict[str, np.ndarray], **kw: Any) -> list[str]:
    return [n.op for n in nn.from_onnx(_model(op, inputs, **kw)).to_graph().nodes]


def check(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- Resize expectations
def _source(y: int, scale: float, n_in: int, n_out: int, mode: str, roi: tuple[float, float]) -> float:
    """ONNX's coordinate transformation of output index y (the spec's formulas, one at a time)."""
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if n_out > 1 else -0.5
    if mode == "asymmetric":
        return y / scale
    if mode == "align_corners":
        return 0.0 if n_out == 1 else y * (n_in - 1) / (n_out - 1)
    assert mode == "tf_crop_and_resize"
    lo, hi = roi
    if n_out == 1:
        return (hi - lo) * (n_in - 1) / 2 + lo * (n_in - 1)
    return lo * (n_in - 1) + y * (hi - lo) * (n_in - 1) / (n_out - 1)


def _keys(t: float, a: float) -> float:
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def resize_1d(v: np.ndarray, n_out: int, scale: float, *, mode: str = "nearest", coord: str = "half_pixel",
              nearest: str = "round_prefer_floor", a: float = -0.75, exclude: bool = False, antialias: bool = False,
              roi: tuple[float, float] = (0.0, 1.0), fill: float = 0.0) -> np.ndarray:
    """One axis of ONNX Resize on a 1-D float64 vector, pixel by pixel."""
    n = len(v)
    out = np.empty(n_out)
    for y in range(n_out):
        x = _source(y, scale, n, n_out, coord, roi)
        if coord == "tf_crop_and_resize" and not 0 <= x <= n - 1:
            out[y] = fill
            continue
        if mode == "nearest":
            f = math.floor(x)
            r = x - f
            up = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5, "floor": False, "ceil": r > 0}[nearest]
            out[y] = v[min(max(f + up, 0), n - 1)]
            continue
        s = min(scale, 1.0) if antialias else 1.0
        reach = (2 if mode == "cubic" else 1) / s
        taps = [i for i in range(math.floor(x - reach) - 1, math.ceil(x + reach) + 2) if abs(i - x) * s < (2 if mode == "cubic" else 1)]
        w = [(_keys((i - x) * s, a) if mode == "cubic" else 1 - abs(i - x) * s) for i in taps]
        if exclude:
            w = [wi if 0 <= i < n else 0.0 for i, wi in zip(taps, w)]
        total = sum(w) if (antialias or exclude) else 1.0
        out[y] = sum(wi * v[min(max(i, 0), n - 1)] for i, wi in zip(taps, w)) / total
    return out


def resize_nd(x: np.ndarray, plan: dict[int, tuple[int, float]], rois: dict[int, tuple[float, float]] | None = None,
              **kw: Any) -> np.ndarray:
    out = x.astype(np.float64)
    for ax, (n_out, scale) in plan.items():
        roi = (rois or {}).get(ax, (0.0, 1.0))
        out = np.apply_along_axis(lambda v, n_out=n_out, scale=scale, roi=roi: resize_1d(v, n_out, scale, roi=roi, **kw), ax, out)
    return out


# ----------------------------------------------------------------------------- Resize
def test_resize_nearest_2x_scales_initializer_is_repeat() -> None:
    x = RNG.standard_normal((1, 3, 4, 5)).astype(np.float32)
    kw = {"attrs": {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
          "consts": {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}}
    check(run("Resize", {"x": x}, **kw), x.repeat(2, axis=2).repeat(2, axis=3), rtol=0, atol=0)
    assert ops_of("Resize", {"x": x}, **kw) == ["resize"]


@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners"])
def test_resize_linear_coordinate_modes(coord: str) -> None:
    x = RNG.standard_normal((2, 1, 3, 4)).astype(np.float32)
    sizes = np.array([2, 1, 7, 3], np.int64)
    got = run("Resize", {"x": x}, attrs={"mode": "linear", "coordinate_transformation_mode": coord},
              consts={"sizes": sizes}, order=["x", "", "", "sizes"])
    want = resize_nd(x, {2: (7, 7 / 3), 3: (3, 3 / 4)}, mode="linear", coord=coord)
    check(got, want.astype(np.float32))


@pytest.mark.parametrize(("a", "exclude"), [(-0.75, False), (-0.5, True)])
def test_resize_cubic_scales(a: float, exclude: bool) -> None:
    x = RNG.standard_normal((1, 1, 5, 6)).astype(np.float32)
    scales = np.array([1, 1, 1.6, 0.5], np.float32)
    got = run("Resize", {"x": x}, attrs={"mode": "cubic", "cubic_coeff_a": a, "exclude_outside": int(exclude)},
              consts={"scales": scales}, order=["x", "", "scales"])
    want = resize_nd(x, {2: (8, float(scales[2])), 3: (3, 0.5)}, mode="cubic", a=a, exclude=exclude)
    check(got, want.astype(np.float32))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_downsample(mode: str) -> None:
    x = RNG.standard_normal((1, 2, 9, 8)).astype(np.float32)
    got = run("Resize", {"x": x}, attrs={"mode": mode, "antialias": 1, "axes": [2, 3]},
              consts={"sizes": np.array([4, 3], np.int64)}, order=["x", "", "", "sizes"])
    want = resize_nd(x, {2: (4, 4 / 9), 3: (3, 3 / 8)}, mode=mode, antialias=True)
    check(got, want.astype(np.float32))


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes_axes_reversed(nearest: str) -> None:
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    got = run("Resize", {"x": x}, attrs={"mode": "nearest", "nearest_mode": nearest, "axes": [3, -2]},
              consts={"sizes": np.array([8, 7], np.int64)}, order=["x", "", "", "sizes"])
    want = resize_nd(x, {3: (8, 8 / 5), 2: (7, 7 / 4)}, nearest=nearest)
    check(got, want.astype(np.float32), rtol=0, atol=0)


@pytest.mark.parametrize(("policy", "shape"), [("not_larger", (1, 1, 6, 8)), ("not_smaller", (1, 1, 9, 12))])
def test_resize_keep_aspect_ratio(policy: str, shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal((1, 1, 3, 4)).astype(np.float32)
    got = run("Resize", {"x": x}, attrs={"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": policy},
              consts={"sizes": np.array([9, 8], np.int64)}, order=["x", "", "", "sizes"])
    s = shape[2] / 3
    want = resize_nd(x, {2: (shape[2], s), 3: (shape[3], s)})
    check(got, want.astype(np.float32), rtol=0, atol=0)


def test_resize_tf_crop_and_resize_extrapolates() -> None:
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    roi = np.array([-0.2, 0.4, 0.9, 1.3], np.float32)  # (h0, w0, h1, w1) over the axes (2, 3)
    got = run("Resize", {"x": x}, attrs={"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "axes": [2, 3],
                                         "extrapolation_value": 5.0},
              consts={"roi": roi, "sizes": np.array([3, 5], np.int64)}, order=["x", "roi", "", "sizes"])
    want = resize_nd(x, {2: (3, 3 / 4), 3: (5, 5 / 4)}, mode="linear", coord="tf_crop_and_resize", fill=5.0,
                     rois={2: (float(roi[0]), float(roi[2])), 3: (float(roi[1]), float(roi[3]))})
    check(got, want.astype(np.float32))


def test_resize_uint8_rounds_and_float16_keeps_dtype() -> None:
    x = RNG.integers(0, 256, (1, 1, 3, 3)).astype(np.uint8)
    consts = {"scales": np.array([1, 1, 1.5, 1.5], np.float32)}
    got = run("Resize", {"x": x}, attrs={"mode": "cubic"}, consts=consts, order=["x", "", "scales"])
    want = resize_nd(x, {2: (4, 1.5), 3: (4, 1.5)}, mode="cubic")
    check(got, np.clip(np.round(want), 0, 255).astype(np.uint8), rtol=0, atol=1)
    h = RNG.standard_normal((1, 1, 3, 3)).astype(np.float16)
    got = run("Resize", {"x": h}, attrs={"mode": "linear"}, consts=consts, order=["x", "", "scales"])
    check(got, resize_nd(h, {2: (4, 1.5), 3: (4, 1.5)}, mode="linear").astype(np.float16), rtol=2e-3, atol=2e-3)


def test_resize_unchanged_axes_are_left_out_and_identity_folds() -> None:
    x = RNG.standard_normal((2, 3, 4, 4)).astype(np.float32)
    m = nn.from_onnx(_model("Resize", {"x": x}, attrs={"mode": "linear"}, consts={"scales": np.array([1, 1, 2, 1], np.float32)},
                            order=["x", "", "scales"]))
    (node,) = [n for n in m.to_graph().nodes if n.op == "resize"]
    assert tuple(node.attrs["axes"]) == (2,)
    assert "resize" not in ops_of("Resize", {"x": x}, consts={"scales": np.ones(4, np.float32)}, order=["x", "", "scales"])


@pytest.mark.parametrize(("consts", "why"), [
    ({"scales": np.array([1, 1, 2, 2], np.float32), "sizes": np.array([1, 1, 8, 8], np.int64)}, "exactly one"),
    ({"scales": np.array([2, 2], np.float32)}, "scales for 4 axes"),
])
def test_resize_malformed_operands_refused(consts: dict[str, np.ndarray], why: str) -> None:
    x = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    order = ["x", "", "scales", "sizes"] if len(consts) == 2 else ["x", "", "scales"]
    with pytest.raises(NeurenixError, match=why):
        nn.from_onnx(_model("Resize", {"x": x}, consts=consts, order=order))


# ----------------------------------------------------------------------------- GridSample
def _unnormalise(g: float, n: int, align: bool) -> float:
    return (g + 1) / 2 * (n - 1) if align else ((g + 1) * n - 1) / 2


def _reflect(x: float, lo: float, hi: float) -> float:
    span = hi - lo
    while not lo <= x <= hi:
        x = 2 * lo - x if x < lo else 2 * hi - x
    return x if span > 0 else lo


def _pixel(img: np.ndarray, i: int, j: int, pad: str, align: bool) -> float:
    h, w = img.shape
    if pad == "zeros":
        return float(img[i, j]) if 0 <= i < h and 0 <= j < w else 0.0
    if pad == "border":
        return float(img[min(max(i, 0), h - 1), min(max(j, 0), w - 1)])
    lo = 0.0 if align else -0.5
    i = int(_reflect(i, lo, h - 1 if align else h - 0.5))
    j = int(_reflect(j, lo, w - 1 if align else w - 0.5))
    return float(img[i, j])


def grid_sample_2d(x: np.ndarray, grid: np.ndarray, mode: str, pad: str, align: bool) -> np.ndarray:
    n, c, h, w = x.shape
    out = np.zeros((n, c) + grid.shape[1:3])
    for b, ch, oy, ox in np.ndindex(out.shape):
        px, py = _unnormalise(float(grid[b, oy, ox, 0]), w, align), _unnormalise(float(grid[b, oy, ox, 1]), h, align)
        if mode == "nearest":
            px, py = float(np.rint(px)), float(np.rint(py))
        if pad == "border":
            px, py = min(max(px, 0), w - 1), min(max(py, 0), h - 1)
        elif pad == "reflection":
            px = _reflect(px, 0 if align else -0.5, w - 1 if align else w - 0.5)
            py = _reflect(py, 0 if align else -0.5, h - 1 if align else h - 0.5)
        img = x[b, ch]
        if mode == "nearest":
            out[b, ch, oy, ox] = _pixel(img, int(py), int(px), pad, align)
            continue
        x0, y0 = math.floor(px), math.floor(py)
        tx, ty = px - x0, py - y0
        out[b, ch, oy, ox] = sum(wy * wx * _pixel(img, y0 + dy, x0 + dx, pad, align)
                                 for dy, wy in ((0, 1 - ty), (1, ty)) for dx, wx in ((0, 1 - tx), (1, tx)))
    return out


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode: str, pad: str, align: int) -> None:
    x = RNG.standard_normal((2, 2, 3, 4)).astype(np.float32)
    grid = RNG.uniform(-1.4, 1.4, (2, 3, 5, 2)).astype(np.float32)
    got = run("GridSample", {"x": x, "grid": grid}, attrs={"mode": mode, "padding_mode": pad, "align_corners": align})
    check(got, grid_sample_2d(x, grid, mode, pad, bool(align)).astype(np.float32))


def test_grid_sample_opset16_names_and_affine_identity_roundtrip() -> None:
    x = RNG.standard_normal((1, 2, 4, 6)).astype(np.float32)
    theta = np.array([[[1, 0, 0], [0, 1, 0]]], np.float32)
    grid = run("AffineGrid", {"theta": theta}, consts={"size": np.array([1, 2, 4, 6], np.int64)}, opset=20)
    assert grid.shape == (1, 4, 6, 2) and grid.dtype == np.float32
    # the identity transform samples every pixel at its own centre: X comes back
    got = run("GridSample", {"x": x, "grid": grid}, attrs={"mode": "bilinear"}, opset=16)
    check(got, x)
    got = run("GridSample", {"x": x, "grid": grid}, attrs={"mode": "bicubic"}, opset=16)
    check(got, x)


def test_grid_sample_volumetric_linear() -> None:
    x = RNG.standard_normal((1, 1, 2, 3, 4)).astype(np.float32)
    grid = RNG.uniform(-1, 1, (1, 2, 2, 2, 3)).astype(np.float32)
    got = run("GridSample", {"x": x, "grid": grid}, attrs={"mode": "linear", "align_corners": 1})
    want = np.zeros((1, 1, 2, 2, 2))
    d, h, w = x.shape[2:]
    for i, j, k in np.ndindex(2, 2, 2):
        px, py, pz = (_unnormalise(float(g), n, True) for g, n in zip(grid[0, i, j, k], (w, h, d)))
        x0, y0, z0 = math.floor(px), math.floor(py), math.floor(pz)
        for dz, dy, dx in np.ndindex(2, 2, 2):
            zi, yi, xi = z0 + dz, y0 + dy, x0 + dx
            if 0 <= zi < d and 0 <= yi < h and 0 <= xi < w:
                want[0, 0, i, j, k] += ((1 - abs(pz - zi)) * (1 - abs(py - yi)) * (1 - abs(px - xi))) * x[0, 0, zi, yi, xi]
    check(got, want.astype(np.float32))


# ----------------------------------------------------------------------------- AffineGrid
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 2, 4)])
def test_affine_grid(align: int, size: tuple[int, ...]) -> None:
    nd = len(size) - 2
    theta = RNG.standard_normal((2, nd, nd + 1)).astype(np.float32)
    got = run("AffineGrid", {"theta": theta}, attrs={"align_corners": align}, consts={"size": np.array(size, np.int64)}, opset=20)
    spatial = size[2:]
    want = np.zeros((size[0],) + spatial + (nd,))
    for idx in np.ndindex(*spatial):
        # normalised position, innermost axis first (x, y[, z]), then 1
        pos = [(2 * i + 1) / n - 1 if not align else -1 + 2 * i / (n - 1) for i, n in zip(idx, spatial)][::-1] + [1.0]
        for b in range(size[0]):
            want[(b,) + idx] = theta[b].astype(np.float64) @ np.array(pos)
    check(got, want.astype(np.float32))


# ----------------------------------------------------------------------------- RoiAlign
def roi_align(x: np.ndarray, rois: np.ndarray, idx: np.ndarray, oh: int, ow: int, ratio: int, scale: float, mode: str,
              half_pixel: bool) -> np.ndarray:
    _, c, h, w = x.shape
    out = np.zeros((len(rois), c, oh, ow))
    for r, (x1, y1, x2, y2) in enumerate(rois.astype(np.float64)):
        off = 0.5 if half_pixel else 0.0
        sx, sy, ex, ey = x1 * scale - off, y1 * scale - off, x2 * scale - off, y2 * scale - off
        rw, rh = (ex - sx, ey - sy) if half_pixel else (max(ex - sx, 1.0), max(ey - sy, 1.0))
        gh = ratio if ratio > 0 else math.ceil(rh / oh)
        gw = ratio if ratio > 0 else math.ceil(rw / ow)
        for ch, ph, pw in np.ndindex(c, oh, ow):
            vals = []
            for iy, ix in np.ndindex(gh, gw):
                yy = sy + ph * rh / oh + (iy + 0.5) * rh / oh / gh
                xx = sx + pw * rw / ow + (ix + 0.5) * rw / ow / gw
                if yy < -1 or yy > h or xx < -1 or xx > w:
                    vals.append([0.0])
                    continue
                yy, xx = max(yy, 0.0), max(xx, 0.0)
                y0, x0 = min(int(yy), h - 1), min(int(xx), w - 1)
                y1_, x1_ = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                yy, xx = (y0, yy)[int(yy) < h - 1], (x0, xx)[int(xx) < w - 1]
                ly, lx = yy - y0, xx - x0
                img = x[idx[r], ch].astype(np.float64)
                vals.append([(1 - ly) * (1 - lx) * img[y0, x0], (1 - ly) * lx * img[y0, x1_],
                             ly * (1 - lx) * img[y1_, x0], ly * lx * img[y1_, x1_]])
            out[r, ch, ph, pw] = sum(sum(v) for v in vals) / max(gh * gw, 1) if mode == "avg" else max(max(v) for v in vals)
    return out


@pytest.mark.parametrize(("mode", "coord", "ratio"), [("avg", "half_pixel", 2), ("avg", "output_half_pixel", 0), ("max", "half_pixel", 0)])
def test_roi_align(mode: str, coord: str, ratio: int) -> None:
    x = RNG.standard_normal((2, 2, 6, 7)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 4.5, 5.0], [-1.0, 2.0, 9.0, 4.0], [2.0, 2.0, 2.5, 2.2]], np.float32)
    idx = np.array([1, 0, 1], np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "output_height": 3, "output_width": 2,
             "sampling_ratio": ratio, "spatial_scale": 0.9}
    got = run("RoiAlign", {"x": x, "rois": rois, "batch_indices": idx}, attrs=attrs)
    check(got, roi_align(x, rois, idx, 3, 2, ratio, 0.9, mode, coord == "half_pixel").astype(np.float32))
