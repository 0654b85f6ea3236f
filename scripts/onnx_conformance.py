"""ONNX's backend node tests on every neurenix device and on ONNX Runtime, in one run.

    .venv/bin/python scripts/onnx_conformance.py                      # every device, print the table
    .venv/bin/python scripts/onnx_conformance.py --devices cpu,npu    # some devices
    .venv/bin/python scripts/onnx_conformance.py --write-docs         # also regenerate docs/onnx-conformance.md
    .venv/bin/python scripts/onnx_conformance.py --update-expected    # rewrite tests/onnx_node_expected/<device>.txt

Plugins run emulated on the host CPU through their real runtimes (NEURENIX_EMULATE, as the test
suite sets it). Each case goes through ``nx.nn.from_onnx`` and ``nx.compile(..., precision="fp32")``
(``neurenix_core.testing.onnx_suite``); ONNX Runtime runs the same cases through
``onnxruntime.backend`` in the same process. "common" is the selection of ops common in real
models (``onnx_suite.COMMON_OPS``).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "onnx-conformance.md"
EXPECTED = ROOT / "tests" / "onnx_node_expected"
BEGIN, END = "<!-- conformance table: begin (scripts/onnx_conformance.py --write-docs) -->", "<!-- conformance table: end -->"
DEVICES = ("cpu", "cuda", "tpu", "npu", "edgetpu")


def _run(runtime: str, cases: list, run_one) -> dict:  # type: ignore[type-arg]
    from rich.progress import Progress

    out = {}
    with Progress(transient=True) as bar:
        task = bar.add_task(f"{runtime:>8}", total=len(cases))
        for case in cases:
            out[case.name] = run_one(case)
            bar.advance(task)
    return out


def _row(runtime: str, results: dict, cases: list) -> str:  # type: ignore[type-arg]
    def stats(selected: list) -> str:  # type: ignore[type-arg]
        count = collections.Counter(results[c.name].status for c in selected)
        return (f"{count['pass']} ({100 * count['pass'] / max(len(selected), 1):.1f}%) | {count['wrong']} | "
                f"{count['crash']} | {count['refused']}")

    common = [c for c in cases if c.common]
    return f"| {runtime} | {stats(cases)} | {stats(common)} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", default=",".join(DEVICES))
    parser.add_argument("--no-ort", action="store_true", help="skip ONNX Runtime")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--update-expected", action="store_true")
    parser.add_argument("--show", choices=("wrong", "crash", "refused"), action="append", default=[],
                        help="print every case with this outcome")
    args = parser.parse_args(argv)

    from neurenix_core.benchkit import cpu_model
    from neurenix_core.testing import onnx_expected, onnx_suite

    cases = onnx_suite.load_cases()
    rows, started = [], time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = ["| runtime | whole suite: pass | wrong | crash | refused | common ops: pass | wrong | crash | refused |",
              "|---|---|---|---|---|---|---|---|---|"]
    if not args.no_ort:
        import onnxruntime

        onnxruntime.set_default_logger_severity(4)  # its own errors are its refusals, counted
        ort = _run("ort", cases, onnx_suite.run_ort)
        rows.append(_row(f"onnxruntime {onnxruntime.__version__} (CPU)", ort, cases))
    for device in [d for d in args.devices.split(",") if d]:
        results = _run(device, cases, lambda c, d=device: onnx_suite.run_case(c, d))
        rows.append(_row(f"neurenix {device}:0", results, cases))
        for status in args.show:
            for name, o in sorted(results.items()):
                if o.status == status:
                    print(f"{device} {status} {name}: {o.detail[:300]}")
        if args.update_expected:
            refused = {n: onnx_expected.reason_for(o.detail) for n, o in results.items() if o.status == "refused"}
            onnx_expected.write_expected(EXPECTED / f"{device}.txt", f"{device}:0", refused)
    table = "\n".join(header + rows)
    total, common = len(cases), sum(1 for c in cases if c.common)
    note = (f"{total} node tests ({common} of ops common in real models), onnx "
            f"{__import__('onnx').__version__}, measured {started} on {cpu_model()}; plugins emulated on that CPU.")
    print(table)
    print(note)
    if args.write_docs:
        text = DOC.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{table}\n\n{note}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
