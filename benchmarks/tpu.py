"""neurenix-tpu: a compiled model through neurenix against the same jitted function in plain JAX,
and eager (layer by layer) against compiled, in the same run on the same device.

    python benchmarks/tpu.py [--quick] [--threads 1 2] [--batches 1 32] [--models mlp cnn] [--json out.json]

Both sides' configurations are read back from the XLA programs themselves (platform, device,
the dot/convolution precision and result types in the lowered StableHLO, the XLA thread flags);
a row whose two sides differ is refused (neurenix_core.benchkit).

Each thread count runs in a fresh process pinned to that many CPUs (sched_setaffinity) with XLA's
CPU thread pool sized to match, since XLA reads its flags once at start. Without a Cloud TPU it
runs emulated (NEURENIX_EMULATE=tpu, JAX's CPU platform), so the numbers measure neurenix's own
overhead around XLA, not TPU speed. The contenders take turns of a few consecutive calls (the
order is shuffled every turn) and the median per-call time is reported, counting only calls that
follow a call of the same contender (the machine may be shared: short turns expose everyone to
the same load, the median drops the calls a spike hit; see ``_best`` for why not call by call).
Ratios are time(neurenix) / time(plain JAX): the goal is <= 1.05 at batch 1 and 32. The "plugin"
column is the plugin's compiled model called on a native array (the same XLA program without the
core's Tensor handling), which separates the plugin's cost from the core's. "control / JAX" is a
second plain-JAX program with its own copy of the weights, timed in the same turns: the spread
two identical programs show on this machine, against which a ratio is read.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

MODELS = ("mlp", "cnn")


# ------------------------------------------------------------------ child: one thread setting
def _models(nn: Any) -> dict[str, tuple[Any, tuple[int, ...]]]:
    mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    return {"mlp": (mlp, (256,)), "cnn": (cnn, (3, 32, 32))}


def _plain_jax(graph: Any, precision: str) -> tuple[Callable[..., Any], Any]:
    """The model written by hand in JAX (NHWC convs, as JAX users write them) and its params."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    dt = jnp.float32 if precision == "fp32" else jnp.bfloat16
    prec = lax.Precision.HIGHEST if precision == "fp32" else lax.Precision.DEFAULT
    params: list[dict[str, Any]] = []
    for n in graph.nodes:
        p = {k: np.asarray(v, np.float32) for k, v in n.params.items()}
        if n.op == "conv2d":
            p["weight"] = p["weight"].transpose(2, 3, 1, 0)
        if "weight" in p:
            p["weight"] = p["weight"].astype(dt)
        params.append(p)
    ops = [(n.op, dict(n.attrs)) for n in graph.nodes]

    def fn(params: list[dict[str, Any]], x: Any) -> Any:
        h = x.astype(dt)
        if h.ndim == 4:
            h = h.transpose(0, 2, 3, 1)
        for (op, a), p in zip(ops, params):
            if op == "linear":
                h = (lax.dot_general(h, p["weight"], (((1,), (1,)), ((), ())), precision=prec, preferred_element_type=jnp.float32) + p["bias"]).astype(dt)
            elif op == "conv2d":
                pad = a["padding"]
                h = lax.conv_general_dilated(h, p["weight"], a["stride"], ((pad[0], pad[0]), (pad[1], pad[1])),
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=prec, preferred_element_type=jnp.float32)
                h = (h + p["bias"]).astype(dt)
            elif op == "relu":
                h = jnp.maximum(h, 0)
            elif op == "max_pool2d":
                k, s = a["kernel_size"], a["stride"]
                h = lax.reduce_window(h, -jnp.inf, lax.max, (1, k[0], k[1], 1), (1, s[0], s[1], 1), "VALID")
            elif op == "adaptive_avg_pool2d":
                h = h.mean(axis=(1, 2), keepdims=True)
            elif op == "flatten":
                h = h.reshape(h.shape[0], -1)
            else:
                raise ValueError(f"benchmark model has an op the plain-JAX version does not write: {op}")
        return h.astype(x.dtype)

    dev = jax.devices()[0]
    return jax.jit(fn), jax.device_put(params, dev)


