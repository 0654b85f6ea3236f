"""benchmarks/first_compile.py: the README's first snippet, cold then warm, in fresh processes.
It must keep finding the snippet's compile line (README edits would otherwise break it
silently), and a warm run must reuse the runtime the cold run measured and cached. No timing is
asserted (the machine may be shared)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("first_compile", ROOT / "benchmarks" / "first_compile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_snippet_runs_cold_then_warm_with_the_same_runtime(capsys: Any) -> None:
    rows = _benchmark().main(["--runs", "1"])
    cold, warm = rows["cold"][0], rows["warm"][0]
    assert cold["runtime"] == warm["runtime"] != "?"
    assert not cold["cached"] and warm["cached"]  # the warm process read the cold one's choice
    assert 0 < float(warm["compile_s"]) < float(warm["process_s"])
    out = capsys.readouterr().out
    assert "| 1 | cold |" in out and "| 1 | warm |" in out and "runtime chosen: " in out
