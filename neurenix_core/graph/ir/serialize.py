"""The core's one codec of model graphs, quantization plans and attribute values as JSON whose
arrays live in an array file (:mod:`neurenix_core.io.array_file`). Model files (``.nxm``) and
compiled artifacts (``graph.json`` + ``graph.arrays``) both use it; docs/model-files.md is the
specification.

Values are JSON where JSON has the type and a one-key tagged object where it has not, so a graph
comes back with its types (its ``fingerprint()`` is the same): ``$tuple``, ``$dict``, ``$sym``
(a SymDim), ``$float`` (non-finite), ``$tensor`` (an array, by name), ``$scalar`` (a NumPy scalar,
stored as a 0-d array), ``$dtype``. Compiled artifacts of format 1 used other tags (``a``, ``sym``,
``t``, ``l``, ``d``, ``dt``); :data:`ARTIFACT_V1_TAGS` decodes them.

Anything else is refused when saving, naming the node, instead of being written lossily; a
malformed value when loading is the caller's error class (``ModelFormatError`` or
``ArtifactFormatError``) naming the file and the remedy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.errors import ModelFormatError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams, TensorSpec
from neurenix_core.graph.ir.symbolic import SymDim
from neurenix_core.io.array_file import dtype_named

__all__ = ["ARTIFACT_V1_TAGS", "TAGS", "Decoder", "Encoder", "graph_from_json", "graph_to_json", "plan_from_json", "plan_to_json"]


# ----------------------------------------------------------------------------------- values -> JSON
class Encoder:
    """Turns values into JSON, collecting the arrays they hold under readable, unique names.

    ``error`` is raised for a value no file can hold (a Python object), with ``remedy``."""

    def __init__(self, error: type[Exception] = UnsupportedOperationError, remedy: str = "nx.nn.save handles graphs of data only") -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.error, self.remedy = error, remedy

    def array(self, name: str, value: Any, where: str) -> str:
        """Store ``value`` as an array under ``name`` (``name#2`` ... when taken); its key."""
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise self.error(f"{where} holds a NumPy object array, which cannot be saved; fold it to numbers before saving")
        key, k = name, 1
        while key in self.arrays:
            k += 1
            key = f"{name}#{k}"
        self.arrays[key] = arr
        return key

    def value(self, v: Any, name: str, where: str) -> Any:
        """``v`` as JSON; its arrays are stored under ``name``."""
        if v is None or isinstance(v, (bool, str, int)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"$float": repr(v)}
        if isinstance(v, SymDim):
            return {"$sym": v.expr}
        if isinstance(v, np.ndarray):
            return {"$tensor": self.array(name, v, where)}
        if isinstance(v, np.generic):  # a NumPy scalar keeps its dtype (np.float32(0.5) is not 0.5 in a fingerprint)
            return {"$scalar": self.array(name, np.asarray(v), where)}
        if isinstance(v, np.dtype):
            return {"$dtype": v.name}
        if isinstance(v, tuple):
            return {"$tuple": [self.value(x, f"{name}.{i}", where) for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [self.value(x, f"{name}.{i}", where) for i, x in enumerate(v)]
        if isinstance(v, Mapping):
            return {"$dict": [[self.value(k, f"{name}.key{i}", where), self.value(x, f"{name}.{k}", where)]
                              for i, (k, x) in enumerate(v.items())]}
        raise self.error(f"{where} is of type {type(v).__name__} ({v!r:.60}), which cannot be saved (a control-flow body or another "
                         f"Python object); {self.remedy}")


# ----------------------------------------------------------------------------------- JSON -> values
class Decoder:
    """Resolves tagged JSON values against a file's arrays; ``tags`` is the dialect
    (:data:`TAGS`, or :data:`ARTIFACT_V1_TAGS` for artifacts of format 1)."""

    def __init__(self, arrays: Mapping[str, np.ndarray], where: str, *, error: type[ModelFormatError] = ModelFormatError,
                 remedy: str = "save the model again with nx.nn.save", tags: Mapping[str, Callable[[Decoder, Any], Any]] | None = None) -> None:
        self.arrays, self.where, self.error, self.remedy = arrays, where, error, remedy
        self.tags = TAGS if tags is None else tags

    def fail(self, what: str) -> ModelFormatError:
        return self.error(f"{self.where}: {what}; {self.remedy}")

    def array(self, key: Any) -> np.ndarray:
        if not isinstance(key, str) or key not in self.arrays:
            raise self.fail(f"a stored value is malformed: the graph refers to tensor {key!r}, which the file does not hold")
        return self.arrays[key]

    def value(self, v: Any) -> Any:
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict):
            return v
        if len(v) != 1:
            raise self.fail(f"a stored value is malformed: {v!r:.80} is not a tagged value")
        tag, body = next(iter(v.items()))
        decoder = self.tags.get(tag)
        if decoder is None:
            raise self.fail(f"a stored value is malformed: unknown value tag {tag!r} (a file of a newer format?)")
        return decoder(self, body)

    def dtype(self, name: Any) -> np.dtype[Any]:
        return dtype_named(str(name), self.where, self.error)


def _dict(d: Decoder, body: Any) -> dict[Any, Any]:
    return {_hashable(d.value(k)): d.value(x) for k, x in body}


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


#: The tags model files and compiled artifacts (format 2 on) write.
TAGS: Final[Mapping[str, Callable[[Decoder, Any], Any]]] = {
    "$tensor": lambda d, b: d.array(b),
    "$scalar": lambda d, b: d.array(b)[()],
    "$float": lambda d, b: float(b),
    "$sym": lambda d, b: SymDim(b),
    "$dtype": Decoder.dtype,
    "$tuple": lambda d, b: tuple(d.value(x) for x in b),
    "$dict": _dict,
}

#: The tags of compiled artifacts of format 1 (arrays, NumPy scalars included, came back as arrays).
ARTIFACT_V1_TAGS: Final[Mapping[str, Callable[[Decoder, Any], Any]]] = {
    "a": lambda d, b: d.array(b),
    "sym": lambda d, b: SymDim(b),
    "t": lambda d, b: tuple(d.value(x) for x in b),
    "l": lambda d, b: [d.value(x) for x in b],
    "d": _dict,
    "dt": Decoder.dtype,
}


# ----------------------------------------------------------------------------------- graph, plan
def graph_to_json(graph: Graph, enc: Encoder) -> dict[str, Any]:
    """The graph as JSON; weights go to ``enc`` under ``<node>.<param>`` (the state_dict's names)."""
    nodes = []
    for n in graph.nodes:
        where = f"node {n.name!r} ({n.op})"
        attrs = {k: enc.value(v, f"{n.name}:{k}", f"{where} attribute {k!r}") for k, v in n.attrs.items()}
        params = {k: enc.array(f"{n.name}.{k}", v, f"{where} param {k!r}") for k, v in n.params.items()}
        nodes.append({"name": n.name, "op": n.op, "inputs": list(n.inputs), "output": n.output, "attrs": attrs, "params": params})
    inputs = [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "dynamic": list(s.dynamic)} for s in graph.inputs]
    return {"inputs": inputs, "nodes": nodes, "outputs": list(graph.outputs), "limits": [list(x) for x in graph.limits]}


def graph_from_json(doc: Any, dec: Decoder) -> Graph:
    """The graph of :func:`graph_to_json`'s JSON. A malformed document raises the decoder's error
    for a bad value or array, and KeyError / TypeError / ValueError otherwise (the caller names the file)."""
    inputs = tuple(TensorSpec(str(s["name"]), tuple(int(d) for d in s["shape"]), str(s["dtype"]), tuple(int(a) for a in s["dynamic"]))
                   for s in doc["inputs"])
    nodes = []
    for n in doc["nodes"]:
        attrs = {str(k): dec.value(v) for k, v in n["attrs"].items()}
        params = {str(k): dec.array(t) for k, t in n["params"].items()}
        nodes.append(Node(str(n["name"]), str(n["op"]), tuple(str(i) for i in n["inputs"]), str(n["output"]), attrs, params))
    limits = tuple((int(i), int(a), int(m)) for i, a, m in doc.get("limits", ()))
    return Graph(inputs, tuple(nodes), tuple(str(o) for o in doc["outputs"]), limits)


def _qparams_json(q: QuantParams, name: str, enc: Encoder) -> dict[str, Any]:
    return {"scale": enc.array(f"{name}.scale", q.scale, name), "zero_point": enc.array(f"{name}.zero_point", q.zero_point, name),
            "bits": q.bits, "axis": q.axis, "qmin": q.qmin, "qmax": q.qmax}


def plan_to_json(plan: QuantizationPlan | None, enc: Encoder) -> dict[str, Any] | None:
    if plan is None:
        return None
    return {"bits": plan.bits, "method": plan.method, "dynamic": plan.dynamic,
            "activations": {k: _qparams_json(q, f"plan:activation:{k}", enc) for k, q in plan.activations.items()},
            "weights": {k: _qparams_json(q, f"plan:weight:{k}", enc) for k, q in plan.weights.items()}}


def plan_from_json(doc: Any, dec: Decoder) -> QuantizationPlan | None:
    if doc is None:
        return None

    def one(q: Any) -> QuantParams:
        axis = q["axis"]
        return QuantParams(dec.array(q["scale"]), dec.array(q["zero_point"]), int(q["bits"]), None if axis is None else int(axis),
                           int(q["qmin"]), int(q["qmax"]))

    return QuantizationPlan(int(doc["bits"]), {str(k): one(q) for k, q in doc["activations"].items()},
                            {str(k): one(q) for k, q in doc["weights"].items()}, str(doc["method"]), bool(doc["dynamic"]))
