"""Calibration range methods against each other: top-1 agreement of the all-int8 plan with fp32.

    .venv/bin/python -P benchmarks/int8_calibration.py [--models resnet18 ... vit bert] [--methods minmax histogram]
        [--mixed] [--quick] [--json out.json]

For each model and each ``calibration_method``, ``nx.compile(model, "cpu", precision="int8",
calibration=..., calibration_method=method, mixed_precision=False, runtime="openvino")`` (every
layer int8; ``--mixed``: nx.compile's default mix, each cell naming the values kept in float;
verified against the integer reference as every int8 compile is; a plan the verification
refuses is a row saying so), then the share of the agreement inputs whose arg-max
is the torch fp32 model's, and the integer reference's relative error against float on the
verification batches (what the verification holds to 30%).

Models: the int8 rows of ``benchmarks/cpu.py`` (ResNet-18, MobileNetV3-Small, EfficientNet-B0 with
re-estimated batch norms, BERT-tiny's pooled output; its 16 batch-1 calibration inputs and 320
agreement inputs) and the transformers of ``benchmarks/int8_mixed.py`` (``vit``: ViT-Tiny's width
and depth, ``bert``: BERT-tiny's configuration, each plain and with planted outliers; 8 calibration
batches of 16, 500 inputs). ``--quick``: 32 / 100 inputs. No number is asserted; the table in
docs/quantization.md ("Calibration") comes from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
# benchmarks/openvino.py would shadow the real OpenVINO package while this folder is on sys.path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

CPU_MODELS = ("resnet18", "mobilenetv3_small", "efficientnet_b0", "bert_tiny")
MIXED_MODELS = ("vit", "bert")
METHODS = ("minmax", "percentile", "histogram")


def _sibling(name: str) -> Any:
    """A benchmark script beside this one, loaded as a module (its model builders)."""
    from neurenix_core import benchkit

    return benchkit.load_script(os.path.join(_HERE, f"{name}.py"), f"_bench_{name}")


def _cases(models: Sequence[str], quick: bool) -> list[tuple[str, Any, tuple[Any, ...], list[Any], list[Any]]]:
    """(row name, torch module, example inputs, calibration batches, agreement inputs) per model."""
    import torch

    cases = []
    if any(m in CPU_MODELS for m in models):
        cpu = _sibling("cpu")
        count = cpu.QUICK_AGREEMENT_SAMPLES if quick else cpu.AGREEMENT_SAMPLES
        for m in (m for m in models if m in CPU_MODELS):
            module = cpu.int8_model(m)
            example = (torch.from_numpy(cpu.int8_inputs(m, 1, 0)[0]),)
            cases.append((m, module, example, cpu.int8_inputs(m, cpu.CALIBRATION, 1000), cpu.int8_inputs(m, count, cpu.AGREEMENT_SEED)))
    if any(m in MIXED_MODELS for m in models):
        mixed = _sibling("int8_mixed")
        n_cal, n_inputs = (4, 100) if quick else (mixed.CALIBRATION_BATCHES, 500)
        for m in (m for m in models if m in MIXED_MODELS):
            build, outlier = (mixed.vit, 30.0) if m == "vit" else (mixed.bert, 100.0)
            for variant, size in (("plain", 0.0), ("outliers", outlier)):
                case = build(size, n_cal, n_inputs)
                cases.append((f"{m} {variant}", case.torch_model, case.example, case.calibration, case.inputs))
    return cases


def _args(x: Any) -> tuple[Any, ...]:
    return x if isinstance(x, tuple) else (x,)


def measure(name: str, module: Any, example: tuple[Any, ...], calibration: list[Any], inputs: list[Any],
            method: str, mixed: bool = False) -> dict[str, Any]:
    import torch

    import neurenix_core as nx
    from neurenix_core.graph.quantization import mixed as M

    with torch.no_grad():
        want = np.concatenate([module(*(torch.from_numpy(a) for a in _args(x))).numpy() for x in inputs])
    model = nx.nn.from_torch(module, example)
    start = time.perf_counter()
    row: dict[str, Any] = {"model": name, "method": method}
    try:
        compiled = nx.compile(model, device="cpu", precision="int8", calibration=list(calibration), calibration_method=method,
                              mixed_precision=mixed, runtime="openvino", progress=False, outputs="host")
    except nx.CompilationError as exc:
        row.update(top1=None, error=None, note=f"refused: {str(exc).splitlines()[0][:160]}")
        return row
    got = np.concatenate([np.asarray(compiled(*_args(x))) for x in inputs])
    floats = len({v for f in compiled.float_layers for v in f.values})
    row.update(top1=float(np.mean(got.argmax(-1) == want.argmax(-1))), error=M.plan_error(compiled.graph, compiled.plan, calibration),
               note=f"{floats} values float" if floats else "", seconds=time.perf_counter() - start)
    return row


def table(rows: list[dict[str, Any]], methods: Sequence[str]) -> str:
    lines = ["| model | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for name in dict.fromkeys(r["model"] for r in rows):
        cells = []
        for m in methods:
            r = next((r for r in rows if r["model"] == name and r["method"] == m), None)
            if r is None:
                cells.append("")
            elif r["top1"] is None:
                found = re.search(r"is ([0-9.]+%) away", r["note"])
                cells.append(f"refused ({found.group(1)})" if found else r["note"][:60])
            else:
                cells.append(f"{r['top1']:.3f} ({r['error']:.1%}{', ' + r['note'] if r['note'] else ''})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=[*CPU_MODELS, *MIXED_MODELS], choices=[*CPU_MODELS, *MIXED_MODELS])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--mixed", action="store_true", help="nx.compile's default mix after calibration (mixed_precision=True)")
    p.add_argument("--quick", action="store_true", help="32 agreement inputs for cpu.py's models, 100 for the transformers")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from neurenix_core import benchkit

    print(f"CPU: {benchkit.cpu_model()}; top-1 agreement with fp32 (the plan's error vs float)", flush=True)
    rows = []
    for name, module, example, calibration, inputs in _cases(args.models, args.quick):
        for method in args.methods:
            rows.append(measure(name, module, example, calibration, inputs, method, args.mixed))
            r = rows[-1]
            shown = r["note"] if r["top1"] is None else f"top-1 {r['top1']:.3f}, error {r['error']:.1%}"
            print(f"  {name:18s} {method:10s} {shown}", flush=True)
    print(table(rows, args.methods))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
