"""Whether LiteRT's XNNPACK kernels may use Intel AMX in this process (read back for reports, and
what ``stem="auto"`` decides the space-to-depth stem from: lower_s2d.py).

XNNPACK chooses its int8 kernels once per process: on a CPU with AMX-INT8 it asks Linux for the
AMX tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM)``) and, once granted, runs int8 convolutions and
fully connected layers on AMX tiles. Those carry a fixed cost per block of 16 output pixels, so
narrow layers (few channels, many pixels: a 3-channel stem at full resolution) run several times
slower than on AVX512-VNNI and wide ones several times faster (docs/edgetpu.md, Benchmark). Which
of the two ran is therefore part of an int8 benchmark's configuration. XNNPACK asks when LiteRT
first creates its delegate; ``xnnpack_amx`` reads the answer after making sure that has happened.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["amx_state", "xnnpack_amx"]

_SYS_ARCH_PRCTL: Final = 158  # x86-64
_ARCH_GET_XCOMP_PERM: Final = 0x1022
_XFEATURE_XTILEDATA: Final = 18


def amx_state() -> str:
    """"granted" (this process may use AMX tiles: XNNPACK's int8 kernels do), "not granted" (the
    CPU has AMX-INT8 but this process has no permission: XNNPACK uses AVX512-VNNI or older),
    "absent" (no AMX-INT8 on this CPU) or "unknown" (not x86-64 Linux)."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return "unknown"
    if not _cpu_has_amx_int8():
        return "absent"
    mask = ctypes.c_uint64(0)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_PERM, ctypes.byref(mask)) != 0:
        return "unknown"
    return "granted" if mask.value >> _XFEATURE_XTILEDATA & 1 else "not granted"


_xnnpack_answer: list[str] = []  # at most one entry: XNNPACK chooses once per process
_xnnpack_lock = threading.Lock()


def xnnpack_amx(start_xnnpack: Callable[[], None]) -> str:
    """``amx_state()`` once XNNPACK has initialised in this process: "granted" means XNNPACK's
    int8 kernels run on AMX tiles here.

    XNNPACK asks for the AMX tile state when LiteRT first creates its XNNPACK delegate, so until
    then ``amx_state()`` says "not granted" whatever XNNPACK will do. ``start_xnnpack`` creates
    such an interpreter (what compiling a model does anyway; XNNPACK initialises only once, so
    when it already has this changes nothing). The first answer is kept: XNNPACK chose its
    kernels from its own request, for the life of the process, and a later grant to another
    library does not change them.
    """
    with _xnnpack_lock:
        if not _xnnpack_answer:
            state = amx_state()
            if state == "not granted":  # not decided yet, or refused: let XNNPACK ask (once) and read again
                start_xnnpack()
                state = amx_state()
            _xnnpack_answer.append(state)
        return _xnnpack_answer[0]


@functools.cache
def _cpu_has_amx_int8() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return "amx_int8" in flags.split()
