"""int8 on the Intel NPU: the core calibrates, the plugin lowers the plan to FakeQuantize nodes and
OpenVINO runs the convolutions and the classifier in int8 (read back from the runtime graph).

    NEURENIX_EMULATE=npu python examples/npu_int8.py
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "npu")

import numpy as np
from neurenix_npu_openvino.api import NPUBackend

from neurenix_core.nn import Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential


def main() -> None:
    model = Sequential(
        Conv2d(3, 16, kernel_size=3, padding=1), ReLU(), MaxPool2d(2),
        Conv2d(16, 32, kernel_size=3, padding=1), ReLU(), MaxPool2d(2),
        Flatten(), Linear(32 * 8 * 8, 10),
    )
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((16, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    npu = NPUBackend()
    fp32 = npu.optimize_model(model, precision="fp32")
    int8 = npu.optimize_model(model, quantize=True, precision="int8", optimize_for="throughput", calibration=calibration)

    x = rng.standard_normal((64, 3, 32, 32)).astype(np.float32)
    agree = float((int8(x).numpy().argmax(1) == fp32(x).numpy().argmax(1)).mean())
    layers = int8.openvino(x.shape).compute_layers()
    print(int8.summary)
    print(f"top-1 agreement int8 vs fp32 on 64 inputs: {agree:.1%}")
    for name, precision in layers.items():
        print(f"  {name}: runs in {precision}")
    assert all(p.lower() in ("u8", "i8") for p in layers.values())

    batches = [rng.standard_normal((8, 3, 32, 32)).astype(np.float32) for _ in range(6)]
    outs = int8.run_batches(batches)  # AsyncInferQueue: parallel infer requests
    print(f"{len(outs)} batches through the async queue, first result shape {outs[0].shape}")
    assert np.allclose(outs[0], int8(batches[0]).numpy())


if __name__ == "__main__":
    main()
