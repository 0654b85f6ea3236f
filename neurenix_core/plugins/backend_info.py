"""One row of ``nx.backends()`` / ``neurenix doctor``: a frozen snapshot of a plugin record.

Its own module because it is a dataclass (code generation costs import time) and is only needed
when somebody asks for the report, never at ``import neurenix_core``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neurenix_core.plugins.records import Failure, Status

__all__ = ["BackendInfo", "emulation_note"]


def emulation_note(capabilities: Any) -> str:
    """What runs an emulated plugin's devices, from its manifest (``extra["runtime"]``):
    "emulated: OpenVINO on the host CPU"."""
    extra = capabilities.get("extra") if isinstance(capabilities, Mapping) else getattr(capabilities, "extra", None)
    runtime = extra.get("runtime") if isinstance(extra, Mapping) else None
    return f"emulated: {runtime} on the host CPU" if isinstance(runtime, str) and runtime else "emulated: its software stack on the host CPU"


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """One row of ``nx.backends()`` / ``neurenix doctor``."""

    name: str
    distribution: str | None
    version: str | None
    status: Status
    device_types: tuple[str, ...]
    device_count: int
    emulated: bool
    band: str | None
    priority: int | None
    reason: str
    install_hint: str
    failure: Failure | None
    capabilities: dict[str, Any] | None
    #: What the plugin did that works but deserves attention (it changed os.environ / sys.path).
    warnings: tuple[str, ...] = ()
    #: Other names it answers to wherever a plugin name is taken (``npu-openvino`` for ``npu``).
    aliases: tuple[str, ...] = ()

    @property
    def emulation(self) -> str:
        """"emulated: OpenVINO on the host CPU" for an emulated plugin, else ""."""
        return emulation_note(self.capabilities) if self.emulated else ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status.value,
            "device_types": list(self.device_types),
            "device_count": self.device_count,
            "emulated": self.emulated,
            "band": self.band,
            "priority": self.priority,
            "reason": self.reason,
            "install_hint": self.install_hint,
            "failure": None if self.failure is None else {"phase": self.failure.phase, "cause": self.failure.cause},
            "capabilities": self.capabilities,
            "warnings": list(self.warnings),
            "aliases": list(self.aliases),
        }
