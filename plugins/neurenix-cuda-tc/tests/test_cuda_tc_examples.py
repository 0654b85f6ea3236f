"""The examples/ scripts and the benchmark's --quick mode run end to end (CPU emulation)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neurenix_core.testing.reference import TOLERANCES

REPO = Path(__file__).resolve().parents[3]
_RTOL, _ATOL = TOLERANCES["float32"]
# Padding may route the convolutions through another CPU kernel: equal within float32 rounding,
# not bit for bit (2.98e-08 on AMD EPYC, 0 on Intel Xeon with AMX).
_UNCHANGED = f"unchanged within float32 tolerance (rtol={_RTOL:g}, atol={_ATOL:g}): True"


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ("tensor_cores_validate.py", _UNCHANGED),
        ("tensor_cores_train_amp.py", "loss "),
        ("tensor_cores_optimize.py", "restored switches"),
    ],
)
def test_example_runs(clean_python: Any, script: str, expect: str) -> None:
    code = f"import runpy; runpy.run_path({str(REPO / 'examples' / script)!r}, run_name='__main__')"
    proc = clean_python(code, emulate="cuda", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expect in proc.stdout


def test_benchmark_quick_mode(tmp_path: Path) -> None:
    out = tmp_path / "tc.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tensor_cores.py"), "--quick", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=str(REPO), check=False,
                          env={**__import__("os").environ, "NEURENIX_EMULATE": "cuda"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    # The shared benchmark schema (neurenix_core.benchkit): one row per model, precision,
    # batch and thread count, both sides' configurations read back and compared.
    rows = data["rows"]
    assert data["benchmark"] == "tensor_cores" and data["machine"]["cpu"]
    models = {r["model"] for r in rows}
    assert {"baseline-fp32", "tc-bf16"} <= models and any(m.startswith("matmul-bf16") for m in models)
    for r in rows:
        assert r["threads"] == 1 and r["neurenix_us"] > 0 and r["native_us"] > 0
        assert r["refused"] is None and r["neurenix_config"] == r["native_config"], r["refused"]
        assert r["neurenix_config"]["intra_op_threads"] == 1
    bf16 = next(r for r in rows if r["model"] == "tc-bf16")
    assert bf16["neurenix_config"]["param_dtype"] == "torch.bfloat16" and bf16["neurenix_config"]["weights_channels_last"] is True
