"""NPU plugin (OpenVINO): nx.compile'd CNNs against the same OpenVINO model compiled and run
through OpenVINO's own API, fp32 and int8, batch 1 and 32, 1 and 2 threads; PyTorch eager
for reference.

neurenix is called the way a user calls it: ``compiled(x)`` on an npu tensor, returning an npu
tensor. The native side is what an OpenVINO user writes: ``ov.Core().compile_model(model,
"CPU", {INFERENCE_NUM_THREADS, INFERENCE_PRECISION_HINT, PERFORMANCE_HINT})`` on the very
``ov.Model`` neurenix lowered (FakeQuantize included for int8), then a reused infer request with
a shared input tensor. Both compiled models' configurations are read back with
``compiled.get_property`` (threads, streams, precision, hints, pinning, core type, integer
layers) and a row whose two sides differ is refused.

PyTorch runs in its own timing phase: its OpenMP workers keep spinning after a call, and
interleaved with OpenVINO they slowed whichever contender ran next (at 2 threads on 2 CPUs the
neurenix side always ran right after PyTorch: that, not a wrapper cost, was the 1.4-1.6x).
Without an Intel NPU this measures OpenVINO's CPU device (NEURENIX_EMULATE=npu).

    python benchmarks/openvino.py [--quick] [--threads 1 2] [--batches 1 32] [--models cnn cnn-s2] [--json out.json]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("NEURENIX_EMULATE", "npu")
# This file is named openvino.py: with its folder first on sys.path it would shadow the real
# OpenVINO package for every import below.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

import numpy as np

import neurenix_core as nx
from neurenix_core import benchkit

MODELS = ("cnn", "cnn-s2")


def torch_model(torch: Any, name: str) -> Any:
    """The NPU seed document's CNN, and a stride-2-stem variant, as PyTorch modules."""
    torch.manual_seed(0)
    nn = torch.nn
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
        ).eval()
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, 1, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    ).eval()


def native(ov_model: Any, precision: str, threads: int, x: np.ndarray) -> tuple[Callable[[], Any], dict[str, str]]:
    """OpenVINO's own API on the same ov.Model: what its user would write."""
    import openvino as ov
    from neurenix_npu_openvino.compiled import runtime_config

    compiled = ov.Core().compile_model(ov_model, "CPU", {
        "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
    })
    request = compiled.create_infer_request()

    def run() -> np.ndarray:
        request.set_input_tensor(0, ov.Tensor(x, shared_memory=True))
        request.infer()
        return request.get_output_tensor(0).data.copy()

    return run, runtime_config(compiled)


def bench(name: str, batches: list[int], threads_list: list[int], rounds: int, progress: Any = None) -> list[dict[str, Any]]:
    import torch
    from neurenix_npu_openvino.lowering import lower_graph

    from neurenix_core.graph.quantization import calibrate, fold_batch_norm
    from neurenix_core.nn import from_torch

    tm = torch_model(torch, name)
    graph = fold_batch_norm(from_torch(tm).to_graph((1, 3, 32, 32)))
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((8, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    plan = calibrate(graph, calibration, progress=False)
    rows = []
    for threads in threads_list:
        torch.set_num_threads(threads)
        for batch in batches:
            x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
            xt, x_torch = nx.asarray(x, device="npu:0"), torch.from_numpy(x)
            times = {}
            for precision in ("fp32", "int8"):
                quant = plan if precision == "int8" else None
                compiled = nx.compile(graph, device="npu:0", precision=precision, quantize=quant, threads=threads)
                y = compiled(xt)
                if precision == "fp32":
                    y_fp32 = y.numpy()
                model = compiled.native(x.shape)
                run, native_config = native(lower_graph(graph.with_input_shapes(x.shape), quant, device="npu:0"), precision, threads, x)
                np.testing.assert_allclose(run(), y.numpy(), rtol=1e-5, atol=1e-5)  # same model, same numbers
                t = benchkit.interleaved({"neurenix": lambda c=compiled, xt=xt: c(xt), "native": run}, rounds=rounds)
                times[precision] = t["neurenix"]
                rows.append(benchkit.row("openvino", name, precision, batch, threads, t["neurenix"], t["native"], model.config, native_config))

            def torch_run(x_torch: Any = x_torch) -> Any:
                with torch.inference_mode():
                    return tm(x_torch)

            np.testing.assert_allclose(torch_run().numpy(), y_fp32, rtol=1e-3, atol=1e-4)  # the lowered graph is the torch model
            t_torch = benchkit.interleaved({"torch": torch_run}, rounds=max(3, rounds // 3))["torch"]
            for r in rows[-2:]:
                r["torch_fp32_us"] = t_torch * 1e6
            rows[-1]["int8_speedup"] = times["fp32"] / times["int8"]
            rows[-2]["int8_speedup"] = None
            if progress is not None:
                progress()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = benchkit.parser(__doc__, models=MODELS).parse_args(argv)
    be = nx.backend("npu:0")
    rows = benchkit.run_models("openvino", args, bench, 40)
    device = f"npu:0 = OpenVINO {be.ov_device} ({be.full_device_name()}), emulated={be.emulated}, OpenVINO {be.ov.get_version()}"
    benchkit.report("openvino", rows, args, [("int8_speedup", "int8 speed-up (fp32/int8, neurenix)", ".2f"),
                                             ("torch_fp32_us", "PyTorch eager fp32 µs", ".0f")], device=device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
