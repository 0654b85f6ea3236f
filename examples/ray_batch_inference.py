"""Batch inference over a Ray cluster with nx.distributed.ray_inference.

    python examples/ray_batch_inference.py --rows 512 --actors 2            # a local Ray cluster
    RAY_ADDRESS=auto python examples/ray_batch_inference.py                  # an existing cluster

Trains nothing: builds a small MLP classifier from fixed weights saved to a .npz (the file every
actor loads, as nodes would from shared storage), runs it over a Ray Data dataset with one
compiled model per actor on each node's best device, prints where each actor ran, and checks
the predictions against the same model run in this process.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
from pathlib import Path

import numpy as np

import neurenix_core as nx
from neurenix_core import nn

FEATURES, CLASSES = 16, 4


def make_model(weights: str) -> nn.Module:
    """Module-level, so Ray can ship it to the actors (with functools.partial for the path)."""
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES), nn.Softmax(dim=-1))
    return model.load(weights)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default=None, help="e.g. npu:0; default: each node's best device")
    ap.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray cluster (ignored with RAY_ADDRESS)")
    args = ap.parse_args()
    import ray

    from neurenix_core.distributed.ray_inference import placements, predict

    folder = Path(tempfile.mkdtemp(prefix="nx-ray-"))
    nn.manual_seed(0)
    weights = str(folder / "mlp.npz")
    nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES), nn.Softmax(dim=-1)).save(weights)
    x = np.random.default_rng(0).standard_normal((args.rows, FEATURES)).astype(np.float32)

    if "RAY_ADDRESS" in os.environ:
        ray.init()
    else:
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        # Several blocks, so every actor gets work; "id" passes through to match rows afterwards.
        ds = ray.data.from_items([{"id": i, "data": row} for i, row in enumerate(x)],
                                 override_num_blocks=max(1, args.rows // args.batch_size))
        out = predict(ds, functools.partial(make_model, weights), device=args.device, batch_size=args.batch_size,
                      concurrency=args.actors).take_all()
    finally:
        ray.shutdown()
    for (node, actor, device), n in sorted(placements(out).items()):
        print(f"actor {actor} on node {node}: {device}, {n} rows")
    got = np.empty((args.rows, CLASSES), np.float32)
    for row in out:  # Ray Data may reorder blocks: place rows by their id
        got[int(row["id"])] = row["prediction"]
    want = np.asarray(make_model(weights)(nx.asarray(x)).numpy())
    err = float(np.abs(got - want).max()) if len(out) == args.rows else float("inf")
    print(f"{len(out)} rows, {len(placements(out))} actor(s); max |ray - single process| = {err:.2e}")
    if err > 1e-5:
        raise SystemExit(f"predictions differ from the single-process model by {err}")


if __name__ == "__main__":
    main()
