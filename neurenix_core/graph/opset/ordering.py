"""Order statistics and ordered scans: cumulative extrema, medians and modes, sorted search, histograms.

The ops here are the ones no exact, memory-linear composition of other opset ops gives (the
importer writes medians, histograms and segment or index reductions with ``topk``, ``cumsum``,
``gather_elements`` and ``scatter_elements``). Their references follow PyTorch's CPU kernels step
for step where PyTorch's result depends on its algorithm and not only on the math:

* ``cummax`` / ``cummin``: a NaN is taken, and kept until the next NaN (whose index it takes);
  ties take the later index.
* ``kthvalue``: the value is the k-th smallest with NaN above everything; its index, where the
  value occurs more than once in the row, is the one PyTorch's quickselect (median-of-three
  pivot, ``SortingUtils.h``) leaves at position k-1.
* ``mode``: the smallest of the most frequent values; its index is the one PyTorch's
  ``std::sort`` of (value, index) pairs (libstdc++'s introsort, which is not stable beyond 16
  elements) puts last in the value's run.
* ``searchsorted``: PyTorch's binary search (``!(mid >= v)`` / ``!(mid > v)``), so NaN values
  and sequences behave as they do there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from neurenix_core.graph.opset.schema import REQUIRED, Arrays, Attrs, Params, Shape, _axis, _def, _is_float

__all__ = ["nth_of_equivalents"]

Less = Callable[[float, float], bool]


def _output_rule(a: Attrs, dtype: str) -> str:
    """Output 0 (values) keeps the dtype, output 1 (indices) is int64."""
    if a["output"] not in (0, 1):
        raise ValueError(f"has outputs 0 (values) and 1 (indices), got {a['output']}")
    return dtype if a["output"] == 0 else "int64"


def _reduced(shape: Shape, axis: int, keep: bool) -> Shape:
    return tuple(1 if i == axis else n for i, n in enumerate(shape)) if keep else shape[:axis] + shape[axis + 1:]


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` with ``axis`` last, flattened to (rows, length)."""
    moved = np.moveaxis(x, axis, -1)
    return moved.reshape(-1, x.shape[axis])


def _unrows(rows: np.ndarray, shape: Shape, axis: int, keep: bool) -> np.ndarray:
    """One value per row back to the reduced shape."""
    out = rows.reshape(shape[:axis] + shape[axis + 1:])
    return np.expand_dims(out, axis) if keep else out


# ----------------------------------------------------------------------------- cummax / cummin
def _scan_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _axis(int(a["axis"]), len(s[0]))
    if d[0] == "bool":
        raise ValueError("takes a numeric input, got bool")
    return s[0], _output_rule(a, d[0])


def _cum_extreme(better: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Attrs, Arrays, Params], np.ndarray]:
    """PyTorch's cummax_cummin_helper: x replaces the running value where x is NaN, or where
    the running value is not NaN and ``better(x, running)`` (>= or <=: ties take the later index)."""

    def ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
        data = x[0]
        axis = _axis(int(a["axis"]), data.ndim)
        moved = np.moveaxis(data, axis, 0)
        values, indices = np.empty_like(moved), np.zeros(moved.shape, np.int64)
        if moved.shape[0]:
            run, at = moved[0].copy(), np.zeros(moved.shape[1:], np.int64)
            for i, current in enumerate(moved):
                take = np.isnan(current) | (~np.isnan(run) & better(current, run)) if data.dtype.kind == "f" else better(current, run)
                run, at = np.where(take, current, run), np.where(take, i, at)
                values[i], indices[i] = run, at
        out = values if a["output"] == 0 else indices
        return np.ascontiguousarray(np.moveaxis(out, 0, axis))

    return ref


for _name, _better, _word in (("cummax", np.greater_equal, "maximum"), ("cummin", np.less_equal, "minimum")):
    _def(_name, "scan", f"running {_word} along axis and its index (torch.{_name}): output 0 values, 1 int64 indices; a NaN "
         "is taken and propagates, ties take the later index", ("x",), _scan_rule, _cum_extreme(_better),
         attrs={"axis": REQUIRED, "output": 0})


