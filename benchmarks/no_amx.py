"""Withhold Intel AMX from this process, to measure what XNNPACK does on CPUs without it.

XNNPACK (LiteRT's CPU kernels) runs int8 layers on AMX tiles once Linux grants the process the AMX
tile state, which it asks for with ``arch_prctl(ARCH_REQ_XCOMP_PERM)``. ``withhold()`` installs a
seccomp filter that answers that one request with EPERM, so XNNPACK keeps to its AVX512-VNNI
kernels: the ones it runs on CPUs without AMX, such as the AMD EPYC build machines. The filter
stays for the life of the process (seccomp filters cannot be removed) and affects every library in
it, which is why this is a benchmark option (``benchmarks/edgetpu.py --no-amx``) and not something
neurenix does to a user's process. Call it before LiteRT creates its first interpreter.
"""

from __future__ import annotations

import ctypes
import platform
import struct
import sys

from neurenix_core.errors import ConfigurationError

__all__ = ["withhold"]

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_AUDIT_ARCH_X86_64 = 0xC000003E
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM = 158, 0x1023
_ALLOW, _EPERM = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _program() -> bytes:
    # seccomp_data: nr at offset 0, arch at 4, args[0] (low 32 bits, little-endian) at 16.
    return b"".join([
        _insn(_BPF_LD_W_ABS, 0, 0, 4),
        _insn(_BPF_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(_BPF_RET_K, 0, 0, _ALLOW),
        _insn(_BPF_LD_W_ABS, 0, 0, 0),
        _insn(_BPF_JEQ_K, 0, 3, _SYS_ARCH_PRCTL),
        _insn(_BPF_LD_W_ABS, 0, 0, 16),
        _insn(_BPF_JEQ_K, 0, 1, _ARCH_REQ_XCOMP_PERM),
        _insn(_BPF_RET_K, 0, 0, _EPERM),
        _insn(_BPF_RET_K, 0, 0, _ALLOW),
    ])


def withhold() -> None:
    """Refuse AMX tile permission to this process from now on (x86-64 Linux only)."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise ConfigurationError(f"--no-amx: withholding AMX needs x86-64 Linux, this is {sys.platform} {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    code = _program()
    program = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.cast(program, ctypes.c_void_p))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise ConfigurationError(f"--no-amx: the kernel refused the seccomp filter (errno {ctypes.get_errno()})")
