"""Every seed snippet that uses only the core runs as written (examples/seeds/), in a fresh
interpreter with plugin autoload off, so only the core is involved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SEEDS = sorted((Path(__file__).resolve().parents[1] / "examples" / "seeds").glob("*.py"))


def test_seed_examples_exist() -> None:
    assert len(SEEDS) >= 6


@pytest.mark.parametrize("script", SEEDS, ids=lambda p: p.stem)
def test_seed_example_runs(script: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env["NEURENIX_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip(), "a seed example prints what it did"
