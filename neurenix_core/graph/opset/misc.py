"""Ops of no larger family: bit reinterpretation (ONNX BitCast), n-gram counting (ONNX
TfIdfVectorizer, integer tokens) and the stateful causal depthwise convolution of state-space
and Mamba-style models (ONNX CausalConvWithState)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neurenix_core.graph.opset.schema import DTYPES, REQUIRED, Arrays, Attrs, Params, Shape, _def, _is_float, _np_dtype

__all__: list[str] = []


# ----------------------------------------------------------------------------- BitCast
def _bitcast_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    to = a["to"]
    if to not in DTYPES:
        raise ValueError(f"bitcast: `to` must be one of {', '.join(DTYPES)}, got {to!r}")
    if _np_dtype(d[0]).itemsize != _np_dtype(to).itemsize:
        raise ValueError(f"bitcast keeps the bit width: {d[0]} ({_np_dtype(d[0]).itemsize * 8} bits) "
                         f"to {to} ({_np_dtype(to).itemsize * 8} bits)")
    return s[0], to


_def("bitcast", "dtype", "reinterpret each element's bits as dtype `to` of the same width (ONNX BitCast)", ("x",),
     _bitcast_rule, lambda a, x, p: np.ascontiguousarray(x[0]).view(_np_dtype(a["to"])).reshape(x[0].shape),
     attrs={"to": REQUIRED})


# ----------------------------------------------------------------------------- TfIdfVectorizer
TFIDF_MODES = ("TF", "IDF", "TFIDF")


def tfidf_pool(pool: Sequence[int], ngram_counts: Sequence[int], min_gram: int, max_gram: int) -> dict[tuple[int, ...], int]:
    """The pool's n-grams of the counted sizes -> their position in ngram_indexes. ``pool``
    holds the 1-grams, then the 2-grams ... (``ngram_counts[k]``: where the (k+1)-grams start);
    a repeated n-gram keeps its last position, as ONNX's reference does."""
    grams: dict[tuple[int, ...], int] = {}
    position = 0
    for k, start in enumerate(ngram_counts):
        size = k + 1
        end = ngram_counts[k + 1] if k + 1 < len(ngram_counts) else len(pool)
        count = max(end - start, 0) // size
        if min_gram <= size <= max_gram:
            for g in range(count):
                grams[tuple(int(v) for v in pool[start + g * size : start + (g + 1) * size])] = position + g
        position += count
    return grams


def _tfidf_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] not in ("int32", "int64") or len(s[0]) not in (1, 2) or (len(s[0]) == 2 and s[0][0] < 1):
        raise ValueError(f"tfidf_vectorizer takes int32 / int64 tokens [C] or [B, C] with B >= 1, got {d[0]} {s[0]}")
    if a["mode"] not in TFIDF_MODES or not 1 <= a["min_gram_length"] <= a["max_gram_length"] or a["max_skip_count"] < 0:
        raise ValueError(f"tfidf_vectorizer: mode {' | '.join(TFIDF_MODES)}, 1 <= min_gram_length <= max_gram_length and "
                         f"max_skip_count >= 0; got {dict(a)}")
    if not a["ngram_indexes"] or min(a["ngram_indexes"]) < 0:
        raise ValueError("tfidf_vectorizer needs non-negative ngram_indexes")
    if a["weights"] is not None and len(a["weights"]) < _tfidf_width(a):
        raise ValueError(f"tfidf_vectorizer has {len(a['weights'])} weights for {_tfidf_width(a)} outputs")
    grams = tfidf_pool(a["pool"], a["ngram_counts"], a["min_gram_length"], a["max_gram_length"])
    if grams and max(grams.values()) >= len(a["ngram_indexes"]):
        raise ValueError(f"tfidf_vectorizer's pool has more n-grams than its {len(a['ngram_indexes'])} ngram_indexes")
    if (len(set(a["pool"])) + 1) ** a["max_gram_length"] >= 2**63:
        raise ValueError(f"tfidf_vectorizer codes each n-gram as one int64: {len(set(a['pool']))} distinct tokens in "
                         f"{a['max_gram_length']}-grams do not fit")
    return s[0][:-1] + (_tfidf_width(a),), "float32"


def _tfidf_width(a: Attrs) -> int:
    return max(a["ngram_indexes"]) + 1


def _gram_windows(rows: np.ndarray, size: int, skip: int) -> np.ndarray:
    """[B, positions, size]: the n-grams of ``size`` tokens ``skip`` apart starting at each position."""
    span = (size - 1) * skip + 1
    starts = np.arange(max(rows.shape[1] - span + 1, 0))
    return rows[:, starts[:, None] + skip * np.arange(size)[None, :]]


