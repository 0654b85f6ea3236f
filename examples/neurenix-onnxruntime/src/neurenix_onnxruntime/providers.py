"""ONNX Runtime execution providers as neurenix devices: names, preference, and what each needs.

Plain data and file checks only (imported by the probe at ``import neurenix_core``): whether a
provider is *built into* the installed wheel is read from the provider libraries next to
``onnxruntime/capi``, and whether its hardware is there from the driver library or device node.
``onnxruntime.get_available_providers()`` is not enough on its own: it lists the CUDA provider of
a GPU wheel even on a machine without a GPU.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Final, NamedTuple

__all__ = ["CPU", "PROVIDERS", "SHORT_NAMES", "Provider", "present", "resolve_name", "runtime_dir"]


# A NamedTuple, not a dataclass: this module is imported by `import neurenix_core`, and
# creating a dataclass costs ~2 ms there.
class Provider(NamedTuple):
    """One execution provider: ORT's name, the library that carries it, and the hardware it needs."""

    name: str
    short: str
    library: str | None  # provider shared library inside onnxruntime/capi (None: built into libonnxruntime)
    driver_library: str | None  # the driver library it needs ("cuda" -> libcuda.so*)
    device_glob: str | None  # a /dev node that shows the hardware
    accelerator: bool
    fp16: bool  # runs float16 kernels natively (the CPU provider upcasts most of them to float32)


CPU: Final = Provider("CPUExecutionProvider", "cpu", None, None, None, accelerator=False, fp16=False)

#: Preference order: ort:0 is the first one present. The CPU provider is always last and always there.
PROVIDERS: Final[tuple[Provider, ...]] = (
    Provider("TensorrtExecutionProvider", "tensorrt", "libonnxruntime_providers_tensorrt.so", "nvinfer", "/dev/nvidia[0-9]*", True, True),
    Provider("CUDAExecutionProvider", "cuda", "libonnxruntime_providers_cuda.so", "cuda", "/dev/nvidia[0-9]*", True, True),
    Provider("ROCMExecutionProvider", "rocm", "libonnxruntime_providers_rocm.so", "amdhip64", "/dev/kfd", True, True),
    Provider("MIGraphXExecutionProvider", "migraphx", "libonnxruntime_providers_migraphx.so", "migraphx_c", "/dev/kfd", True, True),
    Provider("OpenVINOExecutionProvider", "openvino", "libonnxruntime_providers_openvino.so", None, None, False, False),
    Provider("DnnlExecutionProvider", "dnnl", "libonnxruntime_providers_dnnl.so", None, None, False, False),
    CPU,
)

SHORT_NAMES: Final = {p.short: p.name for p in PROVIDERS}


class Shadowed(Exception):
    """A plain module named ``onnxruntime`` (a user's script) hides the real package."""


def runtime_dir() -> str | None:
    """``onnxruntime/capi`` of the installed wheel, found without importing onnxruntime."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None:
        return None
    if not spec.submodule_search_locations:
        raise Shadowed(f"{spec.origin} shadows the onnxruntime package: rename that file or run from another folder")
    return os.path.join(next(iter(spec.submodule_search_locations)), "capi")


_LIB_DIRS: Final = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/local/cuda/lib64", "/opt/rocm/lib")


def _find_library(name: str) -> str | None:
    # ctypes.util.find_library shells out to ldconfig; a probe must not start subprocesses.
    import glob  # only a wheel with a GPU provider gets here; glob costs ~0.3 ms of import otherwise

    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d] + list(_LIB_DIRS)
    for d in dirs:
        hits = glob.glob(os.path.join(d, f"lib{name}.so*"))
        if hits:
            return hits[0]
    return None


def _hardware_present(p: Provider) -> bool:
    if p.driver_library is not None and _find_library(p.driver_library) is None:
        return False
    if p.device_glob is None:
        return True
    import glob

    return bool(glob.glob(p.device_glob))


def present(capi: str) -> list[Provider]:
    """Providers built into the wheel at ``capi`` whose hardware this machine has, best first."""
    out: list[Provider] = []
    for p in PROVIDERS:
        if p.library is None or (os.path.exists(os.path.join(capi, p.library)) and _hardware_present(p)):
            out.append(p)
    return out


def resolve_name(name: str) -> str:
    """``"cuda"`` or ``"CUDAExecutionProvider"`` -> ORT's provider name (unknown names pass through)."""
    return SHORT_NAMES.get(name.strip().lower(), name.strip())
