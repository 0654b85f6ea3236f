"""Self-contained model files: a GraphModule's graph, weights, input specs and int8 plan in one file.

``nx.nn.save(model, "m.nxm")`` writes, ``nx.nn.load("m.nxm")`` reads back a GraphModule that runs
exactly as the saved one did, in a process that has only ``neurenix-core`` (NumPy): no torch, no
transformers, no onnx, no pickle. The file is in the safetensors layout (:mod:`tensor_file`):
every array of the model (weights, constants, array attributes, the quantization plan's scales)
is a tensor, and the header's ``__metadata__`` holds

* ``format``: ``"neurenix.model"``; ``format_version``: :data:`FORMAT_VERSION` (an integer);
* ``neurenix_core``: the version that wrote it;
* ``model``: JSON of the graph (inputs with dynamic axes, nodes, outputs, limits), the plan,
  the module's state (training flag, frozen parameters, source) and the data's SHA-256.

Node attributes are JSON with tagged values where JSON has no type (tuples, SymDims, NumPy
scalars, non-finite floats, arrays stored as tensors), so the loaded graph has the saved graph's
fingerprint. docs/model-files.md is the specification.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from neurenix_core.errors import ModelFormatError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams, TensorSpec
from neurenix_core.graph.symbolic import NotSymbolicError, SymDim
from neurenix_core.nn import tensor_file

__all__ = ["FORMAT", "FORMAT_VERSION", "SUFFIX", "is_model_file", "load_model", "save_model"]

FORMAT: Final = "neurenix.model"
#: Bumped when a reader of the previous version would misread a new file; readers refuse newer ones.
FORMAT_VERSION: Final = 1
#: The suffix ``nx.nn.save`` writes a model file for (``.npz`` / ``.safetensors`` stay weights only).
SUFFIX: Final = ".nxm"

_RESAVE = "save the model again with nx.nn.save"


# ----------------------------------------------------------------------------- values <-> JSON
class _Writer:
    """Collects the tensors a model's JSON refers to (``{"$tensor": name}``)."""

    def __init__(self) -> None:
        self.tensors: dict[str, np.ndarray] = {}

    def tensor(self, name: str, arr: np.ndarray, where: str) -> dict[str, str]:
        if arr.dtype.hasobject:
            raise UnsupportedOperationError(f"{where} holds a NumPy object array, which a model file cannot store; fold it to "
                                            "numbers before saving (nx.nn.save)")
        key, k = name, 1
        while key in self.tensors:
            k += 1
            key = f"{name}#{k}"
        self.tensors[key] = arr
        return {"$tensor": key}

    def value(self, v: Any, name: str, where: str) -> Any:
        """``v`` as JSON; arrays go to the tensors under ``name``."""
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"$float": repr(v)}
        if isinstance(v, SymDim):
            return {"$sym": v.expr}
        if isinstance(v, np.ndarray):
            return self.tensor(name, v, where)
        if isinstance(v, np.generic):  # a NumPy scalar keeps its dtype (np.float32(0.5) is not 0.5 in a fingerprint)
            return {"$scalar": self.tensor(name, np.asarray(v), where)["$tensor"]}
        if isinstance(v, np.dtype):
            return {"$dtype": v.name}
        if isinstance(v, tuple):
            return {"$tuple": [self.value(x, f"{name}.{i}", where) for i, x in enumerate(v)]}
        if isinstance(v, list):
            return [self.value(x, f"{name}.{i}", where) for i, x in enumerate(v)]
        if isinstance(v, Mapping):
            return {"$dict": [[self.value(k, f"{name}.key{i}", where), self.value(x, f"{name}.{k}", where)]
                              for i, (k, x) in enumerate(v.items())]}
        raise UnsupportedOperationError(f"{where} is of type {type(v).__name__} ({v!r:.60}), which a model file cannot store (a control-flow "
                                        "body or another Python object); nx.nn.save handles graphs of data only")


class _Reader:
    """Resolves tagged JSON values against the file's tensors."""

    def __init__(self, tensors: Mapping[str, np.ndarray], source: Path) -> None:
        self.tensors = tensors
        self.source = source

    def tensor(self, key: Any) -> np.ndarray:
        if not isinstance(key, str) or key not in self.tensors:
            raise ModelFormatError(f"{self.source}: the graph refers to tensor {key!r}, which the file does not hold; {_RESAVE}")
        return self.tensors[key]

    def value(self, v: Any) -> Any:
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict):
            return v
        if len(v) != 1:
            raise ModelFormatError(f"{self.source}: attribute value {v!r:.80} is not a tagged value; {_RESAVE}")
        tag, body = next(iter(v.items()))
        decoder = _TAGS.get(tag)
        if decoder is None:
            raise ModelFormatError(f"{self.source}: unknown value tag {tag!r} (a file of a newer format?); {_RESAVE}")
        return decoder(self, body)