def _jax_config(jitted: Callable[..., Any], params: Any, x: Any) -> dict[str, Any]:
    """What XLA runs for this program, read back from it: platform and device of the inputs,
    the dot/convolution precisions and element types in the lowered StableHLO, and the XLA
    thread flags of this process."""
    import re

    import jax

    text = jitted.lower(params, x).as_text()
    precisions = sorted(set(re.findall(r"precision = \[(\w+), \w+\]", text))) or ["DEFAULT"]
    types = sorted(set(re.findall(r"stablehlo\.(?:dot_general|convolution)[^\n]*-> tensor<[^>]*?x?(f32|bf16|f16|i8|i32)>", text)))
    dev = next(iter(x.devices()))
    return {"jax": jax.__version__, "platform": dev.platform, "device": str(dev), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "matmul_precision": ",".join(precisions), "matmul_result_types": ",".join(types) or "-"}


#: Consecutive calls of one contender per turn; the first of each turn is not counted.
BLOCK = 8


def _best(fns: dict[str, Callable[[], Any]], budget_s: float) -> dict[str, float]:
    """Median per-call time of each contender, in turns of ``BLOCK`` consecutive calls.

    The machine is shared: turns change quickly (about a millisecond each), so every contender
    sees the same load, and the median ignores the calls a load spike hit. Within a turn only
    calls that follow a call of the same contender are timed: each contender has its own weights
    in memory (neurenix and the plugin share one copy, plain JAX has another), and a call right
    after the other copy ran finds its weights out of the CPU caches. Strict call-by-call rotation
    gave that cold state to plain JAX on every call, to neurenix on two in three and to the plugin
    on one in three (MLP fp32 batch 1: 45 µs warm against 78 µs cold, for either side).
    """
    import jax

    one = 0.0
    for fn in fns.values():
        jax.block_until_ready(_native(fn()))  # compile / warm
        t0 = time.perf_counter()
        jax.block_until_ready(_native(fn()))
        one += time.perf_counter() - t0
    turns = max(3, min(400, int(budget_s / max(one * BLOCK, 1e-7))))
    samples: dict[str, list[float]] = {k: [] for k in fns}
    # The eager contender makes many small objects; a cyclic GC pass it triggers would land in
    # whichever call runs next. GC is off while sampling, and the order is shuffled every turn
    # (seeded: benchkit.schedule), so each contender follows each other one about equally often.
    from neurenix_core.benchkit import schedule

    gc.collect()
    gc.disable()
    try:
        for order in schedule(list(fns), turns):
            for name in order:
                fn, timed = fns[name], samples[name]
                for call in range(BLOCK):
                    t0 = time.perf_counter()
                    # A neurenix Tensor is not a JAX pytree: wait on its native array, or nothing waits.
                    jax.block_until_ready(_native(fn()))
                    if call:
                        timed.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return {k: statistics.median(v) for k, v in samples.items()}


def _compile(nx: Any, model: Any, shape: tuple[int, ...], precision: str) -> tuple[Callable[[Any], Any], str]:
    """nx.compile when the core provides it; else the plugin's hook on the traced graph."""
    try:
        from neurenix_core.graph.compile.compiler import compile as nx_compile
    except ImportError:
        from neurenix_tpu.api import TPUBackend

        compiled = TPUBackend().compile_graph(model.to_graph(shape), precision=precision)
        return (lambda t: compiled(t.native)), "neurenix_tpu compile_graph (nx.compile not in this core)"
    compiled = nx_compile(model, device="tpu:0", precision=precision)
    return compiled, "nx.compile"


