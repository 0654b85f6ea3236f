"""cpu:0 on the CPU runtimes installed: which ones there are, which one a model gets, and why.

    python examples/cpu_runtimes.py

Lists the host runtimes the installed plugins offer (OpenVINO's CPU device, LiteRT/XNNPACK,
XLA:CPU, PyTorch CPU; the NumPy interpreter is always there), compiles a small CNN for cpu:0
with the automatic choice (measured, cached in the state folder) and then on each runtime by
name, and checks every result against the float64 reference. Then a 1x16 MLP, a call of a few µs:
small float32 models are measured too, since a runtime's call (LiteRT's is about 1 µs) can cost
far less than the interpreter's steps. Last, the MLP on OpenVINO's runtime at three batch sizes,
which run on one compiled model (docs/cpu.md, "One compiled model for many input shapes").
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.compile import host_select
from neurenix_core.graph.reference.run import run_graph


def _cnn() -> nn.Module:
    nn.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def _ms(compiled: Any, x: np.ndarray, calls: int = 20) -> float:
    compiled(x)
    start = time.perf_counter()
    for _ in range(calls):
        compiled(x)
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    runtimes = host_select.host_runtimes()
    print(
        "host runtimes:",
        ", ".join(f"{k} ({v if isinstance(v, str) else v.version})" for k, v in runtimes.items()) or "none",
        "+ numpy (the interpreter)",
    )
    model = _cnn()
    x = np.random.default_rng(0).standard_normal((8, 3, 32, 32)).astype(np.float32)
    want = run_graph(model.to_graph(), x)

    auto = nx.compile(model, device="cpu")
    y = auto(x).numpy()
    print(f"auto: {auto.summary}")
    print(f"  max relative error vs float64: {np.abs(y - want).max() / np.abs(want).max():.1e}")
    for name in ["numpy", *sorted(k for k, v in runtimes.items() if not isinstance(v, str))]:
        compiled = nx.compile(model, device="cpu", runtime=name, threads=1)
        err = np.abs(compiled(x).numpy() - want).max() / np.abs(want).max()
        print(f"runtime={name!r:<11} {_ms(compiled, x):7.3f} ms per call (1 thread), max relative error {err:.1e}")

    nn.manual_seed(1)
    mlp = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
    v = nx.asarray(np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32))
    small = nx.compile(mlp, device="cpu")
    err = np.abs(small(v).numpy() - run_graph(mlp.to_graph(), v.numpy())).max()
    print(f"small model: {small.summary}")
    print(f"  {_ms(small, v, 2000) * 1e3:.1f} µs per call, against {_ms(nx.compile(mlp, device='cpu', runtime='numpy'), v, 2000) * 1e3:.1f} µs "
          f"on the interpreter; max abs error vs float64 {err:.1e}")

    if "openvino" in runtimes and not isinstance(runtimes["openvino"], str):
        _batches_on_one_model(mlp)


def _batches_on_one_model(mlp: nn.Module) -> None:
    """OpenVINO's runtime at three batch sizes: the three shapes lower to the same OpenVINO model
    up to the batch, so they run on one compiled model (one copy of the weights), the batch axis
    dynamic; each result still checked against float64."""
    compiled = nx.compile(mlp, device="cpu", runtime="openvino")
    graph = mlp.to_graph()
    for batch in (1, 4, 9):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        err = np.abs(compiled(x).numpy() - run_graph(graph, x)).max()
        print(f"openvino batch {batch}: max abs error vs float64 {err:.1e}")
    print(f"openvino shapes: {compiled.summary.split('; runtime')[-2].split('thread(s), ')[-1]}")


if __name__ == "__main__":
    main()
