"""Test models as core Graphs, a float64 NumPy forward pass and min/max calibration.

Used until/unless ``neurenix_core.graph.reference.run`` and ``neurenix_core.graph.quantization`` provide them; the
tests prefer the core's versions when they are importable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams, TensorSpec


def mlp_graph(seed: int = 0, batch: int = 1) -> Graph:
    rng = np.random.default_rng(seed)
    w1, b1 = rng.normal(0, 0.3, (32, 16)).astype(np.float32), rng.normal(0, 0.1, 32).astype(np.float32)
    w2, b2 = rng.normal(0, 0.3, (10, 32)).astype(np.float32), rng.normal(0, 0.1, 10).astype(np.float32)
    return Graph(
        (TensorSpec("x", (batch, 16)),),
        (
            Node("0", "linear", ("x",), "h0", {"in_features": 16, "out_features": 32}, {"weight": w1, "bias": b1}),
            Node("1", "relu", ("h0",), "h1"),
            Node("2", "linear", ("h1",), "logits", {"in_features": 32, "out_features": 10}, {"weight": w2, "bias": b2}),
        ),
        ("logits",),
    )


def cnn_graph(seed: int = 0, batch: int = 1, softmax: bool = False, residual: bool = True) -> Graph:
    rng = np.random.default_rng(seed)
    c1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    d1 = rng.normal(0, 0.3, (8, 1, 3, 3)).astype(np.float32)
    c2 = rng.normal(0, 0.2, (16, 8, 1, 1)).astype(np.float32)
    fc = rng.normal(0, 0.1, (10, 16 * 4 * 4)).astype(np.float32)
    conv = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    nodes = [
        Node("c1", "conv2d", ("x",), "a", {"in_channels": 3, "out_channels": 8, "kernel_size": (3, 3), "groups": 1, **conv},
             {"weight": c1, "bias": rng.normal(0, 0.1, 8).astype(np.float32)}),
        Node("r1", "relu", ("a",), "b"),
        Node("dw", "conv2d", ("b",), "c", {"in_channels": 8, "out_channels": 8, "kernel_size": (3, 3), "groups": 8, **conv},
             {"weight": d1, "bias": rng.normal(0, 0.1, 8).astype(np.float32)}),
        Node("r2", "relu", ("c",), "d"),
        Node("res", "add", ("d", "b"), "e"),
        Node("p1", "max_pool2d", ("e" if residual else "d",), "f", {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
        Node("c2", "conv2d", ("f",), "g", {"in_channels": 8, "out_channels": 16, "kernel_size": (1, 1), "groups": 1,
                                           "stride": (1, 1), "padding": (0, 0), "dilation": (1, 1)},
             {"weight": c2, "bias": rng.normal(0, 0.1, 16).astype(np.float32)}),
        Node("r3", "relu", ("g",), "h"),
        Node("p2", "avg_pool2d", ("h",), "i", {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0), "count_include_pad": True}),
        Node("fl", "flatten", ("i",), "j", {"start_dim": 1, "end_dim": -1}),
        Node("fc", "linear", ("j",), "k", {"in_features": 256, "out_features": 10}, {"weight": fc, "bias": rng.normal(0, 0.1, 10).astype(np.float32)}),
    ]
    if not residual:
        nodes = [n for n in nodes if n.op != "add"]
    outputs = ("k",)
    if softmax:
        nodes.append(Node("sm", "softmax", ("k",), "p", {"axis": -1}))
        outputs = ("p",)
    return Graph((TensorSpec("x", (batch, 3, 16, 16)),), tuple(nodes), outputs)


# ---------------------------------------------------------------------- float64 reference
def _conv(x: np.ndarray, w: np.ndarray, b: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> np.ndarray:
    n, _c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    ph, pw = padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    sh, sw = stride
    dh, dw = dilation
    oh = (h + 2 * ph - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + 2 * pw - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    per = o // groups
    for g in range(groups):
        xs = xp[:, g * ci:(g + 1) * ci]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * oh: sh, j * dw: j * dw + sw * ow: sw]
                out[:, g * per:(g + 1) * per] += np.einsum("nchw,oc->nohw", patch, w[g * per:(g + 1) * per, :, i, j])
    return out + (0 if b is None else b.reshape(1, -1, 1, 1))


def _pool(x: np.ndarray, k: Any, s: Any, fn: Any) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = fn(x[:, :, i * s[0]: i * s[0] + k[0], j * s[1]: j * s[1] + k[1]], axis=(2, 3))
    return out


def forward(graph: Graph, *inputs: np.ndarray) -> dict[str, np.ndarray]:
    """Every value of ``graph`` in float64 (values by name)."""
    env = {s.name: np.asarray(x, np.float64) for s, x in zip(graph.inputs, inputs)}
    for n in graph.nodes:
        x = env[n.inputs[0]]
        a, p = n.attrs, {k: np.asarray(v, np.float64) for k, v in n.params.items()}
        if n.op == "linear":
            y = x @ p["weight"].T + p.get("bias", 0)
        elif n.op == "conv2d":
            y = _conv(x, p["weight"], p.get("bias"), a["stride"], a["padding"], a["dilation"], a["groups"])
        elif n.op == "relu":
            y = np.maximum(x, 0)
        elif n.op == "sigmoid":
            y = 1 / (1 + np.exp(-x))
        elif n.op == "add":
            y = x + env[n.inputs[1]]
        elif n.op == "mul":
            y = x * env[n.inputs[1]]
        elif n.op == "max_pool2d":
            y = _pool(x, a["kernel_size"], a["stride"], np.max)
        elif n.op == "avg_pool2d":
            y = _pool(x, a["kernel_size"], a["stride"], np.mean)
        elif n.op == "adaptive_avg_pool2d":
            y = x.mean(axis=(2, 3), keepdims=True)
        elif n.op == "flatten":
            y = x.reshape(x.shape[0], -1)
        elif n.op == "softmax":
            e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
            y = e / e.sum(axis=a["axis"], keepdims=True)
        elif n.op == "batch_norm2d":
            sc = p["weight"] / np.sqrt(p["running_var"] + a["eps"])
            y = x * sc.reshape(1, -1, 1, 1) + (p["bias"] - p["running_mean"] * sc).reshape(1, -1, 1, 1)
        else:
            raise NotImplementedError(n.op)
        env[n.output] = y
    return env


def calibrate(graph: Graph, *batches: np.ndarray) -> QuantizationPlan:
    """Min/max asymmetric int8 activations, symmetric per-channel weights (the usual TFLite recipe)."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for x in batches:
        for name, v in forward(graph, x).items():
            lo[name] = min(lo.get(name, 0.0), float(v.min()))
            hi[name] = max(hi.get(name, 0.0), float(v.max()))
    acts = {}
    for name, low in lo.items():
        scale = max(hi[name] - low, 1e-8) / 255.0
        zp = int(np.clip(np.round(-128 - low / scale), -128, 127))
        acts[name] = QuantParams(np.array([scale], np.float32), np.array([zp], np.int32), 8)
    weights = {}
    for n in graph.nodes:
        if "weight" in n.params and n.op in ("linear", "conv2d"):
            w = n.params["weight"]
            m = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
            weights[n.name] = QuantParams((np.maximum(m, 1e-8) / 127.0).astype(np.float32), np.zeros(w.shape[0], np.int32), 8, axis=0, qmin=-127)
    return QuantizationPlan(8, acts, weights)


