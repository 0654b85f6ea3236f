"""Quickstart: see what neurenix found, then run real work on the best device.

    python examples/quickstart.py

Runs on whatever `import neurenix_core` selected (the CPU backend when nothing else is
installed); set NEURENIX_DEVICE=npu:0 (or tpu:0, cuda:0, ...) to choose.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import neurenix_core as nx

if TYPE_CHECKING:
    from neurenix_core.graph.compile.compiler import Compiled


def main() -> None:
    device = nx.default_device()
    print("devices:", ", ".join(_describe(d, device) for d in nx.devices()))

    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((256, 128), dtype=np.float32)
    b_host = rng.standard_normal((128, 64), dtype=np.float32)
    a, b = nx.asarray(a_host), nx.asarray(b_host)
    c = nx.matmul(a, b)
    err = float(np.max(np.abs(c.numpy() - a_host.astype(np.float64) @ b_host.astype(np.float64))))
    print(f"matmul {a.shape} @ {b.shape} on {c.device}: max |error| vs float64 = {err:.2e}")
    print("memory:", nx.memory_stats(device).as_dict())
    _run_model(device, rng)


def _run_model(device: nx.Device, rng: np.random.Generator) -> None:
    from neurenix_core import nn
    from neurenix_core.graph.reference.run import run_graph

    # ~35 MFLOPs per call: large enough that, on cpu:0, the fastest installed CPU runtime is
    # measured and chosen (the summary says which and why; small graphs stay in NumPy).
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 4))
    x = rng.standard_normal((64, 64), dtype=np.float32)
    compiled = nx.compile(model, device=device)
    y = compiled(nx.asarray(x, device=device))
    reference = run_graph(compiled.graph, x)  # float64 NumPy interpretation of the same graph
    err = float(np.max(np.abs(y.numpy() - reference)) / np.max(np.abs(reference)))
    print(f"compiled MLP on {y.device}: output {y.shape}, max relative error vs float64 = {err:.2e}")
    print(f"  {_placement_in_words(compiled)}")
    _next_steps()


def _describe(d: nx.Device, default: nx.Device) -> str:
    notes = ["default"] if d == default else []
    notes += ["emulated on the CPU"] if d.emulated else []
    # Plugins from outside this repository (the onnxruntime example, a vendor's) say so: the
    # README's table lists only this repository's plugins.
    info = next((b for b in nx.backends() if b.name == d.backend_name), None)
    if info is not None and info.distribution in EXAMPLE_PLUGINS:
        notes.append(f"third-party example plugin from {EXAMPLE_PLUGINS[info.distribution]}")
    elif info is not None and info.distribution not in FIRST_PARTY:
        notes.append(f"third-party plugin {info.distribution}")
    return f"{d} ({', '.join(notes)})" if notes else str(d)


def _placement_in_words(compiled: Compiled) -> str:
    """Where the nodes run, on what, and why that runtime: the placement report in one sentence."""
    placement = compiled.placement
    native = compiled.native()
    engine = getattr(native, "summary", None) or f"neurenix's NumPy interpreter on {compiled.device}"
    why = placement.host_runtime.split(": ", 1)[-1] if placement.host_runtime else ""
    return f"{placement.line()}, with {engine}" + (f"; {why}" if why else "")


ROOT = Path(__file__).resolve().parents[1]
#: This repository's distributions, and for each plugin an example and its NEURENIX_EMULATE token.
FIRST_PARTY = {"neurenix-core", "neurenix-cuda-tc", "neurenix-tpu", "neurenix-npu-openvino", "neurenix-edgetpu"}
EXAMPLE_PLUGINS = {"neurenix-onnxruntime": "examples/neurenix-onnxruntime"}
EXAMPLES = {
    "cuda": ("examples/tensor_cores_optimize.py", "cuda"),
    "tpu": ("examples/tpu_quickstart.py", "tpu"),
    "npu": ("examples/npu_quickstart.py", "npu"),
    "edgetpu": ("examples/edgetpu_int8.py", "edgetpu"),
    "ort": ("examples/neurenix-onnxruntime/examples/ort_models.py", ""),
}


def _here(path: Path, elsewhere: str | None = None) -> str:
    """``path`` as typed from the current folder (``.venv/bin/python`` in a checkout); from
    outside its folder, ``elsewhere`` (a command's name on PATH) or the absolute path."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else (elsewhere or str(path))


def _next_steps() -> None:
    python = _here(Path(sys.executable), "python")
    steps = [(f"{_here(Path(sys.executable).with_name('neurenix'), 'neurenix')} doctor", "every plugin: found, not found, and why")]
    for b in nx.backends():
        if b.name not in EXAMPLES:
            continue
        script, token = EXAMPLES[b.name]
        usable = str(getattr(b.status, "value", b.status)) in {"selected", "available", "emulated"}
        # Without the hardware, the plugin's real software stack runs on the CPU under NEURENIX_EMULATE.
        env = f"NEURENIX_EMULATE={token} " if token and not usable else ""
        steps.append((f"{env}{python} {_here(ROOT / script)}", b.distribution or b.name))
    width = max(len(command) for command, _ in steps) + 2
    print("\nnext steps:")
    for command, comment in steps:
        print(f"  {command.ljust(width)}# {comment}")
    print("  docs: README.md, docs/tensors.md (the namespace), docs/models.md (nn, compile), docs/plugins.md")


if __name__ == "__main__":
    main()
