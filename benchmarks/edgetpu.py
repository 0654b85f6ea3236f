"""Edge TPU plugin (LiteRT): nx.compile'd models against the same .tflite on a bare LiteRT
interpreter, in the same run, fp32 and int8, batch 1 and 32, 1 and 2 threads.

neurenix is called the way a user calls it: ``compiled(x)`` on an edgetpu tensor, returning an
edgetpu tensor. The bare loop is LiteRT's own API on the same model bytes: ``set_tensor``,
``invoke``, ``get_tensor`` on an interpreter created with the same thread count and kernels.
The written models take float32 NCHW input and quantize/transpose inside the model, so both
sides feed the same array: neurenix's edgetpu tensor shares its memory with the NumPy array the
LiteRT loops read (``nx.asarray(x, device="edgetpu:0", copy=False)``). A second bare interpreter
of the same bytes runs in the same rounds as a control: "control / native" is what the machine
alone makes of two identical interpreters (on 2 shared vCPUs, two thread pools of 2 threads can
differ by well over 5%), so a ratio is read against it. A fourth contender calls LiteRT's own
API on the very interpreter neurenix's model holds ("neurenix / same interpreter"): same thread
pool, same buffers, so that ratio is what neurenix's call path adds and nothing else
(interpreter instances of the same bytes differ among themselves by a few percent at 2 threads
and batch 32, docs/edgetpu.md). Each side's configuration is read back (thread count, kernels, which
ops the XNNPACK delegate took) and a row whose sides differ is refused. Without a Coral device
this measures LiteRT on the host CPU (NEURENIX_EMULATE=edgetpu).

    python benchmarks/edgetpu.py [--quick] [--threads 1 2] [--batches 1 32] [--models mlp cnn] [--json out.json] [--no-amx]

``--no-amx`` withholds Intel AMX from the benchmark process (``benchmarks/no_amx.py``), so an AMX
host measures the AVX512-VNNI int8 kernels that CPUs without AMX run; the ``x86_amx`` entry of
the read-back configuration says which ran. The ``stem`` entry says whether the int8 model was
written with the space-to-depth stem (``stem="auto"`` applies it where XNNPACK runs int8 on AMX):
neurenix's side states what its writer chose, the native side reads it back from the ops of its
own interpreter of the same bytes.
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("NEURENIX_EMULATE", "edgetpu")

import numpy as np

import neurenix_core as nx
from neurenix_core import benchkit

MODELS = ("mlp", "cnn", "cnn-s2")


def build(name: str) -> tuple[Any, tuple[int, ...]]:
    """The benchmark models in neurenix's own nn: an MLP, the NPU seed document's CNN and a CNN
    with a stride-2 stem (the usual mobile design: fewer pixels, more channels per conv)."""
    from neurenix_core import nn

    nn.manual_seed(0)
    if name == "mlp":
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10)), (16,)
    if name == "cnn-s2":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, 1, 1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
        ), (3, 32, 32)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    ), (3, 32, 32)


def bare(model: Any, threads: int) -> tuple[Any, dict[str, Any]]:
    """LiteRT's own API on the same model bytes, and its configuration read back."""
    from neurenix_edgetpu.amx import amx_state
    from neurenix_edgetpu.lower_s2d import stem_of_ops
    from neurenix_edgetpu.runtime import KERNELS, delegation

    litert = model.backend.litert
    kernels = model.config["kernels"]
    it = litert.Interpreter(model_content=model.tflite_bytes, num_threads=threads,
                            experimental_op_resolver_type=getattr(litert.OpResolverType, KERNELS[kernels]))
    it.allocate_tensors()
    ops = delegation(it)
    config = {"runtime": f"LiteRT {model.backend.version}", "threads": threads, "kernels": kernels,
              "delegated_ops": f"{sum(1 for _, d in ops if d)}/{len(ops)}",
              "cpu_kernel_ops": ",".join(sorted({n for n, d in ops if not d})) or "-", "x86_amx": amx_state(),
              "stem": stem_of_ops(n for n, _ in ops)}

    return api_loop(it), config


def api_loop(it: Any) -> Any:
    """One call through LiteRT's own API on interpreter ``it``: set_tensor, invoke, get_tensor."""
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def run(x: np.ndarray) -> np.ndarray:
        it.set_tensor(i, x)
        it.invoke()
        return it.get_tensor(o)

    return run


def bench(name: str, batches: list[int], threads_list: list[int], rounds: int, progress: Any = None) -> list[dict[str, Any]]:
    module, feat = build(name)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((8, *feat)).astype(np.float32) for _ in range(4)]
    rows = []
    for threads in threads_list:
        for batch in batches:
            x = rng.standard_normal((batch, *feat)).astype(np.float32)
            # The edgetpu tensor shares x's memory (copy=False), so every contender reads the same
            # input buffer: with a copy of its own, neurenix's 393 KB batch-32 input was the one
            # buffer the other three contenders never touched, evicted from cache between its turns.
            xt = nx.asarray(x, device="edgetpu:0", copy=False)
            times: dict[str, float] = {}
            for precision in ("fp32", "int8"):
                kw: dict[str, Any] = {"precision": precision, "num_threads": threads}
                if precision == "int8":
                    kw["calibration"] = calibration
                compiled = nx.compile(module, device="edgetpu:0", progress=False, **kw)
                y = compiled(xt)
                model = compiled.native(x.shape)
                run, native_config = bare(model, threads)
                control, _ = bare(model, threads)  # a second bare interpreter: the machine's own spread
                np.testing.assert_array_equal(run(x), y.numpy())  # same model, same numbers
                same = api_loop(model.runner.interpreter)  # LiteRT's API on neurenix's own interpreter
                t = benchkit.interleaved({"neurenix": lambda c=compiled, a=xt: c(a), "native": lambda r=run, a=x: r(a),
                                          "control": lambda r=control, a=x: r(a), "same": lambda r=same, a=x: r(a)}, rounds=rounds)
                times[precision] = t["neurenix"]
                rows.append(benchkit.row("edgetpu", name, precision, batch, threads, t["neurenix"], t["native"],
                                         model.config, native_config, control_ratio=t["control"] / t["native"],
                                         same_ratio=t["neurenix"] / t["same"],
                                         stem=model.config["stem"]))
            rows[-1]["int8_speedup"] = times["fp32"] / times["int8"]
            rows[-2]["int8_speedup"] = None
            if progress is not None:
                progress()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = benchkit.parser(__doc__, models=MODELS)
    p.add_argument("--no-amx", action="store_true", help="withhold Intel AMX from this process (XNNPACK then runs its AVX512-VNNI int8 kernels)")
    args = p.parse_args(argv)
    if args.no_amx:
        from no_amx import withhold  # beside this file; before LiteRT creates an interpreter

        withhold()
    rows = benchkit.run_models("edgetpu", args, bench, 200)
    device = nx.backend("edgetpu:0").device_info(0)["name"]
    benchkit.report("edgetpu", rows, args, [("control_ratio", "control / native", ".3f"),
                                             ("same_ratio", "neurenix / same interpreter", ".3f"),
                                             ("int8_speedup", "int8 speed-up (fp32/int8, neurenix)", ".2f"),
                                             ("stem", "stem", "s")], device=device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
