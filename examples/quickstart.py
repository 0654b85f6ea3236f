"""Quickstart: see what neurenix found, then run real work on the best device.

    python examples/quickstart.py

Runs on whatever `import neurenix_core` selected (the CPU backend when nothing else is
installed); set NEURENIX_DEVICE=npu:0 (or tpu:0, cuda:0, ...) to choose.
"""

from __future__ import annotations

import numpy as np

import neurenix_core as nx


def main() -> None:
    device = nx.default_device()
    print(f"default device: {device} (backend {device.backend_name}, emulated={device.emulated})")
    print("devices:", ", ".join(str(d) for d in nx.devices()))

    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((256, 128), dtype=np.float32)
    b_host = rng.standard_normal((128, 64), dtype=np.float32)
    a, b = nx.asarray(a_host), nx.asarray(b_host)
    c = nx.matmul(a, b)
    err = float(np.max(np.abs(c.numpy() - a_host.astype(np.float64) @ b_host.astype(np.float64))))
    print(f"matmul {a.shape} @ {b.shape} on {c.device}: max |error| vs float64 = {err:.2e}")
    print("memory:", nx.memory_stats(device).as_dict())
    _run_model(device, rng)


def _run_model(device: nx.Device, rng: np.random.Generator) -> None:
    from neurenix_core import nn
    from neurenix_core.graph.reference import run_graph

    # ~35 MFLOPs per call: large enough that, on cpu:0, the fastest installed CPU runtime is
    # measured and chosen (the summary says which and why; small graphs stay in NumPy).
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 4))
    x = rng.standard_normal((64, 64), dtype=np.float32)
    compiled = nx.compile(model, device=device)
    y = compiled(nx.asarray(x, device=device))
    reference = run_graph(compiled.graph, x)  # float64 NumPy interpretation of the same graph
    err = float(np.max(np.abs(y.numpy() - reference)) / np.max(np.abs(reference)))
    print(f"compiled MLP on {y.device}: output {y.shape}, max relative error vs float64 = {err:.2e}")
    print(f"  {compiled.summary}")


if __name__ == "__main__":
    main()
