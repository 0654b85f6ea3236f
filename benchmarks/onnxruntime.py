"""neurenix on ort:0 vs the same ONNX model in a bare ``onnxruntime.InferenceSession``.

Same run, same process, same ONNX model (the one neurenix lowered and runs), same thread count:
the ratio is the cost of neurenix's layer (input placement, shape check, dispatch, wrapping the
output as a Tensor). Both sessions' configurations are read back from ONNX Runtime (providers,
intra/inter-op threads, graph optimization level, execution mode) and a row whose two sides
differ is refused. Batch 1 and 32, 1 and 2 intra-op threads.

    python benchmarks/onnxruntime.py [--quick] [--threads 1 2] [--batches 1 32] [--json out.json]
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

# This file is named onnxruntime.py: with its folder on sys.path it would shadow the real package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

from neurenix_core import benchkit


def _model() -> Any:
    from neurenix_core import nn

    nn.init.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10),
    )


def measure(batch: int, threads: int, rounds: int) -> dict[str, Any]:
    import onnxruntime as ort
    from neurenix_onnxruntime.compiled import session_config

    import neurenix_core as nx

    x_host = np.random.default_rng(0).standard_normal((batch, 3, 32, 32)).astype(np.float32)
    compiled = nx.compile(_model(), device="ort:0", threads=threads)
    x = nx.asarray(x_host, device="ort:0")
    y = compiled(x)  # compiles for this shape
    model = compiled.native(x_host.shape)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    bare = ort.InferenceSession(model.onnx_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed_name, out_name = bare.get_inputs()[0].name, bare.get_outputs()[0].name
    np.testing.assert_allclose(bare.run([out_name], {feed_name: x_host})[0], y.numpy(), rtol=1e-5, atol=1e-6)
    t = benchkit.interleaved({"neurenix": lambda: compiled(x), "native": lambda: bare.run([out_name], {feed_name: x_host})}, rounds=rounds)
    return benchkit.row("onnxruntime", "cnn", "fp32", batch, threads, t["neurenix"], t["native"], model.config, session_config(bare))


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = benchkit.parser(__doc__).parse_args(argv)
    from rich.progress import track

    combos = [(t, b) for t in args.threads for b in args.batches]
    rows = [measure(b, t, 3 if args.quick else 25) for t, b in track(combos, description="onnxruntime", transient=True)]
    benchkit.report("onnxruntime", rows, args)
    return rows


if __name__ == "__main__":
    main()
