"""The ``neurenix`` command: ``doctor`` and ``devices`` (plugins add more through subcommands here).

argparse for the commands, rich for tables; both imported only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main"]


def _console() -> Any:
    from rich.console import Console

    console = Console(soft_wrap=False)
    # Piped or logged output (CI, `| less`) would get rich's 80-column default; it gets 160 unless
    # COLUMNS says otherwise. A terminal's own width (or COLUMNS) is used as it is: the tables
    # rearrange themselves to fit it (cli/doctor_table.py).
    if console.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return console
    return Console(soft_wrap=False, width=160)


def cmd_doctor(args: argparse.Namespace) -> int:
    """A table of every discovered backend; ``--json`` for the stable schema."""
    from neurenix_core.plugins.report import doctor_data

    if args.retry is not None:
        failed = _retry(args.retry)
        if failed is not None:
            return failed
    data = doctor_data()
    if args.json:
        print(json.dumps(data, indent=2))
        return _doctor_status(data, args.strict)
    from rich.markup import escape

    from neurenix_core.cli.doctor_table import backends_table

    console = _console()
    table = backends_table(data, console.width)
    console.print(table)
    default = data["default_device"] or f"unavailable ({data['default_device_error']})"
    console.print(f"default device: [bold]{escape(default)}[/] ({data['selection']} selection)")
    for b in data["backends"]:
        for warning in b["warnings"]:
            console.print(f"[yellow]warning[/]: plugin {escape(b['name'])} ({escape(b['distribution'] or '-')}) {escape(warning)}")
    for note in data["notes"]:
        console.print(f"note: {escape(note)}")
    for missing in data["not_installed"]:
        console.print(f"not installed: {escape(missing['device_type'])} devices ({escape(missing['install'])})")
    _print_configuration(console, data)
    return _doctor_status(data, args.strict)


def _doctor_status(data: dict[str, Any], strict: bool) -> int:
    """2 for a configuration error; 1 when the default device asked for (``NEURENIX_DEVICE``) is
    unavailable, or with ``--strict`` when a plugin failed; else 0. A script checking a machine
    with ``neurenix doctor && ...`` must not go on when the device it set cannot be used."""
    if any(p["level"] == "error" for p in data["configuration_problems"]):
        return 2
    if data["default_device"] is None:
        return 1
    return 1 if data["failures"] and strict else 0


def _print_configuration(console: Any, data: dict[str, Any]) -> None:
    """The NEURENIX_* settings in effect (value, effective value, source) and their problems."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="configuration", show_lines=False)
    for col in ("variable", "value", "effective", "source"):
        table.add_column(col, overflow="fold", no_wrap=col == "variable")  # a variable's name stays whole
    for s in data["configuration"]:
        raw = "-" if s["value"] is None else repr(s["value"])
        table.add_row(escape(s["variable"]), escape(raw), escape(s["effective"]), s["source"])
    console.print(table)
    for p in data["configuration_problems"]:
        style = "bold red" if p["level"] == "error" else "yellow"
        console.print(f"[{style}]configuration {p['level']}[/]: {escape(p['message'])}")