def clusters(shape: tuple[int, ...], n: int, seed: int, classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples of ``classes`` Gaussian clusters (batch-1 samples stacked on axis 0), with labels."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(1234).normal(0, 1, (classes, *shape[1:]))
    labels = rng.integers(0, classes, n)
    xs = centers[labels] + 0.4 * rng.normal(size=(n, *shape[1:]))
    return xs.reshape(n, *shape).astype(np.float32), labels


def fit_head(graph: Graph, xs: np.ndarray, labels: np.ndarray, classes: int = 10) -> Graph:
    """Train the last Linear layer by ridge regression on the features before it (a "trained" model
    whose logits have real margins, as top-1 agreement needs)."""
    head = graph.nodes[-1]
    assert head.op == "linear"
    feats = np.concatenate([forward(graph, x)[head.inputs[0]] for x in xs])
    feats1 = np.hstack([feats, np.ones((len(feats), 1))])
    target = np.eye(classes)[labels] * 4.0 - 2.0
    sol = np.linalg.solve(feats1.T @ feats1 + 1e-2 * np.eye(feats1.shape[1]), feats1.T @ target)
    params = {"weight": sol[:-1].T.astype(np.float32), "bias": sol[-1].astype(np.float32)}
    nodes = graph.nodes[:-1] + (Node(head.name, head.op, head.inputs, head.output, head.attrs, params),)
    return Graph(graph.inputs, nodes, graph.outputs)
