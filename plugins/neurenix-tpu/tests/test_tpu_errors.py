"""Bad input: no TPU, tensors from two TPUs, unknown devices, memory limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import DeviceMismatchError, DeviceNotFoundError, OutOfMemoryError

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "XLA_", "JAX_", "TPU_"))}

_NO_TPU = r"""
import json, neurenix_core as nx
from neurenix_core.errors import BackendUnavailableError
from neurenix_tpu.api import TPUBackend, is_tpu_available
out = {"available": is_tpu_available()}
for name, call in (("zeros", lambda: nx.zeros(3, device="tpu:0")), ("initialize", lambda: TPUBackend().initialize())):
    try:
        call()
        out[name] = None
    except BackendUnavailableError as exc:
        out[name] = str(exc)
import sys
out["jax_imported"] = "jax" in sys.modules
print(json.dumps(out))
"""


def test_tpu_requested_without_one_names_libtpu_and_device_nodes() -> None:
    proc = subprocess.run([sys.executable, "-c", _NO_TPU], env=CLEAN_ENV, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out["available"]:  # pragma: no cover - only on a Cloud TPU VM
        pytest.skip("a Cloud TPU is attached to this machine")
    for key in ("zeros", "initialize"):
        assert out[key] is not None, f"{key} must raise BackendUnavailableError without a TPU"
        assert "libtpu" in out[key] and "/dev/accel" in out[key] and "NEURENIX_EMULATE=tpu" in out[key]
    assert out["jax_imported"] is False, "an unavailable TPU must not start JAX"


def test_ops_on_two_tpus_raise(four_devices: Any) -> None:
    a = nx.ones((2, 2), device="tpu:0")
    b = nx.ones((2, 2), device="tpu:1")
    for op in (lambda: a + b, lambda: nx.matmul(a, b), lambda: nx.concat([a, b])):
        with pytest.raises(DeviceMismatchError, match=r"tpu:0 and tpu:1.*\.to\('tpu:0'\)"):
            op()


def test_unknown_tpu_index(tpu: Any) -> None:
    with pytest.raises(DeviceNotFoundError, match="tpu:9"):
        nx.zeros(3, device="tpu:9")


def test_memory_limit_enforced_and_bytes_reported(four_devices: Any) -> None:
    dev = "tpu:3"
    base = nx.memory_stats(dev).in_use
    keep = nx.zeros((100,), dtype=nx.float32, device=dev)
    assert nx.memory_stats(dev).in_use == base + 400
    info = four_devices.device_info(3)
    assert info["bytes_in_use"] == base + 400 and info["runtime_bytes_in_use"] >= 400
    nx.set_memory_limit(dev, base + 1000)
    try:
        with pytest.raises(OutOfMemoryError, match=r"tpu:3.*limit"):
            nx.zeros((1000,), dtype=nx.float32, device=dev)
        assert np.all(keep.numpy() == 0), "a refused allocation leaves existing tensors intact"
    finally:
        nx.set_memory_limit(dev, None)
    del keep
    assert nx.memory_stats(dev).in_use == base
