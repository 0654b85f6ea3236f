"""Recurrent layers (ONNX's RNN, GRU, LSTM).

One op per cell type, with ONNX's inputs and attributes. The weights (W, R, B, P) are inputs, not
params, so a model that feeds them works as well as one that stores them. ONNX's optional inputs
may be left out in the middle (B given, sequence_lens not, initial_h given ...) while a Node's
inputs are positional: attribute ``present`` names the optional inputs given, in order.

Each node writes one of the ONNX outputs (attribute ``output``: 0 Y, 1 Y_h, 2 Y_c for LSTM), the
importer emits one node per output the model uses. Semantics where ONNX's text leaves a choice
follow ONNX Runtime: ``clip`` bounds every gate's pre-activation; with ``sequence_lens`` a batch
entry stops at its length (Y is 0 after it, Y_h / Y_c hold the last step, 0 for a length of 0),
and the reverse direction runs each entry's own steps backwards; ``activation_alpha`` /
``activation_beta`` are consumed, in order, only by the activations that take them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from neurenix_core.graph.opset.schema import REQUIRED, Arrays, Attrs, Params, Shape, _def, _is_float

__all__ = ["ACTIVATIONS", "GATES", "OPTIONAL_INPUTS"]

Activation = Callable[[np.ndarray], np.ndarray]

#: Gates per cell: the row blocks of W and R (ONNX's order: RNN i; GRU z, r, h; LSTM i, o, f, c).
GATES: dict[str, int] = {"rnn": 1, "gru": 3, "lstm": 4}
_DEFAULTS: dict[str, tuple[str, ...]] = {"rnn": ("Tanh",), "gru": ("Sigmoid", "Tanh"), "lstm": ("Sigmoid", "Tanh", "Tanh")}
OPTIONAL_INPUTS: dict[str, tuple[str, ...]] = {
    "rnn": ("b", "sequence_lens", "initial_h"), "gru": ("b", "sequence_lens", "initial_h"),
    "lstm": ("b", "sequence_lens", "initial_h", "initial_c", "p"),
}
_OUTPUTS: dict[str, tuple[str, ...]] = {"rnn": ("Y", "Y_h"), "gru": ("Y", "Y_h"), "lstm": ("Y", "Y_h", "Y_c")}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0, -x)).astype(x.dtype, copy=False)  # no overflow warning for large |x|


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x).astype(x.dtype, copy=False)


#: ONNX's activation names (lower-cased) -> (uses alpha, uses beta, default alpha, default beta, function of x, alpha, beta).
ACTIVATIONS: dict[str, tuple[bool, bool, float, float, Callable[[np.ndarray, float, float], np.ndarray]]] = {
    "relu": (False, False, 0.0, 0.0, lambda x, a, b: np.maximum(x, 0)),
    "tanh": (False, False, 0.0, 0.0, lambda x, a, b: np.tanh(x)),
    "sigmoid": (False, False, 0.0, 0.0, lambda x, a, b: _sigmoid(x)),
    "affine": (True, True, 1.0, 0.0, lambda x, a, b: x * a + b),
    "leakyrelu": (True, False, 0.01, 0.0, lambda x, a, b: np.where(x >= 0, x, x * a)),
    "thresholdedrelu": (True, False, 1.0, 0.0, lambda x, a, b: np.where(x > a, x, 0)),
    "scaledtanh": (True, True, 1.0, 1.0, lambda x, a, b: a * np.tanh(b * x)),
    "hardsigmoid": (True, True, 0.2, 0.5, lambda x, a, b: np.clip(a * x + b, 0, 1)),
    "elu": (True, False, 1.0, 0.0, lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0)))),
    "softsign": (False, False, 0.0, 0.0, lambda x, a, b: x / (1 + np.abs(x))),
    "softplus": (False, False, 0.0, 0.0, lambda x, a, b: _softplus(x)),
}


def _bound(fn: Callable[[np.ndarray, float, float], np.ndarray], alpha: float, beta: float, x: np.ndarray) -> np.ndarray:
    return fn(x, alpha, beta)


def _activations(cell: str, a: Attrs, directions: int) -> list[list[Activation]]:
    """The activation functions of each direction (f; f, g; or f, g, h), alpha and beta bound."""
    per = len(_DEFAULTS[cell])
    names = list(a["activations"] or _DEFAULTS[cell] * directions)
    if len(names) == per and directions == 2:
        names = names * 2  # one set given for both directions, as ONNX Runtime accepts
    if len(names) != per * directions:
        raise ValueError(f"takes {per * directions} activations ({per} per direction), got {names}")
    alphas, betas = list(a["activation_alpha"] or ()), list(a["activation_beta"] or ())
    funcs: list[Activation] = []
    for name in names:
        entry = ACTIVATIONS.get(str(name).lower())
        if entry is None:
            raise ValueError(f"has no activation {name!r}; ONNX's are {sorted(ACTIVATIONS)}")
        uses_a, uses_b, alpha, beta, fn = entry
        alpha = float(alphas.pop(0)) if uses_a and alphas else alpha
        beta = float(betas.pop(0)) if uses_b and betas else beta
        funcs.append(partial(_bound, fn, alpha, beta))
    return [funcs[d * per:(d + 1) * per] for d in range(directions)]


# ----------------------------------------------------------------------------- shapes
def _operands(cell: str, a: Attrs, items: Sequence[Any]) -> dict[str, Any]:
    """Inputs (shapes, dtypes or arrays) by name: x, w, r, then the ``present`` optional ones."""
    present = tuple(a["present"])
    unknown = set(present) - set(OPTIONAL_INPUTS[cell])
    if unknown or len(set(present)) != len(present) or len(items) != 3 + len(present):
        raise ValueError(f"present={present} must name the optional inputs given ({', '.join(OPTIONAL_INPUTS[cell])}), "
                         f"one per input after x, w, r ({len(items)} inputs)")
    return dict(zip(("x", "w", "r") + present, items))


def _directions(a: Attrs) -> int:
    if a["direction"] not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"direction must be forward, reverse or bidirectional, got {a['direction']!r}")
    return 2 if a["direction"] == "bidirectional" else 1


def _rule(cell: str) -> Callable[[Attrs, list[Shape], list[str], Params], tuple[Shape, str]]:
    def rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
        shapes, dtypes = _operands(cell, a, s), _operands(cell, a, d)
        x = shapes["x"]
        if not _is_float(d[0]) or any(dtypes[k] != d[0] for k in dtypes if k != "sequence_lens"):
            raise ValueError(f"takes float X and weights of its type, got {dtypes}")
        if len(x) != 3:
            raise ValueError(f"takes a 3-D X, got {x}")
        if a["layout"] not in (0, 1):
            raise ValueError(f"layout must be 0 or 1, got {a['layout']}")
        seq, batch, size = x if a["layout"] == 0 else (x[1], x[0], x[2])
        nd, gates, hidden = _directions(a), GATES[cell], a["hidden_size"]
        state = (nd, batch, hidden) if a["layout"] == 0 else (batch, nd, hidden)
        want = {"w": (nd, gates * hidden, size), "r": (nd, gates * hidden, hidden), "b": (nd, 2 * gates * hidden),
                "sequence_lens": (batch,), "initial_h": state, "initial_c": state, "p": (nd, 3 * hidden)}
        for k, shape in shapes.items():
            if k != "x" and tuple(shape) != want[k]:
                raise ValueError(f"input {k} has shape {shape}, expected {want[k]} (hidden_size {hidden}, {nd} direction(s))")
        if "sequence_lens" in dtypes and dtypes["sequence_lens"] not in ("int32", "int64"):
            raise ValueError(f"sequence_lens must be int32, got {dtypes['sequence_lens']}")
        _activations(cell, a, nd)
        if a["output"] not in range(len(_OUTPUTS[cell])):
            raise ValueError(f"output selects one of {_OUTPUTS[cell]}, got {a['output']}")
        if a["output"] == 0:
            return ((seq, nd, batch, hidden) if a["layout"] == 0 else (batch, seq, nd, hidden)), d[0]
        return state, d[0]

    return rule


# ----------------------------------------------------------------------------- cells
def _clip(v: np.ndarray, bound: float | None) -> np.ndarray:
    return v if bound is None else np.clip(v, -bound, bound)


Cell = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _rnn_cell(r: np.ndarray, rb: np.ndarray, p: np.ndarray, acts: list[Activation], a: Attrs) -> Cell:
    def step(xw: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return acts[0](_clip(xw + h @ r.T + rb, a["clip"])), c

    return step


def _gru_cell(r: np.ndarray, rb: np.ndarray, p: np.ndarray, acts: list[Activation], a: Attrs) -> Cell:
    f, g = acts
    hid = r.shape[1]
    r_zr, r_h = r[:2 * hid], r[2 * hid:]
    rb_zr, rb_h = rb[:2 * hid], rb[2 * hid:]

    def step(xw: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        zr = f(_clip(xw[:, :2 * hid] + h @ r_zr.T + rb_zr, a["clip"]))
        z, reset = zr[:, :hid], zr[:, hid:]
        if a["linear_before_reset"]:
            pre = xw[:, 2 * hid:] + reset * (h @ r_h.T + rb_h)
        else:
            pre = xw[:, 2 * hid:] + (reset * h) @ r_h.T + rb_h
        cand = g(_clip(pre, a["clip"]))
        return (1 - z) * cand + z * h, c

    return step


def _lstm_cell(r: np.ndarray, rb: np.ndarray, p: np.ndarray, acts: list[Activation], a: Attrs) -> Cell:
    f, g, hact = acts
    hid = r.shape[1]
    p_i, p_o, p_f = p[:hid], p[hid:2 * hid], p[2 * hid:]

    def step(xw: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gates = xw + h @ r.T + rb
        i = f(_clip(gates[:, :hid] + p_i * c, a["clip"]))
        forget = 1 - i if a["input_forget"] else f(_clip(gates[:, 2 * hid:3 * hid] + p_f * c, a["clip"]))
        cell = forget * c + i * g(_clip(gates[:, 3 * hid:], a["clip"]))
        o = f(_clip(gates[:, hid:2 * hid] + p_o * cell, a["clip"]))
        return o * hact(cell), cell

    return step


_CELLS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray, list[Activation], Attrs], Cell]] = {
    "rnn": _rnn_cell, "gru": _gru_cell, "lstm": _lstm_cell,
}


# ----------------------------------------------------------------------------- the recurrence
def _time_index(lens: np.ndarray, steps: int) -> np.ndarray:
    """(steps, batch) source step of each reversed step: an entry's own steps backwards, the
    padding after them in place (ONNX Runtime's ReverseSequence)."""
    t = np.arange(steps)[:, None]
    return np.where(t < lens[None, :], lens[None, :] - 1 - t, t)


def _run_direction(step: Cell, xw: np.ndarray, lens: np.ndarray, h: np.ndarray, c: np.ndarray,
                   reverse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Y (steps, batch, hidden), Y_h and Y_c of one direction; ``xw`` is X @ W^T + Wb for every step."""
    steps, batch = xw.shape[:2]
    cols = np.arange(batch)
    order = _time_index(lens, steps) if reverse else None
    if order is not None:
        xw = xw[order, cols[None, :]]
    ys = np.zeros((steps, batch, h.shape[1]), h.dtype)
    for t in range(steps):
        active = (t < lens)[:, None]
        h_new, c_new = step(xw[t], h, c)
        h, c = np.where(active, h_new, h), np.where(active, c_new, c)
        ys[t] = np.where(active, h_new, 0)
    if order is not None:
        back = np.empty_like(ys)
        back[order, cols[None, :]] = ys
        ys = back
    empty = (lens == 0)[:, None]
    return ys, np.where(empty, 0, h), np.where(empty, 0, c)


def _ref(cell: str) -> Callable[[Attrs, Arrays, Params], np.ndarray]:
    def ref(a: Attrs, arrays: Arrays, p: Params) -> np.ndarray:
        ins = _operands(cell, a, arrays)
        x = ins["x"]
        dtype = x.dtype
        work = np.float64 if dtype == np.float64 else np.float32  # float16 / bfloat16 recur in float32

        def get(k: str) -> np.ndarray:
            return np.asarray(ins[k]).astype(work)

        xs = get("x")
        if a["layout"] == 1:
            xs = xs.swapaxes(0, 1)
        steps, batch, _ = xs.shape
        nd, gates, hid = _directions(a), GATES[cell], a["hidden_size"]
        w, r = get("w"), get("r")
        b = get("b") if "b" in ins else np.zeros((nd, 2 * gates * hid), work)
        pp = get("p") if "p" in ins else np.zeros((nd, 3 * hid), work)
        lens = np.asarray(ins["sequence_lens"]).astype(np.int64) if "sequence_lens" in ins else np.full(batch, steps, np.int64)
        if np.any((lens < 0) | (lens > steps)):
            raise ValueError(f"sequence_lens {lens.tolist()} must lie in [0, {steps}]")
        states = [get(k) if k in ins else np.zeros((nd, batch, hid), work) for k in ("initial_h", "initial_c")]
        if a["layout"] == 1:
            states = [s.swapaxes(0, 1) if k in ins else s for k, s in zip(("initial_h", "initial_c"), states)]
        acts = _activations(cell, a, nd)
        outs = []
        for d in range(nd):
            step = _CELLS[cell](r[d], b[d, gates * hid:], pp[d], acts[d], a)
            xw = xs @ w[d].T + b[d, :gates * hid]
            outs.append(_run_direction(step, xw, lens, states[0][d], states[1][d], a["direction"] == "reverse" or d == 1))
        if a["output"] == 0:
            y = np.stack([o[0] for o in outs], axis=1)  # steps, directions, batch, hidden
            out = y.transpose(2, 0, 1, 3) if a["layout"] == 1 else y
        else:
            state = np.stack([o[a["output"]] for o in outs])  # directions, batch, hidden
            out = state.swapaxes(0, 1) if a["layout"] == 1 else state
        return np.ascontiguousarray(out).astype(dtype, copy=False)

    return ref


_COMMON = {"hidden_size": REQUIRED, "direction": "forward", "layout": 0, "activations": None, "activation_alpha": None,
           "activation_beta": None, "clip": None, "output": 0, "present": ()}
_def("rnn", "recurrent", "ONNX RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb); inputs x, w, r and the optional ones named "
     "by present (b, sequence_lens, initial_h); output 0 Y, 1 Y_h (one node per output)",
     ("x", "w", "r", "b?", "sequence_lens?", "initial_h?"), _rule("rnn"), _ref("rnn"), attrs=_COMMON)
_def("gru", "recurrent", "ONNX GRU (gates z, r, h; linear_before_reset); inputs x, w, r and the optional ones named by "
     "present (b, sequence_lens, initial_h); output 0 Y, 1 Y_h (one node per output)",
     ("x", "w", "r", "b?", "sequence_lens?", "initial_h?"), _rule("gru"), _ref("gru"),
     attrs=_COMMON | {"linear_before_reset": 0})
_def("lstm", "recurrent", "ONNX LSTM (gates i, o, f, c; peepholes p; input_forget); inputs x, w, r and the optional ones "
     "named by present (b, sequence_lens, initial_h, initial_c, p); output 0 Y, 1 Y_h, 2 Y_c (one node per output)",
     ("x", "w", "r", "b?", "sequence_lens?", "initial_h?", "initial_c?", "p?"), _rule("lstm"), _ref("lstm"),
     attrs=_COMMON | {"input_forget": 0})
