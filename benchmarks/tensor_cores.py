"""Tensor Core benchmark matrix (Ampere guide): baseline fp32, naive fp16, TC-optimised fp16/bf16.

For each configuration: latency, frames/s and (on a GPU) peak memory, through neurenix
(``TensorCoresBackend.optimize_model``) and through raw PyTorch doing the same by hand, measured
in the same run; the figure that matters is the ratio neurenix/native. Pinned to 1 and 2 threads.
Also: a bf16 matmul through ``nx.matmul`` vs ``torch.matmul`` (8192^3 on a GPU).

    NEURENIX_EMULATE=cuda .venv/bin/python benchmarks/tensor_cores.py --quick     # CPU emulation, seconds
    .venv/bin/python benchmarks/tensor_cores.py --json out.json                  # on an NVIDIA GPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("NEURENIX_EMULATE", "cuda")

CONFIGS = (
    ("baseline fp32", "fp32", False),
    ("naive fp16", "fp16", False),
    ("TC optimized fp16", "fp16", True),
    ("TC optimized bf16", "bf16", True),
)


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def timeit(fn: Callable[[], Any], device: Any, repeats: int, warmup: int = 2) -> float:
    """Median seconds per call."""
    for _ in range(warmup):
        fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _peak(device: Any, fn: Callable[[], Any]) -> int | None:
    import torch

    if device.type != "cuda":
        return None  # PyTorch's CPU allocator keeps no peak statistics
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def native_model(precision: str, optimized: bool, device: Any, state: dict[str, Any]) -> Any:
    """The same configuration by hand in raw PyTorch (the guide's recipe)."""
    import torch

    from neurenix_cuda_tc.models import unoptimized_cnn

    model = unoptimized_cnn()
    model.load_state_dict(state)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    model = model.to(device=device, dtype=dtype)
    if optimized:
        model = model.to(memory_format=torch.channels_last)
    return model, dtype


def bench_config(tc: Any, name: str, precision: str, optimized: bool, batch: int, size: int, repeats: int) -> dict[str, Any]:
    import torch

    from neurenix_cuda_tc.models import unoptimized_cnn

    torch.manual_seed(0)
    base = unoptimized_cnn()
    state = base.state_dict()
    device = tc.backend._native_device(tc.device.index)
    x = torch.randn(batch, 3, size, size, device=device)
    ours = tc.optimize_model(base, precision=precision, align=optimized, channels_last=optimized)
    native, dtype = native_model(precision, optimized, device, state)
    xn = x.to(dtype).contiguous(memory_format=torch.channels_last) if optimized else x.to(dtype)
    with torch.inference_mode():
        t_ours = timeit(lambda: ours(x), device, repeats)
        t_native = timeit(lambda: native(xn), device, repeats)
        peak = _peak(device, lambda: ours(x))
    tc.release()
    tc.initialize()
    return {"config": name, "latency_ms": 1e3 * t_ours, "fps": batch / t_ours, "native_latency_ms": 1e3 * t_native,
            "ratio_vs_native": t_native / t_ours, "peak_memory_bytes": peak}


def bench_matmul(tc: Any, n: int, repeats: int) -> dict[str, Any]:
    """bf16 n^3 matmul through neurenix vs torch.matmul on the same tensors; rate ratio (1.0 = equal)."""
    import numpy as np
    import torch

    import neurenix_core as nx

    host = np.random.default_rng(0).standard_normal((n, n), np.float32)
    a = nx.astype(nx.asarray(host, device=str(tc.device)), nx.bfloat16)
    device = tc.backend._native_device(tc.device.index)
    t_nx = timeit(lambda: nx.matmul(a, a), device, repeats)
    t_torch = timeit(lambda: torch.matmul(a.native, a.native), device, repeats)
    return {"n": n, "neurenix_tflops": 2 * n**3 / t_nx / 1e12, "torch_tflops": 2 * n**3 / t_torch / 1e12, "rate_ratio": t_torch / t_nx}


def run(quick: bool, threads: list[int]) -> dict[str, Any]:
    import torch

    from neurenix_cuda_tc.api import TensorCoresBackend

    tc = TensorCoresBackend()
    tc.initialize()
    gpu = not tc.emulated
    batch, size, repeats = (8, 16, 3) if quick else (64, 64, 20)
    n = 8192 if gpu and not quick else (256 if quick else 1024)
    out: dict[str, Any] = {"device": str(tc.device), "emulated": tc.emulated, "torch": torch.__version__, "runs": []}
    for t in threads:
        torch.set_num_threads(t)
        rows = [bench_config(tc, name, p, o, batch, size, repeats) for name, p, o in CONFIGS if gpu or p != "fp16" or not quick]
        out["runs"].append({"threads": t, "configs": rows, "matmul_bf16": bench_matmul(tc, n, repeats)})
    tc.release()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run in seconds")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    result = run(args.quick, args.threads)
    for r in result["runs"]:
        print(f"threads={r['threads']} device={result['device']} emulated={result['emulated']}")
        for c in r["configs"]:
            peak = "-" if c["peak_memory_bytes"] is None else f"{c['peak_memory_bytes'] / 2**20:.1f} MiB"
            print(f"  {c['config']:<20} {c['latency_ms']:8.3f} ms  {c['fps']:9.1f} frames/s  peak {peak:>10}  "
                  f"native {c['native_latency_ms']:8.3f} ms  ratio {c['ratio_vs_native']:.2f}")
        m = r["matmul_bf16"]
        print(f"  bf16 matmul {m['n']}^3: neurenix {m['neurenix_tflops']:.3f} TFLOP/s, torch {m['torch_tflops']:.3f}, ratio {m['rate_ratio']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
