"""Data-parallel training with nx.distributed, launched by torchrun.

    torchrun --standalone --nproc-per-node 2 examples/distributed_train.py --device cpu --out /tmp/dp
    NEURENIX_EMULATE=tpu torchrun --standalone --nproc-per-node 2 examples/distributed_train.py --device tpu

Each rank trains a small MLP regressor with Adam on its half of every global batch
(nx.distributed.shard); compile_step(..., data_parallel=True) broadcasts rank 0's initial
parameters and averages the gradients, so after the run every rank holds the parameters one
process would have reached on the whole global batches (``--reference`` trains that one process).
With ``--checkpoint DIR`` rank 0 saves at the middle step and every rank then resumes from it on a
fresh model and optimizer and must reach the same parameters again. Run without torchrun it is a
world of one. ``--die-rank R --die-at-step K`` makes rank R crash there (the other ranks end with
nx.RankFailedError naming it).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.nn import functional as F
from neurenix_core.optim import Adam

FEATURES, GLOBAL_BATCH = 8, 32


def global_batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """The same global batch on every rank (each then takes its shard): a fixed nonlinear target."""
    rng = np.random.default_rng(step)
    x = rng.standard_normal((GLOBAL_BATCH, FEATURES)).astype(np.float32)
    y = (np.sin(x[:, :2].sum(axis=1, keepdims=True)) + 0.5 * x[:, 2:3] ** 2 + 3.0).astype(np.float32)
    return x, y


def build(device: Any, seed: int) -> tuple[nn.Module, Adam]:
    nn.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)
    return model, Adam(model.parameters(), lr=0.01)


def loss_fn(model: nn.Module, x: nx.Tensor, y: nx.Tensor) -> nx.Tensor:
    return F.mse_loss(model(x), y)


def train(model: nn.Module, optimizer: Adam, steps: range, *, data_parallel: bool, die: tuple[int, int] | None = None) -> list[float]:
    """Train over ``steps`` (global batch numbers); returns this rank's losses."""
    step = nx.compile_step(loss_fn, model, optimizer, data_parallel=data_parallel)
    device, losses = model.device, []
    for s in steps:
        if die is not None and nx.distributed.rank() == die[0] and s == die[1]:
            os._exit(17)  # a crash: no cleanup, no goodbye
        x, y = global_batch(s)
        if data_parallel:
            x, y = nx.distributed.shard(x), nx.distributed.shard(y)
        losses.append(float(step(nx.asarray(x, device=device), nx.asarray(y, device=device)).numpy()))
    return losses


def parameters(model: nn.Module) -> dict[str, np.ndarray]:
    return {name: p.numpy() for name, p in model.named_parameters()}


def reference(device: str, steps: int) -> dict[str, np.ndarray]:
    """One process on the whole global batches, from rank 0's initial parameters."""
    model, optimizer = build(device, seed=0)
    train(model, optimizer, range(steps), data_parallel=False)
    return parameters(model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda or tpu (the engine follows the device)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", type=Path, help="folder for rank<R>.npz (final parameters) and rank<R>.json (losses, engine)")
    ap.add_argument("--checkpoint", type=Path, help="save at the middle step and resume from it on every rank")
    ap.add_argument("--reference", action="store_true", help="train one process on the whole global batches")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--die-rank", type=int)
    ap.add_argument("--die-at-step", type=int, default=5)
    args = ap.parse_args()
    if args.reference:
        result = reference(args.device, args.steps)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            np.savez(args.out / "reference.npz", **result)
        return
    device = nx.distributed.init(args.device, timeout=args.timeout)
    rank, world = nx.distributed.rank(), nx.distributed.world_size()
    # Different seeds on purpose: compile_step(data_parallel=True) must make rank 0's weights everyone's.
    model, optimizer = build(device, seed=rank)
    die = (args.die_rank, args.die_at_step) if args.die_rank is not None else None
    half = args.steps // 2
    losses = train(model, optimizer, range(half), data_parallel=True, die=die)
    if args.checkpoint:
        nx.distributed.save_checkpoint(args.checkpoint, model, optimizer, step=half)
    losses += train(model, optimizer, range(half, args.steps), data_parallel=True, die=die)
    final = parameters(model)
    print(f"rank {rank}/{world} on {device} ({nx.distributed.engine()}): loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    summary = {"rank": rank, "world_size": world, "device": str(device), "engine": nx.distributed.engine(), "losses": losses}
    if args.checkpoint:
        resumed, opt2 = build(device, seed=100 + rank)
        start = nx.distributed.load_checkpoint(args.checkpoint, resumed, opt2)
        train(resumed, opt2, range(start, args.steps), data_parallel=True)
        same = all(np.array_equal(final[k], v) for k, v in parameters(resumed).items())
        summary.update(resumed_from=start, resumed_identical=same)
        print(f"rank {rank}: resumed from step {start}: {'identical' if same else 'DIFFERENT'} parameters", flush=True)
    if args.out:  # files, not stdout: the ranks share it and their lines may interleave
        args.out.mkdir(parents=True, exist_ok=True)
        np.savez(args.out / f"rank{rank}.npz", **final)
        (args.out / f"rank{rank}.json").write_text(json.dumps(summary))
    nx.distributed.shutdown()


if __name__ == "__main__":
    main()
