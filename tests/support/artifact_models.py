"""Models and the fresh-process loader shared by the compiled-artifact tests (issue #30)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: Every plugin in emulation, JAX on the host CPU: what the fresh processes see.
EMULATE = "cuda,tpu,npu,edgetpu"
DEVICES = ("cpu", "npu", "tpu", "edgetpu", "cuda")
NO_TORCH = ("cpu", "npu", "tpu", "edgetpu")


def cnn() -> Any:
    from neurenix_core import nn
    from neurenix_core.nn.init import manual_seed

    manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 10))


def partitioned_graph(middle: str = "cumprod") -> Any:
    """linear -> cumprod -> relu -> linear: no accelerator plugin declares cumprod, so every
    device's compile has two device segments and one cpu:0 segment between them (``middle="cos"``:
    only edgetpu leaves it to cpu:0, where OpenVINO's CPU runtime can run it)."""
    from neurenix_core.graph.ir import Graph, Node, TensorSpec

    rng = np.random.default_rng(1)
    w1, b1 = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    w2, b2 = rng.standard_normal((4, 16)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    nodes = (
        Node("fc1", "linear", ("x",), "h", {"in_features": 8, "out_features": 16}, {"weight": w1, "bias": b1}),
        Node("running", middle, ("h",), "c", {"axis": 1} if middle in ("cumsum", "cumprod") else {}),
        Node("act", "relu", ("c",), "r"),
        Node("fc2", "linear", ("r",), "y", {"in_features": 16, "out_features": 4}, {"weight": w2, "bias": b2}),
    )
    return Graph((TensorSpec("x", (2, 8)),), nodes, ("y",))


def image_batch() -> np.ndarray:
    return np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)


def vector_batch() -> np.ndarray:
    return np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)


_LOADER = r"""
import json, sys
import numpy as np
jobs, block_torch = json.loads(sys.argv[1]), sys.argv[2] == "1"
if block_torch:
    sys.modules["torch"] = None  # `import torch` now raises ImportError: the artifacts must not need it
import neurenix_core as nx
report = []
for job in jobs:
    model = nx.load_compiled(job["artifact"], device=job.get("device"))
    out = model(np.load(job["input"]))
    np.save(job["output"], np.asarray(out.numpy() if hasattr(out, "numpy") else out))
    report.append({"summary": model.summary, "placement": model.placement.line(), "device": str(model.device)})
print(json.dumps({"report": report, "torch": any(m == "torch" or m.startswith("torch.") for m, v in sys.modules.items() if v is not None)}))
"""


def load_fresh(jobs: list[dict[str, Any]], *, block_torch: bool, env: dict[str, str] | None = None, timeout: float = 300) -> dict[str, Any]:
    """Run ``jobs`` ({artifact, input, output[, device]}) through nx.load_compiled in a new interpreter."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    base.update({"NEURENIX_EMULATE": EMULATE, "JAX_PLATFORMS": "cpu"}, **(env or {}))
    proc = subprocess.run([sys.executable, "-c", _LOADER, json.dumps(jobs), "1" if block_torch else "0"], capture_output=True, text=True,
                          env=base, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"fresh process failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_fresh(code: str, *, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    base.update({"NEURENIX_EMULATE": EMULATE, "JAX_PLATFORMS": "cpu"}, **(env or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=base, timeout=timeout, check=False)


def as_host(out: Any) -> np.ndarray:
    return np.asarray(out.numpy() if hasattr(out, "numpy") else out)


def write_input(folder: Path, name: str, array: np.ndarray) -> str:
    path = folder / f"{name}.npy"
    np.save(path, array)
    return str(path)
