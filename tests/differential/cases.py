"""Every differential case (before sampling): which (target, device, mode) combinations exist.

A mode applies where it means something: ``grad`` on devices whose backend trains and for targets
taking a float32/float64 tensor; ``compiled`` for layers and models, on every device, and on
cpu:0 once per host runtime a plugin offers (and NumPy's interpreter); the data-type functions
(``finfo``, ``can_cast`` ...) hold no tensor and run once, on cpu:0.
"""

from __future__ import annotations

import functools
from typing import Any

from neurenix_core.tensor.dtypes import as_dtype

from .gen import GRAD_FLOAT
from .harness import DiffCase
from .namespace import CATALOGUE, HOST_RESULT
from .nn_cases import FUNCTIONAL, LAYERS, LOSSES

__all__ = ["cases_for", "dtypes_on", "host_runtime_names"]


@functools.cache
def _backend(device: str) -> Any:
    import neurenix_core as nx

    return nx.backend(nx.Device(device))


@functools.cache
def dtypes_on(device: str, candidates: tuple[str, ...]) -> tuple[str, ...]:
    """The candidates the device declares (Capabilities.dtypes / its runtime)."""
    be = _backend(device)
    return tuple(d for d in candidates if be.supports_dtype(as_dtype(d)))


def host_runtime_names() -> list[str]:
    """The cpu:0 runtimes: NumPy's interpreter and every host runtime a usable plugin declares
    (from the manifests: nothing is started to list them)."""
    from neurenix_core.plugins.state import registry

    names = ["numpy"]
    for rec in registry().records:
        runtime = rec.manifest.capabilities.host_runtime if rec.manifest is not None else None
        if runtime and rec.failure is None and rec.denied is None and runtime not in names:
            names.append(runtime)
    return names


def cases_for(family: str, mode: str, duts: list[Any]) -> list[DiffCase]:
    if family == "namespace":
        return [c for name in CATALOGUE for c in _namespace_cases(name, mode, duts)]
    if family == "nn":
        return [c for name in [*LAYERS, *LOSSES, *FUNCTIONAL] for c in _nn_cases(name, mode, duts)]
    raise ValueError(f"unknown differential family {family!r}")


def _namespace_cases(name: str, mode: str, duts: list[Any]) -> list[DiffCase]:
    op = CATALOGUE[name]
    out = []
    for dut in duts:
        if name in HOST_RESULT and (dut.device != "cpu:0" or mode != "nograd"):
            continue
        if mode == "grad":
            if op.creates or not _backend(dut.device).trains or not dtypes_on(dut.device, tuple(d for d in op.dtypes if d in GRAD_FLOAT)):
                continue
        elif mode != "nograd" or not dtypes_on(dut.device, op.dtypes):
            continue
        out.append(DiffCase("namespace", name, dut.device, dut.backend, mode))
    return out


def _nn_cases(name: str, mode: str, duts: list[Any]) -> list[DiffCase]:
    out = []
    for dut in duts:
        if mode == "grad" and not _backend(dut.device).trains:
            continue
        if mode == "compiled":
            if name not in LAYERS or not LAYERS[name].compiled:
                continue
            runtimes: list[str | None] = list(host_runtime_names()) if dut.device == "cpu:0" else [None]
            out += [DiffCase("nn", name, dut.device, dut.backend, mode, runtime) for runtime in runtimes]
            continue
        out.append(DiffCase("nn", name, dut.device, dut.backend, mode))
    return out
