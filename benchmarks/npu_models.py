"""NPU plugin (OpenVINO) on real architectures: the model zoo's ResNet basic block and MobileNetV3
block imported from PyTorch (``nx.nn.from_torch`` -> ``nx.compile(device="npu:0")``, the
op-level lowering), fp32 and int8, batch 1 and 32, 1 and 2 threads.

fp32: against the same torch module converted by OpenVINO itself (``openvino.convert_model`` ->
``Core.compile_model``). int8: ``nx.compile(..., quantize="int8", calibration=batches)`` against
the very ``ov.Model`` neurenix lowered (FakeQuantize included; rebuilt from the compiled
model's placement graph and plan) compiled through bare ``openvino.Core().compile_model``: the
same graph on both sides, so the ratio is the wrapper's cost. (OpenVINO's own quantization flow,
NNCF, is not installed here.) The int8 row's speed-up columns are fp32 time / int8 time, for
neurenix and for the native side (convert_model fp32 vs the bare int8 model).

The native side is what an OpenVINO user writes, with the properties neurenix sets spelled out
(INFERENCE_NUM_THREADS, INFERENCE_PRECISION_HINT=f32, PERFORMANCE_HINT=LATENCY,
EXECUTION_MODE_HINT=PERFORMANCE), and a reused infer request with a shared input tensor. Both
compiled models' configurations are read back with ``compiled.get_property`` (plus the count of
conv/FC layers running in integer precision) and a row whose two sides differ is refused.
Before timing, fp32 outputs are checked against torch eager (1e-4); int8 outputs of the two
sides against each other (1e-5: one graph) and against torch eager (INT8_TOLERANCE). Without
an Intel NPU this measures OpenVINO's CPU device (NEURENIX_EMULATE=npu).

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

import numpy as np

import neurenix_core as nx
from neurenix_core import benchkit

MODELS = ("resnet_block", "mobilenetv3_block")
IMAGE = 32  # input H = W
#: Properties both sides compile with (neurenix's npu backend sets exactly these for fp32).
PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "EXECUTION_MODE_HINT": "PERFORMANCE"}
#: int8 against torch eager fp32: largest error relative to the largest output (8-bit activations
#: through two to four quantized layers; the int8 model is not expected to match to 1e-4).
INT8_TOLERANCE = 0.05
CALIBRATION = (4, 8)  # batches x images per batch, 3x32x32 standard normal


def run_request(compiled: Any, x: np.ndarray) -> Callable[[], np.ndarray]:
    """A reused infer request on a shared input tensor: OpenVINO's own synchronous API."""
    import openvino as ov

    request = compiled.create_infer_request()

    def run() -> np.ndarray:
        request.set_input_tensor(0, ov.Tensor(x, shared_memory=True))
        request.infer()
        return request.get_output_tensor(0).data.copy()

    return run


def native(module: Any, threads: int, x: np.ndarray) -> tuple[Callable[[], np.ndarray], dict[str, str]]:
    """OpenVINO's own PyTorch path on the same module: convert_model + compile_model."""
    import openvino as ov
    import torch
    from neurenix_npu_openvino.compiled import runtime_config

    ov_model = ov.convert_model(module, example_input=torch.from_numpy(x), input=[list(x.shape)])
    compiled = ov.Core().compile_model(ov_model, "CPU", {**PROPERTIES, "INFERENCE_NUM_THREADS": threads})
    return run_request(compiled, x), runtime_config(compiled)


def native_int8(compiled_nx: Any, threads: int, x: np.ndarray) -> tuple[Callable[[], np.ndarray], dict[str, str]]:
    """The ov.Model neurenix built for ``compiled_nx`` (its placement graph lowered with its plan:
    FakeQuantize on activations and weights), compiled and run through OpenVINO's own API."""
    import openvino as ov
    from neurenix_npu_openvino.compiled import runtime_config
    from neurenix_npu_openvino.lowering import lower_graph

    ov_model = lower_graph(compiled_nx.placement.graph, compiled_nx.plan, device="npu:0")
    compiled = ov.Core().compile_model(ov_model, "CPU", {**PROPERTIES, "INFERENCE_NUM_THREADS": threads})
    return run_request(compiled, x), runtime_config(compiled)


