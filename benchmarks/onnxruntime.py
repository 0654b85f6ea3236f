"""neurenix on ort:0 vs the same ONNX model in a bare ``onnxruntime.InferenceSession``.

Same run, same process, same ONNX model (the one neurenix lowered and runs), same thread count:
the ratio is the cost of neurenix's layer (input placement, shape check, dispatch, wrapping the
output as a Tensor). Batch 1 and 32, 1 and 2 intra-op threads.

    python benchmarks/onnxruntime.py            # full
    python benchmarks/onnxruntime.py --quick    # a few iterations (smoke test)
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

import numpy as np

# This file is named onnxruntime.py: with its folder on sys.path it would shadow the real package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


def _time(fn: Callable[[], Any], iters: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean seconds per call over ``iters`` calls."""
    fn()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        runs.append((time.perf_counter() - t0) / iters)
    return statistics.median(runs)


def _model() -> Any:
    from neurenix_core import nn

    nn.init.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10),
    )


def measure(batch: int, threads: int, iters: int, repeats: int) -> dict[str, Any]:
    import onnxruntime as ort

    import neurenix_core as nx

    x_host = np.random.default_rng(0).standard_normal((batch, 3, 32, 32)).astype(np.float32)
    compiled = nx.compile(_model(), device="ort:0", threads=threads)
    x = nx.asarray(x_host, device="ort:0")
    y = compiled(x)  # compiles for this shape
    from neurenix_onnxruntime.compiled import _CACHE

    # The very ONNX model neurenix runs for this batch size (the plugin's session cache).
    ort_model = next(m for m in reversed(list(_CACHE.values())) if m.lowered.model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == batch)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    bare = ort.InferenceSession(ort_model.lowered.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed_name, out_name = bare.get_inputs()[0].name, bare.get_outputs()[0].name
    np.testing.assert_allclose(bare.run([out_name], {feed_name: x_host})[0], y.numpy(), rtol=1e-5, atol=1e-6)
    t_bare = _time(lambda: bare.run([out_name], {feed_name: x_host}), iters, repeats)
    t_nx = _time(lambda: compiled(x), iters, repeats)
    return {"batch": batch, "threads": threads, "bare_ms": t_bare * 1e3, "neurenix_ms": t_nx * 1e3, "ratio": t_nx / t_bare}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few iterations: checks the benchmark runs, numbers are rough")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    iters, repeats = (5, 2) if args.quick else (200, 7)
    rows = []
    from rich.progress import track

    for threads in (1, 2):
        for batch in track((1, 32), description=f"{threads} thread(s)", transient=True):
            rows.append(measure(batch, threads, iters if batch == 1 else max(iters // 4, 2), repeats))
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'threads':>7} {'batch':>5} {'bare ORT ms':>12} {'neurenix ms':>12} {'ratio':>6}")
        for r in rows:
            print(f"{r['threads']:>7} {r['batch']:>5} {r['bare_ms']:>12.4f} {r['neurenix_ms']:>12.4f} {r['ratio']:>6.3f}")
    return rows


if __name__ == "__main__":
    main()
