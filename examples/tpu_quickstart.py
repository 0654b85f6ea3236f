"""TPU quickstart: the seed API, tensors on a TPU, a model moved there and one compiled whole.

    python examples/tpu_quickstart.py                    # on a Cloud TPU VM
    NEURENIX_EMULATE=tpu python examples/tpu_quickstart.py  # anywhere: JAX's CPU platform

Without a TPU and without NEURENIX_EMULATE=tpu it prints why (libtpu / device nodes) and exits 1.
"""

from __future__ import annotations

import sys

import numpy as np
from neurenix_tpu.api import TPUBackend, is_tpu_available

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.device import Device, DeviceType
from neurenix_core.errors import BackendUnavailableError


def main() -> int:
    if not is_tpu_available():
        try:
            TPUBackend().initialize()
        except BackendUnavailableError as exc:
            print(f"TPU not available: {exc}", file=sys.stderr)
        return 1
    tpu = TPUBackend()
    tpu.initialize()
    info = tpu.device_info(0)
    print(f"TPU backend: {tpu.device_count()} device(s), tpu:0 = {info['name']}, emulated={tpu.emulated}")

    dev = Device(DeviceType.TPU, 0)
    a = nx.Tensor([[1, 2], [3, 4]], device=dev)
    b = nx.Tensor([[5, 6], [7, 8]], device=dev)
    c = nx.matmul(a, b)
    print(f"matmul on {c.device}: {c.tolist()}")
    assert c.tolist() == [[19, 22], [43, 50]]

    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))
    x_host = np.arange(10, dtype=np.float32).reshape(1, 10) / 10
    cpu_out = model(nx.asarray(x_host)).numpy()
    model.to(dev)
    x = nx.Tensor(x_host, device=dev)
    eager = model(x)
    print(f"eager model on {eager.device}: max |tpu - cpu| = {np.abs(eager.numpy() - cpu_out).max():.2e}")

    compiled = nx.compile(model, device="tpu:0", precision="fp32")
    out = compiled(x)
    print(f"compiled: {compiled.summary}")
    print(f"compiled output on {out.device}: max |compiled - cpu| = {np.abs(out.numpy() - cpu_out).max():.2e}")
    assert np.allclose(out.numpy(), cpu_out, atol=1e-5)
    print("memory on tpu:0:", nx.memory_stats("tpu:0").as_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
