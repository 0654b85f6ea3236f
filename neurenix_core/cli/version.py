"""``neurenix --version``: the core's version and every installed plugin's, without importing any.

Versions are read from the installed distributions' metadata (the ``neurenix.backends`` entry
points and their dist-info), so the answer needs no discovery, no probe and no framework import:
it is what a bug report should start with, and it works where a plugin is broken.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import metadata
from typing import Any, NamedTuple

__all__ = ["PluginVersion", "VersionAction", "plugin_versions", "version_text"]

_CORE = "neurenix-core"


class PluginVersion(NamedTuple):
    name: str
    distribution: str
    version: str
    first_party: bool


def _core_version() -> str:
    try:
        return metadata.version(_CORE)
    except metadata.PackageNotFoundError:  # a source tree on sys.path without an install
        return "unknown (not installed: pip install -e . from the repository)"


def plugin_versions() -> list[PluginVersion]:
    """One row per ``neurenix.backends`` entry point, sorted: this repository's plugins first."""
    from neurenix_core.plugins.names import is_own

    rows: list[PluginVersion] = []
    for ep in metadata.entry_points(group="neurenix.backends"):
        dist = ep.dist
        dist_name = dist.metadata["Name"] if dist is not None else "-"
        version = dist.version if dist is not None else "-"
        rows.append(PluginVersion(ep.name, dist_name, version, is_own(ep.name, dist_name, ep.value)))
    rows.sort(key=lambda r: (not r.first_party, r.name))
    return rows


def version_text() -> str:
    """The text ``neurenix --version`` prints."""
    lines = [f"neurenix-core {_core_version()}", "plugins:"]
    rows = plugin_versions()
    width = max((len(r.name) for r in rows), default=0)
    for r in rows:
        # A plugin outside this repository is labelled so a bug report shows who ships it.
        origin = "" if r.first_party else "  (third-party)"
        lines.append(f"  {r.name:<{width}}  {r.distribution} {r.version}{origin}")
    if not rows:
        lines.append("  none (the built-in cpu backend's entry point is missing: reinstall neurenix-core)")
    return "\n".join(lines)


class VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` and exit 0, like argparse's own version action."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        print(version_text())
        parser.exit(0)
