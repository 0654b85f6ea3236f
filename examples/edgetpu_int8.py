"""Compile a small CNN to a full-integer int8 TFLite model for the Coral Edge TPU and run it.

Without a Coral device, run it with ``NEURENIX_EMULATE=edgetpu`` (LiteRT's CPU interpreter, no
delegate); the script sets that itself when nothing else was chosen.

    python examples/edgetpu_int8.py [--out model.tflite]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("NEURENIX_EMULATE", "edgetpu")

import numpy as np
from neurenix_edgetpu.api import EdgeTPUBackend, is_edgetpu_available, list_edge_tpus

from neurenix_core import nn


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, stride=1, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, kernel_size=3, stride=1, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(),
        nn.Linear(16, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=None, help="write the int8 .tflite here (feed it to edgetpu_compiler)")
    args = parser.parse_args()
    print("Edge TPU available:", is_edgetpu_available(), "| devices:", [d["device"] + (" (emulated)" if d["emulated"] else "") for d in list_edge_tpus()])
    edgetpu = EdgeTPUBackend()
    edgetpu.initialize()
    model = build_model()
    rng = np.random.default_rng(0)
    calibration = [rng.normal(size=(1, 3, 32, 32)).astype(np.float32) for _ in range(16)]
    int8 = edgetpu.optimize_model(model, quantize=True, precision="int8", calibration=calibration)
    fp32 = edgetpu.optimize_model(model, quantize=False, precision="fp32", input_shape=(1, 3, 32, 32))
    print(int8.summary)
    x = calibration[0]
    a, b = int8(x), fp32(x)
    print("int8 logits:", np.round(a, 3))
    print("fp32 logits:", np.round(b, 3))
    print("max |int8 - fp32|:", float(np.abs(a - b).max()), "| same top-1:", int(np.argmax(a)) == int(np.argmax(b)))
    if args.out:
        print("wrote", int8.save(args.out))
    c = edgetpu.matmul([[1.0, 2.0]], [[3.0], [4.0]])
    print("eager matmul on", c.device, "->", c.tolist())


if __name__ == "__main__":
    main()
