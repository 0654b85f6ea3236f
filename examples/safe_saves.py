"""Saves that survive a kill and say why they failed (docs/saving.md).

A second process saves a checkpoint again and again, each step's weights all equal to the step;
this one kills it with SIGKILL in the middle of its saving and loads the checkpoint: one complete
step, every value of that step. The killed save's staging folder is removed by the next save. A
save that cannot write is a SaveError naming the path and the remedy.

    python examples/safe_saves.py [--out DIR] [--kills 3]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

import neurenix_core as nx

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import neurenix_core as nx

    nx.distributed.init("cpu")
    model = nx.nn.Linear(256, 256)
    step = int(sys.argv[2])
    while True:
        model.load_state_dict({k: np.full(v.shape, step, np.float32) for k, v in model.state_dict().items()})
        nx.distributed.save_checkpoint(sys.argv[1], model, step=step)
        print(step, flush=True)
        step += 1
""")


def checkpoint_step(folder: Path) -> tuple[int, bool]:
    """(the step the checkpoint holds, whether every weight is that step's)."""
    model = nx.nn.Linear(256, 256)
    step = nx.distributed.load_checkpoint(folder, model)
    return step, all(np.all(v == step) for v in model.state_dict().values())


def kill_while_saving(folder: Path, start: int, rng: random.Random) -> tuple[int, int]:
    """Start the writer, let it save a few steps, kill it at a random moment; returns (the last
    step it reported saved, the step of the checkpoint on disk)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(start)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    last = int(proc.stdout.readline())  # one save done: the process is past its imports
    time.sleep(rng.uniform(0.0, 0.05))
    proc.send_signal(signal.SIGKILL)
    last = max([last, *(int(line) for line in proc.stdout.read().split())])
    proc.wait()
    step, exact = checkpoint_step(folder)
    assert exact, f"{folder}: step {step} holds values of another step"
    return last, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for the checkpoint (default: a temporary folder)")
    ap.add_argument("--kills", type=int, default=3)
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="safe-saves-"))
    out.mkdir(parents=True, exist_ok=True)
    folder = out / "ckpt"
    nx.distributed.init("cpu")
    rng, start = random.Random(0), 0
    for _ in range(args.kills):
        last, step = kill_while_saving(folder, start, rng)
        print(f"writer killed after saving step {last}: the checkpoint loads as step {step}, every value of step {step}")
        start = step + 1
    left = sorted(p.name for p in out.iterdir() if p.name != "ckpt")
    print(f"left beside it by the killed saves: {len(left)} staging folder(s)")
    model = nx.nn.Linear(256, 256)
    nx.distributed.save_checkpoint(folder, model, step=start)
    print(f"after the next save: {sorted(p.name for p in out.iterdir())}")

    (out / "notes.txt").write_text("a file, not a folder")
    try:
        model.save(out / "notes.txt" / "w.npz")
    except nx.SaveError as exc:  # also an OSError, errno set, the system's error as __cause__
        print(f"SaveError (errno {exc.errno}): {exc}")
    nx.distributed.shutdown()
    print(f"pid {os.getpid()} done")


if __name__ == "__main__":
    main()
