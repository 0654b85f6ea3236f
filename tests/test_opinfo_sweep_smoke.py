"""benchmarks/opinfo_sweep.py on five OpInfo ops, one sample each: it runs, writes sorted records
with known outcomes, ``add`` and ``__rmul__`` import and match eager PyTorch, and ``--diff``
names an op whose outcome changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTCOMES = {"pass", "wrong", "run refused", "import refused", "crash", "timeout", "export failed", "no float32",
            "unsupported sample"}


def test_opinfo_sweep_smoke(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the sweep imports PyTorch's OpInfo database")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"meta": {}, "ops": [{"name": "add", "variant": "", "outcome": "crash", "error": ""}]}))
    out = tmp_path / "now.json"
    env = {**os.environ, "NEURENIX_STATE_DIR": str(tmp_path / "state"), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "opinfo_sweep.py"), "--ops", "add,mul", "--limit", "5",
                           "--samples", "1", "--json", str(out), "--diff", str(old)],
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads(out.read_text())["ops"]
    assert len(records) == 5
    assert records == sorted(records, key=lambda r: (r["name"], r["variant"]))
    assert all(r["outcome"] in OUTCOMES for r in records), records
    by_name = {r["name"]: r for r in records if not r["variant"]}
    assert by_name["add"]["outcome"] == "pass", by_name["add"]
    assert by_name["__rmul__"]["outcome"] == "pass", by_name["__rmul__"]
    assert "torch " in proc.stdout and "cpu: " in proc.stdout and "imported: " in proc.stdout
    assert any(line.split()[:4] == ["add", "crash", "->", "pass"] for line in proc.stdout.splitlines()), proc.stdout
