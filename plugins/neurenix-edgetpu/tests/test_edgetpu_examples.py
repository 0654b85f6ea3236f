"""The example and the benchmark's quick mode run end to end (emulated edgetpu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["NEURENIX_EMULATE"] = "edgetpu"
    return env


def test_example_edgetpu_int8(tmp_path):
    out = tmp_path / "model.tflite"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "edgetpu_int8.py"), "--out", str(out)],
                          env=_env(), check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "same top-1: True" in proc.stdout and "emulated" in proc.stdout
    assert out.read_bytes()[4:8] == b"TFL3"
    assert "eager matmul on edgetpu:0 -> [[11.0]]" in proc.stdout


def test_benchmark_quick(tmp_path):
    """Quick run of two of the three models, batch 1: the schema and the configurations, no timing."""
    report = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "edgetpu.py"), "--quick", "--batches", "1", "--models", "mlp", "cnn", "--json", str(report)],
                          env=_env(), check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(report.read_text())["rows"]
    assert {(r["model"], r["precision"], r["threads"]) for r in rows} == {(m, p, t) for m in ("mlp", "cnn") for p in ("fp32", "int8") for t in (1, 2)}
    for r in rows:  # same configuration on both sides, read back from LiteRT: compared, never refused
        assert r["refused"] is None and abs(r["ratio"] - r["neurenix_us"] / r["native_us"]) < 1e-9 * r["ratio"]
        assert r["neurenix_config"]["threads"] == r["threads"] and r["neurenix_config"]["kernels"] == "xnnpack"
        assert r["neurenix_config"]["x86_amx"] in ("granted", "not granted", "absent", "unknown")
    assert "configurations (read back from the runtimes)" in proc.stdout


def _cpu_has_amx_int8() -> bool:
    from neurenix_edgetpu.amx import _cpu_has_amx_int8 as has

    return has()


def test_benchmark_no_amx_withholds_amx_from_xnnpack(tmp_path):
    """``--no-amx``: the read-back says AMX was not granted (where the CPU has it), so the int8 rows
    measure XNNPACK's AVX512-VNNI kernels; without the option an AMX host reports it granted."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        pytest.skip("AMX and seccomp: x86-64 Linux only")
    states = {}
    for flag in ([], ["--no-amx"]):
        report = tmp_path / f"bench{len(flag)}.json"
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "edgetpu.py"), "--quick", "--batches", "1", "--threads", "1",
                               "--models", "mlp", "--json", str(report), *flag], env=_env(), capture_output=True, text=True, timeout=300,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(report.read_text())["rows"]
        states[bool(flag)] = {r["native_config"]["x86_amx"] for r in rows} | {r["neurenix_config"]["x86_amx"] for r in rows}
    if _cpu_has_amx_int8():
        assert states == {False: {"granted"}, True: {"not granted"}}
    else:
        assert states == {False: {"absent"}, True: {"absent"}}
