"""The runnable documentation: examples/npu_*.py and benchmarks/openvino.py --quick, each in a
fresh interpreter as a user runs them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["NEURENIX_EMULATE"] = "npu"
    return env


@pytest.mark.parametrize("name", ["npu_quickstart.py", "npu_int8.py"])
def test_example_runs(kit: Any, name: str) -> None:
    done = kit.run_script(kit.repo / "examples" / name, env=_env())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "npu:0" in done.stdout or "emulating npu" in done.stdout
    if name == "npu_quickstart.py":
        assert "host inputs: nx.Tensor(x) on cpu:0 -> npu:0; outputs='host' -> ndarray" in done.stdout


@pytest.mark.slow
def test_benchmark_quick_mode_prints_the_table(kit: Any, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import json
    import subprocess

    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(kit.repo / "benchmarks" / "openvino.py"), "--quick", "--models", "cnn", "--json", str(out)],
                          check=False, capture_output=True, text=True, timeout=600, env=_env(), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| model | precision | batch | threads |" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {(r["threads"], r["batch"], r["precision"]) for r in rows} == {(t, b, p) for t in (1, 2) for b in (1, 32) for p in ("fp32", "int8")}
    for r in rows:  # OpenVINO's own API compiled the same model to the same effective configuration
        assert r["refused"] is None and r["ratio"] > 0 and r["torch_fp32_us"] > 0
        assert r["neurenix_config"]["INFERENCE_NUM_THREADS"] == str(r["threads"])
        assert r["neurenix_config"]["integer_layers"].startswith("0/" if r["precision"] == "fp32" else "4/")


@pytest.mark.slow
def test_model_zoo_benchmark_quick_mode_has_fp32_and_int8_rows(kit: Any, tmp_path: Path) -> None:
    """benchmarks/npu_models.py: fp32 against convert_model and int8 against the same FakeQuantize
    graph through bare OpenVINO; every int8 conv/FC runs in integer precision on both sides."""
    pytest.importorskip("torch")
    import json
    import subprocess

    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(kit.repo / "benchmarks" / "npu_models.py"), "--quick", "--models", "resnet_block",
                           "--threads", "1", "--batches", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=_env(), cwd=str(tmp_path), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "int8 speed-up, neurenix (fp32/int8)" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["precision"]) for r in rows] == [("resnet_block", "fp32"), ("resnet_block", "int8")]
    for r in rows:  # both sides read back the same effective configuration
        assert r["refused"] is None and r["ratio"] > 0
        assert r["neurenix_config"]["integer_layers"] == r["native_config"]["integer_layers"] == ("0/4" if r["precision"] == "fp32" else "4/4")
    int8 = rows[1]
    assert int8["int8_speedup"] > 0 and int8["native_int8_speedup"] > 0 and 0 < int8["int8_err"] <= 0.05
