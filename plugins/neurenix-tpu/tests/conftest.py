"""Shared set-up for neurenix-tpu tests: emulate the TPU on JAX's CPU platform with 4 host devices.

The whole-suite run sets these variables before anything is imported; alone, this file sets them
before neurenix_core (and so JAX) is imported. Graph builders and a float64 NumPy reference
(used where ``neurenix_core.graph.reference.run`` has not landed) live here so every test file shares them.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("NEURENIX_EMULATE", "tpu")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def tpu() -> Any:
    """The tpu backend, checked to really be the emulated JAX one (never silently the CPU)."""
    if "tpu" not in os.environ.get("NEURENIX_EMULATE", ""):
        pytest.skip("NEURENIX_EMULATE does not list 'tpu' and no Cloud TPU is attached")
    backend = nx.backend("tpu:0")
    assert backend.name == "tpu" and backend.emulated
    assert type(backend).__module__ == "neurenix_tpu.backend"
    return backend


@pytest.fixture(scope="session")
def four_devices(tpu: Any) -> Any:
    if tpu.device_count() < 4:
        pytest.skip(f"needs 4 emulated TPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=4); JAX has {tpu.device_count()}")
    return tpu


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[-1] if len(shape) == 2 else np.prod(shape[1:]))).astype(np.float32)


def mlp_graph(batch: int = 1, seed: int = 0, sizes: tuple[int, ...] = (10, 20, 5)) -> Graph:
    rng = np.random.default_rng(seed)
    nodes: list[Node] = []
    prev = "x"
    for i, (fin, fout) in enumerate(itertools.pairwise(sizes)):
        out = f"h{i}"
        nodes.append(Node(f"fc{i}", "linear", (prev,), out, {"in_features": fin, "out_features": fout},
                          {"weight": _w(rng, fout, fin), "bias": rng.standard_normal(fout).astype(np.float32)}))
        prev = out
        if i < len(sizes) - 2:
            nodes.append(Node(f"act{i}", "relu", (prev,), f"a{i}"))
            prev = f"a{i}"
    return Graph(inputs=(TensorSpec("x", (batch, sizes[0])),), nodes=tuple(nodes), outputs=(prev,))


def cnn_graph(batch: int = 2, seed: int = 1) -> Graph:
    """conv-bn-relu-maxpool, a residual conv block, avg pool, adaptive pool, flatten, linear, softmax."""
    rng = np.random.default_rng(seed)
    conv = {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    bn = {"weight": (rng.random(8) + 0.5).astype(np.float32), "bias": rng.standard_normal(8).astype(np.float32),
          "running_mean": rng.standard_normal(8).astype(np.float32), "running_var": (rng.random(8) + 0.5).astype(np.float32)}
    nodes = (
        Node("features.0", "conv2d", ("x",), "c0", {"in_channels": 3, "out_channels": 8, **conv},
             {"weight": _w(rng, 8, 3, 3, 3), "bias": rng.standard_normal(8).astype(np.float32)}),
        Node("features.1", "batch_norm2d", ("c0",), "b0", {"num_features": 8, "eps": 1e-5}, bn),
        Node("features.2", "relu", ("b0",), "r0"),
        Node("features.3", "max_pool2d", ("r0",), "p0", {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
        Node("block.conv", "conv2d", ("p0",), "c1", {"in_channels": 8, "out_channels": 8, **conv, "groups": 2},
             {"weight": _w(rng, 8, 4, 3, 3)}),
        Node("block.add", "add", ("c1", "p0"), "s1"),
        Node("block.act", "gelu", ("s1",), "g1", {"approximate": "tanh"}),
        Node("pool", "avg_pool2d", ("g1",), "p1", {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "count_include_pad": False}),
        Node("gap", "adaptive_avg_pool2d", ("p1",), "p2", {"output_size": (3, 3)}),
        Node("flatten", "flatten", ("p2",), "f", {"start_dim": 1, "end_dim": -1}),
        Node("head", "linear", ("f",), "logits", {"in_features": 72, "out_features": 4},
             {"weight": _w(rng, 4, 72), "bias": rng.standard_normal(4).astype(np.float32)}),
        Node("prob", "softmax", ("logits",), "y", {"axis": -1}),
    )
    return Graph(inputs=(TensorSpec("x", (batch, 3, 10, 10)),), nodes=nodes, outputs=("y",))


# ------------------------------------------------------------------ float64 NumPy reference
def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, a: dict[str, Any]) -> np.ndarray:
    (sh, sw), (ph, pw), (dh, dw), g = _pair(a["stride"]), _pair(a["padding"]), _pair(a["dilation"]), int(a["groups"])
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // g
    for gi in range(g):
        xs = x[:, gi * cg:(gi + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * oh: sh, j * dw: j * dw + sw * ow: sw]
                out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[gi * og:(gi + 1) * og, :, i, j])
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def _pool(x: np.ndarray, a: dict[str, Any], kind: str) -> np.ndarray:
    (kh, kw), (sh, sw), (ph, pw) = _pair(a["kernel_size"]), _pair(a.get("stride") or a["kernel_size"]), _pair(a.get("padding", 0))
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    ones = np.pad(np.ones(x.shape), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
            if kind == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cnt = kh * kw if a.get("count_include_pad", True) else ones[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw].sum(axis=(2, 3))
                out[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return out


def _adaptive(x: np.ndarray, size: Any) -> np.ndarray:
    oh, ow = _pair(size)
    h, w = x.shape[2:]
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, h1 = (i * h) // oh, -((-(i + 1) * h) // oh)
            w0, w1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _node(n: Node, ins: list[np.ndarray]) -> np.ndarray:
    p = {k: (None if v is None else np.asarray(v, np.float64)) for k, v in n.params.items()}
    a, x = dict(n.attrs), ins[0]
    table: dict[str, Callable[[], np.ndarray]] = {
        "linear": lambda: x @ p["weight"].T + (0 if p.get("bias") is None else p["bias"]),
        "conv2d": lambda: _conv(x, p["weight"], p.get("bias"), a),
        "relu": lambda: np.maximum(x, 0),
        "gelu": lambda: _gelu(x, a.get("approximate", "none")),
        "sigmoid": lambda: 1 / (1 + np.exp(-x)),
        "tanh": lambda: np.tanh(x),
        "softmax": lambda: _softmax(x, a.get("axis", -1)),
        "max_pool2d": lambda: _pool(x, a, "max"),
        "avg_pool2d": lambda: _pool(x, a, "avg"),
        "adaptive_avg_pool2d": lambda: _adaptive(x, a["output_size"]),
        "flatten": lambda: x.reshape(x.shape[: a.get("start_dim", 1)] + (-1,)),
        "batch_norm2d": lambda: (x - p["running_mean"].reshape(1, -1, 1, 1)) / np.sqrt(p["running_var"].reshape(1, -1, 1, 1) + a["eps"])
        * p["weight"].reshape(1, -1, 1, 1) + p["bias"].reshape(1, -1, 1, 1),
        "layer_norm": lambda: ((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + a["eps"])) * p["weight"] + p["bias"],
        "dropout": lambda: x,
        "add": lambda: ins[0] + ins[1],
        "mul": lambda: ins[0] * ins[1],
    }
    return table[n.op]()


def reference(graph: Graph, *inputs: np.ndarray) -> np.ndarray:
    """Run ``graph`` in float64 NumPy (the core's run_graph is preferred once it lands)."""
    try:
        from neurenix_core.graph.reference.run import run_graph
    except ImportError:
        run_graph = None
    if run_graph is not None:
        out = run_graph(graph, *inputs)
        return np.asarray(out[0] if isinstance(out, (tuple, list)) else out, dtype=np.float64)
    env = {s.name: np.asarray(x, np.float64) for s, x in zip(graph.inputs, inputs)}
    for n in graph.nodes:
        env[n.output] = _node(n, [env[i] for i in n.inputs])
    return env[graph.outputs[0]]


@pytest.fixture
def graphs() -> Any:
    class _G:
        mlp = staticmethod(mlp_graph)
        cnn = staticmethod(cnn_graph)
        ref = staticmethod(reference)

    return _G