def child(quick: bool, threads: int, models: list[str], batches: list[int]) -> list[dict[str, Any]]:
    import numpy as np

    import neurenix_core as nx
    from neurenix_core import benchkit, nn

    budget_s = 0.05 if quick else 3.0
    rows = []
    for name, (model, feat) in _models(nn).items():
        if name not in models:
            continue
        model.to("tpu:0")
        for precision in ("fp32", "bf16"):
            for batch in batches:
                shape = (batch, *feat)
                x = nx.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32), device="tpu:0")
                compiled, path = _compile(nx, model, shape, precision)
                plain, params = _plain_jax(model.to_graph(shape), precision)
                xn = x.native
                # The plugin's compiled model alone (same XLA program, native array in and out):
                # separates the plugin's cost from the core's Tensor handling around it.
                from neurenix_tpu.api import TPUBackend

                plugin = TPUBackend().compile_graph(model.to_graph(shape), precision=precision)
                # A second plain-JAX program with its own weights, timed in the same turns: what
                # the machine alone makes of two identical programs ("control / JAX").
                control, control_params = _plain_jax(model.to_graph(shape), precision)
                contenders: dict[str, Callable[[], Any]] = {
                    # Defaults bind this iteration's objects (the closures are called within it).
                    "neurenix": lambda c=compiled, x=x: c(x),
                    "plugin": lambda p=plugin, xn=xn: p(xn),
                    "jax": lambda f=plain, w=params, xn=xn: f(w, xn),
                    "control": lambda f=control, w=control_params, xn=xn: f(w, xn),
                }
                t = _best(contenders, budget_s)
                if precision == "fp32":
                    # Eager is timed in its own phase: its many small XLA dispatches leave work
                    # and threads busy, which slowed whichever contender ran right after it (in
                    # the rotation that was neurenix three times in four: +10-15 µs per call).
                    t["eager"] = _best({"eager": lambda m=model, x=x: m(x)}, budget_s / 3)["eager"]
                check = np.abs(np.asarray(_native(compiled(x)), np.float64) - np.asarray(plain(params, xn), np.float64)).max()
                prog = plugin.program
                nx_config = _jax_config(prog.jitted, prog.leaves, xn)
                native_config = _jax_config(plain, params, xn)
                rows.append(benchkit.row(
                    "tpu", name, precision, batch, threads, t["neurenix"], t["jax"], nx_config, native_config, path=path,
                    plugin_us=t["plugin"] * 1e6, plugin_overhead=t["plugin"] / t["jax"], control_ratio=t["control"] / t["jax"],
                    eager_us=t["eager"] * 1e6 if "eager" in t else None,
                    eager_vs_compiled=t["eager"] / t["neurenix"] if "eager" in t else None,
                    max_abs_diff=float(check), emulated=bool(nx.backend("tpu:0").emulated),
                ))
    return rows


def _native(out: Any) -> Any:
    return out.native if hasattr(out, "native") else out


# ------------------------------------------------------------------ parent
def pin_to(threads: int) -> None:
    """The child process runs on its first ``threads`` CPUs (where the OS lets us pin)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])


def run_threads(threads: int, quick: bool, models: list[str], batches: list[int], script: str = __file__) -> list[dict[str, Any]]:
    """Run ``script --child threads`` (this file, or another TPU benchmark with the same child
    protocol) in a fresh process whose XLA thread pool is sized for ``threads``; its JSON rows."""
    env = dict(os.environ)
    env.setdefault("NEURENIX_EMULATE", "tpu")
    env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS", "cpu")
    # XLA sizes its CPU pool from these flags at start-up: one process per thread setting.
    env["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} intra_op_parallelism_threads={threads}"
    env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, script, "--child", str(threads), "--models", *models, "--batches", *map(str, batches)] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)  # the failure is reported below
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child ({threads} thread(s)) failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    from neurenix_core import benchkit

    parser = benchkit.parser(__doc__.split("\n\n")[0], models=MODELS)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        pin_to(args.child)
        print(json.dumps(child(args.quick, args.child, args.models, args.batches)))
        return 0
    rows: list[dict[str, Any]] = []
    from rich.progress import track

    for threads in track(args.threads, description="tpu (one process per thread setting)", transient=True):
        rows += run_threads(threads, args.quick, args.models, args.batches)
    benchkit.report("tpu", rows, args, [("control_ratio", "control / JAX", ".3f"), ("plugin_us", "plugin µs", ".1f"),
                                        ("plugin_overhead", "plugin / JAX", ".3f"),
                                        ("eager_vs_compiled", "eager / compiled", ".2f"), ("max_abs_diff", "max abs diff", ".1e")],
                    path=rows[0]["path"] if rows else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
