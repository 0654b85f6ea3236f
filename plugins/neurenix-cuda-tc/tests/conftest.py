"""Shared set-up for neurenix-cuda-tc tests: the cuda device is emulated on PyTorch's CPU.

The whole-suite run sets these variables before anything is imported; alone, this file sets them
before neurenix_core is imported.
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import neurenix_core as nx

REPO = Path(__file__).resolve().parents[3]


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    gpu = None
    for item in items:
        if "gpu" in item.keywords:
            gpu = _has_gpu() if gpu is None else gpu
            if not gpu:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU: torch.cuda.is_available() is False on this machine"))


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped with a reason when none is present)")


@pytest.fixture(scope="session")
def cuda() -> Any:
    """The cuda backend, checked to be this plugin's emulated PyTorch one (never silently the CPU)."""
    if "cuda" not in os.environ.get("NEURENIX_EMULATE", "").split(","):
        pytest.skip("NEURENIX_EMULATE does not list 'cuda' and these tests run on the CPU emulation")
    backend = nx.backend("cuda:0")
    assert backend.name == "cuda" and backend.emulated
    assert type(backend).__module__ == "neurenix_cuda_tc.backend"
    return backend


@pytest.fixture
def tc(cuda: Any) -> Iterator[Any]:
    """An initialised TensorCoresBackend, released (switches restored) after the test."""
    from neurenix_cuda_tc.api import TensorCoresBackend

    backend = TensorCoresBackend("cuda:0")
    assert backend.initialize() is True
    yield backend
    if backend._backend is not None:
        backend.release()


def run_clean(code: str, *, emulate: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with no NEURENIX_* settings (optionally one emulate token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "JAX_", "XLA_"))}
    if emulate:
        env["NEURENIX_EMULATE"] = emulate
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env, cwd=str(REPO), check=False)


@pytest.fixture
def clean_python() -> Any:
    """:func:`run_clean`, for tests of the non-emulated behaviour."""
    return run_clean
