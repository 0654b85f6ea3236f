"""Hook implementations (entry point ``acme``): static manifest, cheap probe, lazy factory.

Imported by ``import neurenix_core``: keep it free of heavy imports; the runtime is imported in
``backend.py`` when the factory runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_acme import __version__
from neurenix_core.contract import Capabilities, Manifest, PriorityBand, ProbeContext, ProbeResult, hookimpl

if TYPE_CHECKING:
    from neurenix_core.contract import Backend, CompiledModel


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(
        name="acme",
        distribution="neurenix-acme",
        version=__version__,
        api=">=1.4,<2",  # the NEURENIX_API_VERSION range this code was written and tested against (1.4: compile_options)
        device_types=("acme",),
        band=PriorityBand.ACCELERATOR,  # what the hardware is; the core orders bands, not the plugin
        priority=10,
        capabilities=Capabilities(
            dtypes=("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"),
            precisions=("fp32", "int8", "int16"),
            native_ops=("*",),  # every array-API function of the namespace
            compiles_models=True,  # neurenix_compile below; returning None there means "run eagerly"
            quantization=("int8", "int16"),
            # The nx.compile options neurenix_compile reads from options.extra: none here (lowering.py
            # reads only the quantization plan), so the core refuses every other name with a TypeError
            # naming the closest valid one. Declare each option you read, e.g.
            # CompileOption(name="cores", type="int|none", doc="ACME cores to use (None: all)").
            compile_options=(),
        ),
        install_hint="pip install neurenix-acme (and the ACME driver for real hardware)",
        emulation="acme",
        description="template backend: the ACME accelerator, emulated with NumPy on the host CPU",
        exports={"neurenix.hardware.acme": "neurenix_acme.api"},
    )


@hookimpl
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    from neurenix_acme.probe import probe

    return probe(context)


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> Backend:
    from neurenix_acme.backend import AcmeBackend

    return AcmeBackend(device_count=probe.device_count, emulated=probe.emulated)


@hookimpl
def neurenix_compile(backend: Backend, graph: Any, options: Any) -> CompiledModel | None:
    from neurenix_acme.lowering import lower

    return lower(backend, graph, options)
