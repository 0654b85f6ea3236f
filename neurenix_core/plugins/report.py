"""What ``nx.explain()`` and ``neurenix doctor`` say: a stable JSON document and its text form.

The JSON schema (``neurenix.doctor/1``) is documented in docs/cli.md; fields are only ever added.
"""

from __future__ import annotations

from typing import Any

from neurenix_core.errors import NeurenixError
from neurenix_core.plugins import state as _state
from neurenix_core.plugins.backend_info import BackendInfo
from neurenix_core.plugins.manifest import NEURENIX_API_VERSION

__all__ = ["SCHEMA", "BackendInfo", "backends", "doctor_data", "explain_text"]

SCHEMA = "neurenix.doctor/1"


def _default() -> tuple[str | None, str | None]:
    try:
        return str(_state.default_device()), None
    except NeurenixError as exc:
        return None, str(exc)


def backends() -> list[BackendInfo]:
    """Every discovered plugin, ranked usable ones first, with status, reason and failure."""
    reg = _state.registry()
    try:
        default = _state.default_device()
    except NeurenixError:
        default = None
    return reg.info(default)


def doctor_data() -> dict[str, Any]:
    reg = _state.registry()
    config, problems = _state.configuration()
    default, default_error = _default()
    rows = [b.as_dict() for b in backends()]
    return {
        "schema": SCHEMA,
        "api_version": ".".join(map(str, NEURENIX_API_VERSION)),
        "default_device": default,
        "default_device_error": default_error,
        "selection": "explicit" if not _state.is_auto() else "automatic",
        "devices": [{"device": str(d), "emulated": reg.is_emulated(d)} for d in reg.devices()],
        "backends": rows,
        "failures": [
            {"plugin": r["name"], "distribution": r["distribution"], **r["failure"]} for r in rows if r["failure"]
        ],
        "notes": list(reg.notes),
        "not_installed": _not_installed(reg),
        "environment": _env(),
        "configuration": [s.as_dict() for s in config.settings],
        "configuration_problems": [p.as_dict() for p in problems],
    }


def _not_installed(reg: Any) -> list[dict[str, str]]:
    """The first-party device types no installed plugin serves, with the install command: the main
    job leaves neurenix-cuda-tc out where there is no NVIDIA driver, and a table without a cuda row
    would not say that it exists."""
    from neurenix_core.plugins.registry import FIRST_PARTY_HINTS

    # A denied plugin (NEURENIX_BACKENDS=-cuda, autoload off) is installed though its manifest was
    # never read: its entry point is named after its device type.
    served = {t for r in reg.records if r.manifest is not None for t in r.manifest.device_types} | {r.name for r in reg.records}
    return [{"device_type": t, "install": hint} for t, hint in FIRST_PARTY_HINTS.items() if t not in served]


def _env() -> dict[str, str | None]:
    import os

    from neurenix_core.config import VARIABLES

    return {k: os.environ.get(k) for k in VARIABLES}


def explain_text() -> str:
    """Why the default device is what it is, and what every plugin is doing."""
    data = doctor_data()
    lines = [f"neurenix API {data['api_version']}"]
    if data["default_device"]:
        lines.append(f"default device: {data['default_device']} ({data['selection']} selection)")
    else:
        lines.append(f"default device: unavailable: {data['default_device_error']}")
    lines.append("ranking: dedicated accelerators > NPUs > edge devices > CPU; emulated devices are never chosen automatically")
    for b in data["backends"]:
        emu = " (emulated)" if b["emulated"] else ""
        lines.append(f"  {b['name']:<16} {b['status']:<11}{emu} devices={b['device_count']} band={b['band']} - {b['reason']}")
        lines += [f"  {'':<16} warning: {w}" for w in b["warnings"]]
    lines += [f"note: {n}" for n in data["notes"]]
    return "\n".join(lines)
