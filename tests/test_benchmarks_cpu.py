"""benchmarks/cpu.py --quick: cpu:0 (default choice and the interpreter) against torch eager,
OpenVINO, ONNX Runtime and LiteRT used directly. It runs, every runtime gets a time, each one's
output agrees with torch eager within 1e-4 and reads back the thread count it was given. No
timing is asserted (the machine may be shared)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


INT8_CONTENDERS = ("cpu:0 int8", "numpy int8", "cpu:0 fp32", "numpy fp32", "onnxruntime int8", "openvino int8")


def test_cpu_benchmark_int8_quick_row_names_runtimes_and_agreement(tmp_path: Path) -> None:
    """benchmarks/cpu.py --int8 --quick: cpu:0 int8 (its runtime and int8 path named), the integer
    reference, cpu:0 and the interpreter in fp32, and ONNX Runtime's QDQ model in ONNX Runtime and
    OpenVINO, one row with every time, the ratios, and top-1 agreements between 0 and 1. Nothing
    is asserted on time or on how well int8 agrees."""
    for module in ("openvino", "onnxruntime", "onnx"):
        pytest.importorskip(module, reason=f"{module} is not installed")
    out = tmp_path / "int8.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu.py"), "--int8", "--quick", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["int8"] is True and data["cpu_features"]["cpu"] and isinstance(data["cpu_features"]["vnni"], bool)
    rows = data["rows"]
    assert [(r["benchmark"], r["model"], r["precision"], r["batch"], r["threads"]) for r in rows] == [("cpu", "mobilenetv3_small", "int8", 1, 1)]
    row = rows[0]
    assert row["skipped"] == {}, row["skipped"]
    assert all(row["times_us"][name] > 0 for name in INT8_CONTENDERS), row["times_us"]
    configs = row["configs"]
    assert f"runtime {row['runtime']} (" in configs["cpu:0 int8"]["summary"] and row["runtime"] != "?"
    assert configs["numpy int8"]["runtime"] == "numpy" and "integer kernels" in configs["numpy int8"]["int8_path"]
    assert row["int8_path"].startswith(("int8 with", "NumPy integer kernels")), row["int8_path"]
    assert row["fp32_runtime"] == configs["cpu:0 fp32"]["runtime"] != "?"
    assert row["fp32_agree"] is True, row["errors"]  # the fp32 contenders agree with torch within 1e-4
    assert all(configs[name]["threads"] == 1 for name in INT8_CONTENDERS), configs
    assert "8-bit" in configs["openvino int8"]["kernels"] and "integer" in configs["onnxruntime int8"]["kernels"]
    assert row["fastest_peer"] in ("onnxruntime int8", "openvino int8")
    assert row["refused"] is None and row["ratio"] == pytest.approx(row["times_us"]["cpu:0 int8"] / row["times_us"][row["fastest_peer"]])
    assert row["int8_vs_fp32"] == pytest.approx(row["times_us"]["cpu:0 int8"] / row["times_us"]["cpu:0 fp32"])
    assert row["numpy_int8_vs_fp32"] == pytest.approx(row["times_us"]["numpy int8"] / row["times_us"]["numpy fp32"])
    assert set(row["agreement"]) == {"cpu:0 int8", "numpy int8", "onnxruntime int8", "openvino int8"}
    assert all(0.0 <= a <= 1.0 for a in row["agreement"].values()), row["agreement"]
    assert row["agreement_samples"] == 32 and 1 <= row["agreement_classes"] <= 32
    assert all(len(picks) == 32 for picks in row["top1"].values()) and set(row["top1"]) == set(row["agreement"])
    assert set(row["same_top1_as_reference"]) == {"cpu:0 int8", "onnxruntime int8", "openvino int8"}
    assert all(0.0 <= a <= 1.0 for a in row["same_top1_as_reference"].values()), row["same_top1_as_reference"]
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| model"))
    assert all(f"{name} µs" in header for name in INT8_CONTENDERS) and "top-1 agreement" in header
    assert "| mobilenetv3_small | 1x3x224x224 | 1 |" in proc.stdout and "int8 features: /proc/cpuinfo" in proc.stdout
    assert "goals:" in proc.stdout and "OPTIMIZATION_CAPABILITIES" in proc.stdout


def _cpu_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_cpu_under_test", ROOT / "benchmarks" / "cpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_int8_path_reads_each_runtimes_summary() -> None:
    bench = _cpu_bench()
    ov = ("input (1, 3, 224, 224): OpenVINO CPU on cpu:0, INFERENCE_PRECISION_HINT=f32, 1 thread(s), int8 with the core's plan "
          "(54/54 conv/FC layers in integer precision), compile cache: miss; runtime openvino (fastest, measured)")
    litert = ("input (1, 3, 224, 224): LiteRT 2.3.0 with the XNNPACK delegate on cpu:0, int8 with the core's plan (XNNPACK's int8 "
              "kernels on AMX tiles), 1 thread(s); XNNPACK took 247/247 ops; runtime litert (fastest)")
    numpy = ("input (1, 3, 224, 224): NumPy integer kernels on cpu:0 (int8, TFLite arithmetic); runtime numpy (runtime='numpy' asked)")
    assert bench.int8_path(ov) == "int8 with the core's plan (54/54 conv/FC layers in integer precision)"
    assert bench.int8_path(litert) == "int8 with the core's plan (XNNPACK's int8 kernels on AMX tiles)"
    assert bench.int8_path(numpy) == "NumPy integer kernels on cpu:0 (int8, TFLite arithmetic)"
    assert bench.int8_path("runtime openvino") == "?"


def test_int8_goals_tally_met_and_missed_rows() -> None:
    bench = _cpu_bench()
    rows = [{"model": "a", "threads": 1, "int8_vs_fp32": 0.5, "ratio": 1.2, "numpy_int8_vs_fp32": 2.0,
             "agreement": {"cpu:0 int8": 0.90, "numpy int8": 0.905}},
            {"model": "b", "threads": 2, "int8_vs_fp32": 0.9, "ratio": None, "numpy_int8_vs_fp32": 3.5,
             "agreement": {"cpu:0 int8": 0.80, "numpy int8": 0.85}}]
    lines = bench.int8_goals(rows, vnni=True)
    assert lines[0] == "- cpu:0 int8 / cpu:0 fp32 <= 0.8: met on 1/2 rows; not met: b t2 0.90"
    assert lines[1] == "- cpu:0 int8 / fastest int8 peer <= 1.05: met on 0/2 rows; not met: a t1 1.20; no ratio: b t2"
    assert lines[2] == "- numpy int8 / numpy fp32 (neurenix-core alone) <= 3.0: met on 1/2 rows; not met: b t2 3.50"
    assert lines[3].endswith("1/2 rows; not: b t2 -0.050")
    assert "no VNNI" in bench.int8_goals(rows, vnni=False)[0]
