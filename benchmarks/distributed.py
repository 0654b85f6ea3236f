"""Data-parallel scaling: samples per second of compile_step(..., data_parallel=True) with 1 and 2
processes (torchrun --standalone), on cpu (torch.distributed/gloo, neurenix tape), cuda (emulated:
PyTorch on the CPU, gloo) and tpu (emulated: JAX CPU, jax.distributed).

    .venv/bin/python benchmarks/distributed.py                     # every device, 1 and 2 processes
    .venv/bin/python benchmarks/distributed.py --quick --devices cpu --json rows.json

Each process runs one thread (OMP/XLA pinned), so 2 processes use 2 cores where 1 uses one: the
speed-up column is what data parallelism buys on this machine, gradient all-reduce included. A
third row per device (not with --quick) is 1 process with 2 threads: the other way to use both
cores of one machine. The
global batch is fixed (weak scaling would grow it); every rank trains on global/N samples per step.
On a 2-vCPU machine both processes share the only two cores with the launcher and the OS, so read
the numbers as a floor. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.benchkit import cpu_model

ROOT = Path(__file__).resolve().parents[1]
FEATURES, HIDDEN, CLASSES = 64, 512, 10



# ---------------------------------------------------------------------- worker (under torchrun)
def worker(device_name: str, steps: int, global_batch: int, out: Path) -> None:
    import neurenix_core as nx
    from neurenix_core import nn
    from neurenix_core.nn import functional as F
    from neurenix_core.optim import Adam

    device = nx.distributed.init(device_name, timeout=120)
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)).to(device)
    step = nx.compile_step(lambda m, x, y: F.cross_entropy(m(x), y), model, Adam(model.parameters(), lr=1e-3), data_parallel=True)
    rng = np.random.default_rng(0)
    x = nx.asarray(nx.distributed.shard(rng.standard_normal((global_batch, FEATURES)).astype(np.float32)), device=device)
    y = nx.asarray(nx.distributed.shard(rng.integers(0, CLASSES, global_batch)), device=device)
    for _ in range(3):  # compilation, optimizer state, first all-reduces
        step(x, y).numpy()
    nx.distributed.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step(x, y)
    loss.numpy()  # the last step finished (asynchronous engines)
    nx.distributed.barrier()
    elapsed = time.perf_counter() - start
    if nx.distributed.rank() == 0:
        row = {"device": str(device), "engine": nx.distributed.engine(), "step_engine": step.engine,
               "processes": nx.distributed.world_size(), "global_batch": global_batch, "steps": steps,
               "samples_per_s": steps * global_batch / elapsed}
        out.write_text(json.dumps(row))
    nx.distributed.shutdown()


# ---------------------------------------------------------------------- parent
def launch(device: str, nproc: int, steps: int, global_batch: int, threads: int = 1) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "LOCAL_RANK", "TORCHELASTIC"))}
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    if threads == 1:  # XLA's CPU client otherwise runs its Eigen pool on every core
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    env["NEURENIX_EMULATE"] = env.get("NEURENIX_EMULATE", "cuda,tpu")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "row.json"
        cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", str(nproc), __file__,
               "--worker", "--device", device, "--steps", str(steps), "--global-batch", str(global_batch), "--row", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{device} x{nproc} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
        return {**json.loads(out.read_text()), "threads": threads}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| device | engine (step) | processes x threads | global batch | samples/s | vs 1 x 1 |", "|---|---|---|---|---|---|"]
    base: dict[str, float] = {}
    for r in rows:
        base.setdefault(r["device"], r["samples_per_s"])
        lines.append(f"| {r['device']} | {r['engine']} ({r['step_engine']}) | {r['processes']} x {r['threads']} | {r['global_batch']} | "
                     f"{r['samples_per_s']:,.0f} | {r['samples_per_s'] / base[r['device']]:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="cpu,cuda,tpu")
    ap.add_argument("--quick", action="store_true", help="few steps: a smoke run (tests use it)")
    ap.add_argument("--global-batch", type=int, default=512)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--device", help=argparse.SUPPRESS)
    ap.add_argument("--row", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = args.steps or (5 if args.quick else 60)
    if args.worker:
        worker(args.device, steps, args.global_batch, args.row)
        return
    shapes = [(1, 1), (2, 1)] + ([] if args.quick else [(1, 2)])  # (processes, threads per process)
    rows = [launch(d, n, steps, args.global_batch, t) for d in args.devices.split(",") for n, t in shapes]
    print(f"CPU: {cpu_model()} ({os.cpu_count()} logical CPUs); {steps} timed steps, MLP "
          f"{FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, Adam")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
