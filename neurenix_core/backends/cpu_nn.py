"""NumPy implementations of the neural-network extension ops (``nn.linear``, ``nn.conv2d`` ...).

They are the CPU backend's native versions, the host fallback every other backend gets for
free, and (run in float64) the kernels of the reference interpreter in ``reference.py``.
All are vectorised: convolution and pooling use ``sliding_window_view`` + ``tensordot``/
``einsum``; no Python loop runs over pixels. Each keeps the floating dtype of its input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from neurenix_core.backends import cpu_threads

__all__ = [
    "OPS",
    "adaptive_avg_pool2d",
    "auto_pads",
    "avg_pool2d",
    "batch_norm",
    "col2im",
    "conv2d",
    "conv2d_f32",
    "conv2d_nobias",
    "conv_nd",
    "conv_transpose_nd",
    "deform_conv2d",
    "erf",
    "fold",
    "gelu",
    "layer_norm",
    "linear",
    "max_pool2d",
    "max_pool_indices",
    "pool_nd",
    "pool_output",
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    a, b = v
    return int(a), int(b)


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    out = np.matmul(x, weight.T)
    return out if bias is None else out + bias


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """(N, C, OH, OW, kh, kw) view of the (already padded) input; no copy."""
    kh, kw = kernel
    span = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    if x.shape[2] < span[0] or x.shape[3] < span[1]:
        raise ValueError(f"input spatial size {x.shape[2:]} (after padding) is smaller than the kernel extent {span}")
    win = sliding_window_view(x, span, axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]


def _pad(x: np.ndarray, padding: tuple[int, int], value: float = 0.0) -> np.ndarray:
    if padding == (0, 0):
        return x
    ph, pw = padding
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def conv2d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> np.ndarray:
    """NCHW convolution, weight (O, C/groups, kh, kw)."""
    if x.ndim != 4:
        raise ValueError(f"conv2d expects a 4-D NCHW input, got shape {x.shape}")
    cg = weight.shape[1]
    if x.shape[1] != cg * groups:
        raise ValueError(f"conv2d: input has {x.shape[1]} channels, weight expects {cg * groups} ({cg} x {groups} groups)")
    out = conv2d_nobias(_pad(x, _pair(padding)), weight, _pair(stride), _pair(dilation), groups)
    if bias is None:
        return out
    b = bias.reshape(1, -1, 1, 1)
    if np.result_type(out, b) == out.dtype:
        out += b  # ``out`` is a fresh array: adding in place saves one output-sized allocation
        return out
    return out + b


def conv2d_nobias(xp: np.ndarray, weight: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int], groups: int) -> np.ndarray:
    """The convolution of an already padded NCHW ``xp``, as a fresh C-contiguous array: im2col
    (one copy of the window view) and one matmul call.

    Ungrouped: one GEMM (O, C*kh*kw) @ (C*kh*kw, N*OH*OW), the batch folded into the columns so
    deep layers with a few output pixels still make one large product; a 1x1 kernel's columns
    are the (strided) input itself. Grouped and depthwise: the columns as (N, G, C/G*kh*kw,
    OH*OW) against the (G, O/G, C/G*kh*kw) weight in one stacked matmul, whose product is
    already NCHW. (A depthwise multiply-add per kernel tap measured about twice as slow in NumPy:
    multiplying by a per-channel scalar runs row by row.)"""
    out_c, cg, kh, kw = weight.shape
    n = xp.shape[0]
    if _depthwise_channels_last(weight, groups, xp.dtype):
        return _depthwise_nhwc(xp, weight, stride, dilation)
    if (kh, kw) == (1, 1) and dilation == (1, 1):
        win = xp[:, :, :: stride[0], :: stride[1], None, None]  # a 1x1 kernel: the (strided) input is its own im2col
    else:
        win = _windows(xp, (kh, kw), stride, dilation)  # (N, C, OH, OW, kh, kw) view
    oh, ow = win.shape[2:4]
    if groups == 1:
        # (C, kh, kw, N, OH, OW): the copy's inner loop runs along OW, not along a 3-wide kernel row.
        cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(cg * kh * kw, n * oh * ow)
        out = np.matmul(weight.reshape(out_c, -1), cols).reshape(out_c, n, oh, ow)
        return out[:, 0].reshape(1, out_c, oh, ow) if n == 1 else np.ascontiguousarray(out.transpose(1, 0, 2, 3))
    cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4).reshape(n, groups, cg * kh * kw, oh * ow)
    out = np.matmul(weight.reshape(groups, out_c // groups, cg * kh * kw), cols)
    return out.reshape(n, out_c, oh, ow)


def _depthwise_channels_last(weight: np.ndarray, groups: int, dtype: np.dtype[Any]) -> bool:
    out_c, cg, kh, kw = weight.shape
    return cg == 1 and groups == out_c >= _DEPTHWISE_NHWC_MIN_CHANNELS and dtype == np.float32 and (kh, kw) != (1, 1)


#: Depthwise convolutions with at least this many channels run channels-last (``_depthwise_nhwc``);
#: below it the channel loop is too short and the stacked matmul of ``conv2d_nobias`` is as fast.
_DEPTHWISE_NHWC_MIN_CHANNELS = 64
#: Elements of one block of ``_depthwise_nhwc``'s accumulator: it and its scratch stay in L2.
_BLOCK_ELEMENTS = 32768


def _depthwise_nhwc(xp: np.ndarray, weight: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """``depthwise_channels_last`` of an already padded ``xp``, as a C-contiguous NCHW array."""
    return np.ascontiguousarray(depthwise_channels_last(xp, weight, stride, dilation, (0, 0)))


def depthwise_channels_last(x: np.ndarray, weight: np.ndarray, stride: tuple[int, int], dilation: tuple[int, int],
                            padding: tuple[int, int], bias: np.ndarray | None = None, act: str | None = None) -> np.ndarray:
    """A depthwise convolution (one filter per channel) of a float32 NCHW ``x`` (any strides),
    zero-padded by ``padding``: channels-last, one multiply-add per kernel tap, a few samples at
    a time. Returns an NCHW-shaped view of a channels-last (NHWC) array: NumPy's ufuncs keep
    that layout, and the next 1x1 convolution reads it as a transposed GEMM operand, so neither
    side pays a layout copy; an input already channels-last (see ``conv2d_f32``) is read
    contiguously into the padded buffer.

    The im2col form is one gemv per (sample, channel) over a copy kh*kw times the input; here
    each tap is a ufunc whose inner loop runs along the channels (long and contiguous) with the
    tap's per-channel weights, and the block's accumulator stays in cache across the taps.
    Measured 1.4-2.8x faster than the stacked matmul for 88-576 channels at batch 32, 3x3 and
    5x5 kernels (1 thread, thread time). With interpreter threads the blocks (of samples, or of
    output rows of one sample) and the input copy are split across them. ``bias`` (C,) and
    ``act`` (see ``_epilogue``) finish each block while it is in cache."""
    _, _, kh, kw = weight.shape
    n, c, h, w = x.shape
    (ph, pw), hp, wp = padding, h + 2 * padding[0], w + 2 * padding[1]
    span = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    if hp < span[0] or wp < span[1]:
        raise ValueError(f"input spatial size {(hp, wp)} (after padding) is smaller than the kernel extent {span}")
    oh, ow = (hp - span[0]) // stride[0] + 1, (wp - span[1]) // stride[1] + 1
    xh = np.zeros((n, hp, wp, c), np.float32) if padding != (0, 0) else np.empty((n, hp, wp, c), np.float32)
    cpu_threads.split(n, lambda a, b: np.copyto(xh[a:b, ph : ph + h, pw : pw + w], x[a:b].transpose(0, 2, 3, 1)))
    taps = np.ascontiguousarray(weight.reshape(c, kh * kw).T)  # (kh*kw, C): one row per tap
    out = np.empty((n, oh, ow, c), np.float32)
    block = cpu_threads.block(_BLOCK_ELEMENTS, n * oh * ow * c, _BLOCK_ELEMENTS)  # split when two blocks or more
    step = max(1, block // (oh * ow * c))
    if n >= cpu_threads.current():
        blocks = [(b, min(n, b + step), 0, oh) for b in range(0, n, step)]
    else:  # fewer samples than threads: blocks of output rows, so every thread has some
        rows = max(1, min(oh, block // (ow * c), -(-oh // cpu_threads.current())))
        blocks = [(b, b + 1, r, min(oh, r + rows)) for b in range(n) for r in range(0, oh, rows)]

    def run(first: int, last: int) -> None:
        scratch = np.empty((min(step, n), oh, ow, c), np.float32)
        for s0, s1, r0, r1 in blocks[first:last]:
            acc, tmp = out[s0:s1, r0:r1], scratch[: s1 - s0, : r1 - r0]
            for t in range(kh * kw):
                i, j = divmod(t, kw)
                i, j = i * dilation[0] + r0 * stride[0], j * dilation[1]
                view = xh[s0:s1, i : i + (r1 - r0 - 1) * stride[0] + 1 : stride[0], j : j + (ow - 1) * stride[1] + 1 : stride[1]]
                if t == 0:
                    np.multiply(view, taps[0], out=acc)
                else:
                    np.multiply(view, taps[t], out=tmp)
                    acc += tmp
            _epilogue(acc, bias, act)

    # Under _SPLIT_MACS of work (MobileNetV3's depthwise layers at batch 1) the hand-offs cost
    # more than the second core saves: one shard.
    small = n * oh * ow * c * kh * kw < _SPLIT_MACS
    cpu_threads.split(len(blocks), run, min_items=len(blocks) if small else 1)
    return out.transpose(0, 3, 1, 2)


#: Output pixels (GEMM columns) per convolution GEMM in ``conv2d_f32``: samples are grouped
#: until their columns reach this. One sample's columns keep the im2col copy, the GEMM and the
#: epilogue in cache (1.6-1.7x faster than one batch-wide GEMM on ResNet-18's 56x56 and 28x28
#: layers at batch 32); at 7x7 a few hundred columns made BLAS slower than the batch-wide GEMM.
_GROUP_COLUMNS = 1024
#: Multiply-adds below which a convolution is not split across interpreter threads (~0.3 ms of
#: work on one core: less than that and the pool's hand-off costs what the second core saves).
_SPLIT_MACS = 8_000_000


def conv2d_f32(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, padding: tuple[int, int], stride: tuple[int, int],
               dilation: tuple[int, int], groups: int, act: str | None, channels_last: bool = False) -> np.ndarray:
    """A float32 NCHW convolution with a per-channel ``bias`` (O,) and an optional activation
    ``act`` ("relu" or "hardswish", the opset references' operations in place), as a
    fresh NCHW array: the interpreter's fused conv step. Ungrouped: samples in groups of about
    :data:`_GROUP_COLUMNS` output pixels, each padded, copied to columns, multiplied and finished
    (bias, activation) while in cache, the groups split across the interpreter's threads (one sample
    and several threads: its columns copied and its output channels multiplied in shards).
    Grouped: ``conv2d_nobias`` on shards of the batch; depthwise with 64 channels or more:
    ``depthwise_channels_last`` (an NCHW-shaped view of NHWC memory). ``channels_last``
    (ungrouped): the output is such a view too, each GEMM computed transposed straight into it
    (what the interpreter asks of a convolution whose only reader is a channels-last depthwise one)."""
    out_c, _, kh, kw = weight.shape
    n, (h, w), (ph, pw) = x.shape[0], x.shape[2:], padding
    span = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    if h + 2 * ph < span[0] or w + 2 * pw < span[1]:
        raise ValueError(f"input spatial size {(h + 2 * ph, w + 2 * pw)} (after padding) is smaller than the kernel extent {span}")
    oh, ow = (h + 2 * ph - span[0]) // stride[0] + 1, (w + 2 * pw - span[1]) // stride[1] + 1
    if groups != 1:
        if _depthwise_channels_last(weight, groups, x.dtype):
            return depthwise_channels_last(x, weight, stride, dilation, padding, bias, act)  # splits its own blocks
        xp = _pad(x, padding)
        res = np.empty((n, out_c, oh, ow), x.dtype)
        cpu_threads.split(n, lambda a, b: np.copyto(res[a:b], conv2d_nobias(xp[a:b], weight, stride, dilation, groups)))
        flat = res.reshape(n, out_c, -1)
        cpu_threads.split(n, lambda a, b: _epilogue(flat[a:b], None if bias is None else bias.reshape(-1, 1), act))
        return res
    wm = weight.reshape(out_c, -1)
    geometry = (kh, kw), stride, dilation, padding
    # A convolution too small to repay the pool's hand-off runs on the caller alone.
    threads = cpu_threads.current() if wm.size * oh * ow * n >= _SPLIT_MACS else 1
    if channels_last:
        return _conv_channels_last(x, wm, bias, act, geometry, (oh, ow), threads)
    out = np.empty((n, out_c, oh * ow), x.dtype)
    if n == 1 and threads > 1:
        cols = _columns(x, 0, 1, geometry, None, split_copy=True)
        cpu_threads.split(out_c, lambda a, b: _gemm_epilogue(wm[a:b], cols, out[0, a:b], None if bias is None else bias[a:b], act), min_items=8)
        return out.reshape(1, out_c, oh, ow)
    per = max(1, min(-(-_GROUP_COLUMNS // (oh * ow)), -(-n // threads)))

    def run(first: int, last: int) -> None:
        scratch: dict[str, np.ndarray] = {}
        for g in range(first, last):
            s0, s1 = g * per, min(n, g * per + per)
            cols = _columns(x, s0, s1, geometry, scratch, split_copy=False)
            if s1 - s0 == 1:
                _gemm_epilogue(wm, cols, out[s0], bias, act)
            else:  # (O, m*L) -> (m, O, L)
                prod = np.matmul(wm, cols).reshape(out_c, s1 - s0, oh * ow)
                np.copyto(out[s0:s1], prod.transpose(1, 0, 2))
                _epilogue(out[s0:s1], None if bias is None else bias.reshape(-1, 1), act)

    cpu_threads.split(-(-n // per), run, min_items=1 if threads > 1 else n)
    return out.reshape(n, out_c, oh, ow)


def _conv_channels_last(x: np.ndarray, wm: np.ndarray, bias: np.ndarray | None, act: str | None,
                        geometry: tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]],
                        size: tuple[int, int], threads: int) -> np.ndarray:
    """``conv2d_f32`` into channels-last memory: per sample (L, O) = columns^T @ W^T (BLAS reads
    both transposed operands as they are), the epilogue along the contiguous channel axis; one
    sample and several threads: shards of its output pixels."""
    n, out_c, (oh, ow) = x.shape[0], wm.shape[0], size
    out = np.empty((n, oh * ow, out_c), x.dtype)
    wt = wm.T
    if n == 1 and threads > 1:
        cols = _columns(x, 0, 1, geometry, None, split_copy=True)

        def pixels(a: int, b: int) -> None:
            np.matmul(cols[:, a:b].T, wt, out=out[0, a:b])
            _epilogue(out[0, a:b], bias, act)

        cpu_threads.split(oh * ow, pixels, min_items=64)
    else:
        def run(first: int, last: int) -> None:
            scratch: dict[str, np.ndarray] = {}
            for s in range(first, last):
                np.matmul(_columns(x, s, s + 1, geometry, scratch, split_copy=False).T, wt, out=out[s])
                _epilogue(out[s], bias, act)

        cpu_threads.split(n, run, min_items=1 if threads > 1 else n)
    return out.reshape(n, oh, ow, out_c).transpose(0, 3, 1, 2)


def _columns(x: np.ndarray, s0: int, s1: int, geometry: tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]],
             scratch: dict[str, np.ndarray] | None, split_copy: bool) -> np.ndarray:
    """im2col of samples s0:s1 of unpadded ``x``: (C*kh*kw, m*OH*OW), rows (c, i, j), columns
    (sample, y, x). Padding goes into a reused scratch (borders zeroed once), not a padded copy of
    the batch; a 1x1 kernel on one unpadded sample at stride 1 is its own columns (no copy)."""
    (kh, kw), stride, dilation, (ph, pw) = geometry
    m, c, h, w = s1 - s0, *x.shape[1:]
    if (kh, kw) == (1, 1) and (ph, pw) == (0, 0) and stride == (1, 1) and m == 1:
        return x[s0].reshape(c, h * w)
    src = x[s0:s1]
    if (ph, pw) != (0, 0):
        pad = None if scratch is None else scratch.get("pad")
        if pad is None or pad.shape[0] != m:
            pad = np.zeros((m, c, h + 2 * ph, w + 2 * pw), x.dtype)
            if scratch is not None:
                scratch["pad"] = pad
        np.copyto(pad[:, :, ph : ph + h, pw : pw + w], src)
        src = pad
    win = _windows(src, (kh, kw), stride, dilation)  # (m, C, OH, OW, kh, kw)
    oh, ow = win.shape[2:4]
    cols = None if scratch is None else scratch.get("cols")
    if cols is None or cols.shape[3] != m:
        cols = np.empty((c, kh, kw, m, oh, ow), x.dtype)
        if scratch is not None:
            scratch["cols"] = cols
    view = win.transpose(1, 4, 5, 0, 2, 3)  # the copy's inner loop runs along OW, not a kernel row
    if split_copy and c >= 2 * cpu_threads.current():
        cpu_threads.split(c, lambda a, b: np.copyto(cols[a:b], view[a:b]))
    elif split_copy:  # few channels (an RGB stem): split the kernel rows as well

        def rows(a: int, b: int) -> None:
            for k in range(a, b):
                np.copyto(cols[divmod(k, kh)], view[divmod(k, kh)])

        cpu_threads.split(c * kh, rows)
    else:
        np.copyto(cols, view)
    return cols.reshape(c * kh * kw, m * oh * ow)


def _gemm_epilogue(wm: np.ndarray, cols: np.ndarray, out: np.ndarray, bias: np.ndarray | None, act: str | None) -> None:
    np.matmul(wm, cols, out=out)
    _epilogue(out, None if bias is None else bias.reshape(-1, 1), act)


def _epilogue(out: np.ndarray, bias: np.ndarray | None, act: str | None) -> None:
    """In place on ``out``: + ``bias`` (shaped to broadcast against it), then the activation:
    ReLU, or hardswish as the opset reference computes it (x * clip(x / 6 + 0.5, 0, 1), the clip
    as maximum then minimum), so the same bits."""
    if bias is not None:
        out += bias
    if act == "relu":
        np.maximum(out, 0, out=out)
    elif act == "hardswish":
        gate = np.divide(out, 6)
        gate += 0.5
        np.maximum(gate, 0, out=gate)
        np.minimum(gate, 1, out=gate)
        out *= gate
    elif act is not None:
        raise ValueError(f"unknown fused activation {act!r}")


def _tap(xp: np.ndarray, i: int, j: int, out: tuple[int, int], stride: tuple[int, int]) -> np.ndarray:
    """The (N, C, OH, OW) view of ``xp`` that kernel element (i, j) (dilation applied) multiplies."""
    return xp[:, :, i : i + (out[0] - 1) * stride[0] + 1 : stride[0], j : j + (out[1] - 1) * stride[1] + 1 : stride[1]]


def max_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0) -> np.ndarray:
    k = _pair(kernel_size)
    s = k if stride is None else _pair(stride)
    low = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    xp = _pad(x, _pair(padding), low)
    if xp.shape[2] < k[0] or xp.shape[3] < k[1]:
        raise ValueError(f"input spatial size {xp.shape[2:]} (after padding) is smaller than the kernel extent {k}")
    size = ((xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1)
    # A running maximum over the kh*kw strided taps: each pass is one vectorised ufunc over the
    # output, where reducing the 6-D window view walks a 3x3 window per output element.
    out = np.array(_tap(xp, 0, 0, size, s))
    for t in range(1, k[0] * k[1]):
        np.maximum(out, _tap(xp, *divmod(t, k[1]), size, s), out=out)
    return out


def avg_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> np.ndarray:
    k = _pair(kernel_size)
    s = k if stride is None else _pair(stride)
    p = _pair(padding)
    sums = _windows(_pad(x, p), k, s, (1, 1)).sum(axis=(4, 5))
    if count_include_pad or p == (0, 0):
        return (sums / (k[0] * k[1])).astype(x.dtype, copy=False)
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    counts = _windows(_pad(ones, p), k, s, (1, 1)).sum(axis=(4, 5))
    return (sums / counts).astype(x.dtype, copy=False)


def adaptive_bounds(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's adaptive pooling cells: start = floor(i*size/out), end = ceil((i+1)*size/out)."""
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def adaptive_avg_pool2d(x: np.ndarray, output_size: Any) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = _pair(output_size)
    if h % oh == 0 and w % ow == 0:
        return x.reshape(n, c, oh, h // oh, ow, w // ow).mean(axis=(3, 5)).astype(x.dtype, copy=False)
    # Uneven cells: an integral image gives every cell's sum in one gather (no loop over cells).
    integral = np.zeros((n, c, h + 1, w + 1), dtype=np.float64)
    integral[:, :, 1:, 1:] = x.astype(np.float64).cumsum(2).cumsum(3)
    hs, he = adaptive_bounds(h, oh)
    ws, we = adaptive_bounds(w, ow)
    total = (integral[:, :, he[:, None], we[None, :]] - integral[:, :, hs[:, None], we[None, :]]
             - integral[:, :, he[:, None], ws[None, :]] + integral[:, :, hs[:, None], ws[None, :]])
    area = (he - hs)[:, None] * (we - ws)[None, :]
    return (total / area).astype(x.dtype, copy=False)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), dtype=x.dtype))


