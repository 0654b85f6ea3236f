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
    done = subprocess.run([sys.executable, str(kit.repo / "benchmarks" / "openvino.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=_env(), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| threads | batch |" in done.stdout
    rows = json.loads(out.read_text())
    assert {(r["threads"], r["batch"]) for r in rows} == {(1, 1), (1, 32), (2, 1), (2, 32)}
    assert all(r["overhead_fp32"] > 0 and r["int8_gain"] > 0 and r["vs_torch"] > 0 for r in rows)
