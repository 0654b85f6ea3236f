"""Training steps per second: neurenix against hand-written JAX and PyTorch, same model and data.

    .venv/bin/python benchmarks/training.py            # full run (about a minute per thread count)
    .venv/bin/python benchmarks/training.py --quick    # smoke run (used by tests)
    .venv/bin/python benchmarks/training.py --json out.json

The model is a small CNN (conv 1->8, batch norm, ReLU, max pool, conv 8->16, ReLU, global
average pool, linear 16->2) on a batch of 64 16x16 images, cross entropy, SGD with momentum 0.9.
Rows, each against its native twin measured in the same child process:

- ``nx.compile_step`` on tpu (JAX, emulated on the CPU)  vs  a hand-written ``jax.jit`` step
- ``nx.compile_step`` on cuda (PyTorch, emulated on the CPU)  vs  a hand-written PyTorch step
- the eager neurenix tape on cpu (NumPy)  vs  PyTorch eager autograd on the CPU

Each thread count runs in its own interpreter pinned to that many CPUs (BLAS, XLA and torch
pools are fixed at start). The time ratio ``nx / native`` is the number to read (goal <= 1.10
for the compiled steps). No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.benchkit import cpu_model, run_child

BATCH, SIZE, LR, MOMENTUM = 64, 16, 0.05, 0.9



def _data() -> tuple[np.ndarray, np.ndarray]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from train_cnn import stripes

    return stripes(BATCH, SIZE)


def _steps_per_second(step: Callable[[], Any], sync: Callable[[Any], Any], steps: int, repeats: int) -> float:
    for _ in range(3):  # compile / warm caches
        sync(step())
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = None
        for _ in range(steps):
            out = step()
        sync(out)
        best = min(best, time.perf_counter() - start)
    return steps / best


# --------------------------------------------------------------------------- neurenix
def _nx_model(device: str) -> Any:
    from neurenix_core import nn

    nn.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 2),
    ).to(device).train()


def _nx_step(device: str, compiled: bool) -> tuple[Callable[[], Any], str]:
    import neurenix_core as nx
    from neurenix_core.nn import functional as F
    from neurenix_core.optim import SGD
    from neurenix_core.training.step import TapeStep

    x, y = _data()
    xb, yb = nx.asarray(x, device=device), nx.asarray(y, device=device)
    model = _nx_model(device)
    opt = SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def loss_fn(m: Any, a: Any, b: Any) -> Any:
        return F.cross_entropy(m(a), b)

    step = nx.compile_step(loss_fn, model, opt) if compiled else TapeStep(loss_fn, model, opt)
    return (lambda: step(xb, yb)), step.engine


# --------------------------------------------------------------------------- hand-written JAX
def _jax_step() -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    x, y = _data()
    xb, yb = jnp.asarray(x), jnp.asarray(y)
    rng = np.random.default_rng(0)

    def u(shape: tuple[int, ...], fan_in: int) -> Any:
        b = 1.0 / np.sqrt(fan_in)
        return jnp.asarray(rng.uniform(-b, b, shape).astype(np.float32))

    params = {"c1": u((8, 1, 3, 3), 9), "b1": u((8,), 9), "g": jnp.ones(8, jnp.float32), "beta": jnp.zeros(8, jnp.float32),
              "c2": u((16, 8, 3, 3), 72), "b2": u((16,), 72), "w": u((2, 16), 16), "bw": u((2,), 16)}
    stats = (jnp.zeros(8, jnp.float32), jnp.ones(8, jnp.float32))  # explicit: the tpu plugin turns on jax x64
    dn = ("NCHW", "OIHW", "NCHW")

    def forward(p: dict[str, Any], s: tuple[Any, Any], a: Any) -> tuple[Any, tuple[Any, Any]]:
        h = lax.conv_general_dilated(a, p["c1"], (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn) + p["b1"][None, :, None, None]
        mean, var = h.mean(axis=(0, 2, 3)), h.var(axis=(0, 2, 3))
        h = (h - mean[None, :, None, None]) * lax.rsqrt(var[None, :, None, None] + 1e-5) * p["g"][None, :, None, None] + p["beta"][None, :, None, None]
        h = lax.reduce_window(jax.nn.relu(h), -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        h = lax.conv_general_dilated(h, p["c2"], (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn) + p["b2"][None, :, None, None]
        h = jax.nn.relu(h).mean(axis=(2, 3))
        n = a.shape[0] * a.shape[2] * a.shape[3]  # values behind each channel's batch statistics
        new = (s[0] * 0.9 + mean * 0.1, s[1] * 0.9 + var * (n / (n - 1)) * 0.1)
        return h @ p["w"].T + p["bw"], new

    def loss(p: dict[str, Any], s: tuple[Any, Any], a: Any, b: Any) -> tuple[Any, tuple[Any, Any]]:
        logits, new = forward(p, s, a)
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(b.shape[0]), b]), new

    @jax.jit
    def step(p: Any, m: Any, s: Any, a: Any, b: Any) -> Any:
        (value, new), g = jax.value_and_grad(loss, has_aux=True)(p, s, a, b)
        m = jax.tree_util.tree_map(lambda mi, gi: MOMENTUM * mi + gi, m, g)
        p = jax.tree_util.tree_map(lambda pi, mi: pi - LR * mi, p, m)
        return p, m, new, value

    state = {"p": params, "m": jax.tree_util.tree_map(jnp.zeros_like, params), "s": stats}

    def run() -> Any:
        state["p"], state["m"], state["s"], value = step(state["p"], state["m"], state["s"], xb, yb)
        return value

    return run


# --------------------------------------------------------------------------- hand-written PyTorch
def _torch_step() -> Callable[[], Any]:
    import torch

    x, y = _data()
    xb, yb = torch.from_numpy(x), torch.from_numpy(y)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 2),
    ).train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def run() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    return run


# --------------------------------------------------------------------------- driver
def measure(threads: int, quick: bool) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(threads)
    steps, repeats = (3, 1) if quick else (30, 5)
    pairs = [
        ("compiled step", "tpu:0", lambda: _nx_step("tpu:0", True), "hand-written jax.jit", _jax_step, lambda v: float(v)),
        ("compiled step", "cuda:0", lambda: _nx_step("cuda:0", True), "hand-written PyTorch", _torch_step, lambda v: float(v)),
        ("eager tape", "cpu:0", lambda: _nx_step("cpu:0", False), "PyTorch eager autograd", _torch_step, lambda v: float(v)),
    ]
    rows = []
    for kind, device, ours, native_name, native, sync in pairs:
        step, engine = ours()
        nx_rate = _steps_per_second(step, sync, steps, repeats)
        native_rate = _steps_per_second(native(), sync, steps, repeats)
        rows.append({"kind": kind, "device": device, "engine": engine, "native": native_name, "threads": threads,
                     "nx_steps_per_s": nx_rate, "native_steps_per_s": native_rate, "time_ratio": native_rate / nx_rate})
    return rows


def _child(threads: int, quick: bool) -> list[dict[str, Any]]:
    env = {"NEURENIX_EMULATE": "cuda,tpu", "JAX_PLATFORMS": "cpu"}
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    cpus = sorted(os.sched_getaffinity(0))[:threads] if hasattr(os, "sched_getaffinity") else []
    prefix = ["taskset", "-c", ",".join(map(str, cpus))] if cpus and len(cpus) == threads and _has_taskset() else []
    return run_child(__file__, threads, quick, env=env, prefix=prefix)


def _has_taskset() -> bool:
    from shutil import which

    return which("taskset") is not None


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'neurenix':<15}{'device':<8}{'engine':<30}{'native':<24}{'thr':>4}{'nx steps/s':>12}{'native steps/s':>16}{'nx/native time':>16}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['kind']:<15}{r['device']:<8}{r['engine']:<30}{r['native']:<24}{r['threads']:>4}"
                     f"{r['nx_steps_per_s']:>12.1f}{r['native_steps_per_s']:>16.1f}{r['time_ratio']:>16.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few steps: checks that the benchmark runs")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.quick)))
        return 0
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        rows.extend(_child(threads, args.quick))
    print(f"CPU: {cpu_model()}; batch {BATCH} of 1x{SIZE}x{SIZE}, SGD momentum {MOMENTUM}")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
