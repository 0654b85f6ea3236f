"""Seed-style public API, served as ``neurenix.hardware.acme`` through the manifest's ``exports``."""

from __future__ import annotations

from typing import Any

__all__ = ["AcmeRuntime", "is_acme_available"]


def is_acme_available() -> bool:
    """True when an ``acme`` device is usable (real hardware, or NEURENIX_EMULATE=acme)."""
    import neurenix_core as nx

    return bool(nx.devices("acme"))


class AcmeRuntime:
    """The ACME backend from the user's side."""

    def __init__(self, device: str = "acme:0") -> None:
        self.device = device

    def initialize(self) -> bool:
        """Start the backend; a missing device raises BackendUnavailableError naming the driver."""
        import neurenix_core as nx

        nx.backend(self.device)
        return True

    def get_device_count(self) -> int:
        import neurenix_core as nx

        return int(nx.backend(self.device).device_count())

    def get_device_info(self, index: int = 0) -> dict[str, Any]:
        import neurenix_core as nx

        return dict(nx.backend(self.device).device_info(index))
