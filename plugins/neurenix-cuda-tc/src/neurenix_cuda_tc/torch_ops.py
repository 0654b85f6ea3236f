"""The opset's weightless ops as PyTorch functions (the layers with weights live in ``lowering.py``).

``function_for(op, attrs, out_shape)`` returns a callable on torch tensors with the node's
attributes bound, following the opset's semantics (``neurenix_core.graph.opset``): ONNX
broadcasting and negative axes, integer division that truncates, ``reshape``'s ``0`` = "copy this
dimension", a bool attention mask that keeps True. The callables use plain torch functions only,
so ``torch.fx`` traces a lowered graph through them (``align_model``) and ``Module.to(dtype)``
/ ``channels_last`` apply to the whole model. ``out_shape`` is the node's static output shape when
the graph has one (imported models do), ``ins`` its inputs' shapes: with them nothing reads a
shape at run time (torch.fx traces no Python arithmetic on sizes); without them (a neurenix model
lowered before its input shapes are known) the few ops that need a size read it from the tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from neurenix_core.errors import UnsupportedOperationError

if TYPE_CHECKING:
    import torch

__all__ = ["FUNCTIONS", "avg_pool2d", "function_for", "max_pool2d", "torch_dtype_of"]

Fn = Callable[..., Any]
Attrs = Mapping[str, Any]
Shape = tuple[int, ...] | None
#: The static shapes of a node's inputs (None when the graph has none).
Ins = tuple[tuple[int, ...], ...] | None
#: Their dtype names (None when unknown): dtype tests are decided here, not traced.
Dts = tuple[str, ...] | None


def torch_dtype_of(name: str) -> Any:
    """The torch dtype of an opset dtype name."""
    import torch

    return getattr(torch, name)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _binary(name: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch

        return getattr(torch, name)

    return build


def _pow(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    """ONNX Pow: the result has the base's dtype. torch.pow promotes an integer base with a float
    exponent to float and refuses negative integer exponents at run time, so an integer base is
    raised in float64 (as the reference does) and cast back, except with integer exponents >= 0,
    which stay exact integer powers."""
    import torch

    def wide(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.pow(x.to(torch.float64), y.to(torch.float64)).to(x.dtype)

    def integer(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.where(y < 0, wide(x, y), torch.pow(x, torch.clamp(y, min=0)))

    def same(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.pow(x, y).to(x.dtype)

    if dts is None:
        return lambda x, y: same(x, y) if x.is_floating_point() else wide(x, y) if y.is_floating_point() else integer(x, y)
    return same if _is_float(dts[0]) else wide if _is_float(dts[1]) else integer


def _div(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    if dts is not None:
        # ONNX Div: integers truncate toward zero; floats divide.
        floats = any(_is_float(d) for d in dts)
        return torch.div if floats else (lambda x, y: torch.div(x, y, rounding_mode="trunc"))

    def div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.is_floating_point() or y.is_floating_point():
            return torch.div(x, y)
        return torch.div(x, y, rounding_mode="trunc")

    return div


def _unary(name: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch

        return getattr(torch, name)

    return build


def _identity(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    return lambda x: x


def _clip(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    lo, hi = a["min"], a["max"]
    if lo is None and hi is None:
        return lambda x: x
    # torch.clamp promotes an integer tensor to float32 with float bounds; the opset's clip keeps
    # the input's dtype (Ergo's expert ids, clamp_max(ids, 3.0), then index a table: a float
    # index raised IndexError). The dtype is known at lowering when the graph is static (traced).
    if dts is not None:
        if _is_float(dts[0]):
            return lambda x: torch.clamp(x, lo, hi)
        dtype = getattr(torch, dts[0])
        return lambda x: torch.clamp(x, lo, hi).to(dtype)
    return lambda x: torch.clamp(x, lo, hi).to(x.dtype)  # no branch on x: torch.fx traces this too


def _leaky_relu(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch.nn.functional as F

    alpha = float(a["alpha"])
    return lambda x: F.leaky_relu(x, alpha)


def _hardsigmoid(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    alpha, beta = float(a["alpha"]), float(a["beta"])
    return lambda x: torch.clamp(x * alpha + beta, 0.0, 1.0)


def _gelu(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch.nn.functional as F

    approximate = str(a["approximate"])
    return lambda x: F.gelu(x, approximate=approximate)


def _activation(name: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch.nn.functional as F

        return getattr(F, name)

    return build


def _softmax(log: bool) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch

        axis = int(a["axis"])
        fn = torch.log_softmax if log else torch.softmax
        return lambda x: fn(x, axis)

    return build


def _matmul(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    return torch.matmul


def _gemm(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    alpha, beta, ta, tb = float(a["alpha"]), float(a["beta"]), bool(a["trans_a"]), bool(a["trans_b"])

    def gemm(x: torch.Tensor, y: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
        r = torch.matmul(x.t() if ta else x, y.t() if tb else y)
        r = r if alpha == 1.0 else r * alpha
        if c is None:
            return r
        return r + (c if beta == 1.0 else c * beta)

    return gemm


def _wide(padding: Sequence[int], kernel: Sequence[int]) -> bool:
    """PyTorch's pooling kernels take padding up to half the window (more is a run-time error)."""
    p, k = _pair(padding), _pair(kernel)
    return any(2 * pad > size for pad, size in zip(p, k))


