"""Write and read compiled artifacts: a folder with ``artifact.json`` (the manifest), the model
graph (``graph.json`` + ``graph.arrays``) and one folder per plugin-compiled part
(``parts/<i>/``) holding the plugin's native artifact (neurenix_save_compiled, API 1.3).

Loading rebuilds the same :class:`~neurenix_core.graph.compiler.Compiled`: placement, summary
and calls follow the code path of the original compile, with each plugin part loaded from its
artifact instead of compiled, and each cpu:0 part run on the runtime that ran it when saved.
The graph is there for that placement, for the cpu:0 segments and for input shapes that were
never compiled (those compile on first call, as before saving).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from neurenix_core.deploy.arrays import read_arrays, write_arrays
from neurenix_core.deploy.codec import Encoder, decode_value, graph_from_json, graph_to_json, plan_from_json, plan_to_json
from neurenix_core.errors import (
    ArtifactFormatError,
    ArtifactMismatchError,
    ArtifactUnsupportedError,
    BackendUnavailableError,
    CompilationError,
    DeviceNotFoundError,
)

if TYPE_CHECKING:
    from neurenix_core.device import DeviceLike
    from neurenix_core.graph.compiler import Compiled

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "load_compiled", "read_manifest", "save_compiled"]

#: Version of the folder layout and manifest; a reader refuses a newer one (ArtifactFormatError).
FORMAT_VERSION: Final = 1
MANIFEST_NAME: Final = "artifact.json"
_KIND: Final = "neurenix-compiled-model"
_REMEDY: Final = "write it again with compiled.save(path) or `neurenix export`"


# ------------------------------------------------------------------------------------ save
def save_compiled(compiled: Compiled, path: str | os.PathLike[str]) -> Path:
    """``Compiled.save``: the folder ``path`` (replaced when it holds an artifact already)."""
    target = Path(path)
    where = f"{compiled.device} (plugin {compiled._record.name})"
    if compiled._values is not None:
        raise ArtifactUnsupportedError(f"{where}: this model is built per value of its inputs {list(compiled._values.value_inputs)}, "
                                       "so it has no one compiled form to save; give those inputs as initializers in the model")
    _compile_static(compiled, where)
    _check_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _write(compiled, staging, where)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _compile_static(compiled: Compiled, where: str) -> None:
    """A model not called yet is compiled for its static input shapes; a dynamic one must be
    called once per shape to deploy (or given shapes through ``neurenix export --shape``)."""
    if compiled.compiled_shapes:
        return
    shapes = tuple(tuple(s.shape) for s in compiled.graph.inputs)
    if compiled.graph.dynamic or compiled._buckets is not None or not all(shapes):
        raise ArtifactUnsupportedError(
            f"{where}: nothing is compiled yet and the input shapes are dynamic {[s.display_shape for s in compiled.graph.inputs]}; "
            "call the compiled model once with each input shape to deploy (or pass --shape to neurenix export), then save"
        )
    compiled.placement  # compiles for the static shapes  # noqa: B018


def _check_target(target: Path) -> None:
    if target.is_file() or (target.is_dir() and any(target.iterdir()) and not (target / MANIFEST_NAME).is_file()):
        raise ArtifactUnsupportedError(f"{target} exists and is not a compiled artifact; choose an empty or new folder")


def _write(compiled: Compiled, folder: Path, where: str) -> None:
    from neurenix_core import __version__
    from neurenix_core.plugins.manifest import NEURENIX_API_VERSION

    rec = compiled._record
    enc = Encoder()
    graph = graph_to_json(compiled.graph, enc)
    plan = None if compiled.plan is None else plan_to_json(compiled.plan, enc)
    parts = _write_parts(compiled, folder, where)
    (folder / "graph.json").write_text(json.dumps({"graph": graph, "plan": plan}))
    write_arrays(folder / "graph.arrays", enc.arrays)
    runtimes = sorted({str(p["meta"]["runtime"]) for p in parts if "runtime" in p["meta"]} | set(compiled._host_parts.values()))
    buckets = None if compiled._bucket_args is None else [enc.value(v, "buckets") for v in compiled._bucket_args]
    assert rec.manifest is not None
    manifest = {
        "kind": _KIND, "format_version": FORMAT_VERSION, "neurenix_core": __version__,
        "device_type": str(compiled.device.type), "device": str(compiled.device),
        "emulated": bool(getattr(compiled._backend, "emulated", False)),
        "plugin": {"name": rec.name, "distribution": rec.manifest.distribution, "version": rec.manifest.version},
        "runtime": runtimes,
        "precision": compiled.precision, "outputs": compiled.outputs,
        "extra": Encoder().value(_plain_extra(compiled.extra), "compile option"),
        "inputs": [{"name": s.name, "shape": list(s.display_shape), "dtype": s.dtype, "dynamic": list(s.dynamic)} for s in compiled.graph.inputs],
        "input_rule": "host data is copied in; float inputs become the declared float dtype, integer inputs keep theirs (docs/compile.md)",
        "output_names": list(compiled.graph.outputs), "buckets": buckets,
        "shapes": [{"shapes": [list(s) for s in shapes], "summary": compiled._summaries.get(shapes, ""),
                    "placement": compiled._placements[shapes].line() if shapes in compiled._placements else None}
                   for shapes in compiled.compiled_shapes],
        "parts": parts, "host_parts": dict(compiled._host_parts),
        "api_version": ".".join(map(str, NEURENIX_API_VERSION)),
    }
    manifest["checksums"] = {str(p.relative_to(folder)): _sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))


def _plain_extra(extra: dict[str, Any]) -> dict[str, Any]:
    # shape_buckets is set by nx.compile itself for bucketed models, and set again when loading.
    return {k: v for k, v in extra.items() if k != "shape_buckets"}


def _write_parts(compiled: Compiled, folder: Path, where: str) -> list[dict[str, Any]]:
    from neurenix_core.plugins.state import registry

    reg, rec = registry(), compiled._record
    if compiled._parts and not reg.implements(rec, "neurenix_save_compiled"):
        raise ArtifactUnsupportedError(
            f"{where}: plugin {rec.name} does not implement neurenix_save_compiled (plugin API 1.3), so its compiled models cannot be "
            f"saved; upgrade {rec.manifest.distribution if rec.manifest else rec.name} to a version that does, or compile for 'cpu'"
        )
    parts = []
    for i, (key, native) in enumerate(compiled._parts.items()):
        directory = folder / "parts" / str(i)
        directory.mkdir(parents=True)
        meta = reg.call(rec, "neurenix_save_compiled", backend=compiled._backend, model=native, directory=directory)
        try:
            json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise ArtifactUnsupportedError(f"{where}: plugin {rec.name}'s neurenix_save_compiled returned metadata that is not JSON ({exc})") from exc
        parts.append({"key": key, "dir": f"parts/{i}", "meta": meta})
    return parts


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------ load
def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The artifact's manifest, its format checked and every file checked against its checksum."""
    folder = Path(path)
    file = folder / MANIFEST_NAME
    if not file.is_file():
        raise ArtifactFormatError(f"{folder} is not a compiled artifact (no {MANIFEST_NAME}); {_REMEDY}")
    try:
        manifest = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ArtifactFormatError(f"{file} is not readable JSON ({exc}); {_REMEDY}") from exc
    if not isinstance(manifest, dict) or manifest.get("kind") != _KIND or not isinstance(manifest.get("format_version"), int):
        raise ArtifactFormatError(f"{file} is not a neurenix compiled-artifact manifest; {_REMEDY}")
    if manifest["format_version"] > FORMAT_VERSION:
        raise ArtifactFormatError(
            f"{folder} has artifact format {manifest['format_version']}, written by neurenix-core {manifest.get('neurenix_core')}; "
            f"this neurenix-core reads format {FORMAT_VERSION} and older: upgrade neurenix-core, or export the model again with this one"
        )
    for name, digest in dict(manifest.get("checksums", {})).items():
        member = folder / name
        if not member.is_file():
            raise ArtifactFormatError(f"{folder}: file {name} of the artifact is missing; {_REMEDY}")
        if _sha256(member) != digest:
            raise ArtifactFormatError(f"{folder}: file {name} is corrupted (its checksum differs from the manifest's); {_REMEDY}")
    return manifest