def _tfidf_counts(a: Attrs, rows: np.ndarray) -> np.ndarray:
    """[B, len(ngram_indexes)] occurrences of each pool n-gram: 1-grams once, longer n-grams
    once per skip distance 1 .. max_skip_count + 1 (ONNX's definition)."""
    grams = tfidf_pool(a["pool"], a["ngram_counts"], a["min_gram_length"], a["max_gram_length"])
    counts = np.zeros((rows.shape[0], len(a["ngram_indexes"])), dtype=np.int64)
    if not grams:
        return counts
    # Tokens absent from the pool cannot be part of a pool n-gram: map the vocabulary to 1..V
    # (0 = absent) and look every window up as one mixed-radix integer code.
    vocab = np.unique(np.asarray(a["pool"], dtype=np.int64))
    token = np.searchsorted(vocab, rows)
    token = np.where(vocab[np.minimum(token, vocab.size - 1)] == rows, token + 1, 0)
    base = vocab.size + 1
    for size in range(a["min_gram_length"], a["max_gram_length"] + 1):
        keys = [g for g in grams if len(g) == size]
        if not keys:
            continue
        code_of = {int(np.dot(np.searchsorted(vocab, g) + 1, base ** np.arange(size)[::-1])): grams[g] for g in keys}
        table = np.array(sorted(code_of), dtype=np.int64)
        column = np.array([code_of[c] for c in sorted(code_of)], dtype=np.int64)
        for skip in range(1, (1 if size == 1 else a["max_skip_count"] + 1) + 1):
            windows = _gram_windows(token, size, skip)
            codes = (windows * base ** np.arange(size, dtype=np.int64)[::-1]).sum(-1)
            at = np.minimum(np.searchsorted(table, codes), table.size - 1)
            hit = (table[at] == codes) & (windows > 0).all(-1)
            batch = np.broadcast_to(np.arange(rows.shape[0])[:, None], hit.shape)
            np.add.at(counts, (batch[hit], column[at[hit]]), 1)
    return counts


def _tfidf_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    rows = x[0].astype(np.int64).reshape(-1, x[0].shape[-1])
    counts = _tfidf_counts(a, rows)
    out: np.ndarray = np.zeros((rows.shape[0], _tfidf_width(a)), dtype=np.float64)
    np.add.at(out, (slice(None), np.asarray(a["ngram_indexes"])), counts)  # type: ignore[arg-type]  # one output column per n-gram position (NumPy's stub: no tuple index)
    weights = None if not a["weights"] else np.asarray(a["weights"], dtype=np.float64)[: out.shape[1]]
    if a["mode"] == "IDF":
        out = (out > 0) * (1.0 if weights is None else weights)
    elif a["mode"] == "TFIDF" and weights is not None:
        out = out * weights
    return out.astype(np.float32).reshape(x[0].shape[:-1] + (out.shape[1],))


_def("tfidf_vectorizer", "text", "[C] or [B, C] integer tokens -> float32 [(B,) max(ngram_indexes)+1]: per row, the count "
     "(mode TF), presence times weight (IDF) or count times weight (TFIDF) of each n-gram of pool (sizes min_gram_length.."
     "max_gram_length, ngram_counts: where each size starts in pool; n-grams of 2+ tokens also with up to max_skip_count "
     "tokens skipped between them) at output ngram_indexes[i] (ONNX TfIdfVectorizer, integer pool)", ("x",),
     _tfidf_rule, _tfidf_ref,
     attrs={"mode": REQUIRED, "min_gram_length": REQUIRED, "max_gram_length": REQUIRED, "max_skip_count": REQUIRED,
            "ngram_counts": REQUIRED, "ngram_indexes": REQUIRED, "pool": REQUIRED, "weights": None})


# ----------------------------------------------------------------------------- CausalConvWithState
def _causal_conv_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, w = s[0], s[1]
    if not _is_float(d[0]) or len(set(d)) != 1:
        raise ValueError(f"causal_conv_with_state takes floating-point inputs of one dtype, got {d}")
    if len(x) != 3 or len(w) != 3 or w[:2] != (x[1], 1) or w[2] < 1:
        raise ValueError(f"causal_conv_with_state takes input [B, C, L] and depthwise weight [C, 1, k], got {x} and {w}")
    state = (x[0], x[1], w[2] - 1)
    if a["has_bias"] and (len(s) < 3 or s[2] != (x[1],)):
        raise ValueError(f"causal_conv_with_state's bias must be [{x[1]}], got {s[2]}")
    if len(s) > 2 + a["has_bias"] and s[2 + a["has_bias"]] != state:
        raise ValueError(f"causal_conv_with_state's past_state must be {state}, got {s[2 + a['has_bias']]}")
    if a["activation"] not in ("none", "silu", "swish") or a["output"] not in (0, 1):
        raise ValueError(f"causal_conv_with_state: activation none | silu | swish, output 0 | 1; got {dict(a)}")
    return (x if a["output"] == 0 else state), d[0]


