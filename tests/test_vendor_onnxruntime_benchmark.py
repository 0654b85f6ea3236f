"""Smoke test of benchmarks/onnxruntime.py --quick: it runs, checks neurenix's output against the
bare session's, and reports a ratio per (threads, batch). No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_quick_mode_reports_every_configuration() -> None:
    pytest.importorskip("neurenix_onnxruntime", reason="neurenix-onnxruntime is not installed (pip install -e examples/neurenix-onnxruntime)")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp, "rows.json")
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "onnxruntime.py"), "--quick", "--json", str(out)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = json.loads(out.read_text())["rows"]
    assert {(r["threads"], r["batch"]) for r in rows} == {(1, 1), (1, 32), (2, 1), (2, 32)}
    for r in rows:  # both sessions report the same options: compared, never refused
        assert r["native_us"] > 0 and r["neurenix_us"] > 0 and r["ratio"] > 0 and r["refused"] is None
        assert r["neurenix_config"]["intra_op_threads"] == r["threads"]
