"""``method="histogram"`` calibration: each value's range chosen to minimize its quantization error.

Min/max calibration spends the int8 grid on the extremes of the calibration data: a value whose
bulk lies within a few units and whose tail reaches ten times further rounds that bulk in steps ten
times coarser than it needs. A histogram of each value over every calibration batch gives the
mean squared error of quantizing it to any range ``[a, b]``:

    E(a, b) = sum_{x < a} (a - x)^2 + sum_{x > b} (x - b)^2 + n_inside * step^2 / 12

(clipping, plus the rounding of a uniform step ``(b - a) / (2^bits - 1)``); the range with the least
error is the plan's (as PyTorch's ``HistogramObserver`` and TensorRT's calibrators choose theirs).
A tail frequent enough to matter (the outlier channels of a transformer's residual stream) costs
more clipped than rounded and keeps its range; a rare one is clipped.

The histogram follows the value's running min/max: when a batch widens the range, the counts so
far move into the wider bins (each old bin's count to the new bin of its centre: at most half a
new bin of smear, and the extremes are exact).
"""

from __future__ import annotations

from typing import Final

import numpy as np

__all__ = ["BINS", "Histogram", "best_range"]

#: Bins per value: fine enough that the rounding step of an 8-bit range spans several bins.
BINS: Final = 2048
#: Candidate cut points per side of the search (every BINS // CUTS bins).
CUTS: Final = 256


class Histogram:
    """One value's counts over ``[lo, hi]`` in ``BINS`` equal bins, widened as batches arrive."""

    __slots__ = ("counts", "hi", "lo")

    def __init__(self) -> None:
        self.counts = np.zeros(BINS, np.float64)
        self.lo = np.inf
        self.hi = -np.inf

    def add(self, flat: np.ndarray) -> None:
        lo, hi = min(self.lo, float(flat.min())), max(self.hi, float(flat.max()))
        if hi > lo and (lo, hi) != (self.lo, self.hi) and self.counts.any():
            old = self.edges()
            self.counts = np.histogram((old[:-1] + old[1:]) / 2, BINS, (lo, hi), weights=self.counts)[0]
        self.lo, self.hi = lo, hi
        if hi > lo:
            self.counts = self.counts + np.histogram(flat, BINS, (lo, hi))[0]
        else:  # a constant so far counts in the first bin: best_range gives it its exact range
            self.counts[0] += flat.size

    def edges(self) -> np.ndarray:
        return np.linspace(self.lo, self.hi, BINS + 1)


def best_range(hist: Histogram, bits: int) -> tuple[float, float]:
    """The range ``[a, b]`` (containing 0, as the plan's parameters do) with the least expected
    squared quantization error over the histogram's values; a constant value's own range (the
    plan gives an empty or vanishing range scale 1, as for min/max)."""
    if hist.hi <= hist.lo:
        return hist.lo, hist.hi
    edges = hist.edges()
    centres, c = (edges[:-1] + edges[1:]) / 2, hist.counts
    # Prefix sums over bins [0, k): count, sum x, sum x^2 (the clipped-below part of a cut at edge k).
    pc, ps, pq = (np.concatenate([[0.0], np.cumsum(v)]) for v in (c, c * centres, c * centres**2))
    cuts = np.unique(np.linspace(0, BINS, CUTS + 1).round().astype(int))
    # A lower cut above 0 (or an upper one below 0) is no cut: the range always holds 0.
    low = cuts[(edges[cuts] <= 0) | (cuts == 0)]
    high = cuts[(edges[cuts] >= 0) | (cuts == BINS)]
    a = np.minimum(edges[low], 0.0)[:, None]
    b = np.maximum(edges[high], 0.0)[None, :]
    i, j = low[:, None], high[None, :]
    below = a**2 * pc[i] - 2 * a * ps[i] + pq[i]
    above = b**2 * (pc[-1] - pc[j]) - 2 * b * (ps[-1] - ps[j]) + (pq[-1] - pq[j])
    step = (b - a) / (2**bits - 1)
    error = below + above + np.maximum(pc[j] - pc[i], 0.0) * step**2 / 12
    error = np.where(j > i, error, np.inf)
    k = np.unravel_index(int(np.argmin(error)), error.shape)
    return float(a[k[0], 0]), float(b[0, k[1]])
