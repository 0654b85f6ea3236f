"""The npu plugin's piece of the persistent compile cache: a second process imports OpenVINO's
compiled blob instead of lowering and compiling, with bit-identical results; the key follows
the precision; a damaged entry is compiled again; two processes at once compile once."""

from __future__ import annotations

from pathlib import Path

import compile_cache_child as child


def test_second_process_hits_with_identical_results(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "npu:0")
    warm = child.run(tmp_path, "npu:0")
    assert "compile cache: miss" in cold["summary"] and "compile cache: hit" in warm["summary"], (cold["summary"], warm["summary"])
    assert warm["sha256"] == cold["sha256"]
    fp16 = child.run(tmp_path, "npu:0", "fp16")  # another precision: another entry
    assert "compile cache: miss" in fp16["summary"] and "INFERENCE_PRECISION_HINT=f16" in fp16["summary"]
    assert len(list((tmp_path / "compile_cache" / "entries").glob("*.nxc"))) == 2


def test_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "npu:0")
    [entry] = (tmp_path / "compile_cache" / "entries").glob("*.nxc")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    again = child.run(tmp_path, "npu:0")
    assert "was unusable (ValueError: checksum mismatch), deleted and compiled again" in again["summary"]
    assert again["sha256"] == cold["sha256"]
    assert "compile cache: hit" in child.run(tmp_path, "npu:0")["summary"]


def test_off_writes_nothing(tmp_path: Path) -> None:
    out = child.run(tmp_path, "npu:0", NEURENIX_COMPILE_CACHE="0")
    assert "compile cache: off (NEURENIX_COMPILE_CACHE=0)" in out["summary"]
    assert not (tmp_path / "compile_cache").exists()


def test_two_processes_at_once(tmp_path: Path) -> None:
    results = child.run_together(tmp_path, "npu:0")
    states = sorted("hit" if "compile cache: hit" in r["summary"] else "miss" for r in results)
    assert states == ["hit", "miss"] and len({r["sha256"] for r in results}) == 1


def test_cpu_host_runtime_hits_too(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "cpu:0", NEURENIX_CPU_RUNTIME="openvino")
    warm = child.run(tmp_path, "cpu:0", NEURENIX_CPU_RUNTIME="openvino")
    assert "OpenVINO CPU on cpu:0" in warm["summary"] and "compile cache: hit" in warm["summary"], warm["summary"]
    assert "compile cache: miss" in cold["summary"] and warm["sha256"] == cold["sha256"]
