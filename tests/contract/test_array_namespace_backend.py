"""ArrayNamespaceBackend builds a conformant backend from any array-API library in a few lines.

The library here is array-api-strict, the standard's reference implementation, which rejects
everything the standard does not specify: the plugin below is a real distribution (dist-info and
entry point in a temporary folder) and must pass the whole conformance suite.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neurenix_core.testing import run_conformance

STRICT_PLUGIN = '''
from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core import ArrayNamespaceBackend, Capabilities, Manifest, PriorityBand, ProbeResult, hookimpl
from neurenix_core.errors import UnsupportedDTypeError

_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "complex64", "complex128")


class StrictBackend(ArrayNamespaceBackend):
    def __init__(self) -> None:
        import array_api_strict as xp

        self.array_type = type(xp.asarray(0))
        self._devices = list(xp.__array_namespace_info__().devices())[:3]  # CPU_DEVICE, device1, device2
        super().__init__(xp, device_type="strict", device_count=len(self._devices))

    def _native_device(self, index: int) -> Any:
        return self._devices[index]

    def _to_host(self, native: Any) -> np.ndarray:
        return np.array(native, copy=True)

    def _dtype_of(self, native: Any) -> np.dtype[Any]:
        return np.dtype(str(native.dtype).rsplit(".", 1)[-1])

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        if str(dtype) not in _DTYPES:
            raise UnsupportedDTypeError(f"strict has no dtype {dtype}")
        return getattr(self.xp, str(dtype))

    def _nbytes_of(self, native: Any) -> int:
        return int(np.prod(native.shape, dtype=np.int64)) * self._dtype_of(native).itemsize


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(name="strict", distribution="neurenix-strict", version="0.1", api=">=1.0,<2", device_types=("strict",),
                    band=PriorityBand.CPU, priority=1, capabilities=Capabilities(dtypes=_DTYPES, native_ops=("*",)))


@hookimpl
def neurenix_probe(context: Any) -> ProbeResult:
    return ProbeResult.found(3)


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> StrictBackend:
    return StrictBackend()
'''


def test_array_api_strict_backend_is_conformant(tmp_path: Path) -> None:
    pytest.importorskip("array_api_strict")
    from distributions import write_distribution

    site = tmp_path / "site"
    site.mkdir()
    write_distribution(site, name="strict", module="nx_strict_plugin", source=STRICT_PLUGIN)
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), "NEURENIX_BACKENDS": "strict,cpu"}
    row = run_conformance("strict", env=env, report_path=tmp_path / "strict.json")
    assert row["returncode"] == 0, row["output_tail"]
    assert row["conformant"] is True and row["totals"]["failed"] == 0
    assert row["totals"]["passed"] > 140
    caps = row["capabilities"]
    # Declared absences are reported as skips with their reasons, not hidden.
    assert any("does not declare dtype bfloat16" in r for r in caps["elementwise"]["skip_reasons"])
    assert caps["errors"]["passed"] == 4, "three strict devices and the cpu: mixing devices is really tried"
