"""Every seed snippet runs as written (examples/seeds/), in a fresh interpreter. Snippets that use
only the core run with plugin autoload off, so only the core is involved; a snippet that needs a
plugin says so on a ``# env: NAME=value`` line (e.g. NEURENIX_EMULATE=cuda) and runs with that."""

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
    needs = [line[len("# env:"):].strip() for line in script.read_text().splitlines() if line.startswith("# env:")]
    if needs:
        env.update(item.split("=", 1) for item in needs)  # type: ignore[arg-type]
        env["OMP_NUM_THREADS"] = "1"
    else:
        env["NEURENIX_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip(), "a seed example prints what it did"
