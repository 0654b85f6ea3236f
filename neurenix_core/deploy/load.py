"""``nx.load_compiled``: rebuild a :class:`~neurenix_core.graph.compile.compiler.Compiled` from an artifact
folder written by ``deploy.artifact``: the plugin checked against the one that saved it, each
plugin part loaded through ``neurenix_load_compiled``, each cpu:0 part pinned to its runtime,
and every saved input shape built again through the compiler's own path."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neurenix_core.errors import (
    ArtifactFormatError,
    ArtifactMismatchError,
    ArtifactUnsupportedError,
    BackendUnavailableError,
    CompilationError,
    DeviceNotFoundError,
)
from neurenix_core.graph.compile.artifact import _REMEDY, read_manifest
from neurenix_core.graph.compile.artifact_arrays import read_arrays
from neurenix_core.graph.compile.artifact_codec import decoder, read_graph
from neurenix_core.io.atomic import settled
from neurenix_core.kwargs import strict_kwargs

if TYPE_CHECKING:
    from neurenix_core.device import DeviceLike
    from neurenix_core.graph.compile.compiler import Compiled

__all__ = ["SavedVerification", "load_compiled"]


class SavedVerification:
    """The verification of a quantized compile as it was when the artifact was saved: its line
    goes into ``summary`` and the placement report as before; ``verify()`` runs a new one."""

    __slots__ = ("_line",)

    def __init__(self, line: str) -> None:
        self._line = line

    def line(self) -> str:
        return f"{self._line} (when saved)"


@strict_kwargs("nx.load_compiled")
def load_compiled(path: str | os.PathLike[str], device: DeviceLike | None = None) -> Compiled:
    """``nx.load_compiled``: the compiled model saved at ``path``, on ``device`` (default: the
    device type it was saved for, index 0). Needs the core and the saving plugin (same version)."""
    from neurenix_core.device import Device, as_device

    folder = settled(path)  # an interrupted save's backup (no-exchange filesystems) first
    manifest = read_manifest(folder)
    saved_type = str(manifest["device_type"])
    dev = Device(saved_type, 0) if device is None else as_device(device)
    if str(dev.type) != saved_type:
        raise ArtifactMismatchError(f"{folder} was compiled for {manifest['device']} (plugin {manifest['plugin']['name']}), not {dev}; "
                                    f"load it with device='{saved_type}:N', or export the model for {dev.type} (neurenix export MODEL --device {dev.type})")
    rec, backend = _plugin(manifest, dev, folder)
    return _rebuild(manifest, folder, dev, rec, backend)


def _plugin(manifest: dict[str, Any], dev: Any, folder: Path) -> tuple[Any, Any]:
    """The installed plugin serving ``dev``, checked against the one that saved the artifact."""
    from neurenix_core.plugins.state import registry
    from neurenix_core.tensor.placement import default_backend

    saved = manifest["plugin"]
    try:
        rec = registry().plugin_for(dev)
    except (DeviceNotFoundError, BackendUnavailableError) as exc:
        raise ArtifactMismatchError(f"{folder} needs plugin {saved['name']} {saved['version']} (pip install "
                                    f"{saved['distribution']}=={saved['version']}) to run on {dev}: {exc}") from exc
    assert rec.manifest is not None
    if saved["name"] not in (rec.name, rec.alias):  # an older release wrote its alias
        raise ArtifactMismatchError(f"{folder} was written by plugin {saved['name']}, but {dev} is served by plugin {rec.name}; "
                                    f"install {saved['distribution']}=={saved['version']} (or allow it: NEURENIX_BACKENDS), or export the model again")
    if rec.manifest.version != saved["version"]:
        raise ArtifactMismatchError(
            f"{folder} was written by plugin {saved['name']} {saved['version']}; {rec.manifest.version} is installed. Export the model "
            f"again with this version (neurenix export), or install {saved['distribution']}=={saved['version']}"
        )
    backend, _, _ = default_backend(dev)
    return rec, backend


def _rebuild(manifest: dict[str, Any], folder: Path, dev: Any, rec: Any, backend: Any) -> Compiled:
    from neurenix_core.graph.compile.compiler import Compiled
    from neurenix_core.graph.ir import CompileOptions

    where = f"compiled artifact {folder}"
    try:
        stored = json.loads((folder / "graph.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ArtifactFormatError(f"{where}: graph.json is not readable JSON ({exc}); {_REMEDY}") from exc
    if not isinstance(stored, dict) or not isinstance(stored.get("graph"), dict):
        raise ArtifactFormatError(f"{where}: graph.json holds no model graph; {_REMEDY}")
    dec = decoder(read_arrays(folder / "graph.arrays"), where, manifest["format_version"])
    graph, plan = read_graph(stored, dec)
    extra = dict(dec.value(manifest["extra"])) if manifest.get("extra") else {}
    compiled = Compiled(graph, dev, backend, rec, manifest["precision"], plan, extra, outputs=manifest["outputs"])
    if manifest.get("buckets") is not None:
        _restore_buckets(compiled, manifest["buckets"], dec)
    options = CompileOptions(device=dev, precision=manifest["precision"], quantization=plan, extra=compiled.extra)
    compiled._restored = _load_parts(manifest, folder, backend, rec, options)
    compiled._host_pins = dict(manifest.get("host_parts", {}))
    for entry in manifest["shapes"]:
        compiled._runner_for(tuple(tuple(int(d) for d in s) for s in entry["shapes"]))
    unused = set(compiled._restored) - set(compiled._parts)
    if unused:
        raise ArtifactMismatchError(
            f"{folder}: plugin {rec.name} placed the model differently than when it was saved ({len(unused)} saved part(s) unused, "
            f"e.g. {min(unused)!r}); export the model again with this installation"
        )
    if isinstance(manifest.get("verification"), str):
        compiled._verification = SavedVerification(manifest["verification"])
    compiled.artifact = folder  # type: ignore[attr-defined]
    return compiled


def _restore_buckets(compiled: Compiled, stored: list[Any], dec: Any) -> None:
    from neurenix_core.graph.compile.buckets import parse_buckets

    buckets, pad_values = (dec.value(v) for v in stored)
    compiled._buckets = parse_buckets(buckets, compiled.graph, pad_values)
    compiled._bucket_args = (buckets, pad_values)
    compiled.extra["shape_buckets"] = True


def _load_parts(manifest: dict[str, Any], folder: Path, backend: Any, rec: Any, options: Any) -> dict[str, Any]:
    from neurenix_core.plugins.state import registry

    reg = registry()
    parts = manifest.get("parts", [])
    if parts and not reg.implements(rec, "neurenix_load_compiled"):
        raise ArtifactUnsupportedError(f"{folder}: plugin {rec.name} does not implement neurenix_load_compiled (plugin API 1.3); "
                                       f"install the version that wrote it ({manifest['plugin']['version']})")
    restored = {}
    for part in parts:
        try:
            restored[part["key"]] = reg.call(rec, "neurenix_load_compiled", backend=backend, directory=folder / part["dir"], meta=part["meta"],
                                             options=options)
        except CompilationError as exc:
            raise ArtifactFormatError(f"{folder}: plugin {rec.name} could not load part {part['dir']}: {exc}; {_REMEDY}") from exc
    return restored
