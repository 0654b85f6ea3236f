"""examples/safe_saves.py runs as written: a checkpoint writer killed with SIGKILL while it saves
leaves a checkpoint of one complete step (the last one it reported, or the one it was saving),
the next save removes what the killed ones left, and a save that cannot write is a SaveError."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_safe_saves_example(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(NEURENIX_DISABLE_PLUGIN_AUTOLOAD="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "safe_saves.py"), "--out", str(tmp_path), "--kills", "3"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kills = re.findall(r"writer killed after saving step (\d+): the checkpoint loads as step (\d+), every value of step (\d+)", proc.stdout)
    assert len(kills) == 3, proc.stdout
    for last, step, same in kills:
        assert step == same and int(step) in (int(last), int(last) + 1), proc.stdout
    assert "after the next save: ['ckpt']" in proc.stdout, proc.stdout
    assert f"SaveError (errno 20): cannot save the weights file to {tmp_path / 'notes.txt' / 'w.npz'}: a part of the path is a file" \
        in proc.stdout, proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "notes.txt"]
