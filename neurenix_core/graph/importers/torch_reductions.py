"""ATen -> opset mappings (PyTorch is not imported here); merged into ``torch_export``'s table.

Order statistics, ordered scans, scatter / index / segment reductions and histograms.

* ``cummax`` / ``cummin`` / ``logcumsumexp`` / ``kthvalue`` / ``mode`` / ``searchsorted``: the
  ``ordering`` ops of the same names, whose references follow PyTorch's kernels (tie indices,
  NaN; see ``opset/ordering.py``).
* ``median`` / ``nanmedian``: PyTorch picks the element a stable sort puts at (n - 1) // 2 (over
  the non-NaN elements for nanmedian; for median the first NaN where there is one), so a full
  ``topk`` (ascending, ties by lower index, NaN last) and ``gather_elements`` at that position
  give both the value and PyTorch's index.
* ``index_reduce`` (prod, mean, amax, amin), ``scatter_reduce`` with ``mean`` and
  ``segment_reduce``: ``scatter_elements`` with the reduction, positions written without the
  original value first cleared to the reduction's identity, means as a sum over a count.
* ``histc`` / ``histogram`` / ``histogramdd``: bin positions as PyTorch computes them (histc by
  linear interpolation on the range; histogram by search in the bin edges, which are
  ``linspace`` in the input dtype, as PyTorch's kernel computes them, or the given ones), out of
  range and NaN values dropped into an extra slot, then counted (or weighted) by
  ``scatter_elements`` add: memory is linear in the input, not input times bins.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, Final

import numpy as np

from neurenix_core.graph.importers.builder import Const, Value
from neurenix_core.graph.importers.torch_ops import HANDLERS as _OPS
from neurenix_core.graph.importers.torch_ops import (
    Handler,
    Unavailable,
    _arg,
    _as,
    _axis,
    _emit,
    _extreme,
    _is_float,
    _out_dtype,
    _result,
    _scalar,
    _static,
)
from neurenix_core.graph.opset import _promote
from neurenix_core.graph.opset.ordering import nth_of_equivalents

__all__ = ["HANDLERS"]

_INDEX: Final = np.int64


def _shape(c: Any, v: Any) -> tuple[Any, ...]:
    """The symbolic shape of an fx argument (a tensor the node reads)."""
    return tuple(c.sym_shape(v))


def _ints(c: Any, n: Any, shape: Sequence[Any], what: str) -> tuple[int, ...]:
    """``shape`` as ints: these ops need their sizes at import."""
    return tuple(_static(c, n, shape, i, what) for i in range(len(shape)))


def _fill(c: Any, n: Any, tag: str, value: Any, shape: Sequence[Any], dtype: str) -> Value:
    """``value`` expanded to ``shape`` in ``dtype``."""
    scalar = Const(np.full((1,) * len(shape), value, dtype=np.dtype(dtype)))
    return _emit(c, n, tag, "expand", [scalar], {"shape": tuple(shape)})


def _index(value: int) -> Const:
    return Const(np.asarray(value, _INDEX))


def _zero_d(n: Any, x: Value) -> list[Value | Unavailable]:
    """A 0-d input along dim 0 / -1: its one element, at index 0."""
    return [x, _result(n, 1, lambda: _index(0))]


# ----------------------------------------------------------------------------- scans
def _cum_extreme(op: str) -> Handler:
    """cummax / cummin(x, dim): values and int64 indices."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
        x, dim = a[0], int(a[1])
        if not _shape(c, n.args[0]):
            return _zero_d(n, x)
        return [_result(n, i, partial(_emit, c, n, ("", "indices")[i], op, [x], {"axis": dim, "output": i})) for i in (0, 1)]

    return run


