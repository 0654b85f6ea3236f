"""Which Tensor Core precisions a compute capability offers, as data (no torch, no driver).

Tensor Cores are a capability of a CUDA device, not a device type: a ``cuda`` device with
compute capability >= 7.0 has them, and the precisions they run grow with the architecture.
Every check takes a plain ``(major, minor)`` tuple so the rules are testable without a GPU.
"""

from __future__ import annotations

from typing import Final

from neurenix_core.errors import ConfigurationError, UnsupportedDTypeError

__all__ = [
    "PRECISIONS",
    "ComputeCapability",
    "UnknownPrecisionError",
    "architecture",
    "check_precision",
    "has_tensor_cores",
    "parse_precision",
    "tensor_core_precisions",
]

ComputeCapability = tuple[int, int]

#: Precision modes a user may ask for. "mixed" = fp16 autocast with fp32 master weights.
PRECISIONS: Final = ("fp32", "tf32", "fp16", "bf16", "mixed")
#: What each mode needs from the Tensor Cores ("fp32" needs none: it runs on CUDA cores).
_NEEDS: Final = {"fp32": None, "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "mixed": "fp16"}
TENSOR_CORE_MIN: Final[ComputeCapability] = (7, 0)

_ARCH: Final = ((12, "Blackwell"), (10, "Blackwell"), (9, "Hopper"), (8, "Ampere"), (7, "Volta/Turing"), (6, "Pascal"), (5, "Maxwell"))


class UnknownPrecisionError(ConfigurationError, ValueError):
    """A precision string that is not one of :data:`PRECISIONS`."""


def architecture(cc: ComputeCapability) -> str:
    if cc == (8, 9):
        return "Ada Lovelace"
    if cc == (7, 5):
        return "Turing"
    if cc in ((7, 0), (7, 2)):
        return "Volta"
    return next((name for major, name in _ARCH if cc[0] >= major), "pre-Maxwell")


def has_tensor_cores(cc: ComputeCapability) -> bool:
    return tuple(cc) >= TENSOR_CORE_MIN


def tensor_core_precisions(cc: ComputeCapability) -> tuple[str, ...]:
    """Input precisions the Tensor Cores of ``cc`` run (empty below 7.0).

    7.0 Volta: fp16. 7.2/7.5 (Xavier, Turing) add int8 (Turing's IMMA units). 8.x Ampere adds
    bf16, tf32 and int8. 8.9 Ada and 9.0 Hopper add fp8; later architectures keep all of them.
    """
    cc = (int(cc[0]), int(cc[1]))
    if not has_tensor_cores(cc):
        return ()
    out = ["fp16"]
    if cc >= (7, 2):
        out.append("int8")
    if cc >= (8, 0):
        out[1:1] = ["bf16", "tf32"]
    if cc >= (8, 9):
        out.append("fp8")
    return tuple(out)


def parse_precision(precision: str) -> str:
    """Normalise a precision string or raise :class:`UnknownPrecisionError` listing the valid ones."""
    if not isinstance(precision, str) or precision.strip().lower() not in PRECISIONS:
        raise UnknownPrecisionError(
            f"unknown Tensor Core precision {precision!r}; use one of {', '.join(PRECISIONS)} (plugin cuda)"
        )
    return precision.strip().lower()


def check_precision(precision: str, cc: ComputeCapability, device: str = "cuda:0") -> str:
    """Return the normalised precision if ``device`` (compute capability ``cc``) runs it on Tensor
    Cores; raise naming the device, its capability and the remedy otherwise."""
    mode = parse_precision(precision)
    need = _NEEDS[mode]
    if need is None:
        return mode
    have = tensor_core_precisions(cc)
    if need not in have:
        cc_txt = f"{cc[0]}.{cc[1]}"
        what = "has no Tensor Cores (they need compute capability >= 7.0)" if not have else f"runs {', '.join(have)} on its Tensor Cores"
        alt = "use precision='fp32' (CUDA cores)" if not have else f"use one of {', '.join(p for p in PRECISIONS if _NEEDS[p] in have)}"
        raise UnsupportedDTypeError(
            f"{device} ({architecture(cc)}, compute capability {cc_txt}) {what}, not {need}: {alt} or run on a newer GPU"
        )
    return mode
