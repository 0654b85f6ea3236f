"""The model graph and quantization plan of a compiled artifact as JSON plus one array file.

Attribute values are tagged so they come back with their Python type (a tuple stays a tuple, a
symbolic size stays a SymDim); weights and array-valued attributes go to the array file.
Anything else is refused when saving, naming the node, instead of being written lossily.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from neurenix_core.errors import ArtifactFormatError, ArtifactUnsupportedError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams, TensorSpec
from neurenix_core.graph.symbolic import SymDim

__all__ = ["Encoder", "decode_value", "graph_from_json", "graph_to_json", "plan_from_json", "plan_to_json"]


class Encoder:
    """Collects arrays under fresh keys while values are turned into JSON."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, value: np.ndarray) -> str:
        key = f"a{len(self.arrays)}"
        self.arrays[key] = np.asarray(value)
        return key

    def value(self, value: Any, where: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (np.ndarray, np.generic)):
            if np.asarray(value).dtype.hasobject:
                raise ArtifactUnsupportedError(f"{where}: an array of Python objects cannot be saved in a compiled artifact")
            return {"a": self.array(np.asarray(value))}
        if isinstance(value, SymDim):
            return {"sym": value.expr}
        if isinstance(value, tuple):
            return {"t": [self.value(v, where) for v in value]}
        if isinstance(value, list):
            return {"l": [self.value(v, where) for v in value]}
        if isinstance(value, Mapping):
            return {"d": [[self.value(k, where), self.value(v, where)] for k, v in value.items()]}
        if isinstance(value, np.dtype):
            return {"dt": str(value)}
        raise ArtifactUnsupportedError(f"{where}: a {type(value).__name__} value cannot be saved in a compiled artifact")


_TAGS = frozenset({"a", "sym", "t", "l", "d", "dt"})


def decode_value(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if not isinstance(value, dict):
        return value
    if len(value) != 1 or next(iter(value)) not in _TAGS or (next(iter(value)) == "a" and value["a"] not in arrays):
        raise ArtifactFormatError(f"compiled artifact: a stored value is malformed ({str(value)[:80]}); write the artifact again")
    (tag, body), = value.items()
    decoders: dict[str, Callable[[Any], Any]] = {
        "a": lambda k: arrays[k],
        "sym": SymDim,
        "t": lambda items: tuple(decode_value(v, arrays) for v in items),
        "l": lambda items: [decode_value(v, arrays) for v in items],
        "d": lambda pairs: {decode_value(k, arrays): decode_value(v, arrays) for k, v in pairs},
        "dt": np.dtype,
    }
    return decoders[tag](body)


def graph_to_json(graph: Graph, enc: Encoder) -> dict[str, Any]:
    nodes = [{
        "name": n.name, "op": n.op, "inputs": list(n.inputs), "output": n.output,
        "attrs": {k: enc.value(v, f"node {n.name!r} attribute {k!r}") for k, v in n.attrs.items()},
        "params": {k: enc.array(v) for k, v in n.params.items()},
    } for n in graph.nodes]
    return {
        "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "dynamic": list(s.dynamic)} for s in graph.inputs],
        "nodes": nodes,
        "outputs": list(graph.outputs),
        "limits": [list(x) for x in graph.limits],
    }


def graph_from_json(data: Mapping[str, Any], arrays: Mapping[str, np.ndarray], where: str) -> Graph:
    try:
        inputs = tuple(TensorSpec(s["name"], tuple(s["shape"]), s["dtype"], tuple(s["dynamic"])) for s in data["inputs"])
        nodes = tuple(Node(n["name"], n["op"], tuple(n["inputs"]), n["output"],
                           {k: decode_value(v, arrays) for k, v in n["attrs"].items()},
                           {k: arrays[v] for k, v in n["params"].items()}) for n in data["nodes"])
        return Graph(inputs, nodes, tuple(data["outputs"]), tuple(tuple(x) for x in data.get("limits", ())))
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactFormatError(f"{where}: the model graph is malformed ({type(exc).__name__}: {exc}); write the artifact again") from exc


def _params_to_json(q: QuantParams, enc: Encoder) -> dict[str, Any]:
    return {"scale": enc.array(q.scale), "zero_point": enc.array(q.zero_point), "bits": q.bits, "axis": q.axis, "qmin": q.qmin, "qmax": q.qmax}


def _params_from_json(d: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> QuantParams:
    return QuantParams(arrays[d["scale"]], arrays[d["zero_point"]], d["bits"], d["axis"], d["qmin"], d["qmax"])


def plan_to_json(plan: QuantizationPlan, enc: Encoder) -> dict[str, Any]:
    return {
        "bits": plan.bits, "method": plan.method, "dynamic": plan.dynamic,
        "activations": {k: _params_to_json(v, enc) for k, v in plan.activations.items()},
        "weights": {k: _params_to_json(v, enc) for k, v in plan.weights.items()},
    }


def plan_from_json(data: Mapping[str, Any], arrays: Mapping[str, np.ndarray], where: str) -> QuantizationPlan:
    try:
        return QuantizationPlan(
            data["bits"], {k: _params_from_json(v, arrays) for k, v in data["activations"].items()},
            {k: _params_from_json(v, arrays) for k, v in data["weights"].items()}, data["method"], data["dynamic"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactFormatError(f"{where}: the quantization plan is malformed ({type(exc).__name__}: {exc}); write the artifact again") from exc
