"""Reading one entry point group without ``importlib.metadata``.

``importlib.metadata`` costs ~40 ms to import (it pulls in the email package) - a third of the
whole import budget of ``neurenix_core``. Discovery needs one group only, so this module reads the
``entry_points.txt`` of every ``*.dist-info`` / ``*.egg-info`` folder on ``sys.path`` directly,
with the same rules: ``sys.path`` order, and the first distribution of a (normalized) name wins.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Any, final

__all__ = [
    "Distribution",
    "EntryPoint",
    "FolderAnswer",
    "combine",
    "distribution_key",
    "entry_points",
    "folder_answer",
    "folder_entry_points",
]



@final
class EntryPoint:
    """One ``name = module[:attr]`` line of a distribution's entry_points.txt."""

    __slots__ = ("dist_name", "dist_version", "folder", "group", "name", "value")

    def __init__(
        self, name: str, value: str, group: str, dist_name: str | None, dist_version: str | None, folder: str | None = None
    ) -> None:
        self.name = name
        self.value = value
        self.group = group
        self.dist_name = dist_name
        self.dist_version = dist_version
        #: The ``*.dist-info`` / ``*.egg-info`` folder it was read from (None when made in code).
        self.folder = folder

    def load(self) -> Any:
        module_name, _, attr = self.value.partition(":")
        obj: Any = importlib.import_module(module_name.strip())
        for part in filter(None, attr.strip().split(".")):
            obj = getattr(obj, part)
        return obj

    def __repr__(self) -> str:
        return f"EntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r}, dist={self.dist_name!r})"


def entry_points(group: str, path: list[str] | None = None) -> list[EntryPoint]:
    """Entry points of ``group`` from every distribution on ``path`` (default ``sys.path``)."""
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for entry in sys.path if path is None else path:
        for folder in _metadata_dirs(entry or "."):
            key = distribution_key(os.path.basename(folder))
            if key in seen:
                continue
            seen.add(key)
            found.extend(_read_group(folder, group))
    return found


#: One distribution of a folder: its folder name, its ``distribution_key`` and its entry points of a group.
Distribution = tuple[str, str, list[EntryPoint]]
#: What ``combine`` needs of one ``sys.path`` folder: the keys of all its distributions in scan
#: order, and the entry points of those that are the first of their key in the folder (only they
#: can win), each with its key, in scan order.
FolderAnswer = tuple[list[str], list[tuple[str, list[EntryPoint]]]]


def folder_entry_points(entry: str, group: str) -> list[Distribution]:
    """Every distribution in one ``sys.path`` folder, in the order ``entry_points`` reads them
    (``combine`` picks the winners across folders)."""
    out: list[Distribution] = []
    for folder in _metadata_dirs(entry or "."):
        name = os.path.basename(folder)
        out.append((name, distribution_key(name), _read_group(folder, group)))
    return out


def folder_answer(distributions: list[Distribution]) -> FolderAnswer:
    """``combine``'s view of one folder's distributions (a later one of the same key never wins)."""
    keys: list[str] = []
    firsts: set[str] = set()
    eps: list[tuple[str, list[EntryPoint]]] = []
    for _, key, found in distributions:
        keys.append(key)
        if key not in firsts:
            firsts.add(key)
            if found:
                eps.append((key, found))
    return keys, eps


def combine(folders: Iterable[FolderAnswer]) -> list[EntryPoint]:
    """``entry_points`` from per-folder answers in ``sys.path`` order: the first distribution of a
    (normalized) name wins, whether or not it has the group."""
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for keys, eps in folders:
        for key, group_eps in eps:
            if key not in seen:
                found.extend(group_eps)
        seen.update(keys)  # one call per folder: a folder holds hundreds of distributions
    return found


def distribution_key(folder_name: str) -> str:
    """The normalized distribution name of a ``name-version.dist-info`` folder (first one wins)."""
    return _normalize(folder_name.rsplit(".", 1)[0].split("-")[0])


def _normalize(name: str) -> str:
    """``re.sub(r"[-_.]+", "_", name).lower()`` (PEP 503 names), without compiling a regex at import."""
    name = name.replace("-", "_").replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name.lower()


def _metadata_dirs(entry: str) -> list[str]:
    try:
        names = os.listdir(entry)
    except OSError:  # not a directory (a zip, a missing path): nothing installed there
        return []
    return [os.path.join(entry, n) for n in sorted(names) if n.endswith((".dist-info", ".egg-info"))]


def _read_group(folder: str, group: str) -> list[EntryPoint]:
    try:
        with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as fh:
            text = fh.read()
    except OSError:  # a distribution without entry points
        return []
    lines = _section(text, group)
    if not lines:
        return []
    name, version = _name_version(folder)
    out = []
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            out.append(EntryPoint(key.strip(), value.strip(), group, name, version, folder))
    return out


def _section(text: str, group: str) -> list[str]:
    lines: list[str] = []
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            inside = line[1:-1].strip() == group
            continue
        if inside:
            lines.append(line)
    return lines


def _name_version(folder: str) -> tuple[str | None, str | None]:
    meta = os.path.join(folder, "METADATA" if folder.endswith(".dist-info") else "PKG-INFO")
    name = version = None
    try:
        with open(meta, encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    break  # end of the header block
                if line.startswith("Name:"):
                    name = line[5:].strip()
                elif line.startswith("Version:"):
                    version = line[8:].strip()
    except OSError:
        return None, None
    return name, version
