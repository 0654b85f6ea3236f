"""A plugin's status and why it failed: values shared by the registry (which sets them) and the
report (which prints them), so that neither imports the other. Plain classes, no dataclass code
generation: this module loads at every ``import neurenix_core``.
"""

from __future__ import annotations

import enum

from neurenix_core.plugins.sanitize import CAUSE_LIMIT, NAME_LIMIT, clean

__all__ = ["Failure", "Status"]


class Status(str, enum.Enum):
    SELECTED = "selected"
    AVAILABLE = "available"
    EMULATED = "emulated"
    UNAVAILABLE = "unavailable"
    DENIED = "denied"
    FAILED = "failed"


class Failure:
    """Why a plugin was dropped: the phase (import, register, manifest, api, probe, backend) and cause."""

    __slots__ = ("cause", "phase")

    def __init__(self, phase: str, cause: str) -> None:
        # A cause usually quotes a plugin's exception text: bounded and printable (sanitize.py).
        self.phase = clean(phase, NAME_LIMIT)
        self.cause = clean(cause, CAUSE_LIMIT)

    def __repr__(self) -> str:
        return f"Failure(phase={self.phase!r}, cause={self.cause!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Failure) and (self.phase, self.cause) == (other.phase, other.cause)

    __hash__ = None  # type: ignore[assignment]
