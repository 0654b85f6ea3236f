"""``import neurenix as nx``: the seed-compatible facade over ``neurenix_core``.

Everything in ``neurenix_core`` (``nx.Tensor``, ``nx.matmul``, ``nx.compile`` ...) plus the seed
modules ``neurenix.device``, ``neurenix.nn`` and ``neurenix.hardware`` (whose names come from the
installed plugins). Nothing heavy is imported here.
"""

from __future__ import annotations

from typing import Any

import neurenix_core as _core
from neurenix_core import *  # noqa: F403
from neurenix_core import __all__ as _core_all
from neurenix_core import __version__  # noqa: F401

from neurenix import device, nn  # noqa: E402 - the seed modules (device is callable: nx.device("cpu"))

__all__ = [*_core_all, "compile", "nn", "optim", "hardware", "device"]


def __getattr__(name: str) -> Any:
    if name in ("hardware", "optim"):
        import importlib

        return importlib.import_module(f"neurenix.{name}")
    return getattr(_core, name)  # compile, linalg, quantization, graph ... (lazily loaded by the core)