def _dict(r: _Reader, body: Any) -> dict[Any, Any]:
    return {_hashable(r.value(k)): r.value(x) for k, x in body}


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


_TAGS: Final[dict[str, Callable[[_Reader, Any], Any]]] = {
    "$tensor": lambda r, b: r.tensor(b),
    "$scalar": lambda r, b: r.tensor(b)[()],
    "$float": lambda r, b: float(b),
    "$sym": lambda r, b: SymDim(b),
    "$dtype": lambda r, b: np.dtype(b),
    "$tuple": lambda r, b: tuple(r.value(x) for x in b),
    "$dict": _dict,
}


# ----------------------------------------------------------------------------- graph, plan <-> JSON
def _graph_json(graph: Graph, w: _Writer) -> dict[str, Any]:
    nodes = []
    for n in graph.nodes:
        where = f"node {n.name!r} ({n.op})"
        attrs = {k: w.value(v, f"{n.name}:{k}", f"{where} attribute {k!r}") for k, v in n.attrs.items()}
        # Weights under "<node>.<param>": the names of the model's state_dict.
        params = {k: w.tensor(f"{n.name}.{k}", np.asarray(v), f"{where} param {k!r}")["$tensor"] for k, v in n.params.items()}
        nodes.append({"name": n.name, "op": n.op, "inputs": list(n.inputs), "output": n.output, "attrs": attrs, "params": params})
    inputs = [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "dynamic": list(s.dynamic)} for s in graph.inputs]
    return {"inputs": inputs, "nodes": nodes, "outputs": list(graph.outputs), "limits": [list(x) for x in graph.limits]}


def _graph_of(doc: Any, r: _Reader) -> Graph:
    inputs = tuple(TensorSpec(str(s["name"]), tuple(int(d) for d in s["shape"]), str(s["dtype"]), tuple(int(a) for a in s["dynamic"]))
                   for s in doc["inputs"])
    nodes = []
    for n in doc["nodes"]:
        attrs = {str(k): r.value(v) for k, v in n["attrs"].items()}
        params = {str(k): r.tensor(t) for k, t in n["params"].items()}
        nodes.append(Node(str(n["name"]), str(n["op"]), tuple(str(i) for i in n["inputs"]), str(n["output"]), attrs, params))
    limits = tuple((int(i), int(a), int(m)) for i, a, m in doc["limits"])
    return Graph(inputs, tuple(nodes), tuple(str(o) for o in doc["outputs"]), limits)


def _qparams_json(q: QuantParams, name: str, w: _Writer) -> dict[str, Any]:
    return {"scale": w.tensor(f"{name}.scale", np.asarray(q.scale), name)["$tensor"],
            "zero_point": w.tensor(f"{name}.zero_point", np.asarray(q.zero_point), name)["$tensor"],
            "bits": q.bits, "axis": q.axis, "qmin": q.qmin, "qmax": q.qmax}


def _plan_json(plan: QuantizationPlan | None, w: _Writer) -> dict[str, Any] | None:
    if plan is None:
        return None
    return {"bits": plan.bits, "method": plan.method, "dynamic": plan.dynamic,
            "activations": {k: _qparams_json(q, f"plan:activation:{k}", w) for k, q in plan.activations.items()},
            "weights": {k: _qparams_json(q, f"plan:weight:{k}", w) for k, q in plan.weights.items()}}


def _plan_of(doc: Any, r: _Reader) -> QuantizationPlan | None:
    if doc is None:
        return None

    def one(q: Any) -> QuantParams:
        axis = q["axis"]
        return QuantParams(r.tensor(q["scale"]), r.tensor(q["zero_point"]), int(q["bits"]), None if axis is None else int(axis),
                           int(q["qmin"]), int(q["qmax"]))

    return QuantizationPlan(int(doc["bits"]), {str(k): one(q) for k, q in doc["activations"].items()},
                            {str(k): one(q) for k, q in doc["weights"].items()}, str(doc["method"]), bool(doc["dynamic"]))


