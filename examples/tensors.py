"""Tensors and the array-API namespace on any device: dispatch, transfers, memory, fallback.

    python examples/tensors.py                 # every available device
    NEURENIX_EMULATE=npu,tpu python examples/tensors.py

For each device it computes with the standard namespace, checks the result against float64
NumPy, moves data to the host and back, shows the memory accounting and a refused allocation,
and what ran through the fallback policy. The last lines are a JSON summary (used by the test).
"""

from __future__ import annotations

import gc
import json
import sys

import numpy as np

import neurenix_core as nx


def exercise(device: nx.Device) -> dict[str, object]:
    rng = np.random.default_rng(0)
    a_host = rng.uniform(-1, 1, (64, 32)).astype(np.float32)
    b_host = rng.uniform(-1, 1, (32, 16)).astype(np.float32)
    a = nx.asarray(a_host, device=device)  # nx.Tensor(a_host, device=device) is the same
    b = nx.asarray(b_host, device=device)

    # Array-API code: the same lines run on every backend.
    c = nx.tanh(a @ b) + 0.5 * nx.mean(a, axis=0, keepdims=True)[:, :16]
    ref = np.tanh(a_host.astype(np.float64) @ b_host) + 0.5 * a_host.astype(np.float64).mean(axis=0, keepdims=True)[:, :16]
    err = float(np.max(np.abs(c.numpy() - ref)))

    top = nx.sort(nx.reshape(c, (-1,)), descending=True)[:3]
    host_copy = c.to("cpu")  # a real copy; c is untouched
    host_copy[0, 0] = 1e6
    assert float(c[0, 0]) != 1e6

    gc.collect()
    stats = nx.memory_stats(device)
    nx.set_memory_limit(device, stats.in_use + 1024)
    try:
        nx.zeros((1024, 1024), device=device)
        refused = ""
    except nx.OutOfMemoryError as exc:
        refused = str(exc).split(".")[0]
    finally:
        nx.set_memory_limit(device, None)

    print(f"{device} ({nx.backend(device).name}{', emulated' if device.emulated else ''}):")
    print(f"  tanh(a @ b) + mean: shape {c.shape} dtype {c.dtype}, max |error| vs float64 = {err:.2e}")
    print(f"  top-3 values {np.round(top.numpy(), 4).tolist()} on {top.device}")
    print(f"  memory: {stats.in_use} bytes in use, peak {stats.peak}; over a limit -> {refused}")
    return {"device": str(device), "error": err, "result_device": str(c.device), "refused": bool(refused), "in_use": stats.in_use}


def main() -> int:
    nx.reset_fallback_stats()
    summary = []
    with nx.fallback_policy("allow"):  # graph backends run some ops on the host: allowed, counted
        for device in nx.devices():
            summary.append(exercise(device))
    print("fallbacks (backend -> op -> count):", nx.fallback_stats())
    other = nx.devices()[-1]
    try:
        if other == nx.Device("cpu:0"):
            nx.ones(2) @ nx.ones(3)  # only the CPU: show a shape error instead
        else:
            nx.ones(2, device="cpu") + nx.ones(2, device=other)
    except (nx.DeviceMismatchError, nx.ShapeError) as exc:
        print(f"refused as expected: {type(exc).__name__}: {exc}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
