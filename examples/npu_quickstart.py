"""Intel NPU through OpenVINO: device facts, an eager matmul and a compiled fp32 CNN.

Runs on a machine with an Intel NPU (driver intel_vpu), or anywhere with the OpenVINO runtime
through emulation: ``NEURENIX_EMULATE=npu python examples/npu_quickstart.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "npu")  # harmless on a real NPU: real hardware wins

import numpy as np
from neurenix_npu_openvino.api import NPUBackend, is_npu_available

import neurenix_core as nx
from neurenix_core.nn import Conv2d, Flatten, Linear, ReLU, Sequential


def main() -> None:
    print("NPU available:", is_npu_available(), "(real hardware:", is_npu_available(allow_emulated=False), ")")
    npu = NPUBackend()
    npu.initialize()
    info = npu.get_device_info(0)
    print(f"device npu:0 = {info['name']} via OpenVINO {info['openvino_device']}, precisions {info['precisions']}, emulated={info['emulated']}")

    a = nx.asarray([[1.0, 2.0], [3.0, 4.0]])
    b = nx.asarray([[5.0, 6.0], [7.0, 8.0]])
    c = npu.matmul(a, b)
    print("matmul on", c.device, "->", c.tolist())
    assert c.tolist() == [[19.0, 22.0], [43.0, 50.0]]

    model = Sequential(
        Conv2d(3, 16, kernel_size=3, stride=1, padding=1), ReLU(),
        Conv2d(16, 32, kernel_size=3, stride=2, padding=1), ReLU(),
        Flatten(), Linear(32 * 16 * 16, 10),
    )
    fast = npu.optimize_model(model, precision="fp32", optimize_for="latency")
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    out = fast(x)
    want = model(nx.asarray(x)).numpy()  # the same model eagerly on the CPU
    err = float(np.max(np.abs(out.numpy() - want)) / np.max(np.abs(want)))
    print(f"compiled: {fast.summary}")
    print(f"output {out.shape} on {out.device}, max relative difference to the CPU: {err:.2e}")
    assert err < 1e-4

    # As the seed documents write it: a cpu:0 tensor is host memory, copied in by the call.
    seed_style = fast(nx.Tensor(x))
    assert seed_style.device == out.device and np.allclose(seed_style.numpy(), out.numpy(), rtol=1e-5, atol=1e-6)
    host = npu.optimize_model(model, precision="fp32", outputs="host")(nx.Tensor(x))
    print(f"host inputs: nx.Tensor(x) on cpu:0 -> {seed_style.device}; outputs='host' -> {type(host).__name__} {host.shape}")
    assert isinstance(host, np.ndarray)


if __name__ == "__main__":
    main()
