"""int8 on cpu:0 at int8 speed: a CNN quantized with neurenix runs on a host runtime's integer kernels.

The same small CNN is compiled for cpu:0 three ways: fp32 (the fastest host runtime), int8 (the
fastest host runtime with int8 kernels, checked against the core's integer reference before it
is chosen, and verified on the calibration data), and int8 on the core's integer reference
itself (``runtime="numpy"``: what ``neurenix-core`` alone runs). Each line says which runtime
ran it, its time per call and its top-1 agreement with fp32.

    python examples/cpu_int8.py [--threads N]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core import nn


def cnn() -> nn.Module:
    nn.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).eval()


def per_call_ms(compiled: Any, x: np.ndarray, budget_s: float = 0.5) -> float:
    """Median time per call over a short budget, after a warm-up call."""
    compiled(x)
    times = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(times) < 5:
        t0 = time.perf_counter()
        compiled(x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def runtime_of(compiled: Any) -> str:
    """The runtime the placement report names for the model (the interpreter where none)."""
    line = compiled.placement.host_runtime
    return line.split("runtime ", 1)[1].split(" ", 1)[0] if "runtime " in line else "numpy"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="threads for every runtime (default: each runtime's own)")
    args = parser.parse_args()
    threads = {} if args.threads is None else {"threads": args.threads}

    model = cnn()
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((1, 3, 64, 64)).astype(np.float32) for _ in range(16)]
    tests = rng.standard_normal((64, 1, 3, 64, 64)).astype(np.float32)

    fp32 = nx.compile(model, device="cpu", **threads)
    want = np.array([np.argmax(fp32(x).numpy()) for x in tests])
    runs = {
        "fp32": fp32,
        "int8": nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False, **threads),
        "int8, runtime='numpy'": nx.compile(model, device="cpu", quantize="int8", calibration=calibration, runtime="numpy",
                                            progress=False, **threads),
    }
    base = per_call_ms(fp32, tests[0])
    for label, compiled in runs.items():
        ms = base if compiled is fp32 else per_call_ms(compiled, tests[0])
        top1 = np.mean([np.argmax(compiled(x).numpy()) == w for x, w in zip(tests, want)])
        print(f"{label:<22} runtime {runtime_of(compiled):<10} {ms:8.3f} ms  {ms / base:5.2f}x fp32  top-1 agreement {top1:.2f}")
    print(runs["int8"].summary)


if __name__ == "__main__":
    main()
