"""from_onnx on cpu:0: one-node models of DFT, STFT, MelWeightMatrix, NonMaxSuppression, BitCast,
TfIdfVectorizer and CausalConvWithState, each compared with a NumPy expectation written out here
(a DFT matrix, explicit frames, loops over boxes and n-grams), exact dtype and shape; and the
typed refusals where a result's shape would depend on run-time values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper
from onnx_nodes import check as check_node
from onnx_nodes import one_node_model, run_node

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixError

RNG = np.random.default_rng(11)


def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **kw: Any) -> Any:
    return one_node_model(op, inputs, outputs, **{"opset": 26, **kw})


def run(op: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **kw: Any) -> list[np.ndarray]:
    return run_node(op, inputs, outputs, **{"opset": 26, **kw})


def check(got: np.ndarray, want: Any, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    check_node(got, want, rtol, atol)


def i64(*v: int) -> np.ndarray:
    return np.asarray(v, np.int64)


# ----------------------------------------------------------------------------- DFT
def _dft_matrix(n_out: int, n_in: int, inverse: bool) -> np.ndarray:
    k, t = np.arange(n_out)[:, None], np.arange(n_in)[None, :]
    m = np.exp((2j if inverse else -2j) * np.pi * k * t / max(n_out if inverse else n_in, 1))
    return m / n_out if inverse else m


def _transform(z: np.ndarray, axis: int, n: int, inverse: bool) -> np.ndarray:
    """The DFT of ``z`` along ``axis`` with length ``n`` (cut or zero-padded), by its matrix."""
    z = np.moveaxis(z, axis, -1)
    z = z[..., :n] if z.shape[-1] >= n else np.concatenate([z, np.zeros(z.shape[:-1] + (n - z.shape[-1],))], -1)
    return np.moveaxis(z @ _dft_matrix(n, n, inverse).T, -1, axis)


def _pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], -1).astype(np.float32)


@pytest.mark.parametrize("axis,length", [(1, None), (-2, None), (2, 5), (1, 9)])
def test_dft_real_signal_any_axis_and_length(axis: int, length: int | None) -> None:
    x = RNG.standard_normal((2, 6, 7, 1)).astype(np.float32)
    consts = {"axis": i64(axis).reshape(())} | ({"n": i64(length).reshape(())} if length else {})
    got = run("DFT", {"x": x}, consts=consts, order=["x", "n" if length else "", "axis"])[0]
    n = length or x.shape[axis % 4]
    check(got, _pairs(_transform(x[..., 0].astype(np.float64), axis % 4 if axis < 0 else axis, n, False)), atol=1e-4)


def test_dft_onesided_inverse_and_irfft() -> None:
    x = RNG.standard_normal((3, 8, 2)).astype(np.float32)
    z = x[..., 0] + 1j * x[..., 1]
    inv = run("DFT", {"x": x}, attrs={"inverse": 1}, consts={"axis": i64(1).reshape(())}, order=["x", "", "axis"])[0]
    check(inv, _pairs(_transform(z, 1, 8, True)))
    real = RNG.standard_normal((3, 8, 1)).astype(np.float32)
    half = run("DFT", {"x": real}, attrs={"onesided": 1}, consts={"axis": i64(-2).reshape(())}, order=["x", "", "axis"])[0]
    check(half, _pairs(_transform(real[..., 0].astype(np.float64), 1, 8, False)[:, :5]), atol=1e-4)
    # irfft of the one-sided spectrum gives back the real signal, [..., 1], length 2 * (5 - 1)
    back = run("DFT", {"x": half}, attrs={"inverse": 1, "onesided": 1}, consts={"axis": i64(1).reshape(())}, order=["x", "", "axis"])[0]
    check(back, real, atol=1e-5)


def test_dft_opset19_axis_attribute_and_float64() -> None:
    x = RNG.standard_normal((4, 5, 1))
    got = run("DFT", {"x": x}, attrs={"axis": 0}, opset=19)[0]
    want = _transform(x[..., 0], 0, 4, False)
    assert got.dtype == np.float64
    check(got, np.stack([want.real, want.imag], -1), atol=1e-12)


def test_dft_on_the_complex_axis_is_refused() -> None:
    with pytest.raises(NeurenixError):
        run("DFT", {"x": np.zeros((2, 4, 1), np.float32)}, consts={"axis": i64(-1).reshape(())}, order=["x", "", "axis"])


# ----------------------------------------------------------------------------- STFT
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_frames_window_onesided(onesided: int) -> None:
    signal = RNG.standard_normal((2, 40, 1)).astype(np.float32)
    window = np.hanning(8).astype(np.float32)
    got = run("STFT", {"signal": signal, "window": window}, attrs={"onesided": onesided}, consts={"step": i64(5).reshape(())},
              order=["signal", "step", "window"])[0]
    frames = np.stack([signal[:, s : s + 8, 0] * window for s in range(0, 40 - 8 + 1, 5)], 1).astype(np.float64)
    spectrum = _transform(frames, 2, 8, False)
    check(got, _pairs(spectrum[:, :, :5] if onesided else spectrum), atol=1e-4)


def test_stft_frame_length_without_window() -> None:
    signal = RNG.standard_normal((1, 20, 1)).astype(np.float32)
    got = run("STFT", {"signal": signal}, consts={"step": i64(4).reshape(()), "length": i64(6).reshape(())},
              order=["signal", "step", "", "length"])[0]
    frames = np.stack([signal[:, s : s + 6, 0] for s in range(0, 15, 4)], 1).astype(np.float64)
    check(got, _pairs(_transform(frames, 2, 6, False)[:, :, :4]), atol=1e-4)


# ----------------------------------------------------------------------------- MelWeightMatrix
def test_mel_weight_matrix_triangles() -> None:
    bins, n_fft, rate = 6, 32, 8000
    consts = {"bins": np.int64(bins), "n": np.int64(n_fft), "rate": np.int64(rate)}
    edges = {"lo": np.float32(100.0), "hi": np.float32(3800.0)}
    got = run("MelWeightMatrix", edges, consts=consts, order=["bins", "n", "rate", "lo", "hi"])[0]
    mel = 2595 * np.log1p(np.array([100.0, 3800.0], np.float32) / 700) / np.log(10)
    hz = 700 * np.expm1((np.arange(bins + 2) * (mel[1] - mel[0]) / (bins + 2) + mel[0]) / 2595 * np.log(10))
    f = ((n_fft + 1) * hz // rate).astype(int)
    want = np.zeros((n_fft // 2 + 1, bins))
    for i in range(bins):
        for j in range(f[i], f[i + 1] + 1):
            want[j, i] = (j - f[i]) / (f[i + 1] - f[i]) if f[i + 1] > f[i] else float(j == f[i + 1])
        for j in range(f[i + 1], f[i + 2]):
            want[j, i] = (f[i + 2] - j) / (f[i + 2] - f[i + 1])
    check(got, want.astype(np.float32))


# ----------------------------------------------------------------------------- NonMaxSuppression
BOXES = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1], [0, 100, 1, 101]]],
                 np.float32)
SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]], np.float32)


def _nms_expected(boxes: np.ndarray, scores: np.ndarray, limit: int, iou: float, floor: float | None) -> np.ndarray:
    out = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            kept: list[int] = []
            for i in sorted(range(boxes.shape[1]), key=lambda i: (-scores[b, c, i], i)):
                if len(kept) == limit or (floor is not None and not scores[b, c, i] > floor):
                    continue
                _y0, _x0, _y1, _x1 = boxes[b, i]
                if all(_iou(boxes[b, i], boxes[b, k]) <= iou for k in kept):
                    kept.append(i)
            out += [(b, c, k) for k in kept]
    return np.asarray(out, np.int64).reshape(-1, 3)


def _iou(p: np.ndarray, q: np.ndarray) -> float:
    h = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
    w = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
    inter = h * w
    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
    return inter / union if inter > 0 else 0.0


@pytest.mark.parametrize("limit,floor", [(3, None), (2, 0.4), (0, None)])
def test_nms_constant_boxes_fold(limit: int, floor: float | None) -> None:
    consts = {"boxes": BOXES, "scores": SCORES, "limit": i64(limit), "iou": np.float32([0.5])}
    if floor is not None:
        consts["floor"] = np.float32([floor])
    imported = nn.from_onnx(_model("NonMaxSuppression", {}, ["y"], consts=consts))
    got = np.asarray(nx.compile(imported, device="cpu:0", precision="fp32", outputs="host", progress=False)())
    check(got, _nms_expected(BOXES, SCORES, limit, 0.5, floor))


def test_nms_center_point_boxes_from_small_graph_inputs() -> None:
    centers = np.array([[[0.5, 0.5, 1, 1], [0.5, 0.6, 1, 1], [0.5, 10.5, 1, 1], [0.5, 10.4, 1, 1]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.95]]], np.float32)
    got = run("NonMaxSuppression", {"boxes": centers, "scores": scores}, attrs={"center_point_box": 1},
              consts={"limit": i64(5), "iou": np.float32([0.5])})[0]
    corners = np.concatenate([centers[..., 1:2] - 0.5 * centers[..., 3:], centers[..., :1] - 0.5 * centers[..., 2:3],
                              centers[..., 1:2] + 0.5 * centers[..., 3:], centers[..., :1] + 0.5 * centers[..., 2:3]], -1)
    check(got, _nms_expected(corners, scores, 5, 0.5, None))


def test_nms_of_many_run_time_boxes_is_refused() -> None:
    boxes = RNG.random((1, 40, 4)).astype(np.float32)  # too many to build the model per value
    with pytest.raises(NeurenixError, match="NonMaxSuppression"):
        run("NonMaxSuppression", {"boxes": boxes}, consts={"scores": RNG.random((1, 1, 40)).astype(np.float32), "limit": i64(3)})


# ----------------------------------------------------------------------------- BitCast
@pytest.mark.parametrize("x,to", [
    (np.array([[1.0, -2.5], [3.75, 0.0]], np.float32), np.int32),
    (np.array([True, False, True]), np.uint8),
    (np.array([1.5, -0.0], np.float16), np.int16),
    (np.array([-1, 2**62], np.int64), np.float64),
    (np.array(7, np.uint32), np.float32),
])
def test_bitcast_reinterprets_bits(x: np.ndarray, to: type) -> None:
    got = run("BitCast", {"x": x}, attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype(to))})[0]
    check(got, x.view(to))


def test_bitcast_to_another_width_is_refused() -> None:
    with pytest.raises(NeurenixError):
        run("BitCast", {"x": np.zeros(3, np.float32)}, attrs={"to": onnx.TensorProto.INT16})


# ----------------------------------------------------------------------------- TfIdfVectorizer
POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7]  # 1-grams 2 3 5 4, 2-grams (5,6) (7,8) (6,7)
TFIDF = {"ngram_counts": [0, 4], "ngram_indexes": [0, 1, 2, 3, 4, 5, 6], "pool_int64s": POOL}


def _tfidf_expected(x: np.ndarray, lo: int, hi: int, skip: int, mode: str, weights: list[float] | None) -> np.ndarray:
    grams = {(g,): i for i, g in enumerate(POOL[:4])} | {tuple(POOL[4 + 2 * i : 6 + 2 * i]): 4 + i for i in range(3)}
    rows = x.reshape(-1, x.shape[-1])
    out = np.zeros((rows.shape[0], 7))
    for r, row in enumerate(rows):
        for size in range(lo, hi + 1):
            for d in range(1, (1 if size == 1 else skip + 1) + 1):
                for s in range(len(row) - (size - 1) * d):
                    key = tuple(int(row[s + d * j]) for j in range(size))
                    if key in grams:
                        out[r, grams[key]] += 1
    w = np.ones(7) if weights is None else np.asarray(weights)
    out = {"TF": out, "IDF": (out > 0) * w, "TFIDF": out * w}[mode]
    return out.astype(np.float32).reshape(x.shape[:-1] + (7,))


@pytest.mark.parametrize("lo,hi,skip,mode,weights", [
    (1, 1, 0, "TF", None), (2, 2, 0, "TF", None), (1, 2, 3, "TF", None), (2, 2, 5, "IDF", None),
    (1, 2, 2, "TFIDF", [0.5, 1, 2, 3, 4, 5, 6]), (1, 2, 1, "IDF", [0.5, 1, 2, 3, 4, 5, 6]),
])
@pytest.mark.parametrize("shape", [(12,), (2, 6)])
def test_tfidf_vectorizer_counts_ngrams(lo: int, hi: int, skip: int, mode: str, weights: list[float] | None,
                                       shape: tuple[int, ...]) -> None:
    x = np.array([2, 3, 5, 6, 7, 8, 6, 7, 5, 4, 5, 6], np.int32).reshape(shape)
    attrs = TFIDF | {"min_gram_length": lo, "max_gram_length": hi, "max_skip_count": skip, "mode": mode}
    if weights:
        attrs["weights"] = weights
    check(run("TfIdfVectorizer", {"x": x}, attrs=attrs)[0], _tfidf_expected(x, lo, hi, skip, mode, weights))


def test_tfidf_vectorizer_string_pool_is_refused() -> None:
    attrs = {"ngram_counts": [0], "ngram_indexes": [0], "pool_strings": ["a"], "min_gram_length": 1, "max_gram_length": 1,
             "max_skip_count": 0, "mode": "TF"}
    with pytest.raises(NeurenixError, match="string"):
        run("TfIdfVectorizer", {"x": np.zeros(3, np.int64)}, attrs=attrs)


# ----------------------------------------------------------------------------- CausalConvWithState
def _causal_expected(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, state: np.ndarray | None,
                     silu: bool) -> tuple[np.ndarray, np.ndarray]:
    k = w.shape[2]
    state = np.zeros(x.shape[:2] + (k - 1,)) if state is None else state
    padded = np.concatenate([state, x], 2).astype(np.float64)
    out = np.zeros(x.shape)
    for t in range(x.shape[2]):
        out[:, :, t] = (padded[:, :, t : t + k] * w[None, :, 0, :]).sum(-1)
    out = out + (0 if bias is None else bias[None, :, None])
    if silu:
        out = out / (1 + np.exp(-out))
    return out.astype(x.dtype), padded[:, :, x.shape[2]:].astype(x.dtype)


@pytest.mark.parametrize("with_bias,with_state,activation", [
    (False, False, "none"), (True, False, "silu"), (False, True, "swish"), (True, True, "none")])
def test_causal_conv_with_state(with_bias: bool, with_state: bool, activation: str) -> None:
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    w = RNG.standard_normal((3, 1, 4)).astype(np.float32)
    bias = RNG.standard_normal(3).astype(np.float32) if with_bias else None
    state = RNG.standard_normal((2, 3, 3)).astype(np.float32) if with_state else None
    inputs = {"x": x, "w": w} | ({"bias": bias} if with_bias else {}) | ({"state": state} if with_state else {})
    order = ["x", "w", "bias" if with_bias else ""] + (["state"] if with_state else [])
    out, present = run("CausalConvWithState", inputs, ["y", "s"], attrs={"activation": activation}, order=order, opset=27)  # type: ignore[arg-type]
    want, want_state = _causal_expected(x, w, bias, state, activation != "none")
    check(out, want)
    check(present, want_state)


def test_causal_conv_with_state_float16_and_kernel_one() -> None:
    x = RNG.standard_normal((1, 2, 6)).astype(np.float16)
    w = RNG.standard_normal((2, 1, 1)).astype(np.float16)
    out, present = run("CausalConvWithState", {"x": x, "w": w}, ["y", "s"], attrs={"activation": "silu"}, opset=27)
    want, want_state = _causal_expected(x, w, None, None, True)
    check(out, want, rtol=2e-3, atol=2e-3)
    check(present, want_state)


# ----------------------------------------------------------------------------- ImageDecoder
def _decoder(encoded: np.ndarray, fmt: str, declared: list[int] | None) -> Any:
    node = helper.make_node("ImageDecoder", ["data"], ["y"], pixel_format=fmt)
    graph = helper.make_graph([node], "decode", [helper.make_tensor_value_info("data", onnx.TensorProto.UINT8, encoded.shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, declared)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _png(pixels: np.ndarray) -> np.ndarray:
    import io

    image = pytest.importorskip("PIL.Image")
    with io.BytesIO() as f:
        image.fromarray(pixels).save(f, format="PNG")
        return np.frombuffer(f.getvalue(), np.uint8).copy()


@pytest.mark.parametrize("fmt", ["RGB", "BGR", "Grayscale"])
def test_image_decoder_png(fmt: str) -> None:
    pixels = RNG.integers(0, 256, (6, 9, 3), dtype=np.uint8)
    encoded = _png(pixels)
    gray = np.asarray(pytest.importorskip("PIL.Image").fromarray(pixels).convert("L"))[:, :, None]
    want = {"RGB": pixels, "BGR": pixels[:, :, ::-1], "Grayscale": gray}[fmt]
    compiled = nx.compile(nn.from_onnx(_decoder(encoded, fmt, list(want.shape))), device="cpu:0", precision="fp32",
                          outputs="host", progress=False)
    check(np.asarray(compiled(encoded)), want)


def test_image_decoder_needs_a_declared_shape_and_keeps_to_it() -> None:
    encoded = _png(np.zeros((4, 5, 3), np.uint8))
    with pytest.raises(NeurenixError, match="declare"):
        nn.from_onnx(_decoder(encoded, "RGB", None))
    compiled = nx.compile(nn.from_onnx(_decoder(encoded, "RGB", [5, 4, 3])), device="cpu:0", precision="fp32",
                          outputs="host", progress=False)
    with pytest.raises(NeurenixError, match="declares"):
        compiled(encoded)
