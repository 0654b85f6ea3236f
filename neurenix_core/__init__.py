"""neurenix: one array-API namespace for tensors and small models on whatever accelerator is installed.

``import neurenix_core as nx`` discovers the backend plugins installed in this environment
(entry point group ``neurenix.backends``), probes them cheaply and selects the best available
device, without importing any framework: backends start on first use.
"""

from __future__ import annotations

import builtins as _builtins
import sys as _sys
from typing import TYPE_CHECKING, Any

from neurenix_core import aliases as _aliases

_aliases.install()  # old module paths (neurenix_core.hookspecs ...) keep working for one release

from neurenix_core.device import Device, DeviceType
from neurenix_core.errors import *  # the hierarchy is part of the public API
from neurenix_core.errors import __all__ as _errors_all
from neurenix_core.kwargs import strict_kwargs as _strict_kwargs
from neurenix_core.plugins import state as _state
from neurenix_core.plugins.hookspecs import hookimpl
from neurenix_core.plugins.manifest import NEURENIX_API_VERSION, Capabilities, Manifest, PriorityBand, ProbeContext, ProbeResult
from neurenix_core.plugins.records import Status
from neurenix_core.plugins.state import default_device, device, set_default_device
from neurenix_core.tensor.dtypes import (
    bool,
    can_cast,
    complex64,
    complex128,
    finfo,
    float16,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    isdtype,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from neurenix_core.tensor.op_names import ops_names as _ops_names

# Importing the subpackage neurenix_core.backends binds the name ``backends`` on this package;
# import it first so that the public function ``nx.backends()`` below is what the name means.
import neurenix_core.backends.cpu  # noqa: F401  # isort: skip (first: see above)
from neurenix_core.autograd import on_demand as _autograd_on_demand

_autograd_on_demand.install()  # the engine loads when a tensor first asks for it (autograd/on_demand.py)

if TYPE_CHECKING:
    # ops binds its generated functions in a loop; a type checker reads them from their stub.
    # Loaded on first access by __getattr__ below (Any to a type checker): their real types.
    from neurenix_core import generation as generation
    from neurenix_core import graph as graph
    from neurenix_core import nn as nn
    from neurenix_core import optim as optim
    from neurenix_core import testing as testing
    from neurenix_core.autograd.amp import GradScaler as GradScaler
    from neurenix_core.autograd.amp import autocast as autocast
    from neurenix_core.autograd.grad import (
        enable_grad as enable_grad,
    )
    from neurenix_core.autograd.grad import (
        grad as grad,
    )
    from neurenix_core.autograd.grad import (
        is_grad_enabled as is_grad_enabled,
    )
    from neurenix_core.autograd.grad import (
        no_grad as no_grad,
    )
    from neurenix_core.autograd.grad import (
        set_grad_enabled as set_grad_enabled,
    )
    from neurenix_core.autograd.grad import (
        value_and_grad as value_and_grad,
    )
    from neurenix_core.generation.generate import generate as generate
    from neurenix_core.graph import quantization as quantization
    from neurenix_core.graph.compile.compiler import compile as compile
    from neurenix_core.plugins.backend import ArrayNamespaceBackend as ArrayNamespaceBackend
    from neurenix_core.plugins.backend import Backend as Backend
    from neurenix_core.plugins.backend import CompiledModel as CompiledModel
    from neurenix_core.plugins.backend_info import BackendInfo as BackendInfo
    from neurenix_core.plugins.memory import MemoryStats as MemoryStats
    from neurenix_core.tensor import fft as fft
    from neurenix_core.tensor import linalg as linalg
    from neurenix_core.tensor._generated_ops import *
    from neurenix_core.tensor.creation import arange as arange
    from neurenix_core.tensor.creation import asarray as asarray
    from neurenix_core.tensor.creation import empty as empty
    from neurenix_core.tensor.creation import empty_like as empty_like
    from neurenix_core.tensor.creation import eye as eye
    from neurenix_core.tensor.creation import from_numpy as from_numpy
    from neurenix_core.tensor.creation import full as full
    from neurenix_core.tensor.creation import full_like as full_like
    from neurenix_core.tensor.creation import linspace as linspace
    from neurenix_core.tensor.creation import ones as ones
    from neurenix_core.tensor.creation import ones_like as ones_like
    from neurenix_core.tensor.creation import zeros as zeros
    from neurenix_core.tensor.creation import zeros_like as zeros_like
    from neurenix_core.tensor.dtypes import bfloat16 as bfloat16
    from neurenix_core.tensor.fallback import fallback_policy as fallback_policy
    from neurenix_core.tensor.fallback import fallback_stats as fallback_stats
    from neurenix_core.tensor.fallback import get_fallback_policy as get_fallback_policy
    from neurenix_core.tensor.fallback import reset_fallback_stats as reset_fallback_stats
    from neurenix_core.tensor.fallback import set_fallback_policy as set_fallback_policy
    from neurenix_core.tensor.ops import *
    from neurenix_core.tensor.tensor import Tensor as Tensor
    from neurenix_core.tensor.tensor import from_dlpack as from_dlpack
    from neurenix_core.training.step import compile_step as compile_step

from neurenix_core._version import __version__ as __version__

__array_api_version__ = "2024.12"

e = 2.718281828459045
inf = float("inf")
nan = float("nan")
pi = 3.141592653589793
newaxis = None


def _run_by_the_neurenix_command() -> _builtins.bool:  # ``bool`` here is nx.bool, the dtype
    """True in the ``neurenix`` command's process (console script or ``-m neurenix_core.cli.main``).

    This import runs before the command's main(), and ``neurenix doctor`` must report a broken
    configuration instead of dying in it: that process defers configuration errors to main(),
    which shows them (doctor) or raises them as ConfigurationError (every other subcommand).
    """
    argv = list(getattr(_sys, "orig_argv", ()))
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1] == "neurenix_core.cli.main":
        return True
    script: str = (getattr(_sys, "argv", None) or [""])[0]
    return script.replace("\\", "/").rsplit("/", 1)[-1] == "neurenix"


