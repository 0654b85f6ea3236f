"""The differential layer's full sweep: every case of tests/differential (every namespace function
and nn entry x every device x every mode, compiled cpu:0 cases once per host runtime), not the
per-run sample CI draws, and the counts: cases, examples, devices, failures by kind.

    .venv/bin/python benchmarks/differential_sweep.py                  # every case, 3 examples each
    .venv/bin/python benchmarks/differential_sweep.py --examples 10 --workers 2 --json sweep.json
    .venv/bin/python benchmarks/differential_sweep.py --seed 7 -k conv # one seed, a subset (pytest -k)

The devices are the installed backends' (the accelerators emulated on the host CPU through their
real runtimes unless NEURENIX_EMULATE is set otherwise). A failing case prints its seed: rerun it
with ``NEURENIX_DIFF_SEED=<seed> NEURENIX_DIFF_SAMPLE=all pytest tests/differential -k <case id>``.
Shrinking is off here (a sweep counts; the CI run shrinks what it finds). Known failures
(tests/differential/known_failures.py) are counted apart, as is every case the library refused
with a typed error (an unsupported op or dtype on a device: honest, but listed with its reason).
No timing is asserted: the wall time is printed for people.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# benchmarks/ holds openvino.py, onnxruntime.py, tpu.py ...: as the script's folder it would be the
# first entry of sys.path (and of every xdist worker's), and `import openvino` would find the
# benchmark instead of the runtime. The runtimes must be the installed ones.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]


class Tally:
    """A pytest plugin counting the differential cases from their reports (xdist workers' too)."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.known_kinds: Counter[str] = Counter()
        self.by_device: dict[str, Counter[str]] = defaultdict(Counter)
        self.devices: set[str] = set()
        self.examples = 0
        self.failed: list[str] = []
        self.xpassed: list[str] = []
        self.refusals: Counter[str] = Counter()
        self.other: list[str] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        props = dict(report.user_properties)
        case = props.get("differential_case")
        if case is None:
            if report.when == "call" and report.failed:
                self.other.append(report.nodeid)  # the catalogue-coverage tests
            return
        if report.when == "setup" and report.passed:
            return
        if report.when == "teardown" and not report.failed:
            return
        where = case["device"] + (f" [{case['runtime']}]" if case.get("runtime") else "")
        self.devices.add(where)
        run = props.get("differential", {})
        self.examples += int(run.get("examples", 0))
        outcome = _outcome(report)
        self.outcomes[outcome] += 1
        self.by_device[where][outcome] += 1
        case_id = report.nodeid.split("[", 1)[-1].rstrip("]")
        if outcome == "failed":
            self.kinds[run.get("kind") or "harness"] += 1
            self.failed.append(f"{case_id}: [{run.get('kind') or 'harness'}]")
        elif outcome == "xfailed":
            self.known_kinds[run.get("kind") or "harness"] += 1
        elif outcome == "xpassed":
            self.xpassed.append(case_id)
        elif outcome == "refused":
            reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.refusals[reason.split("typed error): ", 1)[-1][:140]] += 1
        if run.get("refusal") and outcome == "passed":
            self.refusals[f"(some examples) {run['refusal'][:130]}"] += 1

    def summary(self) -> dict[str, Any]:
        return {
            "cases": sum(self.outcomes.values()),
            "examples": self.examples,
            "devices": sorted(self.devices),
            "outcomes": dict(self.outcomes),
            "failures_by_kind": dict(self.kinds),
            "known_failures_by_kind": dict(self.known_kinds),
            "by_device": {d: dict(c) for d, c in sorted(self.by_device.items())},
            "failed": self.failed,
            "xpassed": self.xpassed,
            "refusals": dict(self.refusals.most_common()),
            "other_failures": self.other,
        }


def _outcome(report: Any) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.skipped:
        return "refused"
    return "failed" if report.failed else "passed"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=3, help="hypothesis examples per case (default 3)")
    parser.add_argument("--seed", type=int, default=None, help="the run seed (default: a random one, printed)")
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (default 0: this process)")
    parser.add_argument("-k", default=None, help="only the cases whose id matches (pytest -k)")
    parser.add_argument("--json", type=Path, default=None, help="write the counts here")
    args = parser.parse_args(argv)

    # Every accelerator emulated through its real runtime unless the caller chose otherwise; a
    # fresh state folder, so compile caches and runtime choices start empty.
    os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("NEURENIX_STATE_DIR", tempfile.mkdtemp(prefix="nx-sweep-"))
    os.environ["NEURENIX_DIFF_SAMPLE"] = "all"
    os.environ["NEURENIX_DIFF_EXAMPLES"] = str(args.examples)
    os.environ["NEURENIX_DIFF_SHRINK"] = "0"
    if args.seed is not None:
        os.environ["NEURENIX_DIFF_SEED"] = str(args.seed)

    import pytest

    tally = Tally()
    cmd = ["-q", "-p", "no:cacheprovider", "-n", str(args.workers), "--no-header", "-o", "console_output_style=count",
           str(ROOT / "tests" / "differential")]
    if args.k:
        cmd += ["-k", args.k]
    start = time.perf_counter()
    code = pytest.main(cmd, plugins=[tally])
    wall = time.perf_counter() - start
    summary = tally.summary() | {"seed": int(os.environ.get("NEURENIX_DIFF_SEED", "0")), "examples_per_case": args.examples,
                                 "wall_s": round(wall, 1), "pytest_exit": int(code)}
    _print(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, sort_keys=True))
    return 0 if not summary["failed"] and not summary["xpassed"] and not summary["other_failures"] else 1


def _print(s: dict[str, Any]) -> None:
    out = s["outcomes"]
    print(f"\ndifferential sweep: seed {s['seed']}, {s['examples_per_case']} example(s) per case, {s['wall_s']} s")
    print(f"devices ({len(s['devices'])}): {', '.join(s['devices'])}")
    print(f"cases: {s['cases']} ({s['examples']} examples): {out.get('passed', 0)} passed, {out.get('failed', 0)} failed, "
          f"{out.get('xfailed', 0)} known failures (strict xfail), {out.get('xpassed', 0)} known failures now passing, "
          f"{out.get('refused', 0)} refused by the library (typed error)")
    print(f"failures by kind: {s['failures_by_kind'] or 'none'}; known failures by kind: {s['known_failures_by_kind'] or 'none'}")
    for device, counts in s["by_device"].items():
        print(f"  {device:<22} {dict(counts)}")
    for line in s["failed"]:
        print(f"  FAILED {line}")
    for line in s["xpassed"]:
        print(f"  XPASS (remove from known_failures.py) {line}")
    for line in s["other_failures"]:
        print(f"  FAILED {line}")
    if s["refusals"]:
        print("refusals (typed errors, by reason):")
        for reason, n in s["refusals"].items():
            print(f"  {n:>4}  {reason}")


if __name__ == "__main__":
    sys.exit(main())