def bench(name: str, batches: list[int], threads_list: list[int], rounds: int, progress: Any = None) -> list[dict[str, Any]]:
    import model_zoo as zoo
    import torch

    from neurenix_core.nn import from_torch

    module = zoo.build(name)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((CALIBRATION[1], 3, IMAGE, IMAGE)).astype(np.float32) for _ in range(CALIBRATION[0])]
    rows = []
    for threads in threads_list:
        for batch in batches:
            x = rng.standard_normal((batch, 3, IMAGE, IMAGE)).astype(np.float32)
            xt = nx.asarray(x, device="npu:0")
            want = module(torch.from_numpy(x)).detach().numpy()
            imported = from_torch(module, torch.from_numpy(x))
            fp32 = fp32_row(name, imported, module, threads, x, xt, want, rounds)
            int8 = int8_row(name, imported, threads, x, xt, want, rounds, calibration)
            int8["int8_speedup"] = fp32["neurenix_us"] / int8["neurenix_us"]
            int8["native_int8_speedup"] = fp32["native_us"] / int8["native_us"]
            rows += [fp32, int8]
            if progress is not None:
                progress()
    return rows


def fp32_row(name: str, imported: Any, module: Any, threads: int, x: np.ndarray, xt: Any, want: np.ndarray, rounds: int) -> dict[str, Any]:
    import model_zoo as zoo

    compiled = nx.compile(imported, device="npu:0", precision="fp32", threads=threads, progress=False)
    got = compiled(xt).numpy()
    run, native_config = native(module, threads, x)
    assert zoo.max_rel_err(got, want) <= 1e-4 and zoo.max_rel_err(run(), want) <= 1e-4, "fp32 outputs differ from torch eager"
    assert not compiled.placement.partitioned, compiled.placement.line()  # the whole model on the device, no CPU segment
    t = benchkit.interleaved({"neurenix": lambda c=compiled, x=xt: c(x), "native": run}, rounds=rounds)
    return benchkit.row("npu_models", name, "fp32", x.shape[0], threads, t["neurenix"], t["native"], compiled.native(x.shape).config, native_config)


def int8_row(name: str, imported: Any, threads: int, x: np.ndarray, xt: Any, want: np.ndarray, rounds: int,
             calibration: list[np.ndarray]) -> dict[str, Any]:
    import model_zoo as zoo

    compiled = nx.compile(imported, device="npu:0", quantize="int8", calibration=calibration, threads=threads, progress=False)
    got = compiled(xt).numpy()
    assert not compiled.placement.partitioned, compiled.placement.line()
    run, native_config = native_int8(compiled, threads, x)
    np.testing.assert_allclose(run(), got, rtol=1e-5, atol=1e-5)  # one graph on both sides, same numbers
    err = zoo.max_rel_err(got, want)
    assert err <= INT8_TOLERANCE, f"{name} int8: {err:.3f} from torch eager fp32 (tolerance {INT8_TOLERANCE})"
    config = compiled.native(x.shape).config
    ints, total = (int(n) for n in config["integer_layers"].split("/"))
    assert ints == total > 0, f"{name} int8: only {config['integer_layers']} conv/FC layers run in integer precision"
    t = benchkit.interleaved({"neurenix": lambda c=compiled, x=xt: c(x), "native": run}, rounds=rounds)
    return benchkit.row("npu_models", name, "int8", x.shape[0], threads, t["neurenix"], t["native"], config, native_config, int8_err=err)


def main(argv: list[str] | None = None) -> int:
    args = benchkit.parser(__doc__, models=MODELS).parse_args(argv)
    be = nx.backend("npu:0")
    rows = benchkit.run_models("npu_models", args, bench, 30)
    device = f"npu:0 = OpenVINO {be.ov_device} ({be.full_device_name()}), emulated={be.emulated}, OpenVINO {be.ov.get_version()}"
    print(device)
    benchkit.report("npu_models", rows, args, [("int8_speedup", "int8 speed-up, neurenix (fp32/int8)", ".2f"),
                                               ("native_int8_speedup", "int8 speed-up, native", ".2f")], device=device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
