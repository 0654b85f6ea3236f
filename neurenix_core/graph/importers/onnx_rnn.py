"""ONNX import handlers: Recurrent layers (ONNX's rnn family: RNN, GRU, LSTM).

Every input stays an input (weights included, so a model that feeds W and R works as one that
stores them); the optional inputs the node gives are named in the op's ``present`` attribute.
One node per ONNX output the model uses (Y, Y_h, Y_c), each selecting it with ``output``.
"""

from __future__ import annotations

from typing import Any

from neurenix_core.graph.importers.builder import GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, fail, outputs_used
from neurenix_core.graph.opset.rnn import ACTIVATIONS, OPTIONAL_INPUTS

__all__ = ["HANDLERS"]


def _attrs(b: GraphBuilder, n: OnnxNode, cell: str) -> dict[str, Any]:
    a = n.attrs
    r_shape = b.spec(n.inputs[2]).shape  # type: ignore[arg-type]
    acts = tuple(str(s) for s in a.get("activations", ())) or None
    unknown = [s for s in acts or () if s.lower() not in ACTIVATIONS]
    if unknown:
        raise fail(b, n, f"uses activation(s) {unknown}; ONNX's recurrent activations are {sorted(ACTIVATIONS)}")
    out: dict[str, Any] = {
        "hidden_size": int(a.get("hidden_size", r_shape[-1] if r_shape else 0)),
        "direction": str(a.get("direction", "forward")),
        "layout": int(a.get("layout", 0)),
        "activations": acts,
        "activation_alpha": tuple(float(v) for v in a["activation_alpha"]) if "activation_alpha" in a else None,
        "activation_beta": tuple(float(v) for v in a["activation_beta"]) if "activation_beta" in a else None,
        "clip": float(a["clip"]) if "clip" in a else None,
    }
    if cell == "gru":
        out["linear_before_reset"] = int(a.get("linear_before_reset", 0))
    if cell == "lstm":
        out["input_forget"] = int(a.get("input_forget", 0))
    return out


def _recurrent(cell: str) -> Handler:
    def run(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
        optional = OPTIONAL_INPUTS[cell]  # ONNX's optional inputs after X, W, R, in its order
        present = tuple(name for i, name in enumerate(optional, start=3) if n.input(i) is not None)
        inputs = n.inputs[:3] + [n.input(3 + optional.index(name)) for name in present]
        attrs = _attrs(b, n, cell) | {"present": present}
        used = outputs_used(n)
        if not any(used):
            raise fail(b, n, "names none of its outputs")
        return [b.emit(f"{n.name}.{k}" if k else n.name, cell, inputs, attrs | {"output": k}) if u else None  # type: ignore[arg-type]
                for k, u in enumerate(used)]

    return run


HANDLERS: dict[str, Handler] = {"RNN": _recurrent("rnn"), "GRU": _recurrent("gru"), "LSTM": _recurrent("lstm")}