# erfc(z) for z >= 0, Numerical Recipes' Chebyshev fit (fractional error < 1.2e-7): NumPy has
# no erf and the core must not depend on SciPy for one activation.
_ERFC_COEF = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def erf(x: np.ndarray) -> np.ndarray:
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(z)
    for c in reversed(_ERFC_COEF):
        poly = poly * t + c
    erfc = t * np.exp(-z * z + poly)
    return np.sign(x) * (1.0 - erfc)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        x64 = x.astype(np.float64)
        out = 0.5 * x64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64**3)))
    elif approximate == "none":
        out = 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
    else:
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return out.astype(x.dtype, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def batch_norm(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float = 1e-5) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = 1.0 / np.sqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return (x * scale.reshape(shape).astype(x.dtype) + shift.reshape(shape).astype(x.dtype)).astype(x.dtype, copy=False)


def layer_norm(x: np.ndarray, normalized_shape: Any, weight: np.ndarray | None, bias: np.ndarray | None, eps: float = 1e-5) -> np.ndarray:
    dims = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    axes = tuple(range(x.ndim - len(dims), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.astype(x.dtype, copy=False)


OPS: dict[str, Callable[..., Any]] = {
    "nn.linear": linear,
    "nn.conv2d": conv2d,
    "nn.max_pool2d": max_pool2d,
    "nn.avg_pool2d": avg_pool2d,
    "nn.adaptive_avg_pool2d": adaptive_avg_pool2d,
    "nn.relu": relu,
    "nn.gelu": gelu,
    "nn.sigmoid": sigmoid,
    "nn.tanh": tanh,
    "nn.softmax": softmax,
    "nn.batch_norm": batch_norm,
    "nn.layer_norm": layer_norm,
}


# ----------------------------------------------------------------------------- ONNX-semantics kernels (1-3 spatial axes)
# Spatial geometry follows ONNX: ``begin``/``end`` are the pads before and after each spatial
# axis, ``ext`` = dilation * (kernel - 1) + 1 is a window's extent.
def _extent(kernel: Sequence[int], dilations: Sequence[int]) -> tuple[int, ...]:
    return tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations))


def auto_pads(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
              pads: Sequence[int] | None, auto_pad: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(begin, end) pads of a Conv / pool: explicit ``pads``, or SAME_UPPER / SAME_LOWER (output
    ceil(size / stride), the odd pad after / before), or VALID (none)."""
    nd = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        ext = _extent(kernel, dilations)
        total = [max(0, (-(-n // s) - 1) * s + e - n) for n, s, e in zip(spatial, strides, ext)]
        small = tuple(t // 2 for t in total)
        big = tuple(t - t // 2 for t in total)
        return (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    if auto_pad == "VALID" or pads is None:
        return (0,) * nd, (0,) * nd
    if auto_pad != "NOTSET":
        raise ValueError(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}")
    return tuple(int(p) for p in pads[:nd]), tuple(int(p) for p in pads[nd:])


def pool_output(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                begin: Sequence[int], end: Sequence[int], ceil_mode: bool) -> tuple[int, ...]:
    """Output sizes of a pool; in ceil mode a last window that would start in the end padding is dropped."""
    out = []
    for n, k, s, d, b, e in zip(spatial, kernel, strides, dilations, begin, end):
        span = n + b + e - (d * (k - 1) + 1)
        size = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (size - 1) * s >= n + b:
            size -= 1
        out.append(size)
    return tuple(out)


def _fit(x: np.ndarray, begin: Sequence[int], length: Sequence[int], value: Any) -> np.ndarray:
    """``x`` padded with ``value`` by ``begin`` before each spatial axis and padded or cut after it to ``length``."""
    after = [ln - n - b for ln, n, b in zip(length, x.shape[2:], begin)]
    if any(begin) or any(a > 0 for a in after):
        x = np.pad(x, [(0, 0), (0, 0)] + [(b, max(a, 0)) for b, a in zip(begin, after)], constant_values=value)
    if any(a < 0 for a in after):
        x = x[(slice(None), slice(None)) + tuple(slice(0, ln) for ln in length)]
    return x


def _strided_windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
    """(N, C, *out, *kernel) view of ``x`` (already padded to exactly fit the windows)."""
    nd = len(kernel)
    win = sliding_window_view(x, _extent(kernel, dilations), axis=tuple(range(2, 2 + nd)))
    return win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) + tuple(slice(None, None, d) for d in dilations)]


def _accumulator(dtype: np.dtype[Any]) -> Any:
    """Sums of half-precision values accumulate in float32 (then round back once)."""
    return np.float32 if dtype.kind == "f" and dtype.itemsize < 4 or dtype.kind == "V" else None


def pool_nd(x: np.ndarray, kind: str, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
            begin: Sequence[int], end: Sequence[int], out: Sequence[int], count_include_pad: bool = False, p: float = 2.0) -> np.ndarray:
    """ONNX MaxPool / AveragePool / LpPool over the trailing spatial axes. Padding never wins a max
    and adds nothing to a sum; an average divides by the window's real elements (with
    ``count_include_pad``: also the declared pads, never the ceil-mode overhang)."""
    nd = len(kernel)
    need = [(o - 1) * s + e for o, s, e in zip(out, strides, _extent(kernel, dilations))]
    axes = tuple(range(2 + nd, 2 + 2 * nd))
    if kind == "max":
        low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min
        return np.ascontiguousarray(_strided_windows(_fit(x, begin, need, low), kernel, strides, dilations).max(axis=axes))
    src = x if kind == "avg" else np.abs(x) ** np.asarray(p, x.dtype)
    acc = _accumulator(x.dtype)
    sums = _strided_windows(_fit(src, begin, need, 0), kernel, strides, dilations).sum(axis=axes, dtype=acc)
    if kind == "lp":
        return (sums ** (1.0 / p)).astype(x.dtype, copy=False)
    ones = np.ones((1, 1) + x.shape[2:], np.float32)
    if count_include_pad:
        ones = _fit(ones, begin, [n + b + e for n, b, e in zip(x.shape[2:], begin, end)], 1.0)
        ones = _fit(ones, (0,) * nd, need, 0.0)
    else:
        ones = _fit(ones, begin, need, 0.0)
    counts = _strided_windows(ones, kernel, strides, dilations).sum(axis=axes)
    return (sums / counts.astype(sums.dtype)).astype(x.dtype, copy=False)


def max_pool_indices(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                     begin: Sequence[int], out: Sequence[int], storage_order: int = 0) -> np.ndarray:
    """ONNX MaxPool's ``Indices``: the flat int64 index (over N, C and the spatial axes, row-major,
    or column-major spatial with ``storage_order`` 1) of each window's first maximum."""
    nd = len(kernel)
    need = [(o - 1) * s + e for o, s, e in zip(out, strides, _extent(kernel, dilations))]
    low = -np.inf if x.dtype.kind in "fV" else np.iinfo(x.dtype).min
    win = _strided_windows(_fit(x, begin, need, low), kernel, strides, dilations)
    arg = win.reshape(win.shape[: 2 + nd] + (-1,)).argmax(axis=-1)
    offsets = np.unravel_index(arg, tuple(kernel))
    coords = [np.arange(o).reshape((-1,) + (1,) * (nd - 1 - i)) * s - b + off * d
              for i, (o, s, b, off, d) in enumerate(zip(out, strides, begin, offsets, dilations))]
    spatial = tuple(x.shape[2:])
    flat = np.ravel_multi_index(tuple(np.clip(c, 0, n - 1) for c, n in zip(coords, spatial)), spatial, order="F" if storage_order else "C")
    plane = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * nd) * math.prod(spatial)
    return (plane + flat).astype(np.int64)


