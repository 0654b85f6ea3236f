"""Write compiled artifacts, and read and check their manifest (loading: ``deploy.load``): a folder with ``artifact.json`` (the manifest), the model
graph (``graph.json`` + ``graph.arrays``) and one folder per plugin-compiled part
(``parts/<i>/``) holding the plugin's native artifact (neurenix_save_compiled, API 1.3).

Loading rebuilds the same :class:`~neurenix_core.graph.compile.compiler.Compiled`: placement, summary
and calls follow the code path of the original compile, with each plugin part loaded from its
artifact instead of compiled, and each cpu:0 part run on the runtime that ran it when saved.
The graph is there for that placement, for the cpu:0 segments and for input shapes that were
never compiled (those compile on first call, as before saving).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from neurenix_core.errors import (
    ArtifactFormatError,
    ArtifactUnsupportedError,
)
from neurenix_core.graph.compile.artifact_arrays import write_arrays
from neurenix_core.graph.compile.artifact_codec import encoder
from neurenix_core.graph.ir.serialize import graph_to_json, plan_to_json
from neurenix_core.io.atomic import replace_folder, settled
from neurenix_core.io.digest import file_sha256

if TYPE_CHECKING:
    from neurenix_core.graph.compile.lowering import Lowering

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "member", "read_manifest", "save_compiled"]

#: Version of the folder layout and manifest; a reader refuses a newer one (ArtifactFormatError).
#: 2: the graph is stored as model files store theirs (neurenix_core.io); format 1 still loads.
FORMAT_VERSION: Final = 2
MANIFEST_NAME: Final = "artifact.json"
_KIND: Final = "neurenix-compiled-model"
_REMEDY: Final = "write it again with compiled.save(path) or `neurenix export`"


# ------------------------------------------------------------------------------------ save
def save_compiled(compiled: Lowering, path: str | os.PathLike[str]) -> Path:
    """``Compiled.save``: the folder ``path``, replaced as a whole when it holds an artifact already;
    a full or read-only disk is a SaveError naming the path and the remedy."""
    target = Path(path)
    where = f"{compiled.device} (plugin {compiled._record.name})"
    if compiled._values is not None:
        raise ArtifactUnsupportedError(f"{where}: this model is built per value of its inputs {list(compiled._values.value_inputs)}, "
                                       "so it has no one compiled form to save; give those inputs as initializers in the model")
    _compile_static(compiled, where)
    # The whole folder is written under a staging name and swapped in by one rename (docs/saving.md):
    # a kill at any point leaves the previous artifact or the new one, never none and never a mix.
    return replace_folder(target, lambda staging: _write(compiled, staging, where), what="the compiled artifact", check=_check_target)


def _compile_static(compiled: Lowering, where: str) -> None:
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


def _write(compiled: Lowering, folder: Path, where: str) -> None:
    from neurenix_core.plugins.manifest import NEURENIX_API_VERSION

    rec = compiled._record
    enc = encoder()
    graph = graph_to_json(compiled.graph, enc)
    plan = plan_to_json(compiled.plan, enc)
    # Options and buckets may hold arrays (pad values): they go to graph.arrays with the weights.
    extra = enc.value(_python_scalars(_plain_extra(compiled.extra)), "option", "compile option")
    buckets = None if compiled._bucket_args is None else [enc.value(_python_scalars(v), f"buckets.{i}", "buckets")
                                                          for i, v in enumerate(compiled._bucket_args)]
    parts = _write_parts(compiled, folder, where)
    (folder / "graph.json").write_text(json.dumps({"graph": graph, "plan": plan}))
    write_arrays(folder / "graph.arrays", enc.arrays)
    runtimes = sorted({str(p["meta"]["runtime"]) for p in parts if "runtime" in p["meta"]} | set(compiled._host_parts.values()))
    assert rec.manifest is not None
    manifest = {
        "kind": _KIND, "format_version": FORMAT_VERSION, "neurenix_core": _core_version(),
        "device_type": str(compiled.device.type), "device": str(compiled.device),
        "emulated": bool(getattr(compiled._backend, "emulated", False)),
        "plugin": {"name": rec.name, "distribution": rec.manifest.distribution, "version": rec.manifest.version},
        "runtime": runtimes,
        "precision": compiled.precision, "outputs": compiled.outputs,
        "extra": extra,
        "inputs": [{"name": s.name, "shape": list(s.display_shape), "dtype": s.dtype, "dynamic": list(s.dynamic)} for s in compiled.graph.inputs],
        "input_rule": "host data is copied in; float inputs become the declared float dtype, integer inputs keep theirs (neurenix_core.graph.compile.inputs, docs/models.md)",
        "output_names": list(compiled.graph.outputs), "buckets": buckets,
        "shapes": [{"shapes": [list(s) for s in shapes], "summary": compiled._summaries.get(shapes, ""),
                    "placement": compiled._placements[shapes].line() if shapes in compiled._placements else None}
                   for shapes in compiled.compiled_shapes],
        "parts": parts, "host_parts": dict(compiled._host_parts),
        "verification": None if compiled._verification is None else compiled._verification.line(),
        "api_version": ".".join(map(str, NEURENIX_API_VERSION)),
    }
    manifest["checksums"] = {str(p.relative_to(folder)): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1))


def _core_version() -> str:
    from neurenix_core._version import __version__

    return __version__


def _python_scalars(value: Any) -> Any:
    """NumPy scalars in options (a pad value, a threshold) as the Python numbers users pass; graph
    attributes keep theirs (their dtype can matter), options are read as numbers."""
    import numpy as np

    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return type(value)(_python_scalars(v) for v in value)
    if isinstance(value, dict):
        return {k: _python_scalars(v) for k, v in value.items()}
    return value


def _plain_extra(extra: dict[str, Any]) -> dict[str, Any]:
    # shape_buckets is set by nx.compile itself for bucketed models, and set again when loading.
    return {k: v for k, v in extra.items() if k != "shape_buckets"}


def _write_parts(compiled: Lowering, folder: Path, where: str) -> list[dict[str, Any]]:
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


# ------------------------------------------------------------------------------------ load
def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The artifact's manifest, its format checked and every file checked against its checksum."""
    folder = settled(path)  # an interrupted save's backup (no-exchange filesystems) first
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
    _check_fields(manifest, file)
    _check_confined(manifest, folder, file)
    for name, digest in manifest["checksums"].items():
        member = folder / name
        if not member.is_file():
            raise ArtifactFormatError(f"{folder}: file {name} of the artifact is missing; {_REMEDY}")
        if file_sha256(member) != digest:
            raise ArtifactFormatError(f"{folder}: file {name} is corrupted (its checksum differs from the manifest's); {_REMEDY}")
    return manifest


