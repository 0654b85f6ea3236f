"""from_torch of the order statistics, scans, scatter / index / segment reductions and histograms
of issue #41 (opset family ``ordering``, importer ``torch_reductions``). Each op is imported as a
one-op module, run on cpu:0 and compared with eager PyTorch, tie indices and NaN included
(PyTorch's kernels decide them: quickselect for kthvalue, a stable order for median, its
std::sort for mode), at rtol 1e-5 unless a test says otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_eager import assert_outputs_match, run_both

from neurenix_core.graph import opset


def _check(fn: Callable[..., Any], *inputs: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """``fn`` imported with these inputs and run on cpu:0 gives eager PyTorch's outputs."""
    assert_outputs_match(*run_both(fn, *inputs), rtol=rtol, atol=atol, integer_width=True)


_NAN = float("nan")


def _ties(*shape: int, seed: int = 0) -> torch.Tensor:
    """Small integers as floats: many ties along every axis."""
    return torch.randint(0, 4, shape, generator=torch.Generator().manual_seed(seed)).float()


# ----------------------------------------------------------------------------- scans
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
def test_cummax_cummin_ties_nan_and_dims(fn: Callable[..., Any]) -> None:
    x = _ties(3, 9)
    x[1, 4], x[2, 0], x[2, 6] = _NAN, _NAN, _NAN  # a NaN is taken and kept until the next one
    _check(lambda t, s, e: (fn(t, 1), fn(t, -2), fn(s, 0), fn(e, 0)), x, torch.tensor(2.5), torch.zeros(0, 3))  # 0-d: itself, index 0


def test_logcumsumexp_is_stable_far_below_the_maximum() -> None:
    x = torch.tensor([[-1000.0, 0.0, -5.0, float("inf"), 3.0], [float("-inf"), -1.0, 2.0, 50.0, -80.0]])
    _check(lambda t, s: (torch.logcumsumexp(t, 1), torch.logcumsumexp(t, -2), torch.logcumsumexp(s, 0)), x, torch.tensor(1.5))


# ----------------------------------------------------------------------------- order statistics
def test_kthvalue_tie_index_is_quickselects() -> None:
    x = torch.tensor([[3.0, 1.0, 3.0, 1.0, 2.0, 1.0, 3.0]] * 2)
    x[1, 2] = _NAN  # NaN above every number
    _check(lambda t: [torch.kthvalue(t, k, 1) for k in range(1, 8)], x)
    _check(lambda a, b, s: (torch.kthvalue(a, 20, 0, keepdim=True), torch.kthvalue(b, 2, -1), torch.kthvalue(s, 1)),
           torch.ones(50), torch.randn(3, 4, 5), torch.tensor(0.5))


@pytest.mark.parametrize("fn", [torch.median, torch.nanmedian])
def test_median_lower_middle_stable_index_and_nan(fn: Callable[..., Any]) -> None:
    x = _ties(4, 6)
    x[1, 3] = _NAN
    x[2, :] = _NAN  # all NaN: nanmedian gives NaN at index 0
    x[3, 1], x[3, 4] = _NAN, _NAN
    # of all elements: the value only; integers: no NaN to look for
    _check(lambda t, s, i: (fn(t, 1), fn(t, -2, keepdim=True), fn(t), fn(s, 0), fn(i, 1)), x, torch.tensor(3.0), torch.randint(0, 3, (3, 5)))


def test_masked_median_goes_through_nanmedian() -> None:
    x, mask = torch.randn(5, 6), torch.rand(5, 6) > 0.4
    _check(lambda t, m: torch.masked.median(t, 1, mask=m), x, mask)


def test_mode_smallest_most_frequent_and_sort_order_index() -> None:
    _check(lambda t: torch.mode(t, 1), _ties(3, 7))
    _check(lambda t: torch.mode(t, -1, keepdim=True), _ties(2, 40, seed=1))  # past 16: PyTorch's introsort order
    x = _ties(2, 25, seed=2)
    x[0, ::3] = _NAN
    _check(lambda t: torch.mode(t, 1), x)
    _check(lambda t: torch.mode(t), torch.tensor(7.0))


def test_mode_reference_matches_pytorch_on_long_rows() -> None:
    x = _ties(6, 300, seed=3)
    value, index = torch.mode(x, 1)
    np.testing.assert_array_equal(opset.evaluate("mode", {"axis": 1}, [x.numpy()], {}), value.numpy())
    np.testing.assert_array_equal(opset.evaluate("mode", {"axis": 1, "output": 1}, [x.numpy()], {}), index.numpy())


