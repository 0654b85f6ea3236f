"""from_onnx on cpu:0: one-node models of ONNX's nn family (convolution, pooling, normalisation),
each compared with a NumPy expectation of ONNX's semantics written out plainly here (loops over
window positions on tiny inputs), exact dtype and shape."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")


from onnx_nodes import check, one_node_model, run_node

from neurenix_core import nn
from neurenix_core.errors import NeurenixError

RNG = np.random.default_rng(11)


def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **kw: Any) -> Any:
    return one_node_model(op, inputs, outputs, **{"opset": 23, **kw})


def run(op: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **kw: Any) -> list[np.ndarray]:
    return run_node(op, inputs, outputs, **{"opset": 23, **kw})


def ops_of(op: str, inputs: dict[str, np.ndarray], **kw: Any) -> set[str]:
    return {n.op for n in nn.from_onnx(_model(op, inputs, ["y"], **kw)).to_graph().nodes}


# ----------------------------------------------------------------------------- NumPy expectations
def _geometry(spatial: tuple[int, ...], k: list[int], s: list[int], d: list[int], pads: list[int], auto: str,
              ceil: bool) -> tuple[list[int], list[int], list[int]]:
    nd = len(k)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(n / st) for n, st in zip(spatial, s)]
        total = [max(0, (o - 1) * st + dd * (kk - 1) + 1 - n) for o, st, dd, kk, n in zip(out, s, d, k, spatial)]
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        return out, begin, [t - b for t, b in zip(total, begin)]
    begin, end = pads[:nd], pads[nd:]
    out = []
    for n, kk, st, dd, b, e in zip(spatial, k, s, d, begin, end):
        span = (n + b + e - dd * (kk - 1) - 1) / st + 1
        o = math.ceil(span) if ceil else math.floor(span)
        if ceil and (o - 1) * st >= n + b:
            o -= 1
        out.append(o)
    return out, begin, end


def pool_expect(x: np.ndarray, kind: str, k: list[int], s: list[int] | None = None, d: list[int] | None = None,
                pads: list[int] | None = None, auto: str = "NOTSET", ceil: bool = False, include: bool = False,
                p: int = 2, order: int = 0) -> tuple[np.ndarray, np.ndarray]:
    nd = len(k)
    s, d, pads = s or [1] * nd, d or [1] * nd, pads or [0] * 2 * nd
    spatial = x.shape[2:]
    out, begin, end = _geometry(spatial, k, s, d, pads, auto, ceil)
    y = np.zeros(x.shape[:2] + tuple(out), x.dtype)
    idx = np.zeros(y.shape, np.int64)
    for n, c, *o in itertools.product(range(x.shape[0]), range(x.shape[1]), *[range(v) for v in out]):
        vals, where, count = [], [], 0
        for off in itertools.product(*[range(v) for v in k]):
            pos = [oi * st - b + f * dd for oi, st, b, f, dd in zip(o, s, begin, off, d)]
            inside = all(0 <= q < m for q, m in zip(pos, spatial))
            declared = all(-b <= q < m + e for q, m, b, e in zip(pos, spatial, begin, end))
            count += declared if include else inside
            if inside:
                vals.append(x[(n, c, *pos)])
                where.append(pos)
        v = np.array(vals, np.float64)
        if kind == "max":
            j = int(np.argmax(v))
            y[(n, c, *o)] = vals[j]
            flat = np.ravel_multi_index(tuple(where[j]), spatial, order="F" if order else "C")
            idx[(n, c, *o)] = (n * x.shape[1] + c) * math.prod(spatial) + flat
        elif kind == "avg":
            y[(n, c, *o)] = v.sum() / count
        else:
            y[(n, c, *o)] = (np.abs(v) ** p).sum() ** (1 / p)
    return y, idx


def conv_expect(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: list[int], d: list[int], begin: list[int],
                end: list[int], group: int) -> np.ndarray:
    nd = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(zip(begin, end)))
    k = w.shape[2:]
    out = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    y = np.zeros((x.shape[0], w.shape[0]) + tuple(out))
    og, cg = w.shape[0] // group, w.shape[1]
    for off in itertools.product(*[range(v) for v in k]):
        sl = tuple(slice(f * dd, f * dd + (o - 1) * st + 1, st) for f, dd, o, st in zip(off, d, out, s))
        for g in range(group):
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]
            y[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, w[(slice(g * og, (g + 1) * og), slice(None)) + off])
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    return y.astype(x.dtype)


def conv_t_expect(x: np.ndarray, w: np.ndarray, s: list[int], begin: list[int], out: list[int], group: int = 1) -> np.ndarray:
    """Every input pixel adds its weighted kernel at pixel * stride; keep ``out`` from ``begin``."""
    k = w.shape[2:]
    cg, og = x.shape[1] // group, w.shape[1]
    full = np.zeros((x.shape[0], og * group) + tuple((n - 1) * st + kk + 64 for n, st, kk in zip(x.shape[2:], s, k)))
    for pix in itertools.product(*[range(v) for v in x.shape[2:]]):
        sl = tuple(slice(p * st, p * st + kk) for p, st, kk in zip(pix, s, k))
        for g in range(group):
            contrib = np.einsum("nc,co...->no...", x[(slice(None), slice(g * cg, (g + 1) * cg)) + pix], w[g * cg:(g + 1) * cg])
            full[(slice(None), slice(g * og, (g + 1) * og)) + sl] += contrib
    return full[(slice(None), slice(None)) + tuple(slice(b, b + o) for b, o in zip(begin, out))].astype(x.dtype)


# ----------------------------------------------------------------------------- pooling
POOLS = [
    ("1d", (1, 2, 9), {"kernel_shape": [3]}),
    ("2d no strides (stride 1, not the kernel)", (1, 2, 6, 7), {"kernel_shape": [2, 3]}),
    ("2d symmetric pads", (1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("2d asymmetric pads", (1, 1, 5, 6), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 1, 2, 0]}),
    ("2d ceil", (1, 1, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("2d ceil last window on pad", (1, 1, 4, 4), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ("2d dilations", (1, 1, 7, 7), {"kernel_shape": [2, 2], "dilations": [2, 3], "strides": [1, 2]}),
    ("2d same upper", (1, 1, 5, 6), {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("2d same lower", (1, 1, 5, 6), {"kernel_shape": [2, 3], "strides": [2, 1], "auto_pad": "SAME_LOWER"}),
    ("2d valid", (1, 1, 6, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "VALID", "pads": [1, 1, 1, 1]}),
    ("3d", (1, 2, 4, 5, 4), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1], "dilations": [1, 1, 2]}),
]


def _pool_kw(attrs: dict[str, Any]) -> dict[str, Any]:
    return {"k": attrs["kernel_shape"], "s": attrs.get("strides"), "d": attrs.get("dilations"),
            "pads": None if attrs.get("auto_pad") == "VALID" else attrs.get("pads"), "auto": attrs.get("auto_pad", "NOTSET"),
            "ceil": bool(attrs.get("ceil_mode", 0))}


@pytest.mark.parametrize("name, shape, attrs", POOLS, ids=[p[0] for p in POOLS])
def test_max_pool(name: str, shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = run("MaxPool", {"x": x}, attrs=attrs)
    check(got, pool_expect(x, "max", **_pool_kw(attrs))[0])


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("name, shape, attrs", POOLS, ids=[p[0] for p in POOLS])
def test_average_pool(name: str, shape: tuple[int, ...], attrs: dict[str, Any], include: int) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = run("AveragePool", {"x": x}, attrs=attrs | {"count_include_pad": include})
    check(got, pool_expect(x, "avg", include=bool(include), **_pool_kw(attrs))[0])


@pytest.mark.parametrize("name, shape, attrs", POOLS[:4], ids=[p[0] for p in POOLS[:4]])
def test_lp_pool(name: str, shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = run("LpPool", {"x": x}, attrs=attrs | {"p": 3})
    check(got, pool_expect(x, "lp", p=3, **_pool_kw(attrs))[0])


def test_symmetric_2d_pools_stay_the_legacy_ops_with_stride_one_by_default() -> None:
    x = RNG.standard_normal((1, 1, 5, 5)).astype(np.float32)
    assert ops_of("MaxPool", {"x": x}, attrs={"kernel_shape": [2, 2]}) == {"max_pool2d"}
    assert ops_of("AveragePool", {"x": x}, attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}) == {"avg_pool2d"}
    assert ops_of("MaxPool", {"x": x}, attrs={"kernel_shape": [2, 2], "ceil_mode": 1}) == {"max_pool"}


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("name, shape, attrs", [POOLS[2], POOLS[3], POOLS[10]], ids=["2d", "2d asymmetric", "3d"])
def test_max_pool_indices(name: str, shape: tuple[int, ...], attrs: dict[str, Any], order: int) -> None:
    x = RNG.permutation(math.prod(shape)).reshape(shape).astype(np.float32)  # distinct values: one argmax
    y, i = run("MaxPool", {"x": x}, ["y", "i"], attrs=attrs | {"storage_order": order})
    want_y, want_i = pool_expect(x, "max", order=order, **_pool_kw(attrs))
    check(y, want_y)
    check(i, want_i)
    (only_i,) = run("MaxPool", {"x": x}, ["", "i"], attrs=attrs | {"storage_order": order})
    check(only_i, want_i)


def test_max_pool_keeps_integer_dtype() -> None:
    x = RNG.integers(0, 255, (1, 2, 5, 5)).astype(np.uint8)
    (got,) = run("MaxPool", {"x": x}, attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]})
    check(got, pool_expect(x, "max", [3, 3], [2, 2], pads=[1, 1, 1, 1])[0])


def test_max_unpool_inverts_max_pool_indices() -> None:
    x = RNG.permutation(16).reshape(1, 1, 4, 4).astype(np.float32)
    vals, idx = pool_expect(x, "max", [2, 2], [2, 2])
    (got,) = run("MaxUnpool", {"x": vals, "i": idx}, attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
    want = np.zeros(16, np.float32)
    want[idx.ravel()] = vals.ravel()
    check(got, want.reshape(1, 1, 4, 4))


@pytest.mark.parametrize("op, fn", [("GlobalAveragePool", np.mean), ("GlobalMaxPool", np.max)])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 2, 3, 4), (1, 2, 2, 3, 2)])
def test_global_pools_reduce_every_spatial_axis(op: str, fn: Any, shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    (got,) = run(op, {"x": x})
    check(got, fn(x, axis=tuple(range(2, x.ndim)), keepdims=True))


def test_global_lp_pool() -> None:
    x = RNG.standard_normal((2, 3, 4, 2)).astype(np.float32)
    (got,) = run("GlobalLpPool", {"x": x}, attrs={"p": 3})
    check(got, ((np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)).astype(np.float32))


# ----------------------------------------------------------------------------- convolution
CONVS = [
    ("1d", (2, 4, 9), (6, 2, 3), {"group": 2, "strides": [2], "pads": [1, 2]}),
    ("2d", (1, 3, 7, 6), (4, 3, 3, 2), {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]}),
    ("2d same lower", (1, 2, 6, 5), (3, 2, 2, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ("3d", (1, 2, 4, 5, 3), (2, 1, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 0, 1, 1]}),
]


def _conv_case(xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32)
    nd = len(xs) - 2
    s, d = attrs.get("strides", [1] * nd), attrs.get("dilations", [1] * nd)
    if attrs.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER"):
        _, begin, end = _geometry(xs[2:], list(ws[2:]), s, d, [], attrs["auto_pad"], False)
    else:
        pads = attrs.get("pads", [0] * 2 * nd)
        begin, end = pads[:nd], pads[nd:]
    return x, w, b, conv_expect(x, w, b, s, d, begin, end, attrs.get("group", 1))


@pytest.mark.parametrize("name, xs, ws, attrs", CONVS, ids=[c[0] for c in CONVS])
def test_conv_with_weight_as_a_graph_input(name: str, xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any]) -> None:
    x, w, b, want = _conv_case(xs, ws, attrs)
    (got,) = run("Conv", {"x": x, "w": w, "b": b}, attrs=attrs)
    check(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, xs, ws, attrs", CONVS, ids=[c[0] for c in CONVS])
def test_conv_with_constant_weight(name: str, xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any]) -> None:
    x, w, b, want = _conv_case(xs, ws, attrs)
    (got,) = run("Conv", {"x": x}, attrs=attrs, consts={"w": w, "b": b})
    check(got, want, rtol=1e-4, atol=1e-5)
    ops = ops_of("Conv", {"x": x}, attrs=attrs, consts={"w": w, "b": b})
    assert ops & {"conv1d", "conv2d"} if len(xs) < 5 else "conv" in ops, ops


def test_conv_in_float16_and_float64_keeps_the_dtype() -> None:
    for dtype, rtol in ((np.float16, 1e-2), (np.float64, 1e-10)):
        x, w, b, _want = _conv_case((1, 2, 5, 5), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]})
        x, w, b = x.astype(dtype), w.astype(dtype), b.astype(dtype)
        (got,) = run("Conv", {"x": x, "w": w, "b": b}, attrs={"pads": [1, 1, 1, 1]})
        check(got, conv_expect(x, w, b, [1, 1], [1, 1], [1, 1], [1, 1], 1), rtol=rtol, atol=rtol)


CONV_TS = [
    ("1d", (1, 2, 4), (2, 3, 3), {"strides": [2]}, [0], None),
    ("2d pads", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "pads": [1, 2, 1, 2]}, [1, 2], None),
    ("2d output_padding", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_padding": [1, 1]}, [0, 0], [10, 8]),
    ("2d output_shape", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}, [0, 0], [10, 8]),
    ("2d same upper", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, [0, 0], [6, 6]),
    # stride beyond the kernel: the full size (9), not size * stride (ONNX shape inference and ONNX Runtime)
    ("1d same, stride beyond the kernel", (1, 2, 5), (2, 2, 1), {"strides": [2], "auto_pad": "SAME_LOWER"}, [0], [9]),
    ("2d group 2", (1, 4, 3, 2), (4, 1, 2, 2), {"group": 2, "pads": [0, 1, 1, 0]}, [0, 1], None),
    ("3d", (1, 1, 2, 3, 2), (1, 2, 2, 2, 3), {"strides": [1, 2, 1]}, [0, 0, 0], None),
]


@pytest.mark.parametrize("const_w", [False, True])
@pytest.mark.parametrize("name, xs, ws, attrs, begin, out", CONV_TS, ids=[c[0] for c in CONV_TS])
def test_conv_transpose(name: str, xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any], begin: list[int],
                        out: list[int] | None, const_w: bool) -> None:
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    nd = len(xs) - 2
    s = attrs.get("strides", [1] * nd)
    if out is None:
        pads = attrs.get("pads", [0] * 2 * nd)
        out = [(n - 1) * st + k - pads[i] - pads[nd + i] for i, (n, st, k) in enumerate(zip(xs[2:], s, ws[2:]))]
    want = conv_t_expect(x, w, s, begin, out, attrs.get("group", 1))
    if const_w:
        (got,) = run("ConvTranspose", {"x": x}, attrs=attrs, consts={"w": w})
    else:
        (got,) = run("ConvTranspose", {"x": x, "w": w}, attrs=attrs)
    check(got, want, rtol=1e-4, atol=1e-5)


def test_col2im_sums_overlapping_blocks() -> None:
    image, block = [4, 5], [2, 3]
    blocks = [(4 + 1 - 2) // 1 + 1, (5 + 1 - 3) // 2 + 1]  # pads [0, 1, 1, 0], strides [1, 2]
    x = RNG.standard_normal((2, 3 * 6, math.prod(blocks))).astype(np.float32)
    (got,) = run("Col2Im", {"x": x}, attrs={"strides": [1, 2], "pads": [0, 1, 1, 0]},
                 consts={"image": np.array(image, np.int64), "block": np.array(block, np.int64)})
    want = np.zeros((2, 3, 4 + 1, 5 + 1), np.float64)
    cols = x.reshape(2, 3, 2, 3, *blocks)
    for bi, bj, ki, kj in itertools.product(range(blocks[0]), range(blocks[1]), range(2), range(3)):
        want[:, :, bi + ki, bj * 2 + kj] += cols[:, :, ki, kj, bi, bj]
    check(got, want[:, :, 0:4, 1:6].astype(np.float32))


# ----------------------------------------------------------------------------- normalisation
def _standardise(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (x64 - x64.mean(axis=axes, keepdims=True)) / np.sqrt(x64.var(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_layer_normalization_runtime_scale_and_all_outputs(axis: int) -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    a = axis % 3
    scale = RNG.standard_normal(x.shape[a:]).astype(np.float32)
    bias = RNG.standard_normal(x.shape[a:]).astype(np.float32)
    y, mean, inv = run("LayerNormalization", {"x": x, "s": scale, "b": bias}, ["y", "m", "r"], attrs={"axis": axis, "epsilon": 1e-3})
    axes = tuple(range(a, 3))
    check(y, (_standardise(x, axes, 1e-3) * scale + bias).astype(np.float32))
    check(mean, x.astype(np.float64).mean(axis=axes, keepdims=True).astype(np.float32))
    check(inv, (1 / np.sqrt(x.astype(np.float64).var(axis=axes, keepdims=True) + 1e-3)).astype(np.float32))


def test_layer_normalization_constant_scale_stays_layer_norm_and_float16_stashes_in_float32() -> None:
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    w = RNG.standard_normal(5).astype(np.float32)
    assert ops_of("LayerNormalization", {"x": x}, consts={"w": w}) == {"layer_norm"}
    x16 = x.astype(np.float16)
    y, mean = run("LayerNormalization", {"x": x16}, ["y", "m"], consts={"w": w.astype(np.float16)})
    check(y, (_standardise(x16, (1,), 1e-5) * w.astype(np.float16)).astype(np.float16), rtol=2e-3, atol=2e-3)
    check(mean, x16.astype(np.float32).mean(axis=1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (1, 3, 2, 2, 2)])
def test_batch_normalization_inference_with_runtime_operands(shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    c = shape[1]
    s, b, m = (RNG.standard_normal(c).astype(np.float32) for _ in range(3))
    v = RNG.uniform(0.5, 2, c).astype(np.float32)
    (got,) = run("BatchNormalization", {"x": x, "s": s, "b": b, "m": m, "v": v}, attrs={"epsilon": 1e-2})
    r = (1, -1) + (1,) * (len(shape) - 2)
    check(got, (s.reshape(r) * (x - m.reshape(r)) / np.sqrt(v.reshape(r) + 1e-2) + b.reshape(r)).astype(np.float32))


def test_batch_normalization_training_mode_outputs_the_running_statistics() -> None:
    x = RNG.standard_normal((3, 2, 4)).astype(np.float32)
    s, b, m = (RNG.standard_normal(2).astype(np.float32) for _ in range(3))
    v = RNG.uniform(0.5, 2, 2).astype(np.float32)
    y, rm, rv = run("BatchNormalization", {"x": x, "s": s, "b": b, "m": m, "v": v}, ["y", "rm", "rv"],
                    attrs={"training_mode": 1, "momentum": 0.8})
    bm, bv = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    check(y, (s[:, None] * (x - bm[:, None]) / np.sqrt(bv[:, None] + 1e-5) + b[:, None]).astype(np.float32))
    check(rm, (m * 0.8 + bm * 0.2).astype(np.float32))
    check(rv, (v * 0.8 + bv * 0.2).astype(np.float32))


def test_batch_normalization_constant_4d_stays_batch_norm2d() -> None:
    x = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    consts = {"s": np.ones(2, np.float32), "b": np.zeros(2, np.float32), "m": np.zeros(2, np.float32), "v": np.ones(2, np.float32)}
    assert ops_of("BatchNormalization", {"x": x}, consts=consts) == {"batch_norm2d"}


def test_instance_and_group_normalization() -> None:
    x = RNG.standard_normal((2, 4, 3, 2)).astype(np.float32)
    s, b = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    r = (1, -1, 1, 1)
    (got,) = run("InstanceNormalization", {"x": x, "s": s, "b": b}, attrs={"epsilon": 1e-3})
    check(got, (_standardise(x, (2, 3), 1e-3) * s.reshape(r) + b.reshape(r)).astype(np.float32))
    (got,) = run("GroupNormalization", {"x": x, "s": s, "b": b}, attrs={"num_groups": 2})
    grouped = _standardise(x.reshape(2, 2, -1), (2,), 1e-5).reshape(x.shape)
    check(got, (grouped * s.reshape(r) + b.reshape(r)).astype(np.float32))


def test_rms_lp_mvn_and_lrn() -> None:
    x = RNG.standard_normal((2, 5, 3, 2)).astype(np.float32)
    x64 = x.astype(np.float64)
    scale = RNG.standard_normal((3, 2)).astype(np.float32)
    (got,) = run("RMSNormalization", {"x": x, "s": scale}, attrs={"axis": 2})
    check(got, (x64 / np.sqrt((x64**2).mean(axis=(2, 3), keepdims=True) + 1e-5) * scale).astype(np.float32))
    for p in (1, 2):
        (got,) = run("LpNormalization", {"x": x}, attrs={"axis": 1, "p": p})
        check(got, (x64 / np.linalg.norm(x64, ord=p, axis=1, keepdims=True)).astype(np.float32))
    (got,) = run("MeanVarianceNormalization", {"x": x})
    check(got, ((x64 - x64.mean(axis=(0, 2, 3), keepdims=True)) / (x64.std(axis=(0, 2, 3), keepdims=True) + 1e-9)).astype(np.float32))
    (got,) = run("LRN", {"x": x}, attrs={"size": 4, "alpha": 0.01, "beta": 0.6, "bias": 1.5})
    sq = np.zeros_like(x64)
    for c in range(5):
        sq[:, c] = (x64[:, max(0, c - 1):min(5, c + 3)] ** 2).sum(axis=1)
    check(got, (x64 / (1.5 + 0.01 / 4 * sq) ** 0.6).astype(np.float32))


def test_unsupported_shapes_are_typed_refusals() -> None:
    x = RNG.standard_normal((1, 2, 4, 4)).astype(np.float32)
    with pytest.raises(NeurenixError):
        nn.from_onnx(_model("Conv", {"x": x, "w": np.ones((3, 5, 2, 2), np.float32)}, ["y"]))
    with pytest.raises(NeurenixError):
        nn.from_onnx(_model("MaxPool", {"x": x}, ["y"], attrs={"kernel_shape": [6, 6]}))


def _bilinear(img: np.ndarray, y: float, x: float) -> float:
    total = 0.0
    for yi, xi in itertools.product((math.floor(y), math.floor(y) + 1), (math.floor(x), math.floor(x) + 1)):
        if 0 <= yi < img.shape[0] and 0 <= xi < img.shape[1]:
            total += (1 - abs(y - yi)) * (1 - abs(x - xi)) * float(img[yi, xi])
    return total


def test_deform_conv_samples_bilinearly_at_the_offsets() -> None:
    x = RNG.standard_normal((1, 4, 4, 5)).astype(np.float32)
    w = RNG.standard_normal((2, 2, 2, 2)).astype(np.float32)  # group 2
    og, (oh, ow) = 2, (4, 5)  # pads [1, 1, 0, 0]: out = in + 1 - 1
    offset = RNG.uniform(-1.5, 1.5, (1, og * 4 * 2, oh, ow)).astype(np.float32)
    mask = RNG.uniform(0, 1, (1, og * 4, oh, ow)).astype(np.float32)
    attrs = {"group": 2, "offset_group": og, "pads": [1, 1, 0, 0]}
    (got,) = run("DeformConv", {"x": x, "w": w, "o": offset, "m": mask}, attrs=attrs, order=["x", "w", "o", "", "m"])
    off = offset.reshape(1, og, 2, 2, 2, oh, ow)
    msk = mask.reshape(1, og, 2, 2, oh, ow)
    want = np.zeros((1, 2, oh, ow))
    for o, i, j, c, ki, kj in itertools.product(range(2), range(oh), range(ow), range(2), range(2), range(2)):
        ci = o * 2 + c  # output channel o is in group o, whose input channels are 2o and 2o + 1
        g = ci // 2  # offset group of the input channel
        y = i - 1 + ki + off[0, g, ki, kj, 0, i, j]
        xx = j - 1 + kj + off[0, g, ki, kj, 1, i, j]
        want[0, o, i, j] += w[o, c, ki, kj] * msk[0, g, ki, kj, i, j] * _bilinear(x[0, ci], y, xx)
    check(got, want.astype(np.float32), rtol=1e-4, atol=1e-5)
