"""Real plugin distributions for the plugin-system tests.

``plugin_site`` writes real distributions (a ``*.dist-info`` folder with METADATA and
``entry_points.txt`` beside a plugin module) into a temporary directory; ``run_neurenix`` runs
Python code in a fresh interpreter with that directory on ``sys.path``, so discovery, isolation
and ``sys.modules`` are observed exactly as a user's process would see them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

HEALTHY_PLUGIN = '''
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult, ArrayNamespaceBackend

class AcmeBackend(ArrayNamespaceBackend):
    def __init__(self, count, emulated):
        super().__init__(np, device_type="{device_type}", device_count=count, emulated=emulated)
    def _native_device(self, index):
        return "cpu"
    def _from_host(self, array, index):
        return np.array(array, copy=True)

@hookimpl
def neurenix_manifest():
    return Manifest(name="{name}", distribution="{dist}", version="1.2.3", api="{api}",
                    device_types=("{device_type}",), band=PriorityBand.{band}, priority={priority},
                    capabilities=Capabilities(dtypes=("float32", "int64"), native_ops=("*",)),
                    install_hint="pip install {dist}", emulation={emulation!r})

@hookimpl
def neurenix_probe(context):
    {probe}

@hookimpl
def neurenix_backend(manifest, probe):
    {backend}
'''


def write_distribution(site: Path, *, name: str, module: str, source: str, dist: str | None = None, version: str = "1.2.3") -> Path:
    """Write ``module.py`` and a real ``<dist>-<version>.dist-info`` registering it as ``name``."""
    dist = dist or f"neurenix-{name}"
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[neurenix.backends]\n{name} = {module}\n")
    (info / "top_level.txt").write_text(f"{module}\n")
    return info


def healthy_source(
    *,
    name: str = "acme",
    device_type: str = "acme",
    band: str = "ACCELERATOR",
    priority: int = 50,
    api: str = ">=1.0,<2",
    emulation: str | None = None,
    probe: str = "return ProbeResult.found(2)",
    backend: str = "return AcmeBackend(probe.device_count, probe.emulated)",
) -> str:
    return HEALTHY_PLUGIN.format(
        name=name, dist=f"neurenix-{name}", device_type=device_type, band=band, priority=priority,
        api=api, emulation=emulation, probe=probe, backend=backend,
    )


