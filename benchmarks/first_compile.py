"""The README's first snippet as a new user runs it: cold (an empty state folder) and warm (the
choice the cold run cached), each in a fresh Python process, and the cpu:0 runtime chosen.

    .venv/bin/python benchmarks/first_compile.py [--runs 5]

The snippet is the README's first ``python`` block, read from README.md (so this follows it).
Each run is a new interpreter, timed from its start to its exit by this process (``process s``,
what a user waits for), and inside it around ``nx.compile`` plus the first call (``compile s``,
where the runtime measurement happens). Cold runs each get a new empty ``NEURENIX_STATE_DIR``; the
warm run after each cold one reuses that folder. No timing is asserted anywhere: the numbers are
for people (docs/cpu.md, issue #43's goal: under 3 s cold, under 1 s warm).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
_MARK = "__first_compile__"
# Wraps the snippet: the compile and first call timed inside the process, the chosen runtime
# read from the summary (the snippet's own prints go to stdout before it).
_PROLOGUE = "import time as _t\n"
_COMPILE = re.compile(r"^(\s*)(compiled = nx\.compile\(.*)$", re.MULTILINE)


def snippet() -> str:
    """The README's first python block, with its compile and first call timed."""
    text = (_ROOT / "README.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    if not _COMPILE.search(block):
        raise SystemExit("README.md's first python block has no `compiled = nx.compile(...)` line to time")
    block = _COMPILE.sub(r"\1_t0 = _t.perf_counter()\n\1\2", block, count=1)
    return _PROLOGUE + block + (
        f"\nimport json as _j\nprint({_MARK!r}, _j.dumps({{'compile_s': _t.perf_counter() - _t0, 'cached': '(cached)' in compiled.summary, "
        "'runtime': compiled.summary.split('runtime ', 1)[1].split(' ', 1)[0] if 'runtime ' in compiled.summary else '?'}))\n"
    )


def run_once(code: str, state_dir: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env["NEURENIX_STATE_DIR"] = state_dir
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False, cwd=tempfile.gettempdir())
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the README snippet failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith(_MARK))
    return {"process_s": wall, **json.loads(line[len(_MARK):])}


def main(argv: list[str] | None = None) -> dict[str, list[dict[str, object]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="cold runs, each followed by a warm run (default 5)")
    args = parser.parse_args(argv)
    from neurenix_core.benchkit import cpu_model

    code = snippet()
    rows: dict[str, list[dict[str, object]]] = {"cold": [], "warm": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="neurenix-first-compile-") as state:
            rows["cold"].append(run_once(code, state))
            rows["warm"].append(run_once(code, state))
    print(f"cpu: {cpu_model()} ({os.cpu_count()} CPUs), load average {os.getloadavg()[0]:.1f} at the end")
    print("| run | state | process s | compile + first call s | cpu:0 runtime |")
    print("|---|---|---|---|---|")
    for i in range(args.runs):
        for kind in ("cold", "warm"):
            r = rows[kind][i]
            print(f"| {i + 1} | {kind} | {r['process_s']:.2f} | {r['compile_s']:.2f} | {r['runtime']} |")
    for kind in ("cold", "warm"):
        times = sorted(float(r["process_s"]) for r in rows[kind])  # type: ignore[arg-type]
        chosen = sorted({str(r["runtime"]) for r in rows[kind]})
        print(f"{kind}: process {times[0]:.2f}-{times[-1]:.2f} s (median {times[len(times) // 2]:.2f}); runtime chosen: {', '.join(chosen)}")
    return rows


if __name__ == "__main__":
    main()
