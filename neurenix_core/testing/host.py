"""Facts about the host CPU that tests of emulated devices need and the runtimes do not report.

OpenVINO's CPU device reports ``OPTIMIZATION_CAPABILITIES`` INT8 on any x86 CPU, but not which
int8 kernels it runs: with VNNI or AMX it has int8 dot-product instructions, on an AVX2-only CPU
it does not, and int8 results of emulated devices can differ there (see issue #25 for the npu).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

__all__ = ["cpu_flags", "int8_dot_product"]


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The ``flags`` of /proc/cpuinfo (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def int8_dot_product() -> bool:
    """Whether the CPU has int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI or AMX-INT8)."""
    return bool(cpu_flags() & {"avx512_vnni", "avx_vnni", "amx_int8"})
