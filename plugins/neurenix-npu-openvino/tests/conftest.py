"""Shared set-up of the neurenix-npu-openvino tests.

The environment matches the whole-suite run (scripts/test.sh) so this folder passes alone and
inside it; it must be set before neurenix_core is imported (discovery reads it at import).
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams, TensorSpec

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def npu() -> Any:
    """The npu backend (emulated on OpenVINO's CPU device in CI)."""
    if "npu" not in os.environ.get("NEURENIX_EMULATE", "") and not nx.Device("npu:0").is_available:
        pytest.skip("no Intel NPU and NEURENIX_EMULATE does not list npu")
    return nx.backend("npu:0")


@pytest.fixture
def clean_env() -> Callable[..., dict[str, str]]:
    """An environment without any NEURENIX_* variable, for subprocess tests of real behaviour."""

    def make(**extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "JAX_", "XLA_"))}
        env.update(extra)
        return env

    return make


@pytest.fixture
def fallback_allowed() -> Iterator[None]:
    with nx.fallback_policy("allow"):
        yield


# ---------------------------------------------------------------------- model graphs
def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _he(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def mlp_graph(batch: int = 4, seed: int = 0) -> Graph:
    rng = _rng(seed)
    sizes = [(32, 64), (64, 64), (64, 10)]
    nodes: list[Node] = []
    value = "input"
    for i, (fin, fout) in enumerate(sizes):
        params = {"weight": _he(rng, (fout, fin), fin), "bias": (rng.standard_normal(fout) * 0.1).astype(np.float32)}
        nodes.append(Node(f"fc{i}", "linear", (value,), f"fc{i}", {"in_features": fin, "out_features": fout}, params))
        value = f"fc{i}"
        if i < len(sizes) - 1:
            nodes.append(Node(f"act{i}", "relu", (value,), f"act{i}"))
            value = f"act{i}"
    return Graph((TensorSpec("input", (batch, 32)),), tuple(nodes), (value,))


def cnn_graph(batch: int = 4, seed: int = 1, width: int = 16) -> Graph:
    """Conv-BN-ReLU x2, max-pool, conv, adaptive pool, flatten, linear: the seed's shape of CNN."""
    rng = _rng(seed)
    c1, c2, c3 = width, 2 * width, 4 * width

    def conv(name: str, cin: int, cout: int, src: str, stride: int = 1) -> Node:
        attrs = {"in_channels": cin, "out_channels": cout, "kernel_size": (3, 3), "stride": (stride, stride), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
        params = {"weight": _he(rng, (cout, cin, 3, 3), cin * 9), "bias": (rng.standard_normal(cout) * 0.05).astype(np.float32)}
        return Node(name, "conv2d", (src,), name, attrs, params)

    def bn(name: str, c: int, src: str) -> Node:
        params = {
            "weight": (1 + 0.1 * rng.standard_normal(c)).astype(np.float32), "bias": (0.1 * rng.standard_normal(c)).astype(np.float32),
            "running_mean": (0.1 * rng.standard_normal(c)).astype(np.float32), "running_var": (1 + 0.1 * rng.random(c)).astype(np.float32),
        }
        return Node(name, "batch_norm2d", (src,), name, {"num_features": c, "eps": 1e-5}, params)

    nodes = (
        conv("conv1", 3, c1, "input"), bn("bn1", c1, "conv1"), Node("relu1", "relu", ("bn1",), "relu1"),
        conv("conv2", c1, c2, "relu1", 2), Node("relu2", "relu", ("conv2",), "relu2"),
        Node("pool", "max_pool2d", ("relu2",), "pool", {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
        conv("conv3", c2, c3, "pool"), Node("relu3", "relu", ("conv3",), "relu3"),
        Node("gap", "adaptive_avg_pool2d", ("relu3",), "gap", {"output_size": (1, 1)}),
        Node("flat", "flatten", ("gap",), "flat", {"start_dim": 1, "end_dim": -1}),
        Node("fc", "linear", ("flat",), "fc", {"in_features": c3, "out_features": 10},
             {"weight": _he(rng, (10, c3), c3), "bias": np.zeros(10, np.float32)}),
    )
    return Graph((TensorSpec("input", (batch, 3, 32, 32)),), nodes, ("fc",))


# ---------------------------------------------------------------------- float64 reference
def reference(graph: Graph, *inputs: np.ndarray) -> np.ndarray:
    """The core's float64 interpreter when it is installed, else a small local one."""
    try:
        from neurenix_core.graph.reference.run import run_graph
    except ImportError:
        return _local_reference(graph, *inputs)
    out = run_graph(graph, *inputs)
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out, np.float64)


def _local_reference(graph: Graph, *inputs: np.ndarray) -> np.ndarray:
    values = {s.name: np.asarray(x, np.float64) for s, x in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        values[node.output] = _REF[node.op](node, *(values[i] for i in node.inputs))
    return values[graph.outputs[0]]


def _conv_ref(node: Node, x: np.ndarray) -> np.ndarray:
    w = np.asarray(node.params["weight"], np.float64)
    (sh, sw), (ph, pw) = node.attrs["stride"], node.attrs["padding"]
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    kh, kw = w.shape[2:]
    oh, ow = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw][:, :, :oh, :ow]
    out = np.einsum("nchwij,ocij->nohw", win, w)
    b = node.params.get("bias")
    return out if b is None else out + np.asarray(b, np.float64)[None, :, None, None]


def _pool_ref(node: Node, x: np.ndarray) -> np.ndarray:
    (kh, kw), (sh, sw) = node.attrs["kernel_size"], node.attrs["stride"]
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    return win.max(axis=(-1, -2))


def _bn_ref(node: Node, x: np.ndarray) -> np.ndarray:
    p = {k: np.asarray(v, np.float64)[None, :, None, None] for k, v in node.params.items()}
    return (x - p["running_mean"]) / np.sqrt(p["running_var"] + node.attrs["eps"]) * p["weight"] + p["bias"]


_REF: dict[str, Callable[..., np.ndarray]] = {
    "linear": lambda n, x: x @ np.asarray(n.params["weight"], np.float64).T + np.asarray(n.params["bias"], np.float64),
    "relu": lambda n, x: np.maximum(x, 0),
    "conv2d": _conv_ref,
    "max_pool2d": _pool_ref,
    "batch_norm2d": _bn_ref,
    "adaptive_avg_pool2d": lambda n, x: x.mean(axis=(2, 3), keepdims=True),
    "flatten": lambda n, x: x.reshape(x.shape[0], -1),
}


def minmax_plan(graph: Graph, batches: list[np.ndarray], bits: int = 8) -> QuantizationPlan:
    """A plan built by hand for tests that must not depend on neurenix_core.graph.quantization:
    per-tensor asymmetric activations (observed float64 ranges), per-channel symmetric weights."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for x in batches:
        values = {graph.inputs[0].name: np.asarray(x, np.float64)}
        for node in graph.nodes:
            values[node.output] = _REF[node.op](node, *(values[i] for i in node.inputs))
        for name, v in values.items():
            lo[name] = min(lo.get(name, 0.0), float(v.min()))
            hi[name] = max(hi.get(name, 0.0), float(v.max()))
    qmin, qmax = (-128, 127) if bits == 8 else (-32768, 32767)
    acts = {}
    for name, low in lo.items():
        scale = max(hi[name] - low, 1e-8) / (qmax - qmin)
        zp = np.clip(np.round(qmin - low / scale), qmin, qmax)
        acts[name] = QuantParams(np.array(scale, np.float32), np.array(zp, np.int32), bits, None, qmin, qmax)
    weights = {}
    for node in graph.nodes:
        if node.op in ("conv2d", "linear"):
            w = np.asarray(node.params["weight"], np.float64)
            amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
            weights[node.name] = QuantParams((np.maximum(amax, 1e-8) / qmax).astype(np.float32), np.zeros(w.shape[0], np.int32), bits, 0, -qmax, qmax)
    return QuantizationPlan(bits=bits, activations=acts, weights=weights, method="minmax")


def run_script(path: Path, env: dict[str, str] | None = None, timeout: float = 300) -> Any:
    import subprocess

    return subprocess.run([sys.executable, str(path)], check=False, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(REPO))


@pytest.fixture(scope="session")
def kit() -> Any:
    """Graph builders, the reference and helpers (conftest modules are not importable under
    --import-mode=importlib, so tests get them through this fixture)."""
    from types import SimpleNamespace

    return SimpleNamespace(mlp=mlp_graph, cnn=cnn_graph, reference=reference, minmax_plan=minmax_plan, run_script=run_script, repo=REPO)
