"""Launched by tests/test_distributed.py under torchrun: nx.distributed's collectives and the
eager tape's average_gradients on one device; writes rank<R>.json into the given folder (not to
stdout, which the ranks share and where their lines can interleave)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.nn import functional as F
from neurenix_core.optim import SGD


def main(device_name: str, out: Path) -> None:
    device = nx.distributed.init(device_name, timeout=60)
    rank, world = nx.distributed.rank(), nx.distributed.world_size()
    x = nx.asarray(np.arange(3, dtype=np.float32) + 10 * rank, device=device)
    result = {
        "rank": rank, "world": world, "engine": nx.distributed.engine(), "device": str(x.device),
        "sum": nx.distributed.all_reduce(x).numpy().tolist(),
        "mean": nx.distributed.all_reduce(x, op="mean").numpy().tolist(),
        "max": nx.distributed.all_reduce(x, op="max").numpy().tolist(),
        "gather": nx.distributed.all_gather(x).numpy().tolist(),
        "bcast": nx.distributed.broadcast(x, src=1).numpy().tolist(),
    }
    # The eager tape: broadcast once, average after every backward.
    nn.manual_seed(rank)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)).to(device)
    nx.distributed.broadcast_parameters(model)
    opt = SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    for _ in range(3):
        gx = rng.standard_normal((8, 4)).astype(np.float32)
        gy = rng.standard_normal((8, 1)).astype(np.float32)
        opt.zero_grad()
        loss = F.mse_loss(model(nx.asarray(nx.distributed.shard(gx), device=device)), nx.asarray(nx.distributed.shard(gy), device=device))
        loss.backward()
        nx.distributed.average_gradients(model)
        opt.step()
    result["params"] = [p.numpy().ravel().tolist() for p in model.parameters()]
    nx.distributed.barrier()
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    nx.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
