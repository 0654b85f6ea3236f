"""What neurenix's ``cpu:0`` call adds over a host runtime's own call, interleaved in one process.

    .venv/bin/python benchmarks/cpu_call_path.py [--threads 1 2] [--rounds 40]

``benchmarks/cpu.py`` times each contender in its own turns, each after 30 ms idle; a row's
ratio then moves with the load on the machine during its few rounds. This script isolates the
call path: on one model and one runtime, the runtime's own Python call, neurenix's host model
(``HostModel.call_one``, the plugin's entry) and ``compiled(x)`` take turns of about 50 ms, back to
back, in shuffled order (``benchmarks/cpu.py``'s ``interleaved_median`` without its idle before each
turn), for ``--rounds`` rounds; the medians are reported:

* ``bert_tiny`` at batch 1 on OpenVINO: ``openvino`` is the request ``benchmarks/cpu.py`` times
  (``convert_model``, f32, ``set_input_tensor`` + ``infer`` + a copy of the output);
* ``mlp_small`` at batch 1 on LiteRT: ``litert`` is LiteRT's public ``set_tensor`` / ``invoke`` /
  ``get_tensor`` on the interpreter neurenix built (the same .tflite), the goal for calls under
  50 µs being at most 1 µs added.

Each thread count runs in its own pinned child process (``benchkit.run_child``). No timing is
asserted anywhere: the numbers are for people. Needs the npu and edgetpu plugins.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]  # benchmarks/openvino.py would shadow openvino

import numpy as np

from neurenix_core import benchkit

_CHILD_ENV = "NEURENIX_BENCH_CALL_PATH_ROUNDS"


def _cpu_module() -> Any:
    return benchkit.load_script(os.path.join(_HERE, "cpu.py"), "neurenix_bench_cpu")


def _interleaved(bench: Any, fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """µs per call (medians) from cpu.py's interleaving, with no idle before a turn: the contenders
    share one runtime, so whatever its threads do between calls, they do for all."""
    return {k: t * 1e6 for k, t in bench.interleaved_median(fns, rounds, settle_s=0.0).items()}


def _compiled(model: Any, x: np.ndarray, runtime: str, threads: int) -> tuple[Any, Any, Any]:
    import torch

    import neurenix_core as nx

    compiled = nx.compile(nx.nn.from_torch(model, torch.from_numpy(x), static=True), device="cpu", runtime=runtime,
                          threads=threads, progress=False)
    xt = nx.asarray(x)
    compiled(xt)
    host = compiled.native(x.shape)
    return compiled, xt, host


def bert_on_openvino(bench: Any, threads: int, rounds: int) -> dict[str, Any]:
    model, x = bench.build("bert_tiny"), bench.example_input("bert_tiny", 1)
    direct, _ = bench.openvino_direct(model, x, threads)
    compiled, xt, host = _compiled(model, x, "openvino", threads)
    fns = {"openvino": direct, "host_model": lambda: host.call_one(x), "compiled": lambda: compiled(xt)}
    return {"model": "bert_tiny", "input": "ids 1x128", "runtime": "openvino", "threads": threads, **_interleaved(bench, fns, rounds)}


def mlp_on_litert(bench: Any, threads: int, rounds: int) -> dict[str, Any]:
    model, x = bench.build("mlp_small"), bench.example_input("mlp_small", 1)
    compiled, xt, host = _compiled(model, x, "litert", threads)
    it, i0, o0 = host.runner.interpreter, host.runner.input_details[0]["index"], host.runner.output_details[0]["index"]

    def litert() -> np.ndarray:
        it.set_tensor(i0, x)
        it.invoke()
        return it.get_tensor(o0)

    fns = {"litert": litert, "host_model": lambda: host.call_one(x), "compiled": lambda: compiled(xt)}
    return {"model": "mlp_small", "input": "1x16", "runtime": "litert", "threads": threads, **_interleaved(bench, fns, rounds)}


def child(threads: int, rounds: int) -> list[dict[str, Any]]:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    bench = _cpu_module()
    return [bert_on_openvino(bench, threads, rounds), mlp_on_litert(bench, threads, rounds)]


def report(rows: list[dict[str, Any]]) -> None:
    m = benchkit.machine()
    print(f"cpu: CPU {m['cpu']} ({m['cpus']} CPUs available, 1-min load {m['load_1min']})")
    print("| model | input | thr | runtime's own call µs | host model µs | compiled(x) µs | added by compiled(x) µs | compiled / own |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        own, got = r[r["runtime"]], r["compiled"]
        print(f"| {r['model']} | {r['input']} | {r['threads']} | {own:.2f} | {r['host_model']:.2f} | {got:.2f} "
              f"| {got - own:+.2f} | {got / own:.3f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--quick", action="store_true", help="3 rounds: a smoke run")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    rounds = 3 if args.quick else args.rounds
    if args.child is not None:
        print(json.dumps(child(args.child, int(os.environ[_CHILD_ENV]))))
        return 0
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        with tempfile.TemporaryDirectory(prefix="neurenix-bench-call-path-") as state:
            env = {_CHILD_ENV: str(rounds), "NEURENIX_STATE_DIR": state, "NEURENIX_EMULATE": "edgetpu", "JAX_PLATFORMS": "cpu"}
            rows += benchkit.run_child(os.path.abspath(__file__), threads, args.quick, env=env, timeout=3600)
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