def _letters(nd: int) -> tuple[str, str]:
    return "xyz"[:nd], "ijk"[:nd]


def conv_nd(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, strides: Sequence[int], dilations: Sequence[int],
            begin: Sequence[int], end: Sequence[int], group: int) -> np.ndarray:
    """ONNX Conv over 1-3 spatial axes: x (N, C, *S), weight (O, C/group, *k), zero pads ``begin``/``end``."""
    nd = x.ndim - 2
    kernel = weight.shape[2:]
    span = [n + b + e for n, b, e in zip(x.shape[2:], begin, end)]
    out = [(sp - ex) // s + 1 for sp, ex, s in zip(span, _extent(kernel, dilations), strides)]
    need = [(o - 1) * s + ex for o, s, ex in zip(out, strides, _extent(kernel, dilations))]
    win = _strided_windows(_fit(x, begin, need, 0), kernel, strides, dilations)
    n, (o_ch, cg) = x.shape[0], weight.shape[:2]
    if group == 1:
        y = np.tensordot(win, weight, axes=([1] + list(range(2 + nd, 2 + 2 * nd)), list(range(1, 2 + nd))))
        y = np.moveaxis(y, -1, 1)
    else:
        sp, kk = _letters(nd)
        wg = win.reshape((n, group, cg) + tuple(out) + tuple(kernel))
        kg = weight.reshape((group, o_ch // group, cg) + tuple(kernel))
        y = np.einsum(f"ngc{sp}{kk},gmc{kk}->ngm{sp}", wg, kg, optimize=True).reshape((n, o_ch) + tuple(out))
    y = np.ascontiguousarray(y)
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * nd)
    return y.astype(x.dtype, copy=False)


def fold(cols: np.ndarray, size: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> np.ndarray:
    """Scatter-add blocks (N, C, *kernel, *blocks) into (N, C, *size): block b's kernel element k
    lands at b * stride + k * dilation (the adjoint of taking windows; one slice-add per kernel element)."""
    nd = len(size)
    kernel, blocks = cols.shape[2 : 2 + nd], cols.shape[2 + nd :]
    acc = _accumulator(cols.dtype)
    buf = np.zeros(cols.shape[:2] + tuple(size), dtype=acc or cols.dtype)
    for off in np.ndindex(*kernel):
        where = tuple(slice(o * d, o * d + (nb - 1) * s + 1, s) for o, d, nb, s in zip(off, dilations, blocks, strides))
        buf[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + off]
    return buf.astype(cols.dtype, copy=False)


def _window_of(full: np.ndarray, begin: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """out[i] = full[begin + i] where that exists, else 0 (a crop by pads or an extension by output_shape)."""
    res = np.zeros(full.shape[:2] + tuple(out), full.dtype)
    src, dst = [slice(None)] * 2, [slice(None)] * 2
    for b, o, f in zip(begin, out, full.shape[2:]):
        lo, hi = max(b, 0), min(f, b + o)
        if hi <= lo:
            return res
        src.append(slice(lo, hi))
        dst.append(slice(lo - b, hi - b))
    res[tuple(dst)] = full[tuple(src)]
    return res


def conv_transpose_nd(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, strides: Sequence[int], dilations: Sequence[int],
                      group: int, begin: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """ONNX ConvTranspose: x (N, C, *S), weight (C, O/group, *k); every input pixel's kernel-weighted
    block is folded into the full output, of which ``out`` elements from ``begin`` are kept."""
    nd = x.ndim - 2
    kernel = weight.shape[2:]
    n, c = x.shape[:2]
    og = weight.shape[1]
    sp, kk = _letters(nd)
    xg = x.reshape((n, group, c // group) + x.shape[2:])
    wg = weight.reshape((group, c // group, og) + tuple(kernel))
    cols = np.einsum(f"ngc{sp},gcm{kk}->ngm{kk}{sp}", xg, wg, optimize=True).reshape((n, group * og) + tuple(kernel) + x.shape[2:])
    full = fold(cols, [(s_ - 1) * st + ex for s_, st, ex in zip(x.shape[2:], strides, _extent(kernel, dilations))], strides, dilations)
    y = _window_of(full, begin, out)
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * nd).astype(y.dtype)
    return y.astype(x.dtype, copy=False)


def col2im(x: np.ndarray, image: Sequence[int], block: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
           begin: Sequence[int], end: Sequence[int]) -> np.ndarray:
    """ONNX Col2Im: x (N, C * prod(block), L) -> (N, C, *image), summing overlapping blocks."""
    blocks = [(n + b + e - ex) // s + 1 for n, b, e, ex, s in zip(image, begin, end, _extent(block, dilations), strides)]
    cols = x.reshape((x.shape[0], -1) + tuple(block) + tuple(blocks))
    full = fold(cols, [n + b + e for n, b, e in zip(image, begin, end)], strides, dilations)
    return _window_of(full, begin, image)


def deform_conv2d(x: np.ndarray, weight: np.ndarray, offset: np.ndarray, bias: np.ndarray | None, mask: np.ndarray | None,
                  strides: Sequence[int], dilations: Sequence[int], begin: Sequence[int], group: int, offset_group: int) -> np.ndarray:
    """ONNX DeformConv (2-D): each kernel tap samples x bilinearly at its regular position plus its
    learned offset (zero outside the image), times the optional mask, then a grouped convolution.
    offset (N, offset_group * kh * kw * 2, OH, OW) holds (dy, dx) pairs; mask (N, offset_group * kh * kw, OH, OW)."""
    n, c, h, w = x.shape
    kh, kw = weight.shape[2:]
    oh, ow = offset.shape[2:]
    og = offset_group
    off = offset.reshape(n, og, kh, kw, 2, oh, ow).astype(np.float64)
    base_y = (np.arange(kh) * dilations[0])[:, None, None, None] + (np.arange(oh) * strides[0] - begin[0])[None, None, :, None]
    base_x = (np.arange(kw) * dilations[1])[None, :, None, None] + (np.arange(ow) * strides[1] - begin[1])[None, None, None, :]
    py = base_y + off[:, :, :, :, 0]  # (N, OG, kh, kw, OH, OW)
    px = base_x + off[:, :, :, :, 1]
    y0, x0 = np.floor(py), np.floor(px)
    planes = x.reshape(n, og, 1, c // og, h * w)
    cols = np.zeros((n, og, c // og, kh, kw, oh, ow), np.float64)
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        yi, xi = y0 + dy, x0 + dx
        wt = (1 - np.abs(py - yi)) * (1 - np.abs(px - xi)) * ((yi >= 0) & (yi < h) & (xi >= 0) & (xi < w))
        flat = (np.clip(yi, 0, h - 1) * w + np.clip(xi, 0, w - 1)).astype(np.int64).reshape(n, og, 1, 1, -1)
        picked = np.take_along_axis(planes, flat, axis=-1).reshape(n, og, c // og, kh, kw, oh, ow)
        cols += picked * wt[:, :, None]
    if mask is not None:
        cols *= mask.reshape(n, og, 1, kh, kw, oh, ow)
    cg, o = weight.shape[1], weight.shape[0]
    cols = cols.reshape(n, group, cg, kh, kw, oh, ow)
    y = np.einsum("ngcijhw,gocij->ngohw", cols, weight.reshape(group, o // group, cg, kh, kw).astype(np.float64), optimize=True)
    y = y.reshape(n, o, oh, ow)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    return y.astype(x.dtype)
