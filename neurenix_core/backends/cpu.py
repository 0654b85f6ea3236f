"""The built-in CPU backend on NumPy, registered through the same entry point group as every
plugin (``cpu = "neurenix_core.backends.cpu"`` in neurenix-core's metadata)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from neurenix_core.plugins.hookspecs import hookimpl
from neurenix_core.plugins.manifest import Capabilities, Manifest, PriorityBand, ProbeContext, ProbeResult
from neurenix_core.tensor.dtypes import DTYPE_NAMES

if TYPE_CHECKING:
    from neurenix_core.backends.cpu_backend import CPUBackend

__all__ = ["CPUBackend"]

_VERSION = "0.1.0"


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(
        name="cpu",
        distribution="neurenix-core",
        version=_VERSION,
        api=">=1.0,<2",
        device_types=("cpu",),
        band=PriorityBand.CPU,
        priority=50,
        capabilities=Capabilities(
            dtypes=DTYPE_NAMES,
            precisions=("fp32", "fp64", "fp16", "bf16", "int8", "int16"),
            native_ops=("*",),
            compiles_models=False,
            quantization=("int8", "int16"),
            dlpack=True,
            # cpu:0 reads the core's own options (runtime, threads: graph.compile_options), no more.
            compile_options=(),
        ),
        install_hint="built into neurenix-core",
        description="NumPy on the host CPU",
    )


@hookimpl
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    return ProbeResult.found(1, cpu_count=os.cpu_count() or 1)


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> CPUBackend:
    from neurenix_core.backends.cpu_backend import CPUBackend

    return CPUBackend()


def __getattr__(name: str) -> Any:
    # ``from neurenix_core.backends.cpu import CPUBackend``: the class lives in cpu_backend.py,
    # loaded when the backend starts rather than at discovery (this module is the entry point).
    if name == "CPUBackend":
        from neurenix_core.backends.cpu_backend import CPUBackend

        return CPUBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