def _pair(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def max_pool2d(x: torch.Tensor, kernel: Any, stride: Any, padding: Any) -> torch.Tensor:
    """F.max_pool2d, also for padding beyond half the window: -inf pads explicitly, then no padding."""
    import torch.nn.functional as F

    if not _wide(padding, kernel):
        return F.max_pool2d(x, kernel, stride, padding)
    ph, pw = _pair(padding)
    return F.max_pool2d(F.pad(x, (pw, pw, ph, ph), value=float("-inf")), kernel, stride, 0)


def avg_pool2d(x: torch.Tensor, kernel: Any, stride: Any, padding: Any, count_include_pad: bool = True,
               size: tuple[int, int] | None = None) -> torch.Tensor:
    """F.avg_pool2d, also for padding beyond half the window: zeros pad explicitly; without
    count_include_pad the window sums divide by the number of input elements in each window.
    ``size``: the static (H, W) when known (torch.fx then traces no size)."""
    import torch
    import torch.nn.functional as F

    if not _wide(padding, kernel):
        return F.avg_pool2d(x, kernel, stride, padding, count_include_pad=count_include_pad)
    ph, pw = _pair(padding)
    padded = F.pad(x, (pw, pw, ph, ph))
    if count_include_pad:
        return F.avg_pool2d(padded, kernel, stride, 0)
    ones = F.pad(torch.ones((1, 1, *(size or x.shape[-2:])), dtype=x.dtype, device=x.device), (pw, pw, ph, ph))
    # Both averages divide by kh * kw: their ratio is sum(x) / count(inputs) per window.
    return F.avg_pool2d(padded, kernel, stride, 0) / F.avg_pool2d(ones, kernel, stride, 0)


def _pool(kind: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        k = tuple(int(v) for v in a["kernel_size"])
        s = tuple(int(v) for v in a["stride"]) if a["stride"] is not None else k
        p = tuple(int(v) for v in a["padding"])
        if any(pad >= size for pad, size in zip(p, k)):
            # A window could lie in the padding alone (no input element): refused, not guessed.
            raise UnsupportedOperationError(f"{kind} pooling with padding {p} not smaller than the window {k}")
        if kind == "max":
            return lambda x: max_pool2d(x, k, s, p)
        include = bool(a["count_include_pad"])
        size = None if ins is None else (int(ins[0][-2]), int(ins[0][-1]))
        return lambda x: avg_pool2d(x, k, s, p, include, size)

    return build


def _adaptive(kind: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch.nn.functional as F

        size = tuple(int(v) for v in a["output_size"])
        fn = F.adaptive_avg_pool2d if kind == "avg" else F.adaptive_max_pool2d
        return lambda x: fn(x, size)

    return build


def _global(kind: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch

        fn = torch.mean if kind == "avg" else torch.amax
        return lambda x: fn(x, dim=(2, 3), keepdim=True)

    return build


@dataclass(frozen=True, slots=True)
class _ConvPlan:
    """One F.conv{nd}d call: torch pads symmetrically, so asymmetric pads go to ``edges`` (an
    F.pad before the convolution, last axis first), the common part to ``padding``."""

    nd: int
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    edges: tuple[int, ...] | None


def _conv_plan(a: Attrs, x: Sequence[int], w: Sequence[int]) -> _ConvPlan:
    nd = len(w) - 2
    if nd not in (1, 2, 3) or len(x) != len(w):
        raise UnsupportedOperationError(f"conv over {nd} spatial axes (x {tuple(x)}, weight {tuple(w)}): PyTorch has F.conv1d..conv3d")
    from neurenix_core.contract import conv_geometry

    try:  # the reference's pads (explicit, VALID, SAME_*), so the two agree by construction
        st, dil, begin, end, _ = conv_geometry(a, x, w)
    except ValueError as e:
        raise UnsupportedOperationError(f"conv (x {tuple(x)}, weight {tuple(w)}): {e}") from e
    common = tuple(min(b, e) for b, e in zip(begin, end))
    edges = tuple(v for i in reversed(range(nd)) for v in (begin[i] - common[i], end[i] - common[i]))
    return _ConvPlan(nd, st, common, dil, int(a["group"]), edges if any(edges) else None)


def _convolve(plan: _ConvPlan, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    import torch.nn.functional as F

    if plan.edges is not None:
        x = F.pad(x, plan.edges)
    fn = (F.conv1d, F.conv2d, F.conv3d)[plan.nd - 1]
    # The reference computes in x's dtype: the weight and bias follow it (a no-op when they match).
    return fn(x, w.to(x.dtype), None if b is None else b.to(x.dtype), plan.stride, plan.padding, plan.dilation, plan.groups)


def _conv(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    """ONNX Conv with the weight (O, C/group, *k) and bias as inputs (training graphs, where
    they are values): F.conv1d/2d/3d, planned once when the shapes are static."""
    if ins is not None:
        plan = _conv_plan(a, ins[0], ins[1])
        return lambda x, w, b=None: _convolve(plan, x, w, b)
    return lambda x, w, b=None: _convolve(_conv_plan(a, tuple(x.shape), tuple(w.shape)), x, w, b)


@dataclass(frozen=True, slots=True)
class _ConvTPlan:
    """One F.conv_transpose{nd}d call, then ``edges`` (an F.pad, last axis first) that crops
    (negative) or extends with zeros (positive) what torch's symmetric padding and bounded
    output_padding cannot express; the bias comes after an extension (the reference adds it there too)."""

    nd: int
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    output_padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    edges: tuple[int, ...] | None
    bias_after: bool


def _torch_window(begin: int, out: int, full: int, st: int, dil: int, ext: int) -> tuple[int, int, int, int]:
    """(padding, output_padding, crop at the start, change at the end) giving the window
    [begin, begin + out) of a transposed convolution whose unpadded size is ``full``: torch's
    result is [padding, full - padding + output_padding) of it."""
    tail = full - begin - out
    # padding: the part cropped on both sides, kept within the kernel's extent (the range every
    # torch/cuDNN kernel takes); output_padding: an extension torch allows (< stride or dilation).
    pad = min(begin, max(tail, 0), ext)
    opad = -tail if 0 < -tail < max(st, dil) else 0
    return pad, opad, begin - pad, (begin + out) - (full - pad + opad)


def _conv_t_plan(a: Attrs, x: Sequence[int], w: Sequence[int]) -> _ConvTPlan:
    nd = len(w) - 2
    if nd not in (1, 2, 3) or len(x) != len(w):
        raise UnsupportedOperationError(
            f"conv_transpose over {nd} spatial axes (x {tuple(x)}, weight {tuple(w)}): PyTorch has F.conv_transpose1d..3d")
    from neurenix_core.contract import conv_transpose_geometry

    try:  # the reference's output window of the unpadded result (pads, output_padding, output_shape, auto_pad)
        st, dil, begin, out = conv_transpose_geometry(a, x, w)
    except ValueError as e:
        raise UnsupportedOperationError(f"conv_transpose (x {tuple(x)}, weight {tuple(w)}): {e}") from e
    ext = [d * (k - 1) for k, d in zip(w[2:], dil)]
    parts = [_torch_window(begin[i], out[i], (x[2 + i] - 1) * st[i] + ext[i] + 1, st[i], dil[i], ext[i]) for i in range(nd)]
    edges = tuple(v for p in reversed(parts) for v in (-p[2], p[3]))
    return _ConvTPlan(nd, st, tuple(p[0] for p in parts), tuple(p[1] for p in parts), dil, int(a["group"]),
                      edges if any(edges) else None, any(p[3] > 0 for p in parts))


def _transpose_convolve(plan: _ConvTPlan, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    import torch.nn.functional as F

    fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[plan.nd - 1]
    bias = None if b is None else b.to(x.dtype)
    y = fn(x, w.to(x.dtype), None if plan.bias_after else bias, plan.stride, plan.padding, plan.output_padding, plan.groups,
           plan.dilation)
    if plan.edges is not None:
        y = F.pad(y, plan.edges)  # negative entries crop
    if plan.bias_after and bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * plan.nd)
    return y


def _conv_transpose(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    """ONNX ConvTranspose with the weight (C, O/group, *k) and bias as inputs:
    F.conv_transpose1d/2d/3d, planned once when the shapes are static."""
    if ins is not None:
        plan = _conv_t_plan(a, ins[0], ins[1])
        return lambda x, w, b=None: _transpose_convolve(plan, x, w, b)
    return lambda x, w, b=None: _transpose_convolve(_conv_t_plan(a, tuple(x.shape), tuple(w.shape)), x, w, b)


def _rank(ins: Ins, x: torch.Tensor, i: int = 0) -> int:
    """Input ``i``'s rank: static when known (fx traces no call on a size), else the tensor's."""
    return len(ins[i]) if ins is not None else x.dim()


def _dims(axes: Sequence[int] | None, x: torch.Tensor) -> tuple[int, ...]:
    return tuple(range(x.dim())) if axes is None else tuple(int(v) for v in axes)


def _empty_axis(shape: tuple[int, ...], axes: Sequence[int] | None) -> bool:
    """Whether reducing ``axes`` (None: all) of ``shape`` reduces an axis of size 0."""
    if not shape:
        return False
    dims = range(len(shape)) if axes is None else (int(v) % len(shape) for v in axes)
    return any(shape[d] == 0 for d in dims)


def _reduce(kind: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch

        keep = bool(a["keepdims"])
        axes = a["axes"] if a["axes"] is not None or ins is None else tuple(range(len(ins[0])))
        if kind == "prod":
            def prod(x: torch.Tensor) -> torch.Tensor:
                # torch.prod reduces one axis at a time: highest first, so the others keep their index.
                for d in sorted((v % _rank(ins, x) for v in _dims(axes, x)), reverse=True):
                    x = torch.prod(x, dim=d, keepdim=keep)
                return x

            return prod
        if kind in ("max", "min") and ins is not None and _empty_axis(ins[0], axes):
            # torch.amax/amin refuse to reduce an empty axis (ONNX gives the identity, -inf / +inf).
            raise UnsupportedOperationError(f"reduce_{kind} over an empty axis of shape {ins[0]}: torch.a{kind} has no identity value")
        fn = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[kind]
        return lambda x: fn(x, dim=_dims(axes, x), keepdim=keep)

    return build


def _arg(kind: str) -> Callable[[Attrs, Ins, Shape, Dts], Fn]:
    def build(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
        import torch

        fn = torch.argmax if kind == "max" else torch.argmin
        axis, keep = int(a["axis"]), bool(a["keepdims"])
        if ins is not None and _empty_axis(ins[0], (axis,)):
            raise UnsupportedOperationError(f"arg{kind} over an empty axis of shape {ins[0]}: torch.arg{kind} raises on it")
        return lambda x: fn(x, dim=axis, keepdim=keep)

    return build


def _reshape(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    if out is not None:
        return lambda x: torch.reshape(x, out)
    shape = tuple(int(v) for v in a["shape"])
    # ONNX: 0 copies the input's dimension (read at run time when the graph has no static shapes).
    return lambda x: torch.reshape(x, tuple(x.shape[i] if v == 0 else v for i, v in enumerate(shape)))


def _flatten(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    start, end = int(a["start_dim"]), int(a["end_dim"])
    return lambda x: torch.flatten(x, start, end)


def _transpose(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    perm = a["perm"] if a["perm"] is not None or ins is None else tuple(reversed(range(len(ins[0]))))
    if perm is None:
        return lambda x: torch.permute(x, tuple(reversed(range(x.dim()))))
    return lambda x: torch.permute(x, tuple(int(v) for v in perm))


def _squeeze(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    if out is not None:
        return lambda x: torch.reshape(x, out)
    axes = a["axes"]
    if axes is None:
        return torch.squeeze
    return lambda x: torch.squeeze(x, tuple(int(v) for v in axes))


def _unsqueeze(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    if out is not None:
        return lambda x: torch.reshape(x, out)
    axes = tuple(int(v) for v in a["axes"])

    def unsqueeze(x: torch.Tensor) -> torch.Tensor:
        n = _rank(ins, x) + len(axes)
        for d in sorted(v % n for v in axes):  # output positions, ascending
            x = torch.unsqueeze(x, d)
        return x

    return unsqueeze


def _expand(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    if out is not None:
        return lambda x: torch.broadcast_to(x, out)
    shape = tuple(int(v) for v in a["shape"])
    return lambda x: torch.broadcast_to(x, torch.broadcast_shapes(x.shape, shape))


def _concat(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    axis = int(a["axis"])
    return lambda *xs: torch.cat(xs, axis)


def _split(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    axis, sizes, index = int(a["axis"]), [int(v) for v in a["sizes"]], int(a["index"])
    start = sum(sizes[:index])
    return lambda x: torch.narrow(x, axis, start, sizes[index])


def _slice(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    starts, ends = [int(v) for v in a["starts"]], [int(v) for v in a["ends"]]
    axes = [int(v) for v in a["axes"]] if a["axes"] is not None else list(range(len(starts)))
    steps = [int(v) for v in a["steps"]] if a["steps"] is not None else [1] * len(axes)

    def slice_(x: torch.Tensor) -> torch.Tensor:
        rank = _rank(ins, x)
        for ax, st, en, sp in zip(axes, starts, ends, steps):
            ax = ax % rank
            n = ins[0][ax] if ins is not None else x.shape[ax]
            # Clamp as ONNX does, then let Python's slice resolve negative starts/ends.
            lo, hi, step = slice(max(min(st, n), -n - 1), max(min(en, n), -n - 1), sp).indices(n)
            idx = range(lo, hi, step)
            if step > 0:
                x = torch.narrow(x, ax, lo, len(idx)) if step == 1 else x[(slice(None),) * ax + (slice(lo, hi, step),)]
            else:  # torch slicing has no negative steps: gather the indices
                x = torch.index_select(x, ax, torch.tensor(list(idx), dtype=torch.long, device=x.device))
        return x

    return slice_


def _gather(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    axis = int(a["axis"])

    def gather(data: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        # np.take / ONNX Gather: result shape data[:axis] + indices.shape + data[axis+1:]; negative
        # indices count from the end. index_select on the flat indices, then that shape.
        ax = axis % _rank(ins, data)
        n = ins[0][ax] if ins is not None else data.shape[ax]
        flat = torch.reshape(indices, (-1,))
        picked = torch.index_select(data, ax, torch.where(flat < 0, flat + n, flat))
        if out is not None:
            return torch.reshape(picked, out)
        return torch.reshape(picked, tuple(data.shape[:ax]) + tuple(indices.shape) + tuple(data.shape[ax + 1 :]))

    return gather


def _gather_elements(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    axis = int(a["axis"])

    def gather_elements(data: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        # ONNX GatherElements is torch.gather once negative indices count from the end.
        ax = axis % _rank(ins, data)
        n = ins[0][ax] if ins is not None else data.shape[ax]
        return torch.gather(data, ax, torch.where(indices < 0, indices + n, indices))

    return gather_elements


def _gather_nd(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    def gather_nd(data: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        # batch_dims 0: the last axis of indices holds k coordinates into data's first k axes.
        k = ins[1][-1] if ins is not None else indices.shape[-1]
        sizes = ins[0][:k] if ins is not None else tuple(data.shape[:k])
        coords = tuple(torch.where(indices[..., i] < 0, indices[..., i] + sizes[i], indices[..., i]) for i in range(k))
        return data[coords]

    return gather_nd


def _where(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch

    return torch.where


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def _pad(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch.nn.functional as F

    pads = [(int(lo), int(hi)) for lo, hi in a["pads"]]
    # F.pad lists (before, after) from the last axis backwards; leading axes without padding are left out.
    first = next((i for i, p in enumerate(pads) if p != (0, 0)), len(pads))
    flat = [v for lo, hi in reversed(pads[first:]) for v in (lo, hi)]
    mode, value = _PAD_MODES[str(a["mode"])], float(a["value"])
    if not flat:
        return lambda x: x
    if mode == "constant":
        return lambda x: F.pad(x, flat, mode="constant", value=value)
    return lambda x: F.pad(x, flat, mode=mode)


def _cast(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    to = str(a["to"])
    float_target = to.startswith(("float", "bfloat"))
    target = torch_dtype_of(to)

    # float -> float keeps the model's working precision (the opset's rule): an fp16 model stays fp16.
    if dts is not None:
        return (lambda x: x) if float_target and _is_float(dts[0]) else (lambda x: x.to(target))

    def cast(x: torch.Tensor) -> torch.Tensor:
        if float_target and x.is_floating_point():
            return x
        return x.to(target)

    return cast


def _attention(a: Attrs, ins: Ins, out: Shape, dts: Dts) -> Fn:
    import torch
    import torch.nn.functional as F

    scale, causal = a["scale"], bool(a["is_causal"])

    bool_mask = None if dts is None or len(dts) < 4 else dts[3] == "bool"
    sizes = None if ins is None else (ins[0][-2], ins[1][-2])

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        is_bool = mask is not None and (bool_mask if bool_mask is not None else mask.dtype == torch.bool)
        if mask is not None and not is_bool:
            mask = mask.to(q.dtype)  # a float mask is added to the scores, in their precision
        if causal and mask is not None:
            # F.scaled_dot_product_attention takes either a mask or is_causal: fold the triangle in.
            L, S = sizes if sizes is not None else (q.shape[-2], k.shape[-2])
            tri = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
            mask = mask & tri if is_bool else mask.masked_fill(~tri, float("-inf"))
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale)

    return sdpa


FUNCTIONS: dict[str, Callable[[Attrs, Ins, Shape, Dts], Fn]] = {
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"), "div": _div, "pow": _pow,
    "maximum": _binary("maximum"), "minimum": _binary("minimum"),
    "equal": _binary("eq"), "not_equal": _binary("ne"), "less": _binary("lt"), "less_equal": _binary("le"),
    "greater": _binary("gt"), "greater_equal": _binary("ge"), "logical_and": _binary("logical_and"),
    "logical_or": _binary("logical_or"), "logical_not": _unary("logical_not"),
    "exp": _unary("exp"), "log": _unary("log"), "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"), "reciprocal": _unary("reciprocal"),
    "sin": _unary("sin"), "cos": _unary("cos"), "erf": _unary("erf"), "tanh": _unary("tanh"), "sigmoid": _unary("sigmoid"),
    "floor": _unary("floor"), "ceil": _unary("ceil"), "neg": _unary("neg"), "abs": _unary("abs"), "sign": _unary("sign"),
    "relu": _unary("relu"), "identity": _identity, "dropout": _identity, "clip": _clip,
    "leaky_relu": _leaky_relu, "hardsigmoid": _hardsigmoid, "gelu": _gelu, "silu": _activation("silu"),
    "hardswish": _activation("hardswish"), "softmax": _softmax(False), "log_softmax": _softmax(True),
    "matmul": _matmul, "gemm": _gemm,
    "conv": _conv, "conv_transpose": _conv_transpose,
    "max_pool2d": _pool("max"), "avg_pool2d": _pool("avg"), "adaptive_avg_pool2d": _adaptive("avg"),
    "adaptive_max_pool2d": _adaptive("max"), "global_avg_pool": _global("avg"), "global_max_pool": _global("max"),
    "reduce_sum": _reduce("sum"), "reduce_mean": _reduce("mean"), "reduce_max": _reduce("max"), "reduce_min": _reduce("min"),
    "reduce_prod": _reduce("prod"), "argmax": _arg("max"), "argmin": _arg("min"),
    "reshape": _reshape, "flatten": _flatten, "transpose": _transpose, "squeeze": _squeeze, "unsqueeze": _unsqueeze,
    "expand": _expand, "concat": _concat, "split": _split, "slice": _slice, "gather": _gather, "where": _where,
    "pad": _pad, "cast": _cast, "scaled_dot_product_attention": _attention,
    "gather_elements": _gather_elements, "gather_nd": _gather_nd, "isnan": _unary("isnan"),
}


def function_for(op: str, attrs: Attrs, in_shapes: Ins, out_shape: Shape, in_dtypes: Dts = None) -> Fn:
    """The torch callable of one weightless node (``attrs`` completed with the opset's defaults;
    static input/output shapes when the graph has them, else None)."""
    build = FUNCTIONS.get(op)
    if build is None:
        raise UnsupportedOperationError(f"plugin cuda has no PyTorch lowering for op {op!r}; nx.compile places it on cpu:0")
    return build(attrs, in_shapes, None if out_shape is None else tuple(int(d) for d in out_shape), in_dtypes)


