"""Stateful step models kept across processes: a saved model folder generates without PyTorch.

``CausalLM.from_pretrained(folder)`` on cpu:0 (``cache="state"``) asks the host runtime to write
the stateful model it compiles (``HostRuntime.compile_stateful(..., folder=)``, API 1.8) into an
entry here; a later process finds the entry by the folder's contents and has the runtime compile
it from there (``load_stateful``): no transformers model is built, no step is exported, torch is
not imported, and the weights are in memory only as the runtime holds them (OpenVINO: the mapped
file and its packed copy, as OpenVINO GenAI holds an exported model).

The key hashes every input of the stored model: the SHA-256 of each file in the model folder (its
weights, its configuration and generation settings: a changed file is a new key), the weight
scheme, the step's format, the versions of neurenix, PyTorch and transformers that exported it,
and the runtime's plugin (name, version, requirements and source digest). The entry records the
key and the SHA-256 of every file the runtime wrote, checked on every load (read in blocks, not
mapped: the check adds no resident memory): an entry copied from another model, damaged or half
evicted is compiled again and replaced, with a warning naming why.

Layout: ``<compile cache>/runtime/generation/<key[:32]>/`` holding ``entry.json`` and the
runtime's files. Entries count against the compile cache's size limit
(``NEURENIX_COMPILE_CACHE_MAX_BYTES``) and go with ``nx cache clear``; one larger than the limit
is not kept (a warning names the setting). A new entry is written in a temporary folder and
renamed into place, so a reader sees a whole entry or none.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from neurenix_core.errors import ModelFormatError
from neurenix_core.io.digest import file_sha256
from neurenix_core.user_frame import user_stacklevel

if TYPE_CHECKING:
    from neurenix_core.graph.ir.host import HostOptions, HostRuntime
    from neurenix_core.graph.ir.host_state import StatefulModel

__all__ = ["FORMAT", "Stored", "entry_folder", "entry_key", "folder_digest", "load", "storing"]

FORMAT: Final = 1
_ENTRY: Final = "entry.json"
_REMEDY: Final = "the model is prepared again and the entry rewritten"


@dataclass(frozen=True, slots=True)
class Stored:
    """An entry's model, ready to run, and what the entry says of the model it came from."""

    model: StatefulModel
    meta: dict[str, Any]
    folder: Path


def folder_digest(folder: Path) -> dict[str, str]:
    """SHA-256 of each regular file directly in ``folder``, by name (its weights, configuration,
    generation settings and tokenizer files alike)."""
    return {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}  # is_file follows links (a hub snapshot's)


def entry_key(files: Mapping[str, str], quantize: str | None, runtime: HostRuntime) -> str:
    """The entry's key: every input that changes the stored model."""
    from importlib import metadata

    from neurenix_core._version import __version__
    from neurenix_core.generation.step_cache import FORMAT as STEP_FORMAT
    from neurenix_core.graph.compile.host_select import runtime_identity

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "-"

    doc = {"format": FORMAT, "step": STEP_FORMAT, "files": dict(files), "quantize": quantize, "neurenix": __version__,
           "torch": version("torch"), "transformers": version("transformers"), "runtime": runtime_identity(runtime.name)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def entry_folder(key: str) -> Path | None:
    """Where the entry of ``key`` lives (None when the compile cache is off or has no folder)."""
    from neurenix_core.graph.compile.cache import runtime_folder

    root = runtime_folder("generation")
    return None if root is None else root / key[:32]


def load(folder: Path, key: str, runtime: HostRuntime, options: HostOptions) -> Stored | None:
    """The entry at ``folder`` compiled by ``runtime``; None when there is none, or (with a
    warning naming why) when it belongs to another key, fails its checksums or cannot be read."""
    if not (folder / _ENTRY).is_file():
        return None
    try:
        meta = json.loads((folder / _ENTRY).read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT or meta.get("key") != key:
            raise ModelFormatError(f"it belongs to another model or version (key {str(meta.get('key', '?'))[:12]}, not {key[:12]})")
        for name, digest in meta["files"].items():
            if file_sha256(folder / name) != digest:
                raise ModelFormatError(f"{name} does not match its checksum")
        model = runtime.load_stateful(folder, options)
    except (ModelFormatError, OSError, KeyError, TypeError, ValueError, AttributeError) as exc:
        warnings.warn(f"stored step model {folder} not used ({exc}); {_REMEDY}", RuntimeWarning, stacklevel=user_stacklevel())
        return None
    for name in (_ENTRY, *meta["files"]):  # hits touch the entry's files: the size limit evicts the least recently used
        with contextlib.suppress(OSError):
            os.utime(folder / name)
    return Stored(model, meta, folder)


@contextlib.contextmanager
def storing(folder: Path, key: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """An empty temporary folder for the runtime to write the entry's files into, and the dict of
    facts to record beside them (the caller fills it for a model it keeps; left empty, nothing is
    stored); on a normal exit the entry is checksummed and renamed into ``folder`` (replacing an
    unusable one). Nothing is kept when the block raises, and only a
    warning is given where the entry cannot be kept: this process runs on, the next prepares again."""
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = folder.parent / f".tmp-{key[:32]}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    facts: dict[str, Any] = {}
    try:
        yield tmp, facts
        try:
            _finish(tmp, folder, key, facts)
        except OSError as exc:  # a full or read-only cache: this process runs on, the next prepares again
            warnings.warn(f"stored step model {folder} not written ({exc}); the next process prepares the model again",
                          RuntimeWarning, stacklevel=user_stacklevel())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _finish(tmp: Path, folder: Path, key: str, facts: dict[str, Any]) -> None:
    from neurenix_core.config import compile_cache_limit
    from neurenix_core.graph.compile.cache import evict

    files = folder_digest(tmp)
    if not files or not facts:
        return  # nothing written, or a model the caller did not keep (a refused one): no entry
    size = sum((tmp / name).stat().st_size for name in files)
    limit = compile_cache_limit()
    if size > limit:
        warnings.warn(f"stored step model not kept: {size / 2**20:.0f} MB is more than NEURENIX_COMPILE_CACHE_MAX_BYTES "
                      f"({limit / 2**20:.0f} MB); raise it to keep the model for the next process", RuntimeWarning, stacklevel=user_stacklevel())
        return
    (tmp / _ENTRY).write_text(json.dumps({"format": FORMAT, "key": key, "files": files, **facts}), encoding="utf-8")
    try:
        if folder.exists():  # an unusable entry (load() said why): replaced
            shutil.rmtree(folder)
        tmp.rename(folder)
    except OSError as exc:  # another process renamed its entry first, or a read-only cache
        if not (folder / _ENTRY).is_file():
            warnings.warn(f"stored step model {folder} not written ({exc}); the next process prepares the model again",
                          RuntimeWarning, stacklevel=user_stacklevel())
        return
    evict()  # as the compile cache does after each store
