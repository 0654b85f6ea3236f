"""cpu:0's NumPy interpreter on more than one core: ``threads=`` with ``runtime="numpy"``.

    python examples/interpreter_threads.py

Compiles a small CNN (convolution + batch norm + ReLU, a depthwise block, pooling, a linear
head) for cpu:0 on the interpreter (what runs with neurenix-core alone) at 1 and 2 threads,
prints each compiled model's summary (the thread count read back) and time per call, and
checks both against the float64 reference and against each other. With ``threads=N`` the
interpreter splits each large step (convolution sample groups, depthwise blocks, pooling,
elementwise passes, linear rows) across N cores and holds BLAS at one thread per shard; the
timings are for people (a shared machine makes them noisy), nothing asserts on them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.reference.run import run_graph


def _cnn() -> nn.Module:
    nn.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 1),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1, groups=64),  # depthwise: runs channels-last
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def _ms(compiled: Any, x: np.ndarray, calls: int = 5) -> float:
    compiled(x)
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        compiled(x)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    model = _cnn().eval()
    x = np.random.default_rng(0).standard_normal((16, 3, 64, 64)).astype(np.float32)
    want = run_graph(model.to_graph(), x)
    results = {}
    for threads in (1, 2):
        compiled = nx.compile(model, device="cpu", runtime="numpy", threads=threads)
        y = compiled(x).numpy()
        results[threads] = y
        err = np.abs(y - want).max() / np.abs(want).max()
        print(f"threads={threads}: {compiled.summary}")
        print(f"  {_ms(compiled, x):.1f} ms per call (best of 5), max relative error vs float64 {err:.1e}")
    apart = np.abs(results[2] - results[1]).max() / np.abs(results[1]).max()
    print(f"threads=2 vs threads=1: max relative difference {apart:.1e}")


if __name__ == "__main__":
    main()
