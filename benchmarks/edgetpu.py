"""Edge TPU backend overhead: a compiled model through neurenix vs the same .tflite on the bare
LiteRT interpreter, in the same run; and int8 vs float32 latency.

Each row pins LiteRT to 1 and to 2 threads. neurenix's time includes what the user gets on top of
the bare interpreter: layout change (NCHW -> NHWC), quantization of the float input,
dequantization of the output and the interpreter lock. The bare loop feeds pre-quantized NHWC
input. Both use the same kernels ("optimized": TFLite's optimized integer kernels; "xnnpack" for
float32). Without a Coral device this measures LiteRT on the host CPU (NEURENIX_EMULATE=edgetpu).

    python benchmarks/edgetpu.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("NEURENIX_EMULATE", "edgetpu")

import numpy as np  # noqa: E402

import neurenix_core as nx  # noqa: E402
from neurenix_core.graph.ir import CompileOptions, Graph  # noqa: E402
from neurenix_core.graph.quantization import calibrate  # noqa: E402
from neurenix_edgetpu.compiled import compile_graph  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plugins", "neurenix-edgetpu", "tests"))
from edgetpu_helpers import cnn_graph, mlp_graph  # noqa: E402


def _time(fn, repeat: int) -> float:
    """Median seconds per call over ``repeat`` calls (after warm-up)."""
    for _ in range(max(3, repeat // 10)):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


def _bare(model, x_native: np.ndarray, threads: int, kernels: str):
    litert = model.backend.litert
    kinds = {"optimized": litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, "xnnpack": litert.OpResolverType.BUILTIN}
    it = litert.Interpreter(model_content=model.tflite_bytes, num_threads=threads, experimental_op_resolver_type=kinds[kernels])
    it.allocate_tensors()
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def run() -> np.ndarray:
        it.set_tensor(i, x_native)
        it.invoke()
        return it.get_tensor(o)

    return run


def bench(name: str, graph: Graph, shape: tuple[int, ...], repeat: int) -> list[dict[str, object]]:
    be = nx.backend("edgetpu:0")
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape).astype(np.float32)
    plan = calibrate(graph, [rng.normal(size=shape).astype(np.float32) for _ in range(8)], progress=False)
    rows = []
    for threads in (1, 2):
        times = {}
        for precision, kernels in (("int8", "optimized"), ("fp32", "xnnpack")):
            options = CompileOptions(device=nx.Device("edgetpu:0"), precision=precision, quantization=plan if precision == "int8" else None,
                                     extra={"num_threads": threads, "kernels": kernels})
            model = compile_graph(be, graph, options)
            native = model._in(model.inputs[0], x)  # what the bare interpreter is fed: NHWC, quantized
            bare = _bare(model, native, threads, kernels)
            np.testing.assert_array_equal(bare(), model.runner.invoke(native)[0])  # same model, same numbers
            t_nx, t_bare = _time(lambda: model(x), repeat), _time(bare, repeat)
            times[precision] = t_nx
            rows.append({"model": name, "precision": precision, "threads": threads, "neurenix_us": t_nx * 1e6,
                         "bare_us": t_bare * 1e6, "overhead_ratio": t_nx / t_bare})
        rows.append({"model": name, "precision": "int8/fp32", "threads": threads, "latency_ratio": times["int8"] / times["fp32"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few repetitions (smoke test)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    repeat = 30 if args.quick else 500
    print(f"device: {nx.backend('edgetpu:0').device_info(0)['name']}; repeat={repeat} (median)")
    rows = bench("mlp 16-32-10", mlp_graph(), (1, 16), repeat) + bench("cnn 3x16x16", cnn_graph(), (1, 3, 16, 16), repeat)
    print(f"{'model':<14}{'precision':<11}{'threads':>8}{'neurenix us':>13}{'bare us':>10}{'ratio':>8}")
    for r in rows:
        if "latency_ratio" in r:
            print(f"{r['model']:<14}{r['precision']:<11}{r['threads']:>8}{'':>13}{'':>10}{r['latency_ratio']:>8.2f}")
        else:
            print(f"{r['model']:<14}{r['precision']:<11}{r['threads']:>8}{r['neurenix_us']:>13.1f}{r['bare_us']:>10.1f}{r['overhead_ratio']:>8.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