def backends() -> list[Any]:
    """Every discovered plugin (:class:`BackendInfo`): status, device count, reason, failure.

    Usable plugins come first, in rank order; denied, unavailable and failed ones follow.
    """
    from neurenix_core.plugins.report import backends as report_backends

    return report_backends()


@_strict_kwargs("nx.devices")
def devices(type: str | DeviceType | None = None) -> list[Device]:
    """Available devices (emulated ones included), best-ranked first; filter by ``type``."""
    return _state.registry().devices(type)


@_strict_kwargs("nx.explain")
def explain(*, file: Any = None) -> str:
    """Print and return why the default device is what it is, and each plugin's status."""
    from neurenix_core.plugins.report import explain_text

    text = explain_text()
    print(text, file=file)
    return text


def rediscover() -> None:
    """Discover plugins again (after installing one in a running session, or changing NEURENIX_*)."""
    _state.initialize()


@_strict_kwargs("nx.backend")
def backend(device: Any = None) -> Backend:
    """The backend object serving ``device`` (default device when None); starts it if needed."""
    from neurenix_core.tensor.placement import default_backend

    return default_backend(device)[0]


@_strict_kwargs("nx.set_memory_limit")
def set_memory_limit(device: Any, nbytes: int | None) -> None:
    """Limit the bytes tensors may hold on ``device`` (None removes the limit)."""
    dev = Device(device) if not isinstance(device, Device) else device
    backend(dev).memory.set_limit(dev.index, nbytes)


@_strict_kwargs("nx.memory_stats")
def memory_stats(device: Any = None) -> MemoryStats:
    """Bytes in use, peak, limit and live allocations on ``device``."""
    dev = default_device() if device is None else (device if isinstance(device, Device) else Device(device))
    return backend(dev).memory.stats(dev.index)


def __array_namespace_info__() -> Any:
    from neurenix_core.tensor.info import NamespaceInfo

    return NamespaceInfo()


#: ``nx.linalg``, ``nx.nn`` ...: submodules with heavier imports, loaded on first attribute access.
_LAZY_MODULES = {
    "linalg": "neurenix_core.tensor.linalg",
    "fft": "neurenix_core.tensor.fft",
    "nn": "neurenix_core.nn",
    "optim": "neurenix_core.optim",
    "quantization": "neurenix_core.graph.quantization",
    "graph": "neurenix_core.graph",
    "generation": "neurenix_core.generation",
    "distributed": "neurenix_core.distributed",  # imports no engine: nx.distributed.init() does
}


