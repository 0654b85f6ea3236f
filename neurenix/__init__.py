"""``import neurenix as nx``: the seed-compatible facade over ``neurenix_core``.

Everything in ``neurenix_core`` (``nx.Tensor``, ``nx.matmul``, ``nx.compile`` ...) plus the seed
modules ``neurenix.device``, ``neurenix.nn`` and ``neurenix.hardware`` (whose names come from the
installed plugins). Nothing heavy is imported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import neurenix_core as _core
from neurenix_core import __all__ as _core_all
from neurenix_core import __version__  # noqa: F401

if TYPE_CHECKING:
    # A type checker does not run the copy below: it reads the same names where they are defined
    # (neurenix_core's __all__ splices in the errors and the array API functions, unread by mypy).
    from neurenix import hardware as hardware
    from neurenix import nn as nn
    from neurenix import optim as optim
    from neurenix_core import *
    from neurenix_core import compile as compile
    from neurenix_core import fft as fft
    from neurenix_core import generation as generation
    from neurenix_core import graph as graph
    from neurenix_core import linalg as linalg
    from neurenix_core import quantization as quantization
    from neurenix_core import testing as testing
    from neurenix_core.errors import *
    from neurenix_core.tensor._generated_ops import *
    from neurenix_core.tensor.ops import *

from neurenix import device  # type: ignore[assignment]  # the seed module replaces the core's device() (callable: nx.device("cpu"))
from neurenix._exports import install_finder

# `import neurenix.hardware.acme` for a facade module only a plugin's Manifest.exports names.
install_finder()

# The core's names that are already loaded, copied once; the rest (the core's lazy names, and the
# seed modules nn, optim and hardware) load on first use, as they do on neurenix_core, so
# ``import neurenix`` costs what ``import neurenix_core`` does (``from neurenix_core import *``
# would load every lazy name, nn with its graph tracer included).
globals().update({name: value for name, value in vars(_core).items() if name in _core_all and name != "device"})

__all__ = [*_core_all, "compile", "nn", "optim", "hardware", "device"]  # noqa: PLE0604 - the core's names are this facade's

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
