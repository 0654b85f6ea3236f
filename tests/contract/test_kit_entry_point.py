"""`pytest --neurenix-backend=NAME` (the pytest11 entry point) runs the kit; other pytest runs never import neurenix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_plain_pytest_with_the_option_runs_the_suite(tmp_path):
    report = tmp_path / "report.json"
    proc = _pytest(tmp_path, "--neurenix-backend=cpu", f"--neurenix-report={report}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(report.read_text())
    totals = data["backends"]["cpu"]["totals"]
    assert totals["passed"] > 100 and totals["failed"] == 0


def test_other_pytest_runs_do_not_import_neurenix(tmp_path):
    (tmp_path / "test_unrelated.py").write_text(
        "import sys\n\ndef test_untouched():\n    assert 'neurenix_core' not in sys.modules\n"
    )
    proc = _pytest(tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 passed" in proc.stdout
