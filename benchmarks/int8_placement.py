"""cpu:0 int8 on OpenVINO: FakeQuantize on every planned activation against ``cpu_placement`` (issue #44).

    .venv/bin/python benchmarks/int8_placement.py                        # MobileNetV3-Small, 1 and 2 threads
    .venv/bin/python benchmarks/int8_placement.py --models mobilenetv3_small efficientnet_b0 --quick

The core's plan rounds every float value (TFLite's arithmetic: conv, HARD_SWISH and the
squeeze-excite MUL each requantize). OpenVINO's CPU device fuses conv -> activation -> FakeQuantize
into one kernel's post-ops, so since this change cpu:0's OpenVINO runtime leaves out the
FakeQuantize on values that only a fused activation reads (``neurenix_npu_openvino.quantize.
cpu_placement``). This script times, in one interleaved run per thread count (the process pinned
to N CPUs, ``benchmarks/cpu.py``'s rounds and models):

* ``cpu:0 fp32``: ``nx.compile(model, device="cpu", threads=N)`` on the runtime it chooses;
* ``int8 every value``: ``runtime="openvino"`` int8 with ``cpu_placement`` replaced by the plan
  itself (what cpu:0 lowered before);
* ``int8 placement``: ``runtime="openvino"`` int8 as cpu:0 lowers it now.

For each int8 model: what the compiled model's runtime graph runs (conv/FC layers by runtime
precision, FakeQuantize layers left in f32, Reorders), top-1 agreement with torch fp32 and with
the integer reference (``runtime="numpy"``) over seeded inputs, and, at the first thread count,
OpenVINO's per-layer times (PERF_COUNT) summed by layer type and kernel.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
# benchmarks/openvino.py would shadow the real OpenVINO package while this folder is on sys.path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

CONTENDERS = ("cpu:0 fp32", "int8 every value", "int8 placement")
_COMPUTE = ("Convolution", "GroupConvolution", "FullyConnected", "MatMul", "Deconvolution")


def _cpu_benchmark() -> ModuleType:
    """benchmarks/cpu.py (its models, inputs and interleaved timing), loaded by path."""
    from neurenix_core import benchkit

    module: ModuleType = benchkit.load_script(os.path.join(_HERE, "cpu.py"), "neurenix_bench_cpu")
    return module


@contextlib.contextmanager
def every_value_rounded() -> Iterator[None]:
    """cpu:0's OpenVINO runtime lowering the plan as it is (FakeQuantize on every planned value)."""
    from neurenix_npu_openvino import quantize

    placement = quantize.cpu_placement
    quantize.cpu_placement = lambda graph, plan: plan
    try:
        yield
    finally:
        quantize.cpu_placement = placement


def runtime_graph(ov_compiled: Any) -> str:
    """Conv/FC layers by runtime precision, f32 FakeQuantize layers and Reorders the CPU plugin runs."""
    compute: collections.Counter[str] = collections.Counter()
    fq_f32 = reorders = 0
    for op in ov_compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind, precision = (info[k].astype(str) if k in info else "" for k in ("layerType", "runtimePrecision"))
        if kind in _COMPUTE:
            compute[precision] += 1
        fq_f32 += kind == "FakeQuantize" and precision == "f32"
        reorders += kind == "Reorder"
    layers = " ".join(f"{p}:{n}" for p, n in sorted(compute.items()))
    return f"conv/FC {layers}; FakeQuantize in f32: {fq_f32}; Reorder: {reorders}"


def perf_by_kernel(graph: Any, plans: dict[str, Any], threads: int, x: np.ndarray, calls: int = 200) -> dict[str, dict[str, float]]:
    """OpenVINO's PERF_COUNT per call (µs) of each plan lowered as it is, summed by layer type and
    kernel; the plans' requests take turns call by call, so load from other processes falls on both."""
    from neurenix_npu_openvino.config import QUANTIZED_CPU_PROPERTIES
    from neurenix_npu_openvino.lowering import lower_graph

    ov: Any = importlib.import_module("openvino")
    core = ov.Core()
    props = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads,
             "PERF_COUNT": True, **QUANTIZED_CPU_PROPERTIES}
    requests = {name: core.compile_model(lower_graph(graph, plan, device="cpu:0"), "CPU", props).create_infer_request()
                for name, plan in plans.items()}
    totals: dict[str, collections.Counter[str]] = {name: collections.Counter() for name in plans}
    for i in range(20 + calls):
        for name, request in requests.items():
            request.infer({0: x})
            if i >= 20:  # after the warm-up calls
                for layer in request.profiling_info:
                    totals[name][f"{layer.node_type} {layer.exec_type}"] += layer.real_time.total_seconds() * 1e6 / calls
    return {name: dict(total) for name, total in totals.items()}


def _compile(bench: ModuleType, imported: Any, x: np.ndarray, threads: int, calibration: Sequence[np.ndarray] | None,
             method: str, runtime: str | None) -> Any:
    import neurenix_core as nx

    kw: dict[str, Any] = {} if runtime is None else {"runtime": runtime}
    if calibration is not None:
        kw.update(precision="int8", calibration=list(calibration), calibration_method=method)
    compiled = nx.compile(imported, device="cpu", threads=threads, progress=False, **kw)
    compiled(nx.asarray(x, device="cpu"))  # compiles (and verifies) for this shape
    return compiled


def _runtime(summary: str) -> str:
    found = re.search(r"runtime (\S+) \(", summary)
    return found.group(1) if found else "?"


