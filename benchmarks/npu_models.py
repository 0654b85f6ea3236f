"""NPU plugin (OpenVINO) on real architectures: the model zoo's ResNet basic block and MobileNetV3
block imported from PyTorch (``nx.nn.from_torch`` -> ``nx.compile(device="npu:0",
precision="fp32")``, the op-level lowering) against the same torch module converted by
OpenVINO itself (``openvino.convert_model`` -> ``Core.compile_model``), fp32, batch 1 and 32,
1 and 2 threads.

The native side is what an OpenVINO user writes, with the properties neurenix sets spelled out
(INFERENCE_NUM_THREADS, INFERENCE_PRECISION_HINT=f32, PERFORMANCE_HINT=LATENCY,
EXECUTION_MODE_HINT=PERFORMANCE), and a reused infer request with a shared input tensor. Both
compiled models' configurations are read back with ``compiled.get_property`` (plus the count of
conv/FC layers in the runtime graph) and a row whose two sides differ is refused. Outputs are
checked equal (fp32, 1e-4) before timing. Without an Intel NPU this measures OpenVINO's CPU
device (NEURENIX_EMULATE=npu).

    python benchmarks/npu_models.py [--quick] [--threads 1 2] [--batches 1 32] [--models resnet_block mobilenetv3_block] [--json out.json]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("NEURENIX_EMULATE", "npu")
_HERE = os.path.dirname(os.path.abspath(__file__))
# benchmarks/openvino.py would shadow the real OpenVINO package while this folder is on sys.path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
# The model zoo of the tests: the same architectures the acceptance test compiles on every backend.
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tests", "support"))

import numpy as np  # noqa: E402

import neurenix_core as nx  # noqa: E402
from neurenix_core.cli import benchkit  # noqa: E402

MODELS = ("resnet_block", "mobilenetv3_block")
IMAGE = 32  # input H = W
#: Properties both sides compile with (neurenix's npu backend sets exactly these for fp32).
PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "EXECUTION_MODE_HINT": "PERFORMANCE"}


def native(module: Any, threads: int, x: np.ndarray) -> tuple[Callable[[], np.ndarray], dict[str, str]]:
    """OpenVINO's own PyTorch path on the same module: convert_model + compile_model."""
    import openvino as ov
    import torch

    from neurenix_npu_openvino.compiled import runtime_config

    ov_model = ov.convert_model(module, example_input=torch.from_numpy(x), input=[list(x.shape)])
    compiled = ov.Core().compile_model(ov_model, "CPU", {**PROPERTIES, "INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()

    def run() -> np.ndarray:
        request.set_input_tensor(0, ov.Tensor(x, shared_memory=True))
        request.infer()
        return request.get_output_tensor(0).data.copy()

    return run, runtime_config(compiled)


def bench(name: str, batches: list[int], threads_list: list[int], rounds: int, progress: Any = None) -> list[dict[str, Any]]:
    import model_zoo as zoo
    import torch

    from neurenix_core.nn import from_torch

    module = zoo.build(name)
    rng = np.random.default_rng(0)
    rows = []
    for threads in threads_list:
        for batch in batches:
            x = rng.standard_normal((batch, 3, IMAGE, IMAGE)).astype(np.float32)
            imported = from_torch(module, torch.from_numpy(x))
            compiled = nx.compile(imported, device="npu:0", precision="fp32", threads=threads, progress=False)
            xt = nx.asarray(x, device="npu:0")
            got = compiled(xt).numpy()
            run, native_config = native(module, threads, x)
            want = module(torch.from_numpy(x)).detach().numpy()
            assert zoo.max_rel_err(got, want) <= 1e-4 and zoo.max_rel_err(run(), want) <= 1e-4, "outputs differ from torch eager"
            placement = compiled.placement
            assert not placement.partitioned, placement.line()  # the whole model on the device, no CPU segment
            t = benchkit.interleaved({"neurenix": lambda c=compiled, x=xt: c(x), "native": run}, rounds=rounds)
            rows.append(benchkit.row("npu_models", name, "fp32", batch, threads, t["neurenix"], t["native"],
                                     compiled.native(x.shape).config, native_config))
            if progress is not None:
                progress()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = benchkit.parser(__doc__, models=MODELS).parse_args(argv)
    from rich.progress import Progress

    be = nx.backend("npu:0")
    rows: list[dict[str, Any]] = []
    with Progress(transient=True) as bar:
        task = bar.add_task("npu_models", total=len(args.models) * len(args.threads) * len(args.batches))
        for name in args.models:
            rows += bench(name, args.batches, args.threads, 3 if args.quick else 30, lambda: bar.advance(task))
    device = f"npu:0 = OpenVINO {be.ov_device} ({be.full_device_name()}), emulated={be.emulated}, OpenVINO {be.ov.get_version()}"
    print(device)
    benchkit.report("npu_models", rows, args, device=device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
