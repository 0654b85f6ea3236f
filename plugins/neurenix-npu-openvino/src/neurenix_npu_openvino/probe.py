"""Intel NPU detection without importing OpenVINO.

Three facts decide availability, each checked on the file system only (the probe runs at
``import neurenix_core`` and must stay cheap):

1. the OpenVINO package is installed (``importlib.util.find_spec``; never imported here),
2. its NPU plugin library ``libopenvino_intel_npu_plugin.so`` ships inside that package,
3. the kernel driver ``intel_vpu`` exposes device nodes ``/dev/accel/accel*``
   (``/sys/class/accel/accelN/device/driver`` links to ``.../intel_vpu``).

Paths are plain strings (``os.path``): importing pathlib would cost ~4 ms of ``import neurenix_core``
where nothing else loads it (a wheel install); the functions accept ``os.PathLike`` too.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Final, NamedTuple

__all__ = ["NPU_DRIVER", "NPU_PLUGIN_LIBRARY", "NPUScan", "npu_device_nodes", "npu_plugin_library", "openvino_dir", "scan"]

NPU_DRIVER: Final = "intel_vpu"
NPU_PLUGIN_LIBRARY: Final = "libopenvino_intel_npu_plugin.so"
_SYS_ACCEL: Final = "/sys/class/accel"
_DEV_ACCEL: Final = "/dev/accel"


# A NamedTuple, not a dataclass: this module is imported by `import neurenix_core`, and
# creating a dataclass costs ~2 ms there.
class NPUScan(NamedTuple):
    """What the file system says; ``reason`` is empty when an NPU is usable."""

    openvino: str | None
    plugin_library: str | None
    device_nodes: tuple[str, ...]
    reason: str

    @property
    def available(self) -> bool:
        return not self.reason


def openvino_dir() -> str | None:
    """The installed ``openvino`` package folder, found without importing it."""
    try:
        spec = importlib.util.find_spec("openvino")
    except (ImportError, ValueError):
        # A broken installation (e.g. a half-removed package) counts as "not installed".
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(next(iter(spec.submodule_search_locations)))


def shadowing_module() -> str | None:
    """The path of a plain module named ``openvino`` (e.g. a script openvino.py in the current
    folder) that hides the real package, or None."""
    try:
        spec = importlib.util.find_spec("openvino")
    except (ImportError, ValueError):
        return None
    if spec is not None and not spec.submodule_search_locations:
        return str(spec.origin)
    return None


def npu_plugin_library(package: str | os.PathLike[str]) -> str | None:
    """OpenVINO's NPU plugin inside the wheel (``libs/``) or next to a system install."""
    for candidate in (os.path.join(package, "libs", NPU_PLUGIN_LIBRARY), os.path.join(package, NPU_PLUGIN_LIBRARY)):
        if os.path.isfile(candidate):
            return candidate
    return None


def npu_device_nodes(sys_accel: str | os.PathLike[str] = _SYS_ACCEL, dev_accel: str | os.PathLike[str] = _DEV_ACCEL) -> tuple[str, ...]:
    """``/dev/accel/accelN`` nodes whose sysfs device is bound to the intel_vpu driver."""
    try:
        names = os.listdir(sys_accel)
    except OSError:  # no such folder (no NPU driver, or no /sys in a container)
        return ()
    nodes: list[str] = []
    for name in sorted(n for n in names if n.startswith("accel")):  # glob("accel*")
        driver = os.path.join(sys_accel, name, "device", "driver")
        try:
            bound = os.path.basename(os.readlink(driver))
        except OSError:
            continue  # no driver bound to this accel node: not usable, not ours
        node = os.path.join(dev_accel, name)
        if bound == NPU_DRIVER and os.path.exists(node):
            nodes.append(node)
    return tuple(nodes)


def scan() -> NPUScan:
    """Check runtime, plugin library and driver, and say in one sentence what is missing."""
    package = openvino_dir()
    if package is None:
        return NPUScan(None, None, (), missing_runtime_reason())
    library = npu_plugin_library(package)
    nodes = npu_device_nodes()
    if library is None:
        reason = f"the OpenVINO package at {package} has no {NPU_PLUGIN_LIBRARY}: reinstall openvino from PyPI (the wheel ships the NPU plugin)"
    elif not nodes:
        reason = (
            f"no /dev/accel/accel* node bound to the {NPU_DRIVER} driver: install the Intel NPU driver "
            "(linux-npu-driver, kernel module intel_vpu) on a machine with an Intel NPU (Core Ultra)"
        )
    else:
        reason = ""
    return NPUScan(package, library, nodes, reason)


def missing_runtime_reason() -> str:
    shadow = shadowing_module()
    if shadow is not None:
        return f"{shadow} shadows the OpenVINO package (a module named openvino is first on sys.path): rename it or run from another folder"
    return "OpenVINO is not installed: pip install openvino (neurenix-npu-openvino depends on it)"


def runtime_installed() -> bool:
    """True when the OpenVINO runtime can be imported later (used by emulation)."""
    return openvino_dir() is not None
