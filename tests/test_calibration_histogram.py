"""``calibration_method="histogram"`` (``nx.compile``'s default): each activation's range of least
quantization error (``quantization/histogram.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import neurenix_core as nx
from neurenix_core.errors import QuantizationError
from neurenix_core.graph import quantization as Q
from neurenix_core.graph.ir.qmath import activation_params
from neurenix_core.graph.quantization.histogram import BINS, Histogram, best_range

RNG = np.random.default_rng(0)


def _mse(x: np.ndarray, lo: float, hi: float, bits: int = 8) -> float:
    """The mean squared error of quantizing ``x`` with the plan's parameters for ``[lo, hi]``."""
    p = activation_params(lo, hi, bits)
    scale, zp = float(p.scale[0]), int(p.zero_point[0])
    q = np.clip(np.round(x / scale) + zp, p.qmin, p.qmax)
    return float(np.mean(((q - zp) * scale - x) ** 2))


def _range(x: np.ndarray, bits: int = 8, parts: int = 4) -> tuple[float, float]:
    hist = Histogram()
    for part in np.array_split(x, parts):
        hist.add(part)
    return best_range(hist, bits)


@pytest.mark.parametrize("kind", ["normal", "laplace", "relu"])
def test_the_range_quantizes_with_less_error_than_min_max(kind: str) -> None:
    x = {"normal": RNG.standard_normal(200_000), "laplace": RNG.laplace(size=200_000),
         "relu": np.maximum(RNG.standard_normal(200_000), 0.0)}[kind]
    lo, hi = _range(x)
    assert lo <= 0.0 <= hi and x.min() <= lo and hi <= x.max()
    # A normal's 8-bit optimum clips near 4 sigma where 200,000 samples reach about 4.5: a tenth less
    # error at least; after a ReLU half the values are exact zeros whatever the range, so just less.
    bound = 1.0 if kind == "relu" else 0.9
    assert _mse(x, lo, hi) < bound * _mse(x, float(x.min()), float(x.max())), (lo, hi)


def test_a_tail_frequent_enough_to_matter_keeps_its_range() -> None:
    """Two outlier channels of a transformer's residual stream: 2% of the values at +-100 cost
    more clipped than rounded, so the range still reaches them (a percentile cut would not)."""
    x = np.concatenate([RNG.standard_normal(98_000), RNG.choice([-100.0, 100.0], 2_000)])
    lo, hi = _range(x)
    assert lo == pytest.approx(-100.0, rel=0.01) and hi == pytest.approx(100.0, rel=0.01)


def test_widening_batches_keep_every_count_and_the_exact_extremes() -> None:
    hist = Histogram()
    batches = [RNG.uniform(-1, 1, 5000), RNG.uniform(-3, 2, 5000), RNG.uniform(0, 7, 5000)]
    for b in batches:
        hist.add(b)
    every = np.concatenate(batches)
    assert hist.counts.sum() == every.size and hist.counts.shape == (BINS,)
    assert (hist.lo, hist.hi) == (every.min(), every.max())
    # Each earlier count moved into the bin of its old centre: the mass below 0 is within one wide bin of the truth.
    edges = np.linspace(hist.lo, hist.hi, BINS + 1)
    below = hist.counts[edges[1:] <= 0].sum()
    assert abs(below - np.sum(every < 0)) <= np.histogram(every, edges)[0].max()


def test_a_constant_value_quantizes_exactly() -> None:
    lo, hi = _range(np.full(1000, 3.0))
    assert (lo, hi) == (3.0, 3.0) and _mse(np.full(10, 3.0), lo, hi) < 1e-12


def test_calibrate_takes_the_method_and_names_the_choices() -> None:
    graph = nx.nn.Sequential(nx.nn.Linear(16, 32), nx.nn.ReLU(), nx.nn.Linear(32, 4)).to_graph()
    batches = [RNG.standard_normal((64, 16)).astype(np.float32) for _ in range(4)]
    plain, hist = (Q.calibrate(graph, batches, method=m, progress=False) for m in ("minmax", "histogram"))
    assert hist.method == "histogram" and set(hist.activations) == set(plain.activations)
    # Least error clips tails: no range is wider than min/max, and the input's (a normal) is narrower.
    assert all(hist.activations[k].scale[0] <= plain.activations[k].scale[0] * (1 + 1e-6) for k in plain.activations)
    assert hist.activations["input"].scale[0] < plain.activations["input"].scale[0]
    with pytest.raises(QuantizationError, match="'minmax', 'percentile', 'histogram'"):
        Q.calibrate(graph, batches, method="entropy", progress=False)


class _Norm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.norm(self.fc1(x)))


def _models() -> tuple[Any, Any, list[np.ndarray]]:
    torch.manual_seed(0)
    batches = [RNG.standard_normal((8, 16)).astype(np.float32) for _ in range(4)]
    cnn = nx.nn.from_torch(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval(),
                           (torch.from_numpy(batches[0]),))
    norm = nx.nn.from_torch(_Norm().eval(), (torch.from_numpy(batches[0]),))
    return cnn, norm, batches


def test_nx_compile_calibrates_by_least_error_unless_told_otherwise() -> None:
    cnn, norm, batches = _models()

    def method(model: Any, **kw: Any) -> str:
        compiled = nx.compile(model, device="cpu", quantize="int8", calibration=batches, progress=False, **kw)
        assert compiled.plan is not None
        return compiled.plan.method

    assert method(cnn) == "histogram" and method(norm) == "histogram" and method(norm, mixed_precision=False) == "histogram"
    assert method(cnn, calibration_method="minmax") == "minmax" and method(norm, calibration_method="percentile") == "percentile"
