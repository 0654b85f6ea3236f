"""The probe's file-system scan (no glob import at ``import neurenix_core``) finds what glob finds."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from neurenix_edgetpu.probe import _entries, _usb_devices


def test_entries_match_glob(tmp_path: Path) -> None:
    for name in ("apex_0", "apex_1", "apex_", ".apex_2", "apexx", "ttyS0"):
        (tmp_path / name).touch()
    folder = str(tmp_path)
    assert _entries(folder, "apex_") == sorted(glob.glob(os.path.join(folder, "apex_*")))
    assert _entries(folder) == sorted(glob.glob(os.path.join(folder, "*")))
    assert [os.path.basename(p) for p in _entries(folder, "apex_")] == ["apex_", "apex_0", "apex_1"]
    assert _entries(str(tmp_path / "missing")) == []


def test_usb_scan_finds_a_coral_accelerator_by_its_ids(tmp_path: Path) -> None:
    for entry, vendor, product in (("1-1", "1a6e", "089a"), ("1-2", "046d", "c52b"), ("2-1", "18D1", "9302")):
        (tmp_path / entry).mkdir()
        (tmp_path / entry / "idVendor").write_text(vendor + "\n")
        (tmp_path / entry / "idProduct").write_text(product + "\n")
    (tmp_path / "usb1").mkdir()  # a root hub without ids is skipped
    assert _usb_devices(str(tmp_path)) == ("1-1", "2-1")
