"""Import cost of ``neurenix_core`` (with every plugin installed) against ``import numpy``.

Each sample is a fresh interpreter timing its own import with perf_counter, so interpreter start-up
is excluded. neurenix and numpy runs are interleaved (so machine load hits both alike) and the
median of N runs is reported. Also checks that no framework was imported.

    python benchmarks/import_time.py [--runs 25] [--env NEURENIX_BACKENDS=-onnxruntime] [--compare DIR] [--json out.json]

The machine this runs on is usually shared: take the median of 25 runs (the default) and compare
medians taken in the same session only. The process CPU time of each sample is reported too: it
leaves out the waits for a free core (and for the probe thread to be scheduled) that a busy
machine adds, so it is the better estimate of an idle machine's wall time; the goal is wall time. ``--env`` sets a variable for the timed interpreters (the
NEURENIX_* variables of the caller are otherwise removed), e.g. to time an install whose plugins
are all first-party (no crash journal written) against one with a third-party plugin.
``--compare DIR`` also times the neurenix_core found in DIR, interleaved with this checkout's, e.g.
before/after a change: ``git archive main neurenix_core neurenix | tar -x -C /tmp/base``. Samples
run in a temporary folder, so that neither copy shadows the other through the current directory.

Goal (issue 2): neurenix_core <= 1.3x numpy's import time, and none of torch/jax/openvino/
ai_edge_litert/tflite_runtime in sys.modules.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

HEAVY = ("torch", "jax", "jaxlib", "openvino", "ai_edge_litert", "tflite_runtime", "tensorflow", "onnxruntime")

SNIPPET = """
import sys, time, json
c0 = time.process_time()
t0 = time.perf_counter()
import {module}
dt = time.perf_counter() - t0
cpu = time.process_time() - c0
heavy = [m for m in {heavy!r} if m in sys.modules]
extra = {{}}
if "{module}" == "neurenix_core":
    extra = {{"backends": [(b.name, b.status.value) for b in {module}.backends()], "file": {module}.__file__}}
print(json.dumps({{"seconds": dt, "cpu_seconds": cpu, "heavy": heavy, **extra}}))
"""


def sample(module: str, env: dict[str, str], cwd: str) -> dict[str, Any]:
    code = SNIPPET.format(module=module, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=cwd)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set for the timed interpreters")
    parser.add_argument("--compare", metavar="DIR", help="also time the neurenix_core in DIR (another checkout), interleaved")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env["OMP_NUM_THREADS"] = "1"
    # Any non-empty PYTHONDONTWRITEBYTECODE (even "0") stops .pyc writing: the warm-up run must
    # write them, or every sample pays for compiling the modules changed since the last write.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(dict(item.split("=", 1) for item in args.env))
    cwd = tempfile.mkdtemp(prefix="neurenix-import-time-")
    other = None
    if args.compare:
        other = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.abspath(args.compare), env.get("PYTHONPATH", "")]))}
        found = sample("neurenix_core", other, cwd)["file"]
        if not found.startswith(os.path.abspath(args.compare)):
            parser.error(f"--compare {args.compare}: neurenix_core was imported from {found}")
    sample("numpy", env, cwd), sample("neurenix_core", env, cwd)  # warm the page cache and .pyc files
    numpy_s, nx_s, other_s, heavy, backends = [], [], [], set(), None
    numpy_cpu, nx_cpu, other_cpu = [], [], []
    for _ in range(args.runs):
        r = sample("numpy", env, cwd)
        numpy_s.append(r["seconds"])
        numpy_cpu.append(r["cpu_seconds"])
        r = sample("neurenix_core", env, cwd)
        nx_s.append(r["seconds"])
        nx_cpu.append(r["cpu_seconds"])
        heavy.update(r["heavy"])
        backends = r["backends"]
        if other is not None:
            r = sample("neurenix_core", other, cwd)
            other_s.append(r["seconds"])
            other_cpu.append(r["cpu_seconds"])
    result = {
        "runs": args.runs,
        "env": args.env,
        "numpy_median_ms": round(statistics.median(numpy_s) * 1e3, 2),
        "neurenix_core_median_ms": round(statistics.median(nx_s) * 1e3, 2),
        "ratio": round(statistics.median(nx_s) / statistics.median(numpy_s), 3),
        "heavy_modules_imported": sorted(heavy),
        "compare": args.compare,
        "compare_median_ms": round(statistics.median(other_s) * 1e3, 2) if other_s else None,
        "cpu_numpy_median_ms": round(statistics.median(numpy_cpu) * 1e3, 2),
        "cpu_neurenix_core_median_ms": round(statistics.median(nx_cpu) * 1e3, 2),
        "cpu_ratio": round(statistics.median(nx_cpu) / statistics.median(numpy_cpu), 3),
        "cpu_compare_median_ms": round(statistics.median(other_cpu) * 1e3, 2) if other_cpu else None,
        "backends_discovered": backends,
    }
    print(f"import numpy          median {result['numpy_median_ms']:8.2f} ms  ({args.runs} runs, interleaved)")
    print(f"import neurenix_core  median {result['neurenix_core_median_ms']:8.2f} ms  ratio {result['ratio']:.3f}x (goal <= 1.3x)")
    if other_s:
        print(f"import neurenix_core  median {result['compare_median_ms']:8.2f} ms  from {args.compare} (interleaved)")
    # CPU time (all threads of the sample) is what the import costs without waiting for a core:
    # on a busy machine it is the closer estimate of an idle machine's wall time. The goal is wall time.
    cpu_line = f"process CPU time: numpy {result['cpu_numpy_median_ms']:.2f} ms, neurenix_core {result['cpu_neurenix_core_median_ms']:.2f} ms"
    cpu_line += f" ({result['cpu_ratio']:.3f}x)"
    if other_cpu:
        cpu_line += f", {args.compare} {result['cpu_compare_median_ms']:.2f} ms"
    print(cpu_line)
    print(f"frameworks imported: {result['heavy_modules_imported'] or 'none'}")
    print(f"backends discovered: {backends}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
