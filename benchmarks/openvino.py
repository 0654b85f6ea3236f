"""NPU (OpenVINO) backend: a compiled CNN through neurenix vs the same model through OpenVINO's own
API, vs PyTorch eager, and int8 vs fp32, all measured in one run.

Rows: threads 1 and 2 (INFERENCE_NUM_THREADS / torch.set_num_threads), batch 1 and 32.
Ratios (goals from issue 5):

* overhead  = neurenix / bare OpenVINO, same ov.Model, same properties    (goal <= 1.05)
* vs_torch  = PyTorch eager fp32 / neurenix fp32                          (goal >= 2)
* int8_gain = neurenix fp32 / neurenix int8                               (goal >= 2 at batch 32)

neurenix is called the way a user calls it: ``compiled(x)`` on an npu tensor, returning an npu
tensor (the core's shape check, the plugin's input check, one infer request, the wrap). The bare
loop is OpenVINO's fastest synchronous form (shared input tensor, ``infer()``, output copy) on an
infer request of the same compiled model. Timings are the best of
interleaved rounds (the machine is shared), never asserted. Without an Intel NPU this measures
OpenVINO's CPU device (NEURENIX_EMULATE=npu).

    python benchmarks/openvino.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("NEURENIX_EMULATE", "npu")
# This file is named openvino.py: with its folder first on sys.path it would shadow the real
# OpenVINO package for every import below.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

import numpy as np  # noqa: E402

import neurenix_core as nx  # noqa: E402
from neurenix_core.graph.ir import CompileOptions, Graph  # noqa: E402
from neurenix_npu_openvino.compiled import compile_graph  # noqa: E402


def seed_cnn(torch: Any) -> Any:
    """The CNN of the NPU seed document (with the Flatten it needs), as a PyTorch module."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    ).eval()


def _best_interleaved(fns: dict[str, Callable[[], Any]], rounds: int, per_round: int) -> dict[str, float]:
    """Seconds per call of each fn: the best round of ``rounds``. The fns take turns so load
    spikes hit them alike, and the best round is the one least disturbed by the other jobs on a
    shared machine (contention only ever adds time)."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
            samples[key].append((time.perf_counter() - t0) / per_round)
    return {k: float(np.min(v)) for k, v in samples.items()}


def _bare(model: Any, x: np.ndarray) -> Callable[[], Any]:
    """OpenVINO's fastest synchronous form: a shared input tensor, infer(), a copied output
    (request.infer([x]) adds a Python dispatcher that costs more than neurenix's whole wrapper)."""
    import openvino as ov

    request = model.compiled.create_infer_request()

    def run() -> np.ndarray:
        request.set_input_tensor(0, ov.Tensor(x, shared_memory=True))
        request.infer()
        return request.get_output_tensor(0).data.copy()

    return run


def bench(graph: Graph, torch_model: Any, batches: tuple[int, ...], threads_list: tuple[int, ...], rounds: int, progress: Any) -> list[dict[str, Any]]:
    import torch

    from neurenix_core.graph.quantization import calibrate, fold_batch_norm

    be = nx.backend("npu:0")
    rng = np.random.default_rng(0)
    folded = fold_batch_norm(graph)
    plan = calibrate(folded, [rng.standard_normal((8, 3, 32, 32)).astype(np.float32) for _ in range(4)], progress=False)
    rows = []
    for threads in threads_list:
        torch.set_num_threads(threads)
        for batch in batches:
            x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
            xt, x_torch = nx.asarray(x, device="npu:0"), torch.from_numpy(x)
            fns: dict[str, Callable[[], Any]] = {}
            models = {}
            for precision in ("fp32", "int8"):
                core = nx.compile(folded, device="npu:0", quantize=plan if precision == "int8" else None,
                                  precision=None if precision == "int8" else "fp32", threads=threads)
                core(xt)  # compiles for this shape
                models[precision] = compile_graph(be, folded.with_input_shapes(x.shape), CompileOptions(
                    device="npu:0", precision=precision, quantization=plan if precision == "int8" else None,
                    extra={"threads": threads}))  # the same cached OpenVINO model the core runs
                fns[f"nx_{precision}"] = (lambda c=core: c(xt))
            fns["ov_fp32"] = _bare(models["fp32"], x)
            fns["ov_int8"] = _bare(models["int8"], x)

            def torch_run() -> Any:
                with torch.inference_mode():
                    return torch_model(x_torch)

            fns["torch_fp32"] = torch_run
            np.testing.assert_allclose(fns["nx_fp32"]().numpy(), torch_run().numpy(), rtol=1e-3, atol=1e-4)
            per_round = max(1, int(0.02 / max(1e-5, _one(fns["nx_fp32"]))))
            t = _best_interleaved(fns, rounds, per_round)
            rows.append({
                "threads": threads, "batch": batch,
                **{f"{k}_us": v * 1e6 for k, v in t.items()},
                "overhead_fp32": t["nx_fp32"] / t["ov_fp32"],
                "overhead_int8": t["nx_int8"] / t["ov_int8"],
                "vs_torch": t["torch_fp32"] / t["nx_fp32"],
                "int8_gain": t["nx_fp32"] / t["nx_int8"],
            })
            progress()
    return rows


def _one(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| threads | batch | neurenix fp32 µs | OpenVINO fp32 µs | overhead fp32 | neurenix int8 µs | OpenVINO int8 µs "
            "| overhead int8 | PyTorch fp32 µs | PyTorch / neurenix | int8 speed-up |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['threads']} | {r['batch']} | {r['nx_fp32_us']:.0f} | {r['ov_fp32_us']:.0f} | {r['overhead_fp32']:.3f} | "
            f"{r['nx_int8_us']:.0f} | {r['ov_int8_us']:.0f} | {r['overhead_int8']:.3f} | {r['torch_fp32_us']:.0f} | "
            f"{r['vs_torch']:.2f}x | {r['int8_gain']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds (a smoke run, not a measurement)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    import torch
    from rich.progress import Progress

    from neurenix_core.nn import from_torch

    torch_model = seed_cnn(torch)
    graph = from_torch(torch_model).to_graph((1, 3, 32, 32))
    batches, threads = (1, 32), (1, 2)
    be = nx.backend("npu:0")
    print(f"device: npu:0 = OpenVINO {be.ov_device} ({be.full_device_name()}), emulated={be.emulated}, "
          f"OpenVINO {be.ov.get_version()}, torch {torch.__version__}")
    with Progress(transient=True) as bar:
        task = bar.add_task("benchmarking", total=len(batches) * len(threads))
        rows = bench(graph, torch_model, batches, threads, 3 if args.quick else 15, lambda: bar.advance(task))
    print(table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
