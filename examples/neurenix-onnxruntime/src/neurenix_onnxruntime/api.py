"""Seed-style public API, served as ``neurenix.hardware.ort`` through the manifest's ``exports``.

    from neurenix.hardware.ort import ORTRuntime, is_ort_available
    rt = ORTRuntime()
    rt.initialize()                      # raises BackendUnavailableError when ORT is missing
    fast = rt.optimize_model(model, example_input, precision="fp32")

Nothing here imports ONNX Runtime until :meth:`ORTRuntime.initialize` runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ORTRuntime", "available_providers", "is_ort_available"]


def is_ort_available() -> bool:
    """True when an ``ort`` device is usable (ONNX Runtime installed and the plugin loaded)."""
    import neurenix_core as nx

    return bool(nx.devices("ort"))


def available_providers() -> list[str]:
    """Execution providers of ``ort:0, ort:1 ...`` in device order (starts the backend)."""
    return list(ORTRuntime().initialize_backend().providers)


class ORTRuntime:
    """The ONNX Runtime backend from the user's side: devices, info, compiled models."""

    def __init__(self, device: str = "ort:0") -> None:
        self.device = device
        self._backend: Any = None

    def initialize_backend(self) -> Any:
        import neurenix_core as nx

        if self._backend is None:
            # An explicit request: a missing runtime raises BackendUnavailableError with the remedy.
            self._backend = nx.backend(self.device)
        return self._backend

    def initialize(self) -> bool:
        """Start ONNX Runtime; True on success (failures raise, they never return False)."""
        self.initialize_backend()
        return True

    def get_device_count(self) -> int:
        return int(self.initialize_backend().device_count())

    def get_device_info(self, index: int = 0) -> dict[str, Any]:
        return dict(self.initialize_backend().device_info(index))

    def optimize_model(self, model: Any, example_input: Any = None, *, precision: str | None = None, quantize: str | None = None,
                       calibration: Any = None, outputs: str = "device") -> Any:
        """``nx.compile`` of ``model`` on this device; with ``example_input`` it is compiled now.

        Host inputs (NumPy, cpu tensors) are copied in by each call; results are ort tensors, or
        NumPy arrays with ``outputs="host"`` (``neurenix_core.graph.compile.inputs``)."""
        import neurenix_core as nx

        compiled = nx.compile(model, device=self.device, precision=precision, quantize=quantize, calibration=calibration, outputs=outputs)
        if example_input is not None:
            compiled(example_input)
        return compiled