def _logcumsumexp(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x = _as(c, n, a[0], _out_dtype(c, n), "in")
    if not _shape(c, n.args[0]):
        return x
    return _emit(c, n, "", "logcumsumexp", [x], {"axis": int(a[1])})


# ----------------------------------------------------------------------------- order statistics
def _kthvalue(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    """kthvalue(x, k, dim=-1, keepdim=False)."""
    x, kk = a[0], int(a[1])
    dim, keep = int(_arg(a, k, 2, "dim", -1)), bool(_arg(a, k, 3, "keepdim", False))
    if not _shape(c, n.args[0]):
        return _zero_d(n, x)
    attrs = {"k": kk, "axis": dim, "keepdims": keep}
    return [_result(n, i, partial(_emit, c, n, ("", "indices")[i], "kthvalue", [x], attrs | {"output": i})) for i in (0, 1)]


def _mode(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    """mode(x, dim=-1, keepdim=False)."""
    x = a[0]
    dim, keep = int(_arg(a, k, 1, "dim", -1)), bool(_arg(a, k, 2, "keepdim", False))
    if not _shape(c, n.args[0]):
        return _zero_d(n, x)
    attrs = {"axis": dim, "keepdims": keep}
    return [_result(n, i, partial(_emit, c, n, ("", "indices")[i], "mode", [x], attrs | {"output": i})) for i in (0, 1)]


def _median(ignore_nan: bool) -> Handler:
    """median / nanmedian: of all elements (.default, the value only) or along dim (value, index)."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Any:
        x, shape = a[0], _shape(c, n.args[0])
        if getattr(n.target, "_overloadname", "") == "default":
            size = int(np.prod(_ints(c, n, shape, "takes the median"), dtype=np.int64))
            if size == 0:  # PyTorch's median of no elements
                return Const(np.asarray(np.nan, np.dtype(_out_dtype(c, n))))
            flat = c.b.reshape(c.name(n) + ".flat", x, (size,)) if len(shape) != 1 else x
            return _median_along(c, n, flat, 0, size, False, ignore_nan, 0)
        dim, keep = int(_arg(a, k, 1, "dim", 0)), bool(_arg(a, k, 2, "keepdim", False))
        if not shape:
            return _zero_d(n, x)
        axis = _axis(dim, len(shape))
        size = _static(c, n, shape, axis, "takes the median")
        return [_result(n, i, partial(_median_along, c, n, x, axis, size, keep, ignore_nan, i)) for i in (0, 1)]

    return run


def _tag(tag: str, part: str) -> str:
    return f"{tag}.{part}" if tag else part


def _median_along(c: Any, n: Any, x: Value, axis: int, size: int, keep: bool, ignore_nan: bool, output: int) -> Value:
    """The element a stable ascending sort (NaN last) puts at the median's position: (size-1)//2,
    or for median the first NaN (at the count of numbers), for nanmedian (numbers-1)//2."""
    tag = ("", "indices")[output]
    ordered = _emit(c, n, _tag(tag, "sorted"), "topk", [x],
                    {"k": size, "axis": axis, "largest": False, "sorted": True, "output": output})
    if not _is_float(str(c.b.spec(x).dtype)):
        picked = _emit(c, n, _tag(tag, "pick") if keep else tag, "gather", [ordered, _index((size - 1) // 2)], {"axis": axis})
        return _emit(c, n, tag, "unsqueeze", [picked], {"axes": (axis,)}) if keep else picked
    number = _emit(c, n, _tag(tag, "number"), "logical_not", [_emit(c, n, _tag(tag, "isnan"), "isnan", [x])])
    count = _emit(c, n, _tag(tag, "count"), "reduce_sum", [c.b.cast_to(f"{c.name(n)}.{_tag(tag, 'n')}", number, "int64")],
                  {"axes": (axis,), "keepdims": True})
    if ignore_nan:  # (count - 1) // 2, and 0 where every element is NaN (C++'s truncating -1 / 2)
        less = _emit(c, n, _tag(tag, "less"), "maximum", [_emit(c, n, _tag(tag, "m1"), "sub", [count, _index(1)]), _index(0)])
        position = _emit(c, n, _tag(tag, "position"), "div", [less, _index(2)])
    else:
        has_nan = _emit(c, n, _tag(tag, "has_nan"), "less", [count, _index(size)])
        position = _emit(c, n, _tag(tag, "position"), "where", [has_nan, count, _index((size - 1) // 2)])
    picked = _emit(c, n, _tag(tag, "pick"), "gather_elements", [ordered, position], {"axis": axis})
    if ignore_nan and output == 1:  # a row of NaNs: the index nth_element leaves first among equivalents
        all_nan = _emit(c, n, _tag(tag, "all_nan"), "equal", [count, _index(0)])
        picked = _emit(c, n, _tag(tag, "nan_row"), "where", [all_nan, _index(nth_of_equivalents(size)), picked])
    return _emit(c, n, tag, "identity" if keep else "squeeze", [picked], {} if keep else {"axes": (axis,)})


def _searchsorted(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """searchsorted(sorted_sequence, values, *, out_int32, right, side, sorter); .Scalar takes one number."""
    seq, values = a[0], a[1]
    right = bool(k.get("right", False)) or k.get("side") == "right"
    dtype = _out_dtype(c, n)
    seq_dtype = str(c.b.spec(seq).dtype)
    if not isinstance(values, (str, Const)):  # searchsorted.Scalar: a number in the sequence's dtype (float for a float one)
        values = _scalar(values, "float32" if isinstance(values, float) and not _is_float(seq_dtype) else seq_dtype)
    common = _promote([seq_dtype, str(c.b.spec(values).dtype)])
    inputs = [_as(c, n, seq, common, "seq"), _as(c, n, values, common, "values")]
    sorter = k.get("sorter")
    if sorter is not None:
        inputs.append(sorter)
    return _emit(c, n, "", "searchsorted", inputs, {"right": right, "dtype": dtype})


# ----------------------------------------------------------------------------- scatter / index / segment reductions
_REDUCTION: Final = {"prod": "mul", "amax": "max", "amin": "min", "mean": "add", "sum": "add", "max": "max", "min": "min"}


def _identity(op: str, dtype: str) -> float | int | bool:
    return {"add": 0, "mul": 1, "max": _extreme(dtype, low=True), "min": _extreme(dtype, low=False)}[op]


def _divide_counts(c: Any, n: Any, total: Value, counts: Value, dtype: str) -> Value:
    """total / counts, as PyTorch's means: counts of 0 read as 1, integers floor-divided."""
    empty = _emit(c, n, "empty", "equal", [counts, _scalar(0, dtype)])
    counts = _emit(c, n, "counts.safe", "where", [empty, _scalar(1, dtype), counts])
    if _is_float(dtype):
        return _emit(c, n, "", "div", [total, counts])
    rem = _emit(c, n, "mod", "mod", [total, counts], {"fmod": False})
    return _emit(c, n, "", "div", [_emit(c, n, "exact", "sub", [total, rem]), counts])


def _index_reduce(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """index_reduce(x, dim, index, source, reduce, include_self=True): source's slices reduced
    into x's positions ``index`` along dim."""
    x, index, src, reduce = a[0], a[2], a[3], str(a[4])
    include_self = bool(_arg(a, k, 5, "include_self", True))
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise c.fail(n, f"reduces with {reduce!r}; prod, mean, amax and amin are the reductions index_reduce has")
    dtype, shape, src_shape = _out_dtype(c, n), _shape(c, n.args[0]), _shape(c, n.args[3])
    if not shape:  # a 0-d tensor is one element along dim 0
        out = _index_reduce_body(c, n, c.b.reshape(c.name(n) + ".x1", x, (1,)), 0, index,
                                 c.b.reshape(c.name(n) + ".src1", src, (1,)), (1,), reduce, include_self, dtype)
        return c.b.reshape(c.name(n), out, ())
    dim = _axis(int(a[1]), len(shape))
    lifted = _emit(c, n, "index", "reshape", [index], {"shape": tuple(-1 if i == dim else 1 for i in range(len(src_shape)))})
    spread = _emit(c, n, "spread", "expand", [lifted], {"shape": src_shape})
    return _index_reduce_body(c, n, x, dim, spread, src, src_shape, reduce, include_self, dtype)


def _index_reduce_body(c: Any, n: Any, x: Value, dim: int, spread: Value, src: Value, src_shape: Sequence[Any], reduce: str,
                       include_self: bool, dtype: str) -> Value:
    op = _REDUCTION[reduce]
    src = _as(c, n, src, dtype, "src")
    base = x
    if not include_self:  # the positions written start from the reduction's identity
        base = _emit(c, n, "clear", "scatter_elements", [x, spread, _fill(c, n, "identity", _identity(op, dtype), src_shape, dtype)],
                     {"axis": dim})
    if reduce != "mean":
        return _emit(c, n, "", "scatter_elements", [base, spread, src], {"axis": dim, "reduction": op})
    total = _emit(c, n, "total", "scatter_elements", [base, spread, src], {"axis": dim, "reduction": "add"})
    start = _fill(c, n, "start", 1 if include_self else 0, c.b.spec(x).shape, dtype)
    counts = _emit(c, n, "counts", "scatter_elements", [start, spread, _fill(c, n, "ones", 1, src_shape, dtype)],
                   {"axis": dim, "reduction": "add"})
    return _divide_counts(c, n, total, counts, dtype)  # positions nothing is written to: x / 1


def _scatter_reduce(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """scatter_reduce(x, dim, index, src, reduce, include_self=True): 'mean' as the sum (torch_ops'
    handler with 'sum') over the count of values each position got (plus one for itself with
    include_self); the other reductions are torch_ops'."""
    reduce, include_self, dtype = str(a[4]), bool(_arg(a, k, 5, "include_self", True)), _out_dtype(c, n)
    if not _shape(c, n.args[0]):
        return _scatter_reduce_0d(c, n, a[0], a[3], reduce, include_self, dtype)
    if reduce != "mean":
        return _OPS["scatter_reduce"](c, n, a, k)
    total = _OPS["scatter_reduce"](c, n, [a[0], a[1], a[2], a[3], "sum", include_self], {})
    start = _fill(c, n, "start", 1 if include_self else 0, _shape(c, n.args[0]), dtype)
    ones = _fill(c, n, "ones", 1, _shape(c, n.args[3]), dtype)
    counts = _OPS["scatter_reduce"](c, n, [start, a[1], a[2], ones, "sum", True], {})
    return _divide_counts(c, n, total, counts, dtype)


def _scatter_reduce_0d(c: Any, n: Any, x: Value, src: Any, reduce: str, include_self: bool, dtype: str) -> Value:
    """A 0-d x (its index and src 0-d too): src's one value reduced with x's, or src alone."""
    src = _as(c, n, src, dtype, "src")
    if not include_self:
        return _emit(c, n, "", "identity", [src])
    x = _as(c, n, x, dtype, "x")
    if reduce == "mean":
        return _divide_counts(c, n, _emit(c, n, "total", "add", [x, src]), _scalar(2, dtype), dtype)
    op = {"sum": "add", "prod": "mul", "amax": "maximum", "amin": "minimum"}.get(reduce)
    if op is None:
        raise c.fail(n, f"reduces with {reduce!r}; sum, prod, mean, amax and amin are supported")
    return _emit(c, n, "", op, [x, src])


def _segment_reduce(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """segment_reduce(data, reduce, *, lengths, indices, offsets, axis=0, unsafe, initial): each
    element's segment is found by searchsorted in the segment ends (a cumulative sum of the
    lengths, or the offsets); elements past the last segment go to an extra slot."""
    data, reduce = a[0], str(a[1])
    lengths, offsets, initial = _arg(a, k, 2, "lengths"), _arg(a, k, 4, "offsets"), _arg(a, k, 7, "initial")
    if reduce not in ("max", "min", "mean", "sum", "prod") or (lengths is None and offsets is None):
        raise c.fail(n, f"reduces with {reduce!r} over segments given by lengths or offsets only "
                        "(max, min, mean, sum, prod are supported)")
    dtype, shape = _out_dtype(c, n), _ints(c, n, _shape(c, n.args[0]), "reduces segments")
    axis = _axis(int(_arg(a, k, 5, "axis", 0)), len(shape))
    ids, segments = _segment_ids(c, n, lengths, offsets, shape, axis)
    op = _REDUCTION[reduce]
    start = _identity(op, dtype) if initial is None else initial
    out_shape = shape[:axis] + (segments + 1,) + shape[axis + 1:]
    reduced = _emit(c, n, "reduced", "scatter_elements", [_fill(c, n, "init", start, out_shape, dtype), ids, data],
                    {"axis": axis, "reduction": op})
    keep = {"starts": (0,), "ends": (segments,), "axes": (axis,), "steps": (1,)}
    total = _emit(c, n, "" if reduce != "mean" else "total", "slice", [reduced], keep)
    if reduce != "mean":
        return total
    counted = _emit(c, n, "counted", "scatter_elements", [_fill(c, n, "zero", 0, out_shape, dtype), ids,
                                                           _fill(c, n, "one", 1, shape, dtype)], {"axis": axis, "reduction": "add"})
    counts = _emit(c, n, "counts", "slice", [counted], keep)
    empty = _emit(c, n, "empty", "equal", [counts, _scalar(0, dtype)])
    safe = _emit(c, n, "safe", "where", [empty, _scalar(1, dtype), counts])
    mean = _emit(c, n, "mean", "div", [total, safe])
    return _emit(c, n, "", "where", [empty, _scalar(np.nan if initial is None else initial, dtype), mean])


def _segment_ids(c: Any, n: Any, lengths: Any, offsets: Any, shape: tuple[int, ...], axis: int) -> tuple[Value, int]:
    """Each element's segment (``segments`` for none), expanded to the data's shape."""
    size, lead = shape[axis], shape[:axis]
    positions = _emit(c, n, "positions", "expand", [Const(np.arange(size, dtype=_INDEX))], {"shape": lead + (size,)})
    if lengths is not None:
        segments = int(c.b.spec(lengths).shape[-1])
        ends = _emit(c, n, "ends", "cumsum", [_as(c, n, lengths, "int64", "lengths")], {"axis": -1})
        ids = _emit(c, n, "ids", "searchsorted", [ends, positions], {"right": True})
    else:
        segments = int(c.b.spec(offsets).shape[-1]) - 1
        offsets = _as(c, n, offsets, "int64", "offsets")
        cut = {"axes": (axis,), "steps": (1,)}
        ends = _emit(c, n, "ends", "slice", [offsets], cut | {"starts": (1,), "ends": (segments + 1,)})
        first = _emit(c, n, "first", "slice", [offsets], cut | {"starts": (0,), "ends": (1,)})
        found = _emit(c, n, "found", "searchsorted", [ends, positions], {"right": True})
        before = _emit(c, n, "before", "less", [positions, first])
        ids = _emit(c, n, "ids", "where", [before, _index(segments), found])
    ids = _emit(c, n, "ids.inner", "reshape", [ids], {"shape": lead + (size,) + (1,) * (len(shape) - axis - 1)})
    return _emit(c, n, "ids.spread", "expand", [ids], {"shape": shape}), segments


# ----------------------------------------------------------------------------- histograms
def _flat(c: Any, n: Any, x: Value, tag: str) -> Value:
    size = int(np.prod(c.b.spec(x).shape, dtype=np.int64))
    return x if len(c.b.spec(x).shape) == 1 else c.b.reshape(f"{c.name(n)}.{tag}", x, (size,))


def _linspace(c: Any, n: Any, lo: Value, hi: Value, steps: int, dtype: str, tag: str) -> Value:
    """PyTorch's CPU linspace in ``dtype``: start + step*i for the first half, end - step*(steps-1-i)
    for the rest, step = (end - start) / (steps - 1); constant ends fold at import."""
    i = np.arange(steps, dtype=np.dtype(dtype))
    step = _emit(c, n, f"{tag}.step", "div", [_emit(c, n, f"{tag}.span", "sub", [hi, lo]), _scalar(max(steps - 1, 1), dtype)])
    head = _emit(c, n, f"{tag}.head", "add", [lo, _emit(c, n, f"{tag}.up", "mul", [step, Const(i)])])
    tail = _emit(c, n, f"{tag}.tail", "sub", [hi, _emit(c, n, f"{tag}.down", "mul", [step, Const((steps - 1 - i).astype(i.dtype))])])
    return _emit(c, n, tag, "where", [Const(np.arange(steps) < steps // 2), head, tail])


def _outer_edges(c: Any, n: Any, column: Value, given: Sequence[float] | None, widen: float, dtype: str, tag: str) -> tuple[Value, Value]:
    """The outermost bin edges: ``given`` (a range), else the data's min and max; an empty range
    is widened by ``widen`` on each side (histogram: 0.5, histc: 1)."""
    lo: Value
    hi: Value
    if given is not None:
        lo, hi = _scalar(float(given[0]), dtype), _scalar(float(given[1]), dtype)
    elif int(np.prod(c.b.spec(column).shape, dtype=np.int64)) == 0:
        lo, hi = _scalar(0.0, dtype), _scalar(0.0, dtype)
    else:
        lo = _emit(c, n, f"{tag}.min", "reduce_min", [column], {"axes": None, "keepdims": False})
        hi = _emit(c, n, f"{tag}.max", "reduce_max", [column], {"axes": None, "keepdims": False})
    flat = _emit(c, n, f"{tag}.flat", "equal", [lo, hi])
    lo = _emit(c, n, f"{tag}.lo", "where", [flat, _emit(c, n, f"{tag}.lo_w", "sub", [lo, _scalar(widen, dtype)]), lo])
    hi = _emit(c, n, f"{tag}.hi", "where", [flat, _emit(c, n, f"{tag}.hi_w", "add", [hi, _scalar(widen, dtype)]), hi])
    return lo, hi


def _edge_bins(c: Any, n: Any, column: Value, edges: Value, bins: int, tag: str) -> Value:
    """The bin of each value: the last edge <= it (the last bin holds its right edge), or
    ``bins`` for a value outside the edges or NaN."""
    found = _emit(c, n, f"{tag}.found", "searchsorted", [edges, column], {"right": True})
    pos = _emit(c, n, f"{tag}.pos", "sub", [found, _index(1)])
    last = _emit(c, n, f"{tag}.last", "gather", [edges, _index(bins)], {"axis": 0})
    first = _emit(c, n, f"{tag}.first", "gather", [edges, _index(0)], {"axis": 0})
    pos = _emit(c, n, f"{tag}.closed", "where", [_emit(c, n, f"{tag}.at_end", "equal", [column, last]), _index(bins - 1), pos])
    return _emit(c, n, f"{tag}.bin", "where", [_inside(c, n, column, first, last, tag), pos, _index(bins)])


def _inside(c: Any, n: Any, column: Value, lo: Value, hi: Value, tag: str) -> Value:
    """lo <= x <= hi (false for NaN)."""
    above = _emit(c, n, f"{tag}.above", "greater_equal", [column, lo])
    below = _emit(c, n, f"{tag}.below", "less_equal", [column, hi])
    return _emit(c, n, f"{tag}.inside", "logical_and", [above, below])


def _count(c: Any, n: Any, pos: Value, weight: Value | None, slots: int, dtype: str, tag: str) -> Value:
    """Per-slot counts (or weight sums) of ``slots`` bins, the out-of-range slot cut off."""
    size = int(np.prod(c.b.spec(pos).shape, dtype=np.int64))
    updates = _fill(c, n, f"{tag}.ones", 1, (size,), dtype) if weight is None else _as(c, n, _flat(c, n, weight, f"{tag}.w"), dtype, f"{tag}.wd")
    zeros = _fill(c, n, f"{tag}.zeros", 0, (slots + 1,), dtype)
    counts = _emit(c, n, f"{tag}.scatter", "scatter_elements", [zeros, pos, updates], {"axis": 0, "reduction": "add"})
    return _emit(c, n, f"{tag}.counts", "slice", [counts], {"starts": (0,), "ends": (slots,), "axes": (0,), "steps": (1,)})


def _histc(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """histc(x, bins=100, min=0, max=0): PyTorch's linear interpolation ((x - lo) * bins / (hi - lo),
    truncated) on [min, max] (min == max: the data's range; still empty: widened by 1)."""
    dtype = _out_dtype(c, n)
    bins, lo_arg, hi_arg = int(_arg(a, k, 1, "bins", 100)), float(_arg(a, k, 2, "min", 0)), float(_arg(a, k, 3, "max", 0))
    column = _flat(c, n, a[0], "flat")
    lo, hi = _outer_edges(c, n, column, None if lo_arg == hi_arg else (lo_arg, hi_arg), 1.0, dtype, "range")
    if lo_arg == hi_arg and int(np.prod(c.b.spec(column).shape, dtype=np.int64)) == 0:
        lo, hi = _scalar(lo_arg - 1.0, dtype), _scalar(hi_arg + 1.0, dtype)
    inside = _inside(c, n, column, lo, hi, "keep")
    column = _emit(c, n, "safe", "where", [inside, column, lo])  # out of range and NaN: counted nowhere, below
    scaled = _emit(c, n, "scaled", "mul", [_emit(c, n, "offset", "sub", [column, lo]), _scalar(float(bins), dtype)])
    ratio = _emit(c, n, "ratio", "div", [scaled, _emit(c, n, "width", "sub", [hi, lo])])
    pos = _emit(c, n, "closed", "minimum", [c.b.cast_to(c.name(n) + ".pos", ratio, "int64"), _index(bins - 1)])
    pos = _emit(c, n, "bin", "where", [inside, pos, _index(bins)])
    return _emit(c, n, "", "identity", [_count(c, n, pos, None, bins, dtype, "hist")])


def _density(c: Any, n: Any, hist: Value, edges: Sequence[Value], dtype: str) -> Value:
    """hist / its sum / each axis' bin widths (PyTorch's order)."""
    total = _emit(c, n, "density.sum", "reduce_sum", [hist], {"axes": None, "keepdims": False})
    out = _emit(c, n, "density.norm", "div", [hist, total])
    rank = len(edges)
    for d, e in enumerate(edges):
        size = int(c.b.spec(e).shape[0])
        right = _emit(c, n, f"density.r{d}", "slice", [e], {"starts": (1,), "ends": (size,), "axes": (0,), "steps": (1,)})
        left = _emit(c, n, f"density.l{d}", "slice", [e], {"starts": (0,), "ends": (size - 1,), "axes": (0,), "steps": (1,)})
        widths = _emit(c, n, f"density.w{d}", "sub", [right, left])
        if rank > 1:
            widths = _emit(c, n, f"density.w{d}.axis", "reshape", [widths], {"shape": tuple(-1 if i == d else 1 for i in range(rank))})
        out = _emit(c, n, f"density.d{d}", "div", [out, widths])
    return out


def _histogram_dd(c: Any, n: Any, x: Value, bins: Sequence[Any], given: Sequence[float] | None, weight: Value | None,
                  density: bool) -> tuple[Value, list[Value]]:
    """The N-d histogram of x's rows (x is (..., D)) and its D edge vectors; ``bins`` per
    dimension a count (edges from the range or the data) or an edge tensor."""
    dtype = str(c.b.spec(x).dtype)
    shape = c.b.spec(x).shape
    dims = int(shape[-1]) if shape else 1
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if shape else 1
    table = c.b.reshape(c.name(n) + ".rows", x, (rows, dims))
    edges: list[Value] = []
    flat: Value = _index(0)
    out_mask: Value = Const(np.asarray(False))
    stride = 1
    counts = [int(b) if not isinstance(b, (str, Const)) else int(c.b.spec(b).shape[0]) - 1 for b in bins]
    for d in reversed(range(dims)):
        column = _emit(c, n, f"col{d}", "gather", [table, _index(d)], {"axis": 1})
        if isinstance(bins[d], (str, Const)):
            e = _as(c, n, bins[d], dtype, f"edges{d}")
        else:
            lo, hi = _outer_edges(c, n, column, None if given is None else given[2 * d:2 * d + 2], 0.5, dtype, f"range{d}")
            e = _linspace(c, n, lo, hi, counts[d] + 1, dtype, f"edges{d}")
        edges.insert(0, e)
        pos = _edge_bins(c, n, column, e, counts[d], f"dim{d}")
        dropped = _emit(c, n, f"dim{d}.out", "equal", [pos, _index(counts[d])])
        term = pos if stride == 1 else _emit(c, n, f"dim{d}.stride", "mul", [pos, _index(stride)])
        flat = _emit(c, n, f"dim{d}.flat", "add", [flat, term])
        out_mask = _emit(c, n, f"dim{d}.any_out", "logical_or", [out_mask, dropped])
        stride *= counts[d]
    flat = _emit(c, n, "flat", "where", [out_mask, _index(stride), flat])
    hist = c.b.reshape(c.name(n) + ".hist", _count(c, n, flat, weight, stride, dtype, "hist"), tuple(counts))
    return (_density(c, n, hist, edges, dtype) if density else hist), edges


def _histogram(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value]:
    """histogram(x, bins (count or edge tensor), *, range, weight, density): (hist, bin_edges)."""
    bins = _arg(a, k, 1, "bins", 100)
    flat = c.b.reshape(c.name(n) + ".column", a[0], (int(np.prod(c.b.spec(a[0]).shape, dtype=np.int64)), 1))
    hist, edges = _histogram_dd(c, n, flat, [bins], k.get("range"), k.get("weight"), bool(k.get("density", False)))
    return [hist, bins if isinstance(bins, (str, Const)) else edges[0]]


def _histogramdd_bin_edges(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value]:
    """_histogramdd_bin_edges(x, bins, *, range, weight, density): the edge vectors alone."""
    return _histogram_dd(c, n, a[0], list(a[1]), k.get("range"), None, False)[1]


def _histogramdd(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """_histogramdd_from_bin_cts / _from_bin_tensors(x, bins, *, [range], weight, density)."""
    return _histogram_dd(c, n, a[0], list(a[1]), k.get("range"), k.get("weight"), bool(k.get("density", False)))[0]


HANDLERS: dict[str, Handler] = {
    "cummax": _cum_extreme("cummax"), "cummin": _cum_extreme("cummin"), "logcumsumexp": _logcumsumexp,
    "kthvalue": _kthvalue, "mode": _mode, "median": _median(False), "nanmedian": _median(True),
    "searchsorted": _searchsorted,
    "index_reduce": _index_reduce, "scatter_reduce": _scatter_reduce, "segment_reduce": _segment_reduce,
    "histc": _histc, "histogram": _histogram, "_histogramdd_bin_edges": _histogramdd_bin_edges,
    "_histogramdd_from_bin_cts": _histogramdd, "_histogramdd_from_bin_tensors": _histogramdd,
}
