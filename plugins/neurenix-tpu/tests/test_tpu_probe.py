"""The probe: device nodes, PCI ids, libtpu and the emulated device count, without importing JAX."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from neurenix_tpu.probe import emulated_device_count, missing_reason, probe, scan

from neurenix_core.plugins.manifest import ProbeContext

CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "XLA_", "JAX_", "TPU_"))}


def _pci(root: Path, name: str, vendor: str, device: str) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "device").write_text(device + "\n")


def test_scan_reads_nodes_and_pci_ids(tmp_path: Path) -> None:
    dev, pci = tmp_path / "dev", tmp_path / "pci"
    (dev / "vfio").mkdir(parents=True)
    for i in range(4):
        (dev / f"accel{i}").write_text("")
    (dev / "accel").mkdir()  # Intel NPUs use /dev/accel/accel0: a directory, not a TPU
    (dev / "vfio" / "vfio").write_text("")  # the vfio control node is not a device
    for i in range(4):
        _pci(pci, f"0000:00:0{i}.0", "0x1ae0", "0x005e")
    _pci(pci, "0000:00:1f.0", "0x8086", "0x005e")  # same device id, other vendor: ignored
    found = scan({}, dev_root=str(dev), pci_root=str(pci))
    assert len(found.accel_nodes) == 4 and found.vfio_nodes == ()
    assert found.pci_chips == ("v4",) * 4 and found.chip_count == 4


def test_missing_reason_names_the_missing_piece(tmp_path: Path) -> None:
    nothing = scan({}, dev_root=str(tmp_path / "none"), pci_root=str(tmp_path / "none"))
    assert "/dev/accel" in missing_reason(nothing) and "libtpu" in missing_reason(nothing)
    (tmp_path / "dev" / "vfio").mkdir(parents=True)
    (tmp_path / "dev" / "vfio" / "0").write_text("")
    nodes_only = scan({"TPU_LIBRARY_PATH": str(tmp_path / "absent.so")}, dev_root=str(tmp_path / "dev"), pci_root=str(tmp_path / "none"))
    assert nodes_only.vfio_nodes and nodes_only.libtpu is None
    reason = missing_reason(nodes_only)
    assert "libtpu is not installed" in reason and "vfio/0" in reason


def test_tpu_library_path_counts_as_libtpu(tmp_path: Path) -> None:
    lib = tmp_path / "libtpu.so"
    lib.write_bytes(b"\x7fELF")
    assert scan({"TPU_LIBRARY_PATH": str(lib)}, dev_root=str(tmp_path), pci_root=str(tmp_path)).libtpu == str(lib)


def test_emulated_device_count_follows_xla_flags() -> None:
    assert emulated_device_count({}) == 1
    assert emulated_device_count({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}) == 4
    assert emulated_device_count({"XLA_FLAGS": "--foo --xla_force_host_platform_device_count=2 --xla_force_host_platform_device_count=8"}) == 8


def test_probe_emulating_reports_the_count() -> None:
    result = probe(ProbeContext(emulate=True, timeout=2), env={"XLA_FLAGS": "--xla_force_host_platform_device_count=3"})
    assert result.available and result.emulated and result.device_count == 3


def test_probe_without_hardware_is_missing() -> None:
    if scan().has_nodes:  # pragma: no cover - only on a TPU VM
        return
    result = probe(ProbeContext(emulate=False, timeout=2), env={})
    assert not result.available and "/dev/accel" in result.reason


def test_probe_and_plugin_import_no_framework() -> None:
    code = (
        "import sys, json, neurenix_core, neurenix_tpu.plugin, neurenix_tpu.probe, neurenix_tpu.api;"
        "print(json.dumps([m for m in ('jax','jaxlib','torch','openvino','ai_edge_litert','tflite_runtime','onnxruntime') if m in sys.modules]))"
    )
    env = dict(CLEAN_ENV, NEURENIX_EMULATE="tpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
