"""Self-contained model files: a GraphModule's graph, weights, input specs and int8 plan in one file.

``nx.nn.save(model, "m.nxm")`` writes, ``nx.nn.load("m.nxm")`` reads back a GraphModule that runs
exactly as the saved one did, in a process that has only ``neurenix-core`` (NumPy): no torch, no
transformers, no onnx, no pickle. The file is the core's array file
(:mod:`neurenix_core.io.array_file`, the safetensors layout): every array of the model (weights,
constants, array attributes, the quantization plan's scales) is a tensor, and the header's
``__metadata__`` holds

* ``format``: ``"neurenix.model"``; ``format_version``: :data:`FORMAT_VERSION` (an integer);
* ``neurenix_core``: the version that wrote it;
* ``model``: JSON of the graph (inputs with dynamic axes, nodes, outputs, limits), the plan,
  the module's state (training flag, frozen parameters, source) and the data's SHA-256.

The graph and plan are JSON through :mod:`neurenix_core.graph.ir.serialize` (the codec compiled
artifacts use too), so the loaded graph has the saved graph's fingerprint. Loading maps the file:
the graph's arrays are read-only views of it unless ``writable=True``. docs/model-files.md is the
specification.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from neurenix_core.errors import ModelFormatError, UnsupportedOperationError
from neurenix_core.graph.ir import QuantizationPlan
from neurenix_core.graph.ir.serialize import Decoder, Encoder, graph_from_json, graph_to_json, plan_from_json, plan_to_json
from neurenix_core.graph.ir.symbolic import NotSymbolicError
from neurenix_core.io import array_file

__all__ = ["FORMAT", "FORMAT_VERSION", "SUFFIX", "is_model_file", "load_model", "save_model"]

FORMAT: Final = "neurenix.model"
#: Bumped when a reader of the previous version would misread a new file; readers refuse newer ones.
#: Still 1 with the alignment padding and complex dtypes: a version 1 reader reads such a file
#: (padding entries are small unused tensors, hashed with the data) or refuses a dtype it lacks.
FORMAT_VERSION: Final = 1
#: The suffix ``nx.nn.save`` writes a model file for (``.npz`` / ``.safetensors`` stay weights only).
SUFFIX: Final = ".nxm"

_RESAVE = "save the model again with nx.nn.save"
#: The remedy for a file whose bytes are wrong (truncated, corrupted) rather than its content.
_FIX = "save the model again (nx.nn.save) or copy the complete file"


# ----------------------------------------------------------------------------- save
def save_model(model: Any, path: str | os.PathLike[str], *, quantization_plan: QuantizationPlan | None = None) -> Path:
    """Write ``model`` (a GraphModule) to ``path`` atomically; returns the path.

    ``quantization_plan`` (from ``nx.quantization.calibrate``, or a compiled model's ``.plan``)
    is saved with it; by default the model's own (a pre-quantized import's)."""
    from neurenix_core._version import __version__
    from neurenix_core.graph.models.graph_module import GraphModule

    if not isinstance(model, GraphModule):
        raise UnsupportedOperationError(f"nx.nn.save(model, '*{SUFFIX}') saves a GraphModule (nx.nn.from_torch / from_onnx), not a "
                                        f"{type(model).__name__}; save its weights as .npz / .safetensors instead")
    if model.value_inputs:
        raise UnsupportedOperationError(f"{model!r} is built per value of its inputs {list(model.value_inputs)}, so it has no one "
                                        "graph to save; give those inputs as initializers (constants) in the ONNX model")
    plan = quantization_plan if quantization_plan is not None else model.quantization_plan
    enc = Encoder(UnsupportedOperationError, "nx.nn.save handles graphs of data only")
    module = {"source": model._source, "training": model.training,
              "frozen": sorted(k for k, p in model.named_parameters() if not p.requires_grad)}
    doc: dict[str, Any] = {"graph": graph_to_json(model.symbolic_graph(), enc), "quantization_plan": plan_to_json(plan, enc),
                           "module": module}
    layout = array_file.layout(enc.arrays, UnsupportedOperationError)
    doc["data_sha256"] = layout.sha256()
    metadata = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "neurenix_core": __version__,
                "model": json.dumps(doc, separators=(",", ":"), allow_nan=False)}
    return array_file.write(Path(path), layout.file_chunks(metadata), what="the model file")


# ----------------------------------------------------------------------------- load
def is_model_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``nx.nn.save`` / ``nx.nn.load`` treat ``path`` as a model file (its suffix is ``.nxm``;
    every other suffix keeps meaning a weights file, with the weights formats' errors)."""
    return Path(path).suffix.lower() == SUFFIX


def load_model(path: str | os.PathLike[str], *, writable: bool = False) -> Any:
    """The GraphModule saved in ``path`` (on cpu:0); a bad file is a ModelFormatError.

    The file is memory-mapped: the graph's arrays (constants, array attributes, the plan's scales)
    are views of it, read-only unless ``writable`` (copy-on-write: the file never changes). The
    module's parameters are its own copies either way, as for any GraphModule."""
    from neurenix_core.graph.models.graph_module import GraphModule

    source = Path(path)
    if not source.is_file():
        raise ModelFormatError(f"{source}: no such model file")
    tensors, metadata, data_start = array_file.read(source, error=ModelFormatError, remedy=_FIX, writable=writable)
    doc = _document(metadata, source)
    _check_digest(doc, source, data_start)
    dec = Decoder(tensors, str(source), error=ModelFormatError, remedy=_RESAVE)
    try:
        graph, plan = graph_from_json(doc["graph"], dec), plan_from_json(doc["quantization_plan"], dec)
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


def _check_digest(doc: Mapping[str, Any], source: Path, data_start: int) -> None:
    """The data's SHA-256 against the header's: a flipped weight byte is caught here, not as a wrong
    result. It covers the whole data section (arrays and alignment padding), which for version 1
    files written before padding existed is the arrays' bytes in file order, as they were hashed."""
    if array_file.data_sha256(source, data_start) != doc.get("data_sha256"):
        raise ModelFormatError(f"{source}: the weights' SHA-256 differs from the one recorded when the file was written (the file "
                               f"is corrupted); {_RESAVE}, or copy it again")
