"""int8 you can trust: every quantized compile is checked against the core's integer reference.

An MLP with zero biases (as Hugging Face initialises them) is compiled int8 on each int8 device
found (cpu, and npu / edgetpu where their plugins are installed); the summary says how far the
device is from the integer reference. cpu:0 runs int8 on the fastest host runtime with integer
kernels (OpenVINO, LiteRT/XNNPACK where installed), checked the same way; ``runtime="numpy"``
runs the integer reference itself, which is 0.00% from itself by construction. Then a plan with one wrong scale is refused, naming its
layer, and the per-layer float-vs-integer table (the quantization "debugger") is printed.

    python examples/int8_verification.py
"""

from __future__ import annotations

import dataclasses

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.quantization.verify import layer_errors


def main() -> None:
    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))
    for layer in (model[0], model[2]):
        layer.bias.numpy()[...] = 0.0
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(8)]
    x = rng.standard_normal((4, 64)).astype(np.float32)

    devices = [str(d) for d in nx.devices() if d.index == 0 and d.type in ("cpu", "npu", "edgetpu")]
    runs = [(device, {}) for device in devices] + [("cpu:0", {"runtime": "numpy"})]
    for device, options in runs:
        compiled = nx.compile(model, device=device, quantize="int8", calibration=calibration, progress=False, **options)
        v = compiled.verification
        label = device + "".join(f" ({k}={v!r})" for k, v in options.items())
        print(
            f"{label}: device vs integer reference {v.device_relative:.2%} (bound {v.device_bound:.2%}), "
            f"integer vs float {v.plan_relative:.2%}"
        )
        engine = getattr(compiled.native(), "summary", "") or "the core's integer reference (NumPy)"
        print(f"  on {engine.split(';')[0]}")
        print(f"  output[0, :4] = {np.round(np.asarray(compiled(x).numpy())[0, :4], 4)}")

    plan = compiled.plan
    graph = compiled.graph
    first = graph.nodes[0].output
    broken = dict(plan.activations)
    broken[first] = dataclasses.replace(broken[first], scale=broken[first].scale * np.float32(0.02))
    bad = dataclasses.replace(plan, activations=broken)
    try:
        nx.compile(model, device="cpu", quantize=bad, calibration=calibration, progress=False)
    except nx.CompilationError as exc:
        print(f"refused: {str(exc)[:160]}...")

    print("layer            op      int8 vs float   max steps")
    for row in layer_errors(graph, bad, x):
        print(f"{row.node:<16} {row.op:<7} {row.relative:>12.2%} {row.steps:>11.1f}")


if __name__ == "__main__":
    main()
