"""benchmarks/import_time.py runs and reports what docs/plugins.md quotes (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("module", ["neurenix_core", "neurenix"])
def test_import_time_benchmark_runs(tmp_path: Path, module: str) -> None:
    out = tmp_path / "import_time.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "import_time.py"), "--runs", "2", "--module", module, "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["runs"] == 2 and result["module"] == module
    assert result["cpu"] and result["cpu"] in proc.stdout  # the table names the CPU it was measured on
    assert result["numpy_median_ms"] > 0 and result["neurenix_median_ms"] > 0
    assert result["ratio"] == round(result["neurenix_median_ms"] / result["numpy_median_ms"], 3)
    assert result["neurenix_own_ms"] == round(result["neurenix_median_ms"] - result["numpy_median_ms"], 2)
    assert result["numpy_in_process_median_ms"] > 0 and result["in_process_ratio"] > 1
    assert result["heavy_modules_imported"] == []
    assert ["cpu", "selected"] in result["backends_discovered"]
    assert f"import numpy; import {module} as nx; nx.default_device()" in proc.stdout and "goal <= 1.3x" in proc.stdout and "neurenix's own:" in proc.stdout
    assert "in the same processes: numpy" in proc.stdout
