"""Hardware detection for NVIDIA GPUs without importing PyTorch.

Two steps, as the contract asks: :func:`probe` (in-process, cheap) only looks for driver files
and for the PyTorch package; when the driver is there it answers ``ProbeResult.native`` and the
core runs :func:`native_probe` in a subprocess, where ``ctypes`` loads ``libcuda.so.1`` and asks
the driver API for the device count and each device's compute capability. A crashing driver then
costs a subprocess, never the user's process.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from collections.abc import Iterable
from typing import Any, Final

from neurenix_core.contract import ProbeContext, ProbeResult

__all__ = ["EMULATED_CC", "driver_files", "native_probe", "probe", "query_driver"]

LIBCUDA: Final = "libcuda.so.1"
# Where distributions, the CUDA compat package and WSL put the driver library. Searched by path:
# ctypes.util.find_library would shell out to ldconfig, which a probe must not do.
_LIB_DIRS: Final = (
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
    "/usr/local/cuda/compat", "/usr/lib/wsl/lib",
)
_DRIVER_NODES: Final = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg")
#: The capability an emulated device follows (Ampere rules: fp16, bf16, tf32, int8).
EMULATED_CC: Final = (8, 0)

# Driver API constants (cuda.h).
_CU_ATTR_CC_MAJOR: Final = 75
_CU_ATTR_CC_MINOR: Final = 76
_CU_ERRORS: Final = {100: "CUDA_ERROR_NO_DEVICE", 999: "CUDA_ERROR_UNKNOWN", 3: "CUDA_ERROR_NOT_INITIALIZED",
                     35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 101: "CUDA_ERROR_INVALID_DEVICE"}


def _lib_dirs() -> Iterable[str]:
    yield from (d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d)
    yield from _LIB_DIRS


def driver_files() -> list[str]:
    """Paths that show an installed NVIDIA driver (library and device/proc nodes)."""
    # os.path, not pathlib: this runs at ``import neurenix_core``, where importing pathlib costs ~4 ms.
    found = [os.path.join(d, LIBCUDA) for d in _lib_dirs() if os.path.exists(os.path.join(d, LIBCUDA))]
    found += [p for p in _DRIVER_NODES if os.path.exists(p)]
    return found


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def decide(*, emulate: bool, has_torch: bool, files: list[str]) -> ProbeResult:
    """The in-process probe's answer from plain facts (kept pure so every branch is testable)."""
    if emulate:
        if not has_torch:
            return ProbeResult.missing("NEURENIX_EMULATE=cuda but PyTorch is not installed: pip install -c constraints.txt torch")
        return ProbeResult.emulating(
            1,
            reason=f"emulated: PyTorch on the host CPU, following compute capability {EMULATED_CC[0]}.{EMULATED_CC[1]} Tensor Core rules",
            compute_capabilities=[list(EMULATED_CC)],
        )
    if not any(os.path.basename(f) == LIBCUDA for f in files):
        return ProbeResult.missing(
            f"no NVIDIA driver: {LIBCUDA} not found (searched LD_LIBRARY_PATH and {', '.join(_LIB_DIRS[:3])}) "
            "and no /proc/driver/nvidia: install the NVIDIA driver"
        )
    if not has_torch:
        return ProbeResult.missing("the NVIDIA driver is installed but PyTorch is not: pip install neurenix-cuda-tc -c constraints.txt")
    return ProbeResult.native(f"NVIDIA driver found ({', '.join(files)}); asking libcuda for devices")


def probe(context: ProbeContext) -> ProbeResult:
    return decide(emulate=context.emulate, has_torch=torch_installed(), files=driver_files())


def _check(lib: Any, call: str, *args: Any) -> None:
    rc = getattr(lib, call)(*args)
    if rc != 0:
        raise OSError(f"{call} failed with {_CU_ERRORS.get(rc, 'CUresult')} ({rc})")


def query_driver(library: str = LIBCUDA) -> list[dict[str, Any]]:
    """Ask the CUDA driver API for every device: name and compute capability. Raises OSError."""
    lib = ctypes.CDLL(library)
    _check(lib, "cuInit", ctypes.c_uint(0))
    count = ctypes.c_int(0)
    _check(lib, "cuDeviceGetCount", ctypes.byref(count))
    devices = []
    for i in range(count.value):
        handle = ctypes.c_int(0)
        _check(lib, "cuDeviceGet", ctypes.byref(handle), ctypes.c_int(i))
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        _check(lib, "cuDeviceGetAttribute", ctypes.byref(major), ctypes.c_int(_CU_ATTR_CC_MAJOR), handle)
        _check(lib, "cuDeviceGetAttribute", ctypes.byref(minor), ctypes.c_int(_CU_ATTR_CC_MINOR), handle)
        name = ctypes.create_string_buffer(256)
        _check(lib, "cuDeviceGetName", name, ctypes.c_int(256), handle)
        devices.append({"index": i, "name": name.value.decode(errors="replace"), "compute_capability": [major.value, minor.value]})
    return devices


def native_probe(context: ProbeContext, library: str = LIBCUDA) -> ProbeResult:
    """Runs in the core's probe subprocess: load the driver and count devices."""
    try:
        devices = query_driver(library)
    except OSError as exc:
        return ProbeResult.missing(f"the NVIDIA driver ({library}) could not list GPUs: {exc}; check `nvidia-smi` and the driver installation")
    if not devices:
        return ProbeResult.missing(f"the NVIDIA driver ({library}) reports no GPU; check `nvidia-smi`")
    # Only the native probe's child process gets here: the capability tables load with it, not at import.
    from neurenix_cuda_tc.capability import architecture, has_tensor_cores, tensor_core_precisions

    for d in devices:
        cc = tuple(d["compute_capability"])
        d["architecture"] = architecture(cc)  # type: ignore[arg-type]
        d["tensor_cores"] = has_tensor_cores(cc)  # type: ignore[arg-type]
        d["tensor_core_precisions"] = list(tensor_core_precisions(cc))  # type: ignore[arg-type]
    return ProbeResult.found(len(devices), devices=devices, compute_capabilities=[d["compute_capability"] for d in devices])
