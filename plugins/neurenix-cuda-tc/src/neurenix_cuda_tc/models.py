"""The Ampere guide's reference CNNs, as PyTorch and as neurenix models.

``unoptimized_cnn``: Conv 3->67, Conv 67->129, Linear 129->251 (the guide's "issues found").
``optimized_cnn``: its aligned twin, Conv 8->72, Conv 72->128, Linear 128->256, channels_last.
Used by the validator example, the benchmark matrix and the tests; ``neurenix validate-tc
neurenix_cuda_tc.models:unoptimized_cnn`` reproduces the guide's findings.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SEED_OPTIMIZED", "SEED_UNOPTIMIZED", "nx_cnn", "optimized_cnn", "unoptimized_cnn"]

SEED_UNOPTIMIZED = (3, 67, 129, 251)
SEED_OPTIMIZED = (8, 72, 128, 256)


def _torch_cnn(c: tuple[int, int, int, int], channels_last: bool) -> Any:
    import torch

    model = torch.nn.Sequential(
        torch.nn.Conv2d(c[0], c[1], 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(c[1], c[2], 3, padding=1), torch.nn.ReLU(),
        # The guide's snippet goes Conv -> Linear directly; a pool and a flatten make it run.
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(c[2], c[3]),
    ).eval()
    return model.to(memory_format=torch.channels_last) if channels_last else model


def unoptimized_cnn() -> Any:
    """The guide's unoptimised CNN (3->67->129->251) as a torch.nn.Module, NCHW."""
    return _torch_cnn(SEED_UNOPTIMIZED, channels_last=False)


def optimized_cnn() -> Any:
    """The aligned twin (8->72->128->256) as a torch.nn.Module in channels_last."""
    return _torch_cnn(SEED_OPTIMIZED, channels_last=True)


def nx_cnn(c: tuple[int, int, int, int] = SEED_UNOPTIMIZED) -> Any:
    """The same CNN as a neurenix_core.nn model (on the CPU; lower it with optimize_model)."""
    from neurenix_core import nn

    return nn.Sequential(
        nn.Conv2d(c[0], c[1], 3, padding=1), nn.ReLU(),
        nn.Conv2d(c[1], c[2], 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(c[2], c[3]),
    )