def _causal_conv_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    signal, weight = x[0], x[1]
    k = weight.shape[2]
    bias = x[2] if a["has_bias"] else None
    state = x[2 + a["has_bias"]] if len(x) > 2 + a["has_bias"] else np.zeros(signal.shape[:2] + (k - 1,), signal.dtype)
    padded = np.concatenate([state, signal], axis=2)
    if a["output"] == 1:
        return padded[:, :, padded.shape[2] - (k - 1):]
    wide = np.float64 if signal.dtype == np.float64 else np.float32  # half precision accumulates in float32
    windows = np.lib.stride_tricks.sliding_window_view(padded.astype(wide), k, axis=2)  # [B, C, L, k]
    out = np.einsum("bclk,ck->bcl", windows, weight[:, 0, :].astype(wide))
    if bias is not None:
        out = out + bias.astype(wide)[None, :, None]
    out = out.astype(signal.dtype)
    if a["activation"] != "none":  # silu on the rounded convolution, in float32 at least (ONNX's reference)
        v = out.astype(wide)
        out = (v * (1 / (1 + np.exp(-v)))).astype(signal.dtype)
    return out


_def("causal_conv_with_state", "convolution", "depthwise causal conv1d of input [B, C, L] with weight [C, 1, k] (+ bias [C] "
     "when has_bias; without it the third input is past_state), left-padded with past_state [B, C, k-1] (absent: zeros), then activation none | silu | swish; output "
     "0 the result [B, C, L], 1 the present state: the last k-1 steps of [past_state, input] (ONNX CausalConvWithState)",
     ("x", "weight", "bias?", "past_state?"), _causal_conv_rule, _causal_conv_ref,
     attrs={"activation": "none", "has_bias": False, "output": 0})


# ----------------------------------------------------------------------------- ImageDecoder
PIXEL_FORMATS = ("RGB", "BGR", "Grayscale")


def _image_decoder_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    shape = tuple(int(v) for v in a["shape"])
    if d[0] != "uint8" or len(s[0]) != 1:
        raise ValueError(f"image_decoder takes the encoded file as 1-D uint8, got {d[0]} {s[0]}")
    if a["pixel_format"] not in PIXEL_FORMATS or len(shape) != 3 or shape[2] != (1 if a["pixel_format"] == "Grayscale" else 3):
        raise ValueError(f"image_decoder: pixel_format {' | '.join(PIXEL_FORMATS)} and a shape [H, W, 3] ([H, W, 1] for "
                         f"Grayscale); got {a['pixel_format']!r}, {shape}")
    return shape, "uint8"


def _image_decoder_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    import io

    try:
        import PIL.Image  # an optional dependency: the importer refuses ImageDecoder without it
    except ImportError as exc:
        raise ValueError("image_decoder needs Pillow (pip install pillow)") from exc
    try:
        image = PIL.Image.open(io.BytesIO(np.ascontiguousarray(x[0]).tobytes()))
        pixels = np.asarray(image.convert("L" if a["pixel_format"] == "Grayscale" else "RGB"), dtype=np.uint8)
    except (OSError, ValueError) as exc:  # PIL's UnidentifiedImageError is an OSError
        raise ValueError(f"image_decoder cannot decode its input: {exc}") from exc
    pixels = pixels[:, :, None] if pixels.ndim == 2 else (pixels[:, :, ::-1] if a["pixel_format"] == "BGR" else pixels)
    shape = tuple(int(v) for v in a["shape"])
    if pixels.shape != shape:  # the static shape came from the model's declaration; another image size is refused, not reshaped
        raise ValueError(f"image_decoder decoded a {pixels.shape} image where the model declares {shape}")
    return np.ascontiguousarray(pixels)


_def("image_decoder", "image", "decode an encoded image file (1-D uint8: JPEG, PNG, BMP, TIFF, WebP ... as Pillow reads them) to "
     "uint8 [H, W, 3] RGB or BGR, or [H, W, 1] Grayscale; shape is the output's static shape, declared by the model, and "
     "another decoded size is an error (ONNX ImageDecoder; needs Pillow)", ("encoded",), _image_decoder_rule, _image_decoder_ref,
     attrs={"pixel_format": "RGB", "shape": REQUIRED})