#: ``nx.grad``, ``nx.no_grad``, ``nx.autocast`` ...: functions of modules the basic tensor path does
#: not need (autograd, mixed precision), imported on first attribute access (name -> module).
_LAZY_ATTRIBUTES = {
    **dict.fromkeys(
        ("grad", "value_and_grad", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"), "neurenix_core.autograd.grad"
    ),
    **dict.fromkeys(("autocast", "GradScaler"), "neurenix_core.autograd.amp"),
    "generate": "neurenix_core.generation.generate",
    "load_compiled": "neurenix_core.deploy.load",
    "torch_backend": "neurenix_core.torch_compile",  # torch.compile(model, backend=nx.torch_backend(device=...))
    # The tensor layer (Tensor, creation, the array API functions, the fallback policy): discovery
    # and nx.default_device() need none of it (~3 ms of import, issue 43); ``dir(nx)`` lists them.
    **dict.fromkeys(("Tensor", "from_dlpack"), "neurenix_core.tensor.tensor"),
    **dict.fromkeys(
        ("arange", "asarray", "empty", "empty_like", "eye", "from_numpy", "full", "full_like", "linspace", "ones", "ones_like",
         "zeros", "zeros_like"),
        "neurenix_core.tensor.creation",
    ),
    **dict.fromkeys(
        ("fallback_policy", "fallback_stats", "get_fallback_policy", "reset_fallback_stats", "set_fallback_policy"),
        "neurenix_core.tensor.fallback",
    ),
    **dict.fromkeys(_ops_names(), "neurenix_core.tensor.ops"),
    # The backend base classes (a plugin's factory subclasses them) and memory statistics: loaded
    # when the first backend starts (``import neurenix_core`` does not start one).
    **dict.fromkeys(("Backend", "ArrayNamespaceBackend", "CompiledModel"), "neurenix_core.plugins.backend"),
    "MemoryStats": "neurenix_core.plugins.memory",
}


def __dir__() -> list[str]:
    # The names bound at import before they loaded on first use (the tensor layer, the backend
    # classes) are still listed.
    eager_before = ("neurenix_core.tensor.", "neurenix_core.plugins.backend", "neurenix_core.plugins.memory")
    return sorted({*globals(), *(name for name, module in _LAZY_ATTRIBUTES.items() if module.startswith(eager_before))})


def __getattr__(name: str) -> Any:
    # Submodules with heavier imports load on first use only.
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name])
    if name in _LAZY_ATTRIBUTES:
        value = getattr(importlib.import_module(_LAZY_ATTRIBUTES[name]), name)
        globals()[name] = value  # later reads (``with nx.no_grad():`` in a loop) skip this function
        return value
    if f"neurenix_core.{name}" in _aliases.MOVED:  # ``nx.fallback`` ...: a 0.1 submodule, moved in 0.2
        return importlib.import_module(f"neurenix_core.{name}")
    if name == "bfloat16":  # loads ml_dtypes on first use (see neurenix_core.tensor.dtypes)
        from neurenix_core.tensor.dtypes import dtype_table

        return dtype_table()["bfloat16"]
    if name == "BackendInfo":
        from neurenix_core.plugins.backend_info import BackendInfo

        return BackendInfo
    if name == "compile_step":
        from neurenix_core.training.step import compile_step

        return compile_step
    if name == "compile":
        from neurenix_core.graph.compile.compiler import compile as compile_

        return compile_
    raise AttributeError(f"module 'neurenix_core' has no attribute {name!r}")


__all__ = [  # noqa: PLE0604 - the error classes and array-API functions come from their modules' own __all__
    "Tensor", "Device", "DeviceType", "Backend", "ArrayNamespaceBackend", "CompiledModel",
    "Manifest", "Capabilities", "PriorityBand", "ProbeContext", "ProbeResult", "BackendInfo",
    "Status", "MemoryStats", "NEURENIX_API_VERSION", "hookimpl", "backends", "devices",
    "default_device", "set_default_device", "device", "explain", "rediscover", "backend",
    "set_memory_limit", "memory_stats", "fallback_policy", "fallback_stats",
    "get_fallback_policy", "set_fallback_policy", "reset_fallback_stats", "from_dlpack",
    "asarray", "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "zeros_like",
    "ones_like", "empty_like", "full_like", "from_numpy", "bool", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64",
    "complex64", "complex128", "isdtype", "result_type", "can_cast", "finfo", "iinfo",
    "e", "inf", "nan", "pi", "newaxis", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    "grad", "value_and_grad", "autocast", "GradScaler", "compile_step", "load_compiled", "torch_backend", *_errors_all, *_ops_names(),
]

# Discovery runs at import: cheap by contract (manifests and probes only, no frameworks). Last, so
# that a plugin module it imports may import any name of this namespace, the lazily loaded ones too.
_state.initialize(defer_errors=_run_by_the_neurenix_command())
_aliases.protect(_sys.modules[__name__])  # nx.backend stays the function when neurenix_core.backend (0.1) loads
