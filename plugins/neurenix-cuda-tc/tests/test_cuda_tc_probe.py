"""The probe (no torch import), the native ctypes probe, and the non-emulated errors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from neurenix_cuda_tc.probe import LIBCUDA, decide, native_probe, query_driver

from neurenix_core.plugins.manifest import ProbeContext


def test_decide_branches() -> None:
    emu = decide(emulate=True, has_torch=True, files=[])
    assert emu.available and emu.emulated and emu.device_count == 1
    assert "host CPU" in emu.reason
    no_torch = decide(emulate=True, has_torch=False, files=[])
    assert not no_torch.available and "PyTorch is not installed" in no_torch.reason
    none = decide(emulate=False, has_torch=True, files=[])
    assert not none.available and LIBCUDA in none.reason and "install the NVIDIA driver" in none.reason
    driver = decide(emulate=False, has_torch=True, files=[f"/usr/lib64/{LIBCUDA}"])
    assert driver.needs_native and not driver.available
    driver_no_torch = decide(emulate=False, has_torch=False, files=[f"/usr/lib64/{LIBCUDA}"])
    assert not driver_no_torch.needs_native and "PyTorch is not" in driver_no_torch.reason


def test_import_stays_light(clean_python: Any) -> None:
    code = ("import sys, neurenix_core; import neurenix_cuda_tc.plugin, neurenix_cuda_tc.probe;"
            "print([m for m in ('torch','jax','openvino','ai_edge_litert','tflite_runtime','onnxruntime') if m in sys.modules])")
    for emulate in (None, "cuda"):
        proc = clean_python(code, emulate=emulate)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_without_gpu_explicit_requests_name_the_missing_driver(clean_python: Any) -> None:
    code = """
import neurenix_core as nx
from neurenix_cuda_tc.api import TensorCoresBackend, is_tensor_cores_available
print("available", is_tensor_cores_available())
for what, fn in (("zeros", lambda: nx.zeros(3, device="cuda:0")), ("init", lambda: TensorCoresBackend().initialize())):
    try:
        fn()
    except nx.BackendUnavailableError as exc:
        print(what, "raised:", exc)
    else:
        print(what, "did not raise")
print("default", nx.default_device())
"""
    proc = clean_python(code)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "available False" in out
    for what in ("zeros", "init"):
        line = next(l for l in out.splitlines() if l.startswith(what))
        assert "raised:" in line and "cuda:0" in line and LIBCUDA in line and "NEURENIX_EMULATE=cuda" in line
    assert "default cpu:0" in out


# A tiny stand-in for libcuda.so.1, compiled here: it exercises our real ctypes code path (the
# driver API calls and their error handling) on a machine without an NVIDIA driver.
_FAKE_DRIVER = r"""
#include <string.h>
static int init_rc = INIT_RC;
int cuInit(unsigned flags) { return init_rc; }
int cuDeviceGetCount(int *n) { *n = 2; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (attr == 75) { *v = dev == 0 ? 8 : 6; return 0; }
    if (attr == 76) { *v = dev == 0 ? 6 : 1; return 0; }
    return 1;
}
int cuDeviceGetName(char *name, int len, int dev) { strncpy(name, dev == 0 ? "Fake RTX 3090" : "Fake GTX 1080", len); return 0; }
"""


def _build(tmp_path: Path, init_rc: int) -> str:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the stand-in driver library")
    src = tmp_path / "fake.c"
    src.write_text(_FAKE_DRIVER.replace("INIT_RC", str(init_rc)))
    lib = tmp_path / f"libfakecuda{init_rc}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    return str(lib)


def test_native_probe_reads_compute_capabilities_through_ctypes(tmp_path: Path) -> None:
    lib = _build(tmp_path, 0)
    devices = query_driver(lib)
    assert [d["compute_capability"] for d in devices] == [[8, 6], [6, 1]]
    result = native_probe(ProbeContext(emulate=False, timeout=2.0), library=lib)
    assert result.available and result.device_count == 2
    first, second = result.details["devices"]
    assert first["name"] == "Fake RTX 3090" and first["tensor_cores"] and "bf16" in first["tensor_core_precisions"]
    assert second["architecture"] == "Pascal" and not second["tensor_cores"]


def test_native_probe_reports_driver_errors(tmp_path: Path) -> None:
    lib = _build(tmp_path, 100)
    result = native_probe(ProbeContext(emulate=False, timeout=2.0), library=lib)
    assert not result.available and "CUDA_ERROR_NO_DEVICE (100)" in result.reason and "nvidia-smi" in result.reason