def _logcumsumexp_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _axis(int(a["axis"]), len(s[0]))
    if not _is_float(d[0]):
        raise ValueError(f"takes a floating-point input, got {d[0]}")
    return s[0], d[0]


def _logcumsumexp_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    # Each step is log(exp(running) + exp(x)) computed stably, as PyTorch's scan does: a
    # running maximum shift would underflow elements far below a later maximum.
    data = x[0]
    axis = _axis(int(a["axis"]), data.ndim)
    wide = data.astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf + inf inside logaddexp of infinities: NumPy's result is the right one
        out = np.logaddexp.accumulate(wide, axis=axis) if data.size else wide
    return out.astype(data.dtype)


_def("logcumsumexp", "scan", "running log(sum(exp(x))) along axis, each step computed stably (torch.logcumsumexp)", ("x",),
     _logcumsumexp_rule, _logcumsumexp_ref, attrs={"axis": REQUIRED})


# ----------------------------------------------------------------------------- kthvalue
def _kth_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    axis = _axis(int(a["axis"]), len(s[0]))
    if not 1 <= int(a["k"]) <= s[0][axis]:
        raise ValueError(f"kthvalue k={a['k']} is out of range for axis {axis} of size {s[0][axis]}")
    return _reduced(s[0], axis, bool(a["keepdims"])), _output_rule(a, d[0])


def _gt_or_nan(x: float, y: float) -> bool:
    """PyTorch's kthvalue order: NaN above every number."""
    return (math.isnan(x) and not math.isnan(y)) or x > y


