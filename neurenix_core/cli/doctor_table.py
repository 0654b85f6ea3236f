"""The ``neurenix doctor`` backends table, laid out for the width it is printed at.

Seven columns need ~160 characters before the reasons fold into fragments; on a narrower
terminal (or ``COLUMNS=80``) the table has four: the plugin with its distribution and version
under it, the status, the device count, and the reason with the install hint under it. Every
row is the same data either way; only the arrangement changes.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["WIDE", "backends_table", "is_third_party"]

#: From this many columns on, every field has its own column.
WIDE: Final = 140

STYLE: Final = {
    "selected": "bold green",
    "available": "green",
    "emulated": "cyan",
    "unavailable": "yellow",
    "denied": "magenta",
    "failed": "bold red",
}


def is_third_party(backend: dict[str, Any]) -> bool:
    """A plugin this repository does not ship (discovery already refused impostors of our names)."""
    from neurenix_core.plugins.names import RESERVED, normalize

    owner = RESERVED.get(backend["name"])
    return owner is None or owner[0] != normalize(backend["distribution"])


def _status(b: dict[str, Any]) -> str:
    from rich.markup import escape

    status = b["status"] + (" (failed at " + b["failure"]["phase"] + ")" if b["failure"] else "")
    status += f", {len(b['warnings'])} warning(s)" if b["warnings"] else ""
    return f"[{STYLE[b['status']]}]{escape(status)}[/]"


def _name(b: dict[str, Any]) -> str:
    from rich.markup import escape

    # A plugin from outside this repository (the onnxruntime example, a vendor's) says so, so a
    # reader does not look for it in the README's table of our plugins.
    return escape(b["name"]) + (" [dim](third-party)[/]" if is_third_party(b) else "")


def backends_table(data: dict[str, Any], width: int) -> Any:
    """A rich Table of ``data["backends"]`` (the ``neurenix.doctor/1`` document) for ``width`` columns."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"neurenix backends (API {data['api_version']})", show_lines=width < WIDE)
    # Cells hold plugin text (already free of control characters, see plugins/sanitize.py);
    # escaping keeps a reason such as "[link=...]" from being read as rich markup.
    if width >= WIDE:
        for col in ("plugin", "distribution", "version", "status", "devices", "reason", "install"):
            table.add_column(col, overflow="fold")
        for b in data["backends"]:
            table.add_row(_name(b), escape(b["distribution"] or "-"), escape(b["version"] or "-"), _status(b),
                          str(b["device_count"]), escape(b["reason"]), escape(b["install_hint"]))
        return table
    # The plugin column wraps "neurenix-npu-openvino 0.1.0" after the name: the reason needs the room.
    table.add_column("plugin", overflow="fold", max_width=21)
    table.add_column("status", overflow="fold")
    table.add_column("dev", justify="right")
    table.add_column("reason / install", overflow="fold")
    for b in data["backends"]:
        package = f"{escape(b['distribution'] or '-')} {escape(b['version'] or '-')}"
        table.add_row(f"{_name(b)}\n[dim]{package}[/]", _status(b), str(b["device_count"]),
                      f"{escape(b['reason'])}\n[dim]install: {escape(b['install_hint'])}[/]")
    return table
