"""benchmarks/interpreter.py --quick: the interpreter against torch eager on one model and the
per-node row. It runs, both sides get a time, the threads are read back and the model's output
agreed with torch (the benchmark asserts it). No timing is asserted (the machine may be shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_interpreter_benchmark_quick(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path / "interpreter.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "interpreter.py"), "--quick", "--threads", "1",
                           "--models", "bert-tiny", "nodes", "--json", str(out)], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"].split(" ")[0], r["threads"]) for r in rows] == [("bert-tiny", 1), ("nodes", 1)]
    for r in rows:
        assert r["neurenix_us"] > 0 and r["native_us"] > 0 and r["refused"] is None, r
        assert r["neurenix_config"] == r["native_config"] == {"threads": 1}
    assert rows[1]["node_by_node_us"] > 0
    assert "interpreter: CPU " in proc.stdout and "| bert-tiny | fp32 | 1 | 1 |" in proc.stdout
