"""Tensor Core utilisation: the share of CUDA kernel time spent in Tensor Core kernels.

Runs the model under ``torch.profiler`` (CUDA activity) and classifies kernel names. The
classification is by name, so it is a heuristic, but a documented one: cuBLAS/cuDNN/CUTLASS
encode the instruction family in the kernel name (``s16816gemm``, ``h884``, ``tensorop``,
``xmma ... tensor16x8x16``), while CUDA-core kernels say ``sgemm``/``ffma``. The seed's plain
substring ``"tc"`` is not used: it matches ``batch`` and ``fetch``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

from neurenix_core.errors import BackendUnavailableError

__all__ = ["TensorCoreProfile", "classify", "is_tensor_core_kernel", "profile_tensor_cores"]

_TC: Final = re.compile(
    r"(tensorop|tensor\d+x\d+x\d+|hmma|imma|wmma|gmma|wgmma|_mma|mma_|"  # CUTLASS / xmma / PTX families
    r"[hsi]\d{3,5}gemm|[hsi]884|[hsi]1688|[hsi]16816|s16832|bf16_s|tf32|"  # cuBLAS sm70-sm90 MMA shapes
    r"fmha|flash_fwd|flash_bwd|cudnn_.*_nhwckrsc_nhwc.*(f16|bf16)|xmma.*(f16|bf16|e4m3|e5m2))"
)
_NOT_TC: Final = re.compile(r"(ffma|sgemm|dgemm|gemv|elementwise|reduce|copy|fill)")


def is_tensor_core_kernel(name: str) -> bool:
    """True when a CUDA kernel name says it runs on Tensor Cores."""
    low = name.lower()
    if _NOT_TC.search(low) and not re.search(r"tensorop|hmma|imma|tensor\d", low):
        return False
    return bool(_TC.search(low))


@dataclass
class TensorCoreProfile:
    """Kernel time on Tensor Cores vs all CUDA kernels (microseconds)."""

    tensor_core_us: float
    total_us: float
    kernels: list[tuple[str, float, bool]] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.tensor_core_us / self.total_us if self.total_us > 0 else 0.0

    def __str__(self) -> str:
        return f"Tensor Core utilisation: {100 * self.share:.1f}% of {self.total_us:.0f} us CUDA kernel time"


def classify(kernels: list[tuple[str, float]]) -> TensorCoreProfile:
    """Sum kernel times (name, us) into a profile."""
    rows = [(n, t, is_tensor_core_kernel(n)) for n, t in kernels]
    return TensorCoreProfile(sum(t for _, t, tc in rows if tc), sum(t for _, t, _ in rows), sorted(rows, key=lambda r: -r[1]))


def profile_tensor_cores(model: Any, *inputs: Any, iterations: int = 10) -> TensorCoreProfile:
    """Run ``model(*inputs)`` ``iterations`` times under the CUDA profiler and classify kernels.

    Needs a real NVIDIA GPU: CPU-emulated devices have no CUDA kernels to measure.
    """
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            "plugin cuda profile_tensor_cores needs a real NVIDIA GPU (torch.cuda.is_available() is False): "
            "kernel times come from CUDA; emulated cuda devices run on the CPU"
        )
    with torch.inference_mode():
        model(*inputs)  # warm-up: cuDNN autotuning and lazy init stay out of the profile
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(iterations):
                model(*inputs)
            torch.cuda.synchronize()
    kernels = [(e.name, float(e.device_time_total)) for e in prof.key_averages() if e.device_time_total > 0]
    return classify(kernels)
