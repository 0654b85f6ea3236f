"""from_onnx on cpu:0: one-node ONNX RNN, GRU and LSTM models against a NumPy recurrence written
here (one batch entry and one step at a time, ONNX's equations), exact dtype and shape: every
direction, layout 0 and 1, sequence_lens, initial states, peepholes, linear_before_reset, clip,
activations with alpha, weights fed as inputs or stored as initializers, and one graph node per
used output (Y, Y_h, Y_c)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.importers.onnx_import import import_onnx

RNG = np.random.default_rng(3)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _model(op: str, inputs: dict[str, np.ndarray | None], outputs: list[str], attrs: dict[str, Any],
           stored: tuple[str, ...] = ()) -> Any:
    node = helper.make_node(op, [k if v is not None else "" for k, v in inputs.items()], outputs, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items() if v is not None and k not in stored],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o],
        [numpy_helper.from_array(inputs[k], k) for k in stored])  # type: ignore[arg-type]
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


def run(op: str, inputs: dict[str, np.ndarray | None], outputs: list[str], attrs: dict[str, Any],
        stored: tuple[str, ...] = ()) -> list[np.ndarray]:
    compiled = nx.compile(nn.from_onnx(_model(op, inputs, outputs, attrs, stored)), device="cpu:0", precision="fp32",
                          outputs="host", progress=False)
    out = compiled(*[v for k, v in inputs.items() if v is not None and k not in stored])
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


# ----------------------------------------------------------------------------- the NumPy recurrence
def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _step(op: str, x: np.ndarray, h: np.ndarray, c: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray,
          p: np.ndarray, attrs: dict[str, Any], acts: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    n = h.shape[0]
    clip = attrs.get("clip")
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)
    wb, rb = b[:GATES[op] * n], b[GATES[op] * n:]
    blk = lambda m, k: m[k * n:(k + 1) * n]  # the k-th gate's rows
    if op == "RNN":
        return acts[0](cl(w @ x + r @ h + wb + rb)), c
    if op == "GRU":
        f, g = acts
        z = f(cl(blk(w, 0) @ x + blk(r, 0) @ h + blk(wb, 0) + blk(rb, 0)))
        rr = f(cl(blk(w, 1) @ x + blk(r, 1) @ h + blk(wb, 1) + blk(rb, 1)))
        if attrs.get("linear_before_reset"):
            hh = g(cl(blk(w, 2) @ x + rr * (blk(r, 2) @ h + blk(rb, 2)) + blk(wb, 2)))
        else:
            hh = g(cl(blk(w, 2) @ x + blk(r, 2) @ (rr * h) + blk(rb, 2) + blk(wb, 2)))
        return (1 - z) * hh + z * h, c
    f, g, hf = acts
    pre = [blk(w, k) @ x + blk(r, k) @ h + blk(wb, k) + blk(rb, k) for k in range(4)]  # i, o, f, c
    i = f(cl(pre[0] + p[:n] * c))
    ft = f(cl(pre[2] + p[2 * n:] * c))
    cell = ft * c + i * g(cl(pre[3]))
    o = f(cl(pre[1] + p[n:2 * n] * cell))
    return o * hf(cell), cell


def expected(op: str, ins: dict[str, np.ndarray | None], attrs: dict[str, Any], acts: list[Any]) -> list[np.ndarray]:
    """Y, Y_h (and Y_c) in layout 0 or 1, one batch entry and one step at a time."""
    x, w, r = ins["X"], ins["W"], ins["R"]
    layout = attrs.get("layout", 0)
    if layout:
        x = x.swapaxes(0, 1)  # type: ignore[union-attr]
    steps, batch, _ = x.shape  # type: ignore[union-attr]
    nd, n = w.shape[0], r.shape[-1]  # type: ignore[union-attr]
    b = ins.get("B") if ins.get("B") is not None else np.zeros((nd, 2 * GATES[op] * n), np.float32)
    p = ins.get("P") if ins.get("P") is not None else np.zeros((nd, 3 * n), np.float32)
    lens = ins.get("sequence_lens") if ins.get("sequence_lens") is not None else np.full(batch, steps)
    zeros = np.zeros((nd, batch, n), np.float32)
    h0, c0 = (ins.get(k) if ins.get(k) is not None else zeros for k in ("initial_h", "initial_c"))
    if layout:
        h0, c0 = (s.swapaxes(0, 1) if k in ins and ins[k] is not None else s for k, s in (("initial_h", h0), ("initial_c", c0)))
    y = np.zeros((steps, nd, batch, n), np.float32)
    yh, yc = np.zeros((nd, batch, n), np.float32), np.zeros((nd, batch, n), np.float32)
    for d in range(nd):
        back = attrs.get("direction") == "reverse" or d == 1
        for e in range(batch):
            h, c = h0[d, e], c0[d, e]  # type: ignore[index]
            order = range(lens[e] - 1, -1, -1) if back else range(lens[e])  # type: ignore[index]
            for t in order:
                h, c = _step(op, x[t, e], h, c, w[d], r[d], b[d], p[d], attrs, acts[d])  # type: ignore[index]
                y[t, d, e] = h
            yh[d, e], yc[d, e] = (h, c) if lens[e] else (0, 0)  # type: ignore[index]
    if layout:
        return [y.transpose(2, 0, 1, 3), yh.swapaxes(0, 1), yc.swapaxes(0, 1)]
    return [y, yh, yc]


def check(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and g.shape == w.shape, (g.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _inputs(op: str, nd: int, steps: int, batch: int, size: int, n: int, layout: int = 0, **given: Any) -> dict[str, np.ndarray | None]:
    f = lambda *s: (RNG.standard_normal(s) * 0.5).astype(np.float32)
    state = (nd, batch, n) if layout == 0 else (batch, nd, n)
    ins: dict[str, np.ndarray | None] = {
        "X": f(steps, batch, size) if layout == 0 else f(batch, steps, size), "W": f(nd, GATES[op] * n, size),
        "R": f(nd, GATES[op] * n, n), "B": f(nd, 2 * GATES[op] * n) if given.get("B") else None,
        "sequence_lens": given.get("sequence_lens"), "initial_h": f(*state) if given.get("initial_h") else None}
    if op == "LSTM":
        ins |= {"initial_c": f(*state) if given.get("initial_c") else None, "P": f(nd, 3 * n) if given.get("P") else None}
    while ins and list(ins.values())[-1] is None:
        ins.popitem()
    return ins


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_sequence_lens_states_peepholes(direction: str) -> None:
    nd = 2 if direction == "bidirectional" else 1
    ins = _inputs("LSTM", nd, 4, 3, 2, 5, B=True, sequence_lens=np.array([4, 2, 0], np.int32), initial_h=True, initial_c=True, P=True)
    attrs = {"hidden_size": 5, "direction": direction}
    got = run("LSTM", ins, ["Y", "Y_h", "Y_c"], attrs)
    check(got, expected("LSTM", ins, attrs, [[sigmoid, np.tanh, np.tanh]] * nd))


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_layout_1_bidirectional(linear_before_reset: int) -> None:
    ins = _inputs("GRU", 2, 3, 2, 4, 3, layout=1, B=True, initial_h=True)
    attrs = {"hidden_size": 3, "direction": "bidirectional", "layout": 1, "linear_before_reset": linear_before_reset}
    got = run("GRU", ins, ["Y", "Y_h"], attrs)
    check(got, expected("GRU", ins, attrs, [[sigmoid, np.tanh]] * 2))


def test_rnn_activations_alpha_and_clip_with_stored_weights() -> None:
    ins = _inputs("RNN", 2, 5, 2, 3, 4, B=True, sequence_lens=np.array([3, 5], np.int32))
    attrs = {"hidden_size": 4, "direction": "bidirectional", "clip": 0.7, "activations": ["LeakyRelu", "Tanh"],
             "activation_alpha": [0.2]}
    got = run("RNN", ins, ["Y", "Y_h"], attrs, stored=("W", "R", "B"))
    leaky = lambda v: np.where(v >= 0, v, 0.2 * v)
    check(got, expected("RNN", ins, attrs, [[leaky], [np.tanh]]))


def test_gru_hard_sigmoid_defaults_and_lstm_input_forget() -> None:
    ins = _inputs("GRU", 1, 3, 2, 2, 3)
    attrs = {"hidden_size": 3, "activations": ["HardSigmoid", "Softsign"]}
    hard = lambda v: np.clip(0.2 * v + 0.5, 0, 1)  # ONNX HardSigmoid's default alpha and beta
    check(run("GRU", ins, ["Y"], attrs), expected("GRU", ins, attrs, [[hard, lambda v: v / (1 + np.abs(v))]]))
    ins = _inputs("LSTM", 1, 3, 2, 2, 3, B=True)
    got = run("LSTM", ins, ["", "Y_h"], {"hidden_size": 3, "input_forget": 1})[0]
    h = np.zeros((2, 3), np.float32)
    c = np.zeros((2, 3), np.float32)
    w, r, b = ins["W"][0], ins["R"][0], ins["B"][0]  # type: ignore[index]
    for t in range(3):
        pre = ins["X"][t] @ w.T + h @ r.T + b[:12] + b[12:]  # type: ignore[index]
        i = sigmoid(pre[:, :3])
        c = (1 - i) * c + i * np.tanh(pre[:, 9:])
        h = sigmoid(pre[:, 3:6]) * np.tanh(c)
    check([got], [h[None]])


def test_one_node_per_used_output() -> None:
    ins = _inputs("LSTM", 1, 2, 1, 2, 3)
    graph, _ = import_onnx(_model("LSTM", ins, ["", "", "Y_c"], {"hidden_size": 3}))
    assert [(n.op, n.attrs["output"]) for n in graph.nodes] == [("lstm", 2)]
    graph, _ = import_onnx(_model("GRU", _inputs("GRU", 1, 2, 1, 2, 3), ["Y", "Y_h"], {"hidden_size": 3}))
    assert [n.attrs["output"] for n in graph.nodes] == [0, 1]
