"""benchmarks/cpu.py --quick: cpu:0 (default choice and the interpreter) against torch eager,
OpenVINO, ONNX Runtime and LiteRT used directly. It runs, every runtime gets a time, each one's
output agrees with torch eager within 1e-4 and reads back the thread count it was given. No
timing is asserted (the machine may be shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = ("cpu:0", "numpy", "torch", "openvino", "onnxruntime", "litert")


def test_cpu_benchmark_quick_times_every_runtime_and_they_agree(tmp_path: Path) -> None:
    for module, dist in (("openvino", "openvino"), ("onnxruntime", "onnxruntime"), ("ai_edge_litert", "ai-edge-litert"),
                         ("neurenix_edgetpu", "neurenix-edgetpu (its TFLite writer)"), ("transformers", "transformers")):
        pytest.importorskip(module, reason=f"{dist} is not installed")
    out = tmp_path / "cpu.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu.py"), "--quick", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [(r["benchmark"], r["model"], r["batch"], r["threads"]) for r in rows] == [("cpu", "mobilenetv3_small", 1, 1)]
    row = rows[0]
    assert row["neurenix_us"] > 0 and all(row[f"{name}_us"] > 0 for name in RUNTIMES[1:]), row
    assert row["agree"] is True and row["max_rel_err"] <= 1e-4, row["errors"]
    assert f"runtime {row['runtime']} (" in row["configs"]["cpu:0"]["summary"]  # the choice is named, as the summary says
    assert all(row["configs"][name]["threads"] == 1 for name in RUNTIMES), row["configs"]
    assert row["refused"] is None and row["ratio"] == pytest.approx(row["neurenix_us"] / row["native_us"])
    assert data["versions"]["torch"] and data["machine"]["cpu"]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| model"))
    assert all(f"{name} µs" in header for name in RUNTIMES) and "agree" in header
    assert "| mobilenetv3_small | 1x3x224x224 | 1 |" in proc.stdout and "versions: " in proc.stdout


def test_call_path_benchmark_quick_reports_both_rows() -> None:
    """benchmarks/cpu_call_path.py --quick: the runtime's own call, the host model and compiled(x),
    interleaved, on BERT-tiny (OpenVINO) and a small MLP (LiteRT)."""
    for module in ("openvino", "ai_edge_litert", "neurenix_edgetpu", "neurenix_npu_openvino", "transformers"):
        pytest.importorskip(module, reason=f"{module} is not installed")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_call_path.py"), "--quick", "--threads", "1"],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("| bert_tiny", "| mlp_small"))]
    assert [r.split(" | ")[:3] for r in rows] == [["| bert_tiny", "ids 1x128", "1"], ["| mlp_small", "1x16", "1"]], proc.stdout
    for row in rows:
        own, host, compiled = (float(c) for c in row.split(" | ")[3:6])
        assert own > 0 and host > 0 and compiled > 0
