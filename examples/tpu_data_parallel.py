"""Whole-model fusion, batch buckets and data parallelism over every local TPU core.

    NEURENIX_EMULATE=tpu XLA_FLAGS=--xla_force_host_platform_device_count=4 python examples/tpu_data_parallel.py

On a TPU v4-8 the same script shards each batch over the 4 chips from one call. Emulated, the 4
"devices" are JAX CPU devices, so this shows correctness and compile counts, not speed.
"""

from __future__ import annotations

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.reference.run import run_graph


def main() -> int:
    nn.init.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    devices = nx.devices("tpu")
    print(f"{len(devices)} TPU device(s): {', '.join(map(str, devices))}")
    rng = np.random.default_rng(0)

    # One compile per bucket, not per batch size: batches are padded up to 8 or 32.
    bucketed = nx.compile(model, device="tpu:0", precision="fp32", batch_buckets=(8, 32))
    for batch in (1, 5, 8, 13, 32):
        x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
        out = bucketed(x)
        err = np.abs(out.numpy() - run_graph(model.to_graph(x.shape), x)).max()
        print(f"batch {batch:2d} -> {out.shape} on {out.device}, max |error| vs float64 = {err:.1e}")
        assert err < 1e-4
    natives = len(bucketed.compiled_shapes)
    print(f"{natives} batch sizes served; summary of the first: {bucketed.summary.split('; input')[0]}")

    # Data parallel: the batch is split over every device, the result comes back to tpu:0.
    sharded = nx.compile(model, device="tpu:0", precision="fp32", data_parallel=True)
    single = nx.compile(model, device="tpu:0", precision="fp32")
    x = rng.standard_normal((12, 3, 32, 32)).astype(np.float32)
    a, b = sharded(x), single(x)
    diff = np.abs(a.numpy() - b.numpy()).max()
    print(f"data parallel over {len(devices)} device(s) vs one device: max |diff| = {diff:.1e}")
    print(f"summary: {sharded.summary}")
    assert diff < 1e-5
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