def _quickselect(values: list[float], k: int) -> int:
    """The original index PyTorch's quick_select_template leaves at position k (median-of-three
    pivot, Hoare partition), with the same swaps."""
    vals, idx = list(values), list(range(len(values)))

    def swap(i: int, j: int) -> None:
        vals[i], vals[j] = vals[j], vals[i]
        idx[i], idx[j] = idx[j], idx[i]

    lo, hi = 0, len(vals) - 1
    while hi > lo:
        if hi == lo + 1:
            if _gt_or_nan(vals[lo], vals[hi]):
                swap(lo, hi)
            break
        swap(lo + (hi - lo) // 2, lo + 1)
        if _gt_or_nan(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if _gt_or_nan(vals[lo], vals[hi]):
            swap(lo, hi)
        if _gt_or_nan(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j, pivot = lo + 1, hi, vals[lo]
        while True:
            i += 1
            while _gt_or_nan(pivot, vals[i]):
                i += 1
            j -= 1
            while _gt_or_nan(vals[j], pivot):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1
    return idx[k]


def _kth_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    data, k = x[0], int(a["k"])
    axis = _axis(int(a["axis"]), data.ndim)
    rows = _rows(data, axis)
    kth = np.sort(rows, axis=1)[:, k - 1]  # NumPy sorts NaN last, as PyTorch orders it here
    if a["output"] == 0:
        return _unrows(kth, data.shape, axis, bool(a["keepdims"]))
    same = (rows == kth[:, None]) | (np.isnan(rows) & np.isnan(kth)[:, None]) if data.dtype.kind == "f" else rows == kth[:, None]
    index = np.argmax(same, axis=1).astype(np.int64)
    for r in np.flatnonzero(same.sum(axis=1) > 1):  # a tied value: the copy PyTorch's quickselect picks
        index[r] = _quickselect(rows[r].tolist(), k - 1)
    return _unrows(index, data.shape, axis, bool(a["keepdims"]))


_def("kthvalue", "indexing", "the k-th smallest value along axis (NaN above every number) and its index, as torch.kthvalue "
     "(a tied value's index is the one PyTorch's quickselect returns); output 0 values, 1 int64 indices", ("x",),
     _kth_rule, _kth_ref, attrs={"k": REQUIRED, "axis": -1, "keepdims": False, "output": 0})


# ----------------------------------------------------------------------------- mode
def _mode_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    axis = _axis(int(a["axis"]), len(s[0]))
    if s[0][axis] == 0:
        raise ValueError(f"mode of an empty axis {axis}")
    return _reduced(s[0], axis, bool(a["keepdims"])), _output_rule(a, d[0])


def _insertion_sort(keys: list[float], order: list[int], first: int, last: int, less: Less, guarded: bool) -> None:
    """libstdc++'s __insertion_sort (guarded) / __unguarded_insertion_sort over order[first:last]."""
    for i in range(first + 1 if guarded else first, last):
        item = order[i]
        if guarded and less(keys[item], keys[order[first]]):
            order[first + 1:i + 1] = order[first:i]
            order[first] = item
            continue
        j = i
        while j > 0 and less(keys[item], keys[order[j - 1]]):  # j > 0: C++ relies on a sentinel there
            order[j] = order[j - 1]
            j -= 1
        order[j] = item


def _adjust_heap(keys: list[float], order: list[int], first: int, hole: int, length: int, item: int, less: Less) -> None:
    """libstdc++'s __adjust_heap then __push_heap (a max-heap on ``less``)."""
    top, child = hole, hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if less(keys[order[first + child]], keys[order[first + child - 1]]):
            child -= 1
        order[first + hole] = order[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        order[first + hole] = order[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and less(keys[order[first + parent]], keys[item]):
        order[first + hole] = order[first + parent]
        hole, parent = parent, (parent - 1) // 2
    order[first + hole] = item


def _heap_sort(keys: list[float], order: list[int], first: int, last: int, less: Less) -> None:
    """libstdc++'s __partial_sort(first, last, last): make_heap, then pop_heap to the end."""
    length = last - first
    for parent in range((length - 2) // 2, -1, -1):
        _adjust_heap(keys, order, first, parent, length, order[first + parent], less)
    while last - first > 1:
        last -= 1
        item = order[last]
        order[last] = order[first]
        _adjust_heap(keys, order, first, 0, last - first, item, less)


def _partition(keys: list[float], order: list[int], first: int, last: int, less: Less) -> int:
    """libstdc++'s __unguarded_partition_pivot: median of three moved to ``first``, then Hoare."""
    a, b, c = first + 1, first + (last - first) // 2, last - 1
    ka, kb, kc = keys[order[a]], keys[order[b]], keys[order[c]]
    if less(ka, kb):
        pick = b if less(kb, kc) else c if less(ka, kc) else a
    else:
        pick = a if less(ka, kc) else c if less(kb, kc) else b
    order[first], order[pick] = order[pick], order[first]
    pivot, lo, hi = keys[order[first]], first + 1, last
    while True:
        while lo < last and less(keys[order[lo]], pivot):  # the bound guards what C++ leaves to the sentinel
            lo += 1
        hi -= 1
        while hi > first and less(pivot, keys[order[hi]]):
            hi -= 1
        if lo >= hi:
            return lo
        order[lo], order[hi] = order[hi], order[lo]
        lo += 1


def _std_sort(keys: list[float]) -> list[int]:
    """The permutation libstdc++'s std::sort (introsort, threshold 16) gives ``keys`` with ``<``:
    PyTorch's mode sorts (value, index) pairs by value with it, so ties come out in its order."""
    order = list(range(len(keys)))

    def less(x: float, y: float) -> bool:
        return x < y

    def loop(first: int, last: int, depth: int) -> None:
        while last - first > 16:
            if depth == 0:
                _heap_sort(keys, order, first, last, less)
                return
            depth -= 1
            cut = _partition(keys, order, first, last, less)
            loop(cut, last, depth)
            last = cut

    n = len(keys)
    if n:
        loop(0, n, 2 * (n.bit_length() - 1))
        if n > 16:
            _insertion_sort(keys, order, 0, 16, less, True)
            _insertion_sort(keys, order, 16, n, less, False)
        else:
            _insertion_sort(keys, order, 0, n, less, True)
    return order


def nth_of_equivalents(size: int) -> int:
    """The index libstdc++'s std::nth_element(first, first, last) leaves first when no element
    orders before another: PyTorch's nanmedian index for a row of ``size`` NaNs (its comparator
    finds every two NaNs equivalent). Introselect's partitions only ever swap, so the answer
    depends on the size alone."""
    order, keys = list(range(size)), [0.0] * size
    first, last = 0, size
    while last - first > 3:  # the depth limit (2 log2 n) is never reached: each cut halves the range
        last = _partition(keys, order, first, last, lambda x, y: False)
    return order[0] if size else 0


def _row_mode(keys: list[float]) -> tuple[float, int]:
    """PyTorch's mode_kernel on one row: the first longest run (by !=) of the sorted values."""
    order = _std_sort(keys)
    best, best_at, best_count, count = keys[order[0]], order[0], 0, 0
    for i, at in enumerate(order):
        count += 1
        if i == len(order) - 1 or keys[at] != keys[order[i + 1]]:
            if count > best_count:
                best, best_at, best_count = keys[at], at, count
            count = 0
    return best, best_at


def _mode_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    data = x[0]
    axis = _axis(int(a["axis"]), data.ndim)
    rows = _rows(data, axis)
    picked = [_row_mode(row.tolist()) for row in rows]
    if a["output"] == 0:
        out = np.asarray([v for v, _ in picked], dtype=data.dtype).reshape(-1)
    else:
        out = np.asarray([i for _, i in picked], dtype=np.int64).reshape(-1)
    return _unrows(out, data.shape, axis, bool(a["keepdims"]))


_def("mode", "indexing", "the most frequent value along axis (the smallest of equally frequent ones) and an index of it, "
     "as torch.mode (the index its sort of the row leaves last in the value's run); output 0 values, 1 int64 indices",
     ("x",), _mode_rule, _mode_ref, attrs={"axis": -1, "keepdims": False, "output": 0})


# ----------------------------------------------------------------------------- searchsorted
def _search_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    seq, values = s[0], s[1]
    if not seq:
        raise ValueError("searchsorted's sorted_sequence must have at least one axis")
    if len(seq) > 1 and (len(values) != len(seq) or values[:-1] != seq[:-1]):
        raise ValueError(f"searchsorted: an N-d sorted_sequence {seq} needs values with the same leading axes, got {values}")
    if len(s) > 2 and s[2] != seq:
        raise ValueError(f"searchsorted's sorter {s[2]} must have the sorted_sequence's shape {seq}")
    if len(d) > 2 and d[2] not in ("int32", "int64"):
        raise ValueError(f"searchsorted's sorter must be int32/int64, got {d[2]}")
    if a["dtype"] not in ("int32", "int64"):
        raise ValueError(f"searchsorted's dtype must be int32 or int64, got {a['dtype']}")
    if d[0] == "bool" or d[1] == "bool":
        raise ValueError("searchsorted takes numeric values")
    return values, a["dtype"]


def _search_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    seq, values = x[0], x[1]
    n = seq.shape[-1]
    table = seq.reshape(1, n) if seq.ndim == 1 else seq.reshape(-1, n)
    queries = values.reshape(table.shape[0], -1) if seq.ndim > 1 else values.reshape(1, -1)
    if len(x) > 2 and x[2] is not None:
        table = np.take_along_axis(table, x[2].reshape(table.shape).astype(np.int64), axis=1)
    lo = np.zeros(queries.shape, np.int64)
    hi = np.full(queries.shape, n, np.int64)
    with np.errstate(invalid="ignore"):
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = lo + ((hi - lo) >> 1)
            probe = np.take_along_axis(table, np.minimum(mid, max(n - 1, 0)), axis=1)
            # PyTorch's lower / upper bound: move right while !(probe >= v) / !(probe > v)
            right = ~(probe > queries) if a["right"] else ~(probe >= queries)
            lo = np.where(active & right, mid + 1, lo)
            hi = np.where(active & ~right, mid, hi)
    return lo.reshape(values.shape).astype(a["dtype"])


_def("searchsorted", "indexing", "for each value, the insertion index into sorted_sequence's last axis (1-D: one sequence for "
     "all values; N-d: one per leading index) keeping it sorted: the first position of an equal element, or past the last "
     "one with right; sorter (optional) sorts the sequence's last axis; PyTorch's binary search (torch.searchsorted)",
     ("sorted_sequence", "values", "sorter?"), _search_rule, _search_ref, attrs={"right": False, "dtype": "int64"})