#: Manifest fields the loader reads, and their JSON types (format 1).
_FIELDS: Final = {
    "device_type": str, "device": str, "plugin": dict, "precision": (str, type(None)), "outputs": str, "extra": dict,
    "shapes": list, "parts": list, "host_parts": dict, "checksums": dict,
}


def _check_fields(manifest: dict[str, Any], file: Path) -> None:
    for name, kind in _FIELDS.items():
        if not isinstance(manifest.get(name), kind):  # type: ignore[arg-type]
            raise ArtifactFormatError(f"{file}: field {name!r} is missing or malformed; {_REMEDY}")
    plugin = manifest["plugin"]
    if not all(isinstance(plugin.get(k), str) for k in ("name", "distribution", "version")):
        raise ArtifactFormatError(f"{file}: field 'plugin' needs name, distribution and version; {_REMEDY}")
    if not all(isinstance(p, dict) and isinstance(p.get("key"), str) and isinstance(p.get("dir"), str) and isinstance(p.get("meta"), dict)
               for p in manifest["parts"]):
        raise ArtifactFormatError(f"{file}: field 'parts' is malformed; {_REMEDY}")


def _check_confined(manifest: dict[str, Any], folder: Path, file: Path) -> None:
    """Every path the manifest names stays inside the artifact folder (a crafted manifest must not
    point a runtime at other files of the machine)."""
    root = folder.resolve()
    for name in [*manifest["checksums"], *(p["dir"] for p in manifest["parts"])]:
        if not (folder / name).resolve().is_relative_to(root):
            raise ArtifactFormatError(f"{file} names {name!r}, outside the artifact folder; {_REMEDY}")


def member(directory: Path, name: Any) -> Path:
    """``directory / name`` for a file name a plugin stored in its part's metadata, refused
    (ArtifactFormatError) when it is not a string or leads out of ``directory``."""
    path = directory / str(name)
    if not isinstance(name, str) or not path.resolve().is_relative_to(directory.resolve()):
        raise ArtifactFormatError(f"{directory}: the part's metadata names {name!r}, not a file of the part; {_REMEDY}")
    return path
