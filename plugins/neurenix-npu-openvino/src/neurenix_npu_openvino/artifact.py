"""Compiled artifacts of the npu plugin (hooks neurenix_save_compiled / neurenix_load_compiled).

Two files per compiled model: the OpenVINO IR (``model.xml`` + ``model.bin``, portable to any
machine and OpenVINO version that reads IR) and the compiled blob (``compiled_model.export_model``,
``model.blob``), which is bound to the OpenVINO version and device that built it. Loading imports
the blob when both match (no compile: the fastest start) and compiles the IR otherwise; the
summary says which one ran. A blob that fails to import is an error, never a silent recompile.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.contract import member
from neurenix_core.errors import ArtifactFormatError, ArtifactUnsupportedError
from neurenix_npu_openvino.compiled import OpenVINOCompiledModel
from neurenix_npu_openvino.lowering import lower_graph

if TYPE_CHECKING:
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend

__all__ = ["load_compiled", "save_compiled"]


def _runtime(backend: NPUOpenVINOBackend) -> str:
    return f"openvino {backend.ov.get_version()}"


def save_compiled(backend: NPUOpenVINOBackend, model: Any, directory: Path) -> dict[str, Any]:
    loaded = getattr(model, "artifact_files", None)
    if loaded is not None:  # a loaded artifact saved again: its files as they are
        source, meta = loaded
        for name in (meta["ir"], Path(meta["ir"]).with_suffix(".bin").name, meta.get("blob")):
            if name:
                shutil.copyfile(source / name, directory / name)
        return dict(meta)
    graph = getattr(model, "source_graph", None)
    if not isinstance(model, OpenVINOCompiledModel) or graph is None:
        raise ArtifactUnsupportedError(f"{backend.device_label()} (plugin npu-openvino): only models compiled by nx.compile can be saved "
                                       f"as artifacts, not a {type(model).__name__}; compile the model with nx.compile first")
    ir = lower_graph(graph, model.plan, device=backend.device_label())
    backend.ov.save_model(ir, str(directory / "model.xml"), compress_to_fp16=False)
    blob = _write_blob(backend, ir, model, directory / "model.blob")
    return {
        "runtime": _runtime(backend), "ov_device": backend.ov_device, "ir": "model.xml", "blob": blob,
        "precision": model.precision, "optimize_for": model.optimize_for, "threads": model.threads,
        "properties": {k: str(v) for k, v in model.properties.items()}, "nodes": len(graph.nodes),
        "inputs": [[name, list(shape), str(dtype)] for name, shape, dtype in model.input_specs],
    }


def _write_blob(backend: NPUOpenVINOBackend, ir: Any, model: OpenVINOCompiledModel, path: Path) -> str | None:
    """The compiled blob of a fresh compile of ``ir``, checked by importing it once; None when the
    device cannot export. Not ``model.compiled``'s own export: a model that was itself imported
    (from the persistent compile cache) exports a blob OpenVINO 2026.4's CPU device cannot read."""
    props = backend.compile_properties(model.precision, model.optimize_for, model.threads, model.properties)
    try:
        data = bytes(backend.core.compile_model(ir, backend.ov_device, props).export_model().getvalue())
        backend.core.import_model(io.BytesIO(data), backend.ov_device, props)
    except RuntimeError:  # no export on this device: the IR alone is the artifact
        return None
    path.write_bytes(data)
    return path.name


def load_compiled(backend: NPUOpenVINOBackend, directory: Path, meta: dict[str, Any]) -> OpenVINOCompiledModel:
    precision, optimize_for, threads = meta["precision"], meta["optimize_for"], meta["threads"]
    properties = meta.get("properties") or {}
    specs = [(name, tuple(shape), np.dtype(dtype)) for name, shape, dtype in meta["inputs"]]
    same_runtime = meta["runtime"] == _runtime(backend) and meta["ov_device"] == backend.ov_device
    if meta.get("blob") and same_runtime:
        props = backend.compile_properties(precision, optimize_for, threads, properties)
        try:
            compiled = backend.core.import_model(io.BytesIO((member(directory, meta["blob"])).read_bytes()), backend.ov_device, props)
        except RuntimeError as exc:
            raise ArtifactFormatError(f"{backend.device_label()} (plugin npu-openvino): OpenVINO cannot import the compiled blob "
                                      f"{member(directory, meta['blob'])}: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}; "
                                      "export the model again") from exc
        how = "imported from the compiled blob"
    else:
        try:
            ir = backend.core.read_model(str(member(directory, meta["ir"])))
        except RuntimeError as exc:
            raise ArtifactFormatError(f"{backend.device_label()} (plugin npu-openvino): OpenVINO cannot read the IR {member(directory, meta['ir'])}: "
                                      f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}; export the model again") from exc
        compiled = backend.compile_model(ir, precision, optimize_for, threads=threads, properties=properties or None)
        how = f"compiled from the IR (saved with {meta['runtime']} for {meta['ov_device']})"
    model = OpenVINOCompiledModel(backend, compiled, precision=precision, input_specs=specs, optimize_for=optimize_for, nodes=meta["nodes"],
                                  source="neurenix graph")
    model.summary += f"; loaded from {directory.parent.parent.name}: {how}"
    model.artifact_files = (directory, meta)  # what compiled.save writes again
    return model
