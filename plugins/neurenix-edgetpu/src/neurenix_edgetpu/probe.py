"""Edge TPU detection without importing LiteRT: device nodes, USB ids and libedgetpu on disk.

Cheap by contract (the core runs it at ``import neurenix_core``). Only ``native_list_devices``
loads native code (libedgetpu.so.1 through ctypes); the core calls it through
``neurenix_native_probe`` in a child process so a crashing driver cannot take the user's process.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from typing import Final, NamedTuple

__all__ = [
    "LIBRARY",
    "USB_IDS",
    "Scan",
    "emulated_device_count",
    "find_libedgetpu",
    "native_list_devices",
    "runtime_module",
    "scan",
]

#: Coral USB Accelerator: 1a6e:089a before its firmware is loaded, 18d1:9302 after.
USB_IDS: Final = frozenset({("1a6e", "089a"), ("18d1", "9302")})
LIBRARY: Final = "libedgetpu.so.1"
_KNOWN_LIB_DIRS: Final = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/usr/local/lib", "/opt/homebrew/lib")
#: LiteRT first; tflite_runtime only as a fallback (it is built against NumPy 1 and breaks with NumPy 2).
_RUNTIMES: Final = ("ai_edge_litert", "tflite_runtime")


# A NamedTuple, not a dataclass: this module is imported by `import neurenix_core`, and
# creating a dataclass costs ~2 ms there.
class Scan(NamedTuple):
    """What the filesystem says: PCIe nodes, USB accelerators, the library path (or None)."""

    pci: tuple[str, ...]
    usb: tuple[str, ...]
    library: str | None

    @property
    def device_names(self) -> tuple[str, ...]:
        # The names libedgetpu's load_delegate accepts in its "device" option.
        return tuple(f"pci:{i}" for i in range(len(self.pci))) + tuple(f"usb:{i}" for i in range(len(self.usb)))


def _read(path: str) -> str:
    # open(), not pathlib: this runs at ``import neurenix_core``, where importing pathlib costs ~4 ms.
    try:
        with open(path) as fh:
            return fh.read().strip().lower()
    except OSError:
        return ""  # a USB device unplugged while we list /sys is simply not there


def _entries(folder: str, prefix: str = "") -> list[str]:
    """Sorted paths of the non-hidden entries of ``folder`` whose name starts with ``prefix``: what
    ``glob.glob(folder + "/" + prefix + "*")`` returns, without importing glob at import time."""
    try:
        names = os.listdir(folder)
    except OSError:  # no such folder (no /sys in some containers): nothing there
        return []
    return sorted(os.path.join(folder, n) for n in names if n.startswith(prefix) and not n.startswith("."))


def _usb_devices(root: str = "/sys/bus/usb/devices") -> tuple[str, ...]:
    found = []
    for entry in _entries(root):
        ids = (_read(os.path.join(entry, "idVendor")), _read(os.path.join(entry, "idProduct")))
        if ids in USB_IDS:
            found.append(os.path.basename(entry))
    return tuple(found)


def find_libedgetpu() -> str | None:
    """Path of libedgetpu.so.1, without loading it.

    Looks in LD_LIBRARY_PATH and the usual library folders. ctypes.util.find_library is not used:
    it shells out to ldconfig (~20 ms), too slow for a probe that runs at import.
    """
    ld_path = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for directory in (*ld_path, *_KNOWN_LIB_DIRS):
        candidate = os.path.join(directory, LIBRARY)
        if os.path.exists(candidate):
            return candidate
    return None


def scan() -> Scan:
    return Scan(pci=tuple(_entries("/dev", "apex_")), usb=_usb_devices(), library=find_libedgetpu())


def runtime_module() -> str | None:
    """The LiteRT module that is installed (found with find_spec, never imported)."""
    for name in _RUNTIMES:
        if importlib.util.find_spec(name) is not None:
            return name
    return None


def emulated_device_count() -> int:
    """Emulated devices (default 1); NEURENIX_EDGETPU_DEVICES=n emulates several Coral devices."""
    raw = os.environ.get("NEURENIX_EDGETPU_DEVICES", "1")
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"NEURENIX_EDGETPU_DEVICES={raw!r}: expected a positive integer number of emulated Edge TPUs")
    return count


class _Device(ctypes.Structure):
    # struct edgetpu_device { enum edgetpu_device_type type; const char* path; } (edgetpu_c.h)
    _fields_ = [("type", ctypes.c_int), ("path", ctypes.c_char_p)]


def native_list_devices(library: str) -> list[tuple[str, str]]:
    """Ask libedgetpu for its devices: [("pci:0", "/dev/apex_0"), ("usb:0", "/sys/...")].

    Loads native code: call it only in the child process of ``neurenix_native_probe``.
    """
    lib = ctypes.CDLL(library)
    lib.edgetpu_list_devices.restype = ctypes.POINTER(_Device)
    lib.edgetpu_list_devices.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    lib.edgetpu_free_devices.argtypes = [ctypes.POINTER(_Device)]
    count = ctypes.c_size_t(0)
    devs = lib.edgetpu_list_devices(ctypes.byref(count))
    out: list[tuple[str, str]] = []
    seen = {"pci": 0, "usb": 0}
    try:
        for i in range(count.value):
            kind = "pci" if devs[i].type == 0 else "usb"
            out.append((f"{kind}:{seen[kind]}", (devs[i].path or b"").decode()))
            seen[kind] += 1
    finally:
        if devs:
            lib.edgetpu_free_devices(devs)
    return out