def measure(bench: ModuleType, model: str, threads: int, rounds: int, samples: int, perf: bool) -> dict[str, Any]:
    import torch
    from neurenix_npu_openvino.quantize import cpu_placement

    import neurenix_core as nx
    from neurenix_core.nn import from_torch

    module = bench.int8_model(model)
    x = bench.example_input(model, 1)
    calibration = bench.int8_inputs(model, bench.CALIBRATION, seed=1000)
    method = bench.CALIBRATION_METHOD.get(model, "minmax")
    imported = from_torch(module, torch.from_numpy(x), static=True)
    fp32 = _compile(bench, imported, x, threads, None, method, None)
    with every_value_rounded():
        before = _compile(bench, imported, x, threads, calibration, method, "openvino")
    after = _compile(bench, imported, x, threads, calibration, method, "openvino")
    reference = _compile(bench, imported, x, threads, calibration, method, "numpy")
    compiled = {"cpu:0 fp32": fp32, "int8 every value": before, "int8 placement": after}
    xt = nx.asarray(x, device="cpu")
    times = bench.interleaved_median({name: (lambda c=c: c(xt)) for name, c in compiled.items()}, rounds)

    def call(c: Any) -> Callable[[np.ndarray], np.ndarray]:
        return lambda a: np.asarray(c(nx.asarray(a, device="cpu")))

    def torch_call(a: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return np.asarray(module(torch.from_numpy(a)).numpy())

    inputs = bench.int8_inputs(model, samples, seed=bench.AGREEMENT_SEED)
    picks = bench.top1({"torch": torch_call, "numpy": call(reference), "every": call(before), "placement": call(after)}, inputs)
    plan = after.plan
    row: dict[str, Any] = {
        "model": model, "threads": threads, "load": os.getloadavg()[0], "fp32_runtime": _runtime(fp32.summary),
        "us": {k: v * 1e6 for k, v in times.items()},
        "graph": {k: runtime_graph(compiled[k].native(x.shape).compiled) for k in CONTENDERS[1:]},
        "fq": {"int8 every value": len(plan.activations), "int8 placement": len(cpu_placement(after.graph, plan).activations)},
        "top1_float": {k: bench.agreement_of(picks[k], picks["torch"]) for k in ("numpy", "every", "placement")},
        "top1_reference": {k: bench.agreement_of(picks[k], picks["numpy"]) for k in ("every", "placement")},
        "verified": {k: compiled[k].verification.line() for k in CONTENDERS[1:]},
    }
    if perf:
        row["perf"] = perf_by_kernel(after.graph, {"int8 every value": plan, "int8 placement": cpu_placement(after.graph, plan)}, threads, x)
    return row


def report(rows: Sequence[dict[str, Any]], features: dict[str, Any]) -> None:
    print(f"cpu: {features['cpu']}; int8 flags {' '.join(features['flags'])} (VNNI {'yes' if features['vnni'] else 'no'}, "
          f"AMX {'yes' if features['amx'] else 'no'}); OpenVINO CPU {' '.join(features.get('openvino') or [])}")
    print("| model | thr | 1-min load | cpu:0 fp32 (runtime) µs | int8 every value µs | int8 placement µs | every / fp32 | "
          "placement / fp32 | placement / every | FakeQuantize | top-1 vs fp32 (numpy / every / placement) | top-1 = numpy's (every / placement) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        us, t1, tr = r["us"], r["top1_float"], r["top1_reference"]
        print(f"| {r['model']} | {r['threads']} | {r['load']:.2f} | {us['cpu:0 fp32']:.0f} ({r['fp32_runtime']}) | {us['int8 every value']:.0f} | "
              f"{us['int8 placement']:.0f} | {us['int8 every value'] / us['cpu:0 fp32']:.2f} | {us['int8 placement'] / us['cpu:0 fp32']:.2f} | "
              f"{us['int8 placement'] / us['int8 every value']:.2f} | {r['fq']['int8 every value']} -> {r['fq']['int8 placement']} | "
              f"{t1['numpy']:.3f} / {t1['every']:.3f} / {t1['placement']:.3f} | {tr['every']:.3f} / {tr['placement']:.3f} |")
    for r in rows:
        print(f"- {r['model']} t{r['threads']}: " + "; ".join(f"{k}: {r['graph'][k]}; {r['verified'][k]}" for k in CONTENDERS[1:]))
        for name, kernels in r.get("perf", {}).items():
            top = sorted(kernels.items(), key=lambda kv: -kv[1])
            print(f"  PERF_COUNT {name} (sum {sum(kernels.values()):.0f} µs): " + ", ".join(f"{k} {v:.0f}" for k, v in top if v >= 1))


def main(argv: list[str] | None = None) -> int:
    bench = _cpu_benchmark()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["mobilenetv3_small"], choices=bench.INT8_MODELS)
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--quick", action="store_true", help="5 rounds, 32 agreement inputs: checks the script runs")
    args = p.parse_args(argv)
    rounds, samples = (5, 32) if args.quick else (25, 320)
    rows = []
    for threads in args.threads:
        if hasattr(os, "sched_setaffinity"):  # N CPUs for N threads; the process keeps the widest set first
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))[:threads])
        rows += [measure(bench, m, threads, rounds, samples, perf=threads == args.threads[0]) for m in args.models]
    report(rows, bench.cpu_int8_features())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