def load_compiled(path: str | os.PathLike[str], device: DeviceLike | None = None) -> Compiled:
    """``nx.load_compiled``: the compiled model saved at ``path``, on ``device`` (default: the
    device type it was saved for, index 0). Needs the core and the saving plugin (same version)."""
    from neurenix_core.device import Device, as_device

    folder = Path(path)
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
    if rec.name != saved["name"]:
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
    from neurenix_core.graph.compiler import Compiled
    from neurenix_core.graph.ir import CompileOptions

    where = f"compiled artifact {folder}"
    stored = json.loads((folder / "graph.json").read_text())
    arrays = read_arrays(folder / "graph.arrays")
    graph = graph_from_json(stored["graph"], arrays, where)
    plan = None if stored.get("plan") is None else plan_from_json(stored["plan"], arrays, where)
    extra = dict(decode_value(manifest.get("extra") or {"d": []}, {}))
    compiled = Compiled(graph, dev, backend, rec, manifest["precision"], plan, extra, outputs=manifest["outputs"])
    if manifest.get("buckets") is not None:
        _restore_buckets(compiled, manifest["buckets"])
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
    compiled.artifact = folder  # type: ignore[attr-defined]
    return compiled


def _restore_buckets(compiled: Compiled, stored: list[Any]) -> None:
    from neurenix_core.graph.buckets import parse_buckets

    buckets, pad_values = (decode_value(v, {}) for v in stored)
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
