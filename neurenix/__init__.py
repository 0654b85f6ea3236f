"""``import neurenix as nx``: the seed-compatible facade over ``neurenix_core``.

Everything in ``neurenix_core`` (``nx.Tensor``, ``nx.matmul``, ``nx.compile`` ...) plus the seed
modules ``neurenix.device``, ``neurenix.nn`` and ``neurenix.hardware`` (whose names come from the
installed plugins). Nothing heavy is imported here.
"""

from __future__ import annotations

from typing import Any

import neurenix_core as _core
from neurenix_core import __all__ as _core_all
from neurenix_core import __version__  # noqa: F401

from neurenix import device  # noqa: E402 - the seed module (callable: nx.device("cpu"))
from neurenix._exports import install_finder

# `import neurenix.hardware.acme` for a facade module only a plugin's Manifest.exports names.
install_finder()

# The core's names that are already loaded, copied once; the rest (the core's lazy names, and the
# seed modules nn, optim and hardware) load on first use, as they do on neurenix_core, so
# ``import neurenix`` costs what ``import neurenix_core`` does (``from neurenix_core import *``
# would load every lazy name, nn with its graph tracer included).
globals().update({name: value for name, value in vars(_core).items() if name in _core_all and name != "device"})

__all__ = [*_core_all, "compile", "nn", "optim", "hardware", "device"]

_SEED_MODULES = ("nn", "optim", "hardware")


def __getattr__(name: str) -> Any:
    if name in _SEED_MODULES:
        import importlib

        module = importlib.import_module(f"neurenix.{name}")
        globals()[name] = module
        return module
    value = getattr(_core, name)  # compile, linalg, quantization, graph ... (lazily loaded by the core)
    if name in _core_all:
        globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