# ----------------------------------------------------------------------------- save
def save_model(model: Any, path: str | os.PathLike[str], *, quantization_plan: QuantizationPlan | None = None) -> Path:
    """Write ``model`` (a GraphModule) to ``path`` atomically; returns the path.

    ``quantization_plan`` (from ``nx.quantization.calibrate``, or a compiled model's ``.plan``)
    is saved with it; by default the model's own (a pre-quantized import's)."""
    from neurenix_core._version import __version__
    from neurenix_core.nn.graph_module import GraphModule

    if not isinstance(model, GraphModule):
        raise UnsupportedOperationError(f"nx.nn.save(model, '*{SUFFIX}') saves a GraphModule (nx.nn.from_torch / from_onnx), not a "
                                        f"{type(model).__name__}; save its weights as .npz / .safetensors instead")
    if model.value_inputs:
        raise UnsupportedOperationError(f"{model!r} is built per value of its inputs {list(model.value_inputs)}, so it has no one "
                                        "graph to save; give those inputs as initializers (constants) in the ONNX model")
    plan = quantization_plan if quantization_plan is not None else model.quantization_plan
    w = _Writer()
    module = {"source": model._source, "training": model.training,
              "frozen": sorted(k for k, p in model.named_parameters() if not p.requires_grad)}
    doc: dict[str, Any] = {"graph": _graph_json(model.symbolic_graph(), w), "quantization_plan": _plan_json(plan, w), "module": module}
    digest = hashlib.sha256()
    for arr in w.tensors.values():
        digest.update(np.ascontiguousarray(arr).tobytes())
    doc["data_sha256"] = digest.hexdigest()
    metadata = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "neurenix_core": __version__,
                "model": json.dumps(doc, separators=(",", ":"), allow_nan=False)}
    return _write_atomic(Path(path), tensor_file.encode(w.tensors, metadata))


def _write_atomic(target: Path, chunks: list[bytes]) -> Path:
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # the destination was never touched; re-raised as is
        raise
    return target


# ----------------------------------------------------------------------------- load
def is_model_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``nx.nn.save`` / ``nx.nn.load`` treat ``path`` as a model file (its suffix is ``.nxm``;
    every other suffix keeps meaning a weights file, with the weights formats' errors)."""
    return Path(path).suffix.lower() == SUFFIX


def load_model(path: str | os.PathLike[str]) -> Any:
    """The GraphModule saved in ``path`` (on cpu:0); a bad file is a ModelFormatError."""
    from neurenix_core.nn.graph_module import GraphModule

    source = Path(path)
    if not source.is_file():
        raise ModelFormatError(f"{source}: no such model file")
    tensors, metadata = tensor_file.decode(source.read_bytes(), source)
    doc = _document(metadata, source)
    _check_digest(doc, tensors, source)
    r = _Reader(tensors, source)
    try:
        graph, plan = _graph_of(doc["graph"], r), _plan_of(doc["quantization_plan"], r)
        module = doc["module"]
        model = GraphModule(graph, str(module["source"]), quantization_plan=plan)
        frozen = set(module["frozen"])
        model.train(bool(module["training"]))
    except ModelFormatError:
        raise
    except (KeyError, TypeError, ValueError, NotSymbolicError) as exc:  # Node refuses an op this core lacks: ValueError
        raise ModelFormatError(f"{source}: the model description is malformed ({type(exc).__name__}: {exc}); it was written by "
                               f"neurenix-core {metadata.get('neurenix_core', '?')}: {_RESAVE}, or upgrade neurenix-core where that "
                               "one is newer (pip install -U neurenix-core)") from exc
    for name, p in model.named_parameters():
        if name in frozen:
            p.requires_grad_(False)
    return model


def _document(metadata: Mapping[str, str], source: Path) -> dict[str, Any]:
    if metadata.get("format") != FORMAT:
        raise ModelFormatError(f"{source}: not a neurenix model file (format {metadata.get('format')!r}, expected {FORMAT!r}); a "
                               "weights file loads with nx.nn.load('*.safetensors') into a state dict")
    try:
        version = int(metadata.get("format_version", ""))
    except ValueError as exc:
        raise ModelFormatError(f"{source}: format_version {metadata.get('format_version')!r} is not an integer; {_RESAVE}") from exc
    if version > FORMAT_VERSION:
        raise ModelFormatError(f"{source}: model file format version {version} (written by neurenix-core "
                               f"{metadata.get('neurenix_core', '?')}); this neurenix-core reads versions up to {FORMAT_VERSION}: "
                               "pip install -U neurenix-core")
    try:
        doc = json.loads(metadata["model"])
    except (KeyError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{source}: the model description is missing or not JSON ({type(exc).__name__}); {_RESAVE}") from exc
    if not isinstance(doc, dict):
        raise ModelFormatError(f"{source}: the model description is not a JSON object; {_RESAVE}")
    return doc


def _check_digest(doc: Mapping[str, Any], tensors: Mapping[str, np.ndarray], source: Path) -> None:
    """The data's SHA-256 against the header's: a flipped weight byte is caught here, not as a wrong result."""
    digest = hashlib.sha256()
    for arr in tensors.values():  # decode returns them in file order, the order they were hashed in
        digest.update(arr.tobytes())
    if digest.hexdigest() != doc.get("data_sha256"):
        raise ModelFormatError(f"{source}: the weights' SHA-256 differs from the one recorded when the file was written (the file "
                               f"is corrupted); {_RESAVE}, or copy it again")
