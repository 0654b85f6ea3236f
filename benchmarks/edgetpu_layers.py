"""Edge TPU plugin (LiteRT on the CPU): why int8 is not always faster than fp32.

Times single convolutions, each written by the plugin as an fp32 model (NCHW float input, two
TRANSPOSEs around the CONV_2D) and as a full-int8 model with ``io="int8"`` (int8 NHWC input, the
CONV_2D alone: no QUANTIZE/TRANSPOSE edges), with ``interpreter.invoke()`` only, batch 1, one
thread, XNNPACK kernels, best of 15 rounds. It shows the per-layer cost of XNNPACK's QS8
convolution against its fp32 one (docs/edgetpu.md, Benchmark). Not a neurenix-vs-native
comparison (both columns are LiteRT), so not part of ``neurenix bench``.

XNNPACK's int8 convolution runs on AMX tiles where the CPU has AMX and the process may use it, on
AVX512-VNNI otherwise; ``--no-amx`` withholds AMX from this process (``benchmarks/no_amx.py``) to
measure the second on an AMX host. The header names which ran.

    python benchmarks/edgetpu_layers.py [--no-amx]
"""

from __future__ import annotations

import os
import timeit

os.environ.setdefault("NEURENIX_EMULATE", "edgetpu")

import numpy as np

import neurenix_core as nx
from neurenix_core import benchkit

#: (in channels, out channels, kernel, stride, input H = W): the seed ``cnn``'s three convolutions,
#: ``cnn-s2``'s three (benchmarks/edgetpu.py), then wider and 1x1 layers.
LAYERS = (
    (3, 16, 3, 1, 32), (16, 32, 3, 2, 32), (32, 64, 3, 2, 16),
    (3, 32, 3, 2, 32), (32, 64, 3, 2, 16), (64, 64, 3, 1, 8),
    (3, 64, 3, 1, 32), (64, 64, 3, 1, 16), (16, 16, 1, 1, 32), (64, 64, 1, 1, 32),
)


def invoke_us(model_bytes: bytes, litert: object) -> float:
    it = litert.Interpreter(model_content=model_bytes, num_threads=1)  # type: ignore[attr-defined]
    it.allocate_tensors()
    return min(timeit.repeat(it.invoke, number=100, repeat=15)) / 100 * 1e6


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--no-amx", action="store_true", help="withhold Intel AMX from this process (XNNPACK then runs its AVX512-VNNI int8 kernels)")
    if p.parse_args(argv).no_amx:
        from no_amx import withhold  # beside this file; before LiteRT creates an interpreter

        withhold()
    from neurenix_edgetpu.amx import amx_state

    from neurenix_core import nn

    nn.manual_seed(0)
    rng = np.random.default_rng(0)
    litert = nx.backend("edgetpu:0").litert
    lines = ["| conv (batch 1) | output pixels | fp32 µs | int8 µs | int8 ns per output pixel |", "|---|---|---|---|---|"]
    for cin, cout, k, stride, hw in LAYERS:
        model = nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2), nn.ReLU())
        x = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
        xt = nx.asarray(x, device="edgetpu:0")
        times = {}
        for name, kw in (("fp32", {"precision": "fp32"}), ("int8", {"quantize": "int8", "calibration": [x], "io": "int8"})):
            compiled = nx.compile(model, device="edgetpu:0", num_threads=1, progress=False, **kw)
            compiled(xt)
            times[name] = invoke_us(compiled.native(x.shape).tflite_bytes, litert)
        pixels = (hw // stride) ** 2
        lines.append(f"| {cin}->{cout}, {k}x{k}, stride {stride}, {hw}x{hw} | {pixels} | {times['fp32']:.1f} | {times['int8']:.1f} | "
                     f"{times['int8'] / pixels * 1e3:.0f} |")
    print(f"CPU {benchkit.cpu_model()}, LiteRT XNNPACK, 1 thread; x86_amx={amx_state()} (read back after the runs)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