def test_searchsorted_left_right_side_sorter_scalar_and_batched() -> None:
    seq = torch.tensor([0.0, 1.0, 1.0, 2.0, 5.0, _NAN])
    values = torch.tensor([[1.0, -3.0, 5.0], [_NAN, 2.0, 9.0]])
    # a number searched: a 0-d result
    _check(lambda s, v: (torch.searchsorted(s, v), torch.searchsorted(s, v, right=True), torch.searchsorted(s, 1.0),
                         torch.searchsorted(s, v, side="right", out_int32=True)), seq, values)
    unsorted = torch.tensor([5.0, 0.0, 2.0, 1.0])
    _check(lambda s, v, o: torch.searchsorted(s, v, sorter=o), unsorted, values, torch.argsort(unsorted))
    rows = torch.randn(3, 8).sort(1).values
    _check(lambda s, v, e: (torch.searchsorted(s, v), torch.searchsorted(e, v)), rows, torch.randn(3, 4), torch.zeros(0))


def test_isin_through_sort_and_searchsorted() -> None:
    x, test = torch.randint(0, 10, (6,)).float(), torch.randint(0, 10, (30,)).float()
    _check(lambda a, b: (torch.isin(a, b), torch.isin(a, b, invert=True)), x, test)


# ----------------------------------------------------------------------------- scatter / index / segment reductions
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_mean(include_self: bool) -> None:
    x, src = torch.randn(6, 4), torch.randn(5, 4)
    index = torch.tensor([[0, 1, 0, 5], [2, 2, 0, 1], [0, 3, 3, 1], [5, 5, 5, 5], [1, 0, 2, 2]])
    _check(lambda a, i, s: a.scatter_reduce(0, i, s, "mean", include_self=include_self), x, index, src)
    _check(lambda a, i, s: a.scatter_reduce(-1, i[:3, :2] % 4, s, "mean", include_self=include_self), x, index, src)
    ints = torch.randint(-9, 9, (6, 4))
    _check(lambda a, i, s: a.scatter_reduce(0, i, s, "mean", include_self=include_self), ints, index, torch.randint(-9, 9, (5, 4)))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_of_a_0d_tensor(reduce: str, include_self: bool) -> None:
    _check(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self),
           torch.tensor(1.5), torch.tensor(0), torch.tensor(-2.0))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce: str, include_self: bool) -> None:
    x, src, index = torch.randn(4, 5), torch.randn(4, 7), torch.tensor([0, 4, 0, 2, 2, 0, 4])
    _check(lambda a, i, s: a.index_reduce(1, i, s, reduce, include_self=include_self), x, index, src)
    _check(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=include_self),
           torch.tensor(2.0), torch.tensor([0]), torch.tensor(-3.0))  # 0-d


@pytest.mark.parametrize("reduce", ["max", "min", "mean", "sum", "prod"])
def test_segment_reduce_lengths_and_offsets(reduce: str) -> None:
    data = torch.randn(7, 3)
    lengths, offsets = torch.tensor([2, 0, 4, 1]), torch.tensor([0, 2, 2, 6, 7])
    batched = torch.tensor([[3, 0], [1, 1]])  # axis 1: one row of lengths per leading index
    _check(lambda d, n, o, e, b: (torch.segment_reduce(d, reduce, lengths=n), torch.segment_reduce(d, reduce, offsets=o, initial=0.5),
                                  torch.segment_reduce(e, reduce, lengths=b, axis=1, unsafe=True)),
           data, lengths, offsets, torch.randn(2, 3), batched)


# ----------------------------------------------------------------------------- histograms
def test_histc_range_data_range_and_out_of_range() -> None:
    x = torch.tensor([-1.0, 0.0, 0.2, 0.5, 1.0, 1.5, _NAN, 0.999])
    # min == max: the data's range (an empty one widened by 1)
    _check(lambda t, r, f, e, s: (torch.histc(t, bins=4, min=0, max=1), torch.histc(r, bins=7), torch.histc(f, bins=3),
                                  torch.histc(e, bins=3, min=2, max=2), torch.histc(s, bins=1, min=0, max=10)),
           x, torch.randn(40), torch.full((5,), 2.0), torch.zeros(0), torch.tensor(4.0))


def test_histogram_bin_count_edges_weight_density() -> None:
    x, w = torch.randn(30), torch.rand(30)
    # an empty range is widened by 0.5
    _check(lambda t, v, b, f, s: (torch.histogram(t, 6), torch.histogram(t, 5, range=(-1.0, 1.5)),
                                  torch.histogram(t, 4, weight=v, density=True), torch.histogram(t, b), torch.histogram(f, 3),
                                  torch.histogram(s, 2)),
           x, w, torch.tensor([-2.0, -0.5, 0.0, 0.1, 3.0]), torch.full((4,), 1.0), torch.tensor(0.25))


def test_histogramdd_counts_edges_and_tensors() -> None:
    x, w = torch.randn(20, 3), torch.rand(20)
    _check(lambda t, v: torch.histogramdd(t, [2, 3, 4]) + torch.histogramdd(t, [3, 3, 2], range=[-1.0, 1.0, -2.0, 2.0, 0.0, 1.0], weight=v, density=True), x, w)
    edges = [torch.tensor([-3.0, 0.0, 3.0]), torch.tensor([-1.0, 0.5, 1.0]), torch.tensor([-2.0, 2.0])]
    _check(lambda t, a, b, c: torch.histogramdd(t, [a, b, c]), x, *edges)
