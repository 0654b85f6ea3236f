"""Import cost of ``neurenix_core`` (with every plugin installed) against ``import numpy``.

Two kinds of fresh interpreter, interleaved (so machine load hits both alike), N of each:
``import numpy`` alone, and ``import numpy; import neurenix_core as nx; nx.default_device()``, each
timing itself with perf_counter (interpreter start-up excluded). Reported: the medians, their
ratio, and neurenix's own milliseconds (the second kind's median minus the first's; the median
of the in-process split is printed too). Also checks that no framework was imported, and names
the CPU (``/proc/cpuinfo``).

    python benchmarks/import_time.py [--runs 15] [--module neurenix] [--env NEURENIX_BACKENDS=-onnxruntime] [--compare DIR] [--json out.json]

The machine this runs on is usually shared: compare medians taken in the same session only. The
process CPU time of each sample is reported too: it leaves out the waits for a free core (and for
the probe thread to be scheduled) that a busy machine adds, so it is the better estimate of an idle
machine's wall time; the goal is wall time. ``--module neurenix`` times the seed-style facade
(``import neurenix as nx``) instead. ``--env`` sets a variable for the timed interpreters (the
NEURENIX_* variables of the caller are otherwise removed), e.g. to time an install whose plugins
are all first-party (no crash journal written) against one with a third-party plugin.
``--compare DIR`` also times the neurenix_core found in DIR, interleaved with this checkout's, e.g.
before/after a change: ``git archive HEAD neurenix_core neurenix | tar -x -C /tmp/base``. Samples
run in a temporary folder, so that neither copy shadows the other through the current directory.

Goal (issues 17 and 43): ``import numpy; import neurenix_core; nx.default_device()`` <= 1.3x
``import numpy``, and none of torch/jax/openvino/ai_edge_litert/tflite_runtime in sys.modules.
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
GOAL = 1.3

NUMPY_SNIPPET = """
import json, time
c0 = time.process_time()
t0 = time.perf_counter()
import numpy
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}))
"""

NEURENIX_SNIPPET = """
import json, sys, time
c0 = time.process_time()
t0 = time.perf_counter()
import numpy
t1 = time.perf_counter()
import {module} as nx
nx.default_device()
t2 = time.perf_counter()
cpu = time.process_time() - c0
import neurenix_core
print(json.dumps({{
    "seconds": t2 - t0, "numpy_seconds": t1 - t0, "own_seconds": t2 - t1, "cpu_seconds": cpu,
    "heavy": [m for m in {heavy!r} if m in sys.modules],
    "backends": [(b.name, b.status.value) for b in neurenix_core.backends()], "file": neurenix_core.__file__,
}}))
"""


def sample(code: str, env: dict[str, str], cwd: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=cwd)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1e3, 2)


def measure(runs: int, module: str, env: dict[str, str], other: dict[str, str] | None, cwd: str) -> dict[str, Any]:
    """``runs`` samples of each kind, interleaved; medians in ms."""
    nx_code = NEURENIX_SNIPPET.format(module=module, heavy=HEAVY)
    keys = ("numpy", "nx", "own", "numpy_in_nx", "split_ratio", "other", "cpu_numpy", "cpu_nx", "cpu_other")
    samples: dict[str, list[float]] = {k: [] for k in keys}
    heavy: set[str] = set()
    backends: list[Any] = []
    for _ in range(runs):
        r = sample(NUMPY_SNIPPET, env, cwd)
        samples["numpy"].append(r["seconds"])
        samples["cpu_numpy"].append(r["cpu_seconds"])
        r = sample(nx_code, env, cwd)
        samples["nx"].append(r["seconds"])
        samples["own"].append(r["own_seconds"])
        samples["numpy_in_nx"].append(r["numpy_seconds"])
        samples["split_ratio"].append(r["seconds"] / r["numpy_seconds"])
        samples["cpu_nx"].append(r["cpu_seconds"])
        heavy.update(r["heavy"])
        backends = r["backends"]
        if other is not None:
            r = sample(nx_code, other, cwd)
            samples["other"].append(r["seconds"])
            samples["cpu_other"].append(r["cpu_seconds"])
    numpy_ms, nx_ms = median_ms(samples["numpy"]), median_ms(samples["nx"])
    cpu_numpy, cpu_nx = median_ms(samples["cpu_numpy"]), median_ms(samples["cpu_nx"])
    return {
        "numpy_median_ms": numpy_ms,
        "neurenix_median_ms": nx_ms,  # numpy + neurenix + default_device()
        "neurenix_own_ms": round(nx_ms - numpy_ms, 2),
        "neurenix_own_in_process_median_ms": median_ms(samples["own"]),
        # The same process's numpy import and neurenix's after it: on a busy machine the ratio of
        # two medians of separate processes moves by more than neurenix costs; this one does not.
        "numpy_in_process_median_ms": median_ms(samples["numpy_in_nx"]),
        "in_process_ratio": round(statistics.median(samples["split_ratio"]), 3),
        "ratio": round(nx_ms / numpy_ms, 3),
        "compare_median_ms": median_ms(samples["other"]) if samples["other"] else None,
        "cpu_numpy_median_ms": cpu_numpy,
        "cpu_neurenix_median_ms": cpu_nx,
        "cpu_ratio": round(cpu_nx / cpu_numpy, 3),
        "cpu_compare_median_ms": median_ms(samples["cpu_other"]) if samples["cpu_other"] else None,
        "heavy_modules_imported": sorted(heavy),
        "backends_discovered": backends,
    }


def report(result: dict[str, Any], module: str, compare: str | None) -> None:
    runs = result["runs"]
    print(f"CPU: {result['cpu']}, Python {result['python']}")
    labels = ("import numpy", f"import numpy; import {module} as nx; nx.default_device()")
    width = max(map(len, labels))
    print(f"{labels[0]:{width}s}  median {result['numpy_median_ms']:8.2f} ms  ({runs} runs each, interleaved)")
    print(f"{labels[1]:{width}s}  median {result['neurenix_median_ms']:8.2f} ms  ratio {result['ratio']:.3f}x (goal <= {GOAL}x)")
    print(f"neurenix's own: {result['neurenix_own_ms']:.2f} ms ({100 * result['neurenix_own_ms'] / result['numpy_median_ms']:.0f}% of numpy's)")
    print(f"in the same processes: numpy {result['numpy_in_process_median_ms']:.2f} ms, then neurenix "
          f"{result['neurenix_own_in_process_median_ms']:.2f} ms (medians); ratio {result['in_process_ratio']:.3f}x (median of each process's)")
    if result["compare_median_ms"] is not None:
        print(f"the same from {compare}: median {result['compare_median_ms']:8.2f} ms (interleaved)")
    # CPU time (all threads of the sample) is what the import costs without waiting for a core:
    # on a busy machine it is the closer estimate of an idle machine's wall time. The goal is wall time.
    cpu_line = f"process CPU time: numpy {result['cpu_numpy_median_ms']:.2f} ms, with neurenix {result['cpu_neurenix_median_ms']:.2f} ms"
    cpu_line += f" ({result['cpu_ratio']:.3f}x)"
    if result["cpu_compare_median_ms"] is not None:
        cpu_line += f", {compare} {result['cpu_compare_median_ms']:.2f} ms"
    print(cpu_line)
    print(f"frameworks imported: {result['heavy_modules_imported'] or 'none'}")
    print(f"backends discovered: {result['backends_discovered']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--module", choices=("neurenix_core", "neurenix"), default="neurenix_core", help="the package imported as nx")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="set for the timed interpreters")
    parser.add_argument("--compare", metavar="DIR", help="also time the neurenix_core in DIR (another checkout), interleaved")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env["OMP_NUM_THREADS"] = "1"
    # Any non-empty PYTHONDONTWRITEBYTECODE (even "0") stops .pyc writing: the warm-up run must
    # write them, or every sample pays for compiling the modules changed since the last write.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(dict(item.split("=", 1) for item in args.env))
    cwd = tempfile.mkdtemp(prefix="neurenix-import-time-")
    nx_code = NEURENIX_SNIPPET.format(module=args.module, heavy=HEAVY)
    other = None
    if args.compare:
        other = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.abspath(args.compare), env.get("PYTHONPATH", "")]))}
        found = sample(nx_code, other, cwd)["file"]
        if not found.startswith(os.path.abspath(args.compare)):
            parser.error(f"--compare {args.compare}: neurenix_core was imported from {found}")
    sample(NUMPY_SNIPPET, env, cwd), sample(nx_code, env, cwd)  # warm the page cache and .pyc files
    from neurenix_core.benchkit import cpu_model  # in this process only: the timed imports run in children

    result = {"runs": args.runs, "module": args.module, "env": args.env, "compare": args.compare, "cpu": cpu_model(),
              "python": sys.version.split()[0], **measure(args.runs, args.module, env, other, cwd)}
    report(result, args.module, args.compare)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