def _retry(name: str) -> int | None:
    """Lift ``name``'s quarantine and try it again, first in a child interpreter.

    The plugin killed a process before; if it still does, it kills the child, whose journal puts
    it back in quarantine, and this command lives to say so. Returns an exit status when there
    is nothing to retry, else None (the doctor report follows, from a fresh discovery).
    """
    import signal
    import subprocess

    from neurenix_core.config import read_config
    from neurenix_core.plugins import state
    from neurenix_core.plugins.journal import lift, read_quarantine

    state_dir = read_config().state_dir
    quarantined = read_quarantine(state_dir)
    if name not in quarantined:  # an alias (names.alias_of: "onnxruntime" for "ort") names its plugin
        from neurenix_core.plugins.names import alias_of

        name = next((n for n, e in quarantined.items() if alias_of(n, e.distribution) == name), name)
    entry = lift(state_dir, name)
    if entry is None:
        held = ", ".join(sorted(read_quarantine(state_dir))) or "none"
        print(f"neurenix: plugin {name!r} is not quarantined (quarantined: {held}; state folder {state_dir})", file=sys.stderr)
        return 2
    print(f"neurenix: retrying {name} ({entry.distribution} {entry.version}) in a fresh interpreter...", file=sys.stderr)
    proc = subprocess.run([sys.executable, "-c", "import neurenix_core"], capture_output=True, text=True, check=False)
    # The child survives a plugin that still crashes when first-run protection tried it in a
    # grandchild (plugins/first_run.py): the quarantine list, not the exit status, tells.
    again = read_quarantine(state_dir).get(name)
    if proc.returncode != 0 or again is not None:
        how = f"{signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        how = again.status if again is not None and again.status else how
        print(f"neurenix: {name} still kills the process ({how}); it is quarantined again", file=sys.stderr)
    state.initialize()  # this process's registry was built while the plugin was quarantined
    return None


def cmd_devices(args: argparse.Namespace) -> int:
    """List available devices with their backend and whether they are emulated."""
    import neurenix_core as nx

    rows: list[dict[str, Any]] = []
    for dev in nx.devices():
        rows.append({"device": str(dev), "backend": dev.backend_name, "emulated": dev.emulated})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.table import Table

    table = Table(title="neurenix devices")
    for col in ("device", "backend", "emulated"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["device"], r["backend"], "yes" if r["emulated"] else "no")
    _console().print(table)
    return 0


def _parser() -> argparse.ArgumentParser:
    from neurenix_core.cli.version import VersionAction

    parser = argparse.ArgumentParser(prog="neurenix", description="neurenix: backends, devices and tools")
    parser.add_argument("--version", action=VersionAction, help="print the core's version and every installed plugin's, then exit")
    loud = parser.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", help="show everything neurenix logs (DEBUG up) on stderr")
    loud.add_argument("-q", "--quiet", action="store_true", help="show errors only: no notices, progress bars or warnings")
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="show every discovered backend and why it is (not) usable")
    doctor.add_argument("--json", action="store_true", help="print the neurenix.doctor/1 JSON document")
    doctor.add_argument("--strict", action="store_true", help="exit 1 when any plugin failed")
    doctor.add_argument(
        "--retry", metavar="NAME", help="lift the quarantine of a plugin that killed a process, try it in a fresh interpreter, then report"
    )
    doctor.set_defaults(func=cmd_doctor)
    devices = sub.add_parser("devices", help="list available devices")
    devices.add_argument(
        "--json", action="store_true", help='print a JSON list of {"device", "backend", "emulated"} objects (see docs/cli.md)'
    )
    devices.set_defaults(func=cmd_devices)
    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> list[Callable[[Any], None]]:
    """Subcommands from the core's own modules and from plugins' ``neurenix.cli`` entry points.

    Each entry point names a ``register(subparsers)`` function; it is loaded only when the
    ``neurenix`` command runs, never at ``import neurenix_core``. A broken one is reported on
    stderr and skipped, so one plugin cannot take the whole command down.
    """
    from importlib import metadata

    out: list[Callable[[Any], None]] = []
    for ep in metadata.entry_points(group="neurenix.cli"):
        try:
            out.append(ep.load())
        except Exception as exc:  # noqa: BLE001 - reported, the other commands stay usable
            print(f"neurenix: skipping subcommand {ep.name!r} from {ep.value}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from neurenix_core.cli.output import configured
    from neurenix_core.errors import NeurenixError

    with configured(verbose=args.verbose, quiet=args.quiet):
        try:
            if args.command != "doctor":  # the doctor shows configuration problems; others stop on them
                from neurenix_core.plugins.state import check_configuration

                check_configuration()
            return int(args.func(args))
        except NeurenixError as exc:
            print(f"neurenix: error: {exc}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    raise SystemExit(main())
