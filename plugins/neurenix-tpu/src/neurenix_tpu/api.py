"""The seed-style TPU API (``from neurenix.hardware.tpu import TPUBackend, is_tpu_available``).

A thin layer over the core: availability comes from the registry's probe (no JAX import), and
``TPUBackend.initialize()`` starts the real backend, raising ``BackendUnavailableError`` with the
missing piece (libtpu, device nodes) when there is no TPU.
"""

from __future__ import annotations

from typing import Any

import neurenix_core as nx
from neurenix_core.contract import Device, DeviceBackend, DeviceType, device_available

__all__ = ["Device", "DeviceType", "TPUBackend", "is_tpu_available", "is_tpu_emulated", "tpu_device_count"]


def _record() -> Any:
    from neurenix_core.contract import registry

    return registry().record_named("tpu")


def is_tpu_available(*, allow_emulated: bool = True) -> bool:
    """True when a ``tpu`` device can be used (emulated ones count unless ``allow_emulated=False``)."""
    return device_available("tpu", allow_emulated=allow_emulated)


def is_tpu_emulated() -> bool:
    """True when ``tpu`` devices run on JAX's CPU platform (NEURENIX_EMULATE=tpu)."""
    record = _record()
    return record is not None and record.usable and record.emulated


def tpu_device_count() -> int:
    return len(nx.devices("tpu")) if is_tpu_available() else 0


class TPUBackend(DeviceBackend):
    """The TPU runtime as the seed documents it: ``TPUBackend().initialize()`` then use devices.

    ``initialize()`` returns True once JAX found the devices; it raises
    ``BackendUnavailableError`` (never returns False silently) naming what is missing.
    The lifecycle (initialize, backend, emulated, get_device_count/get_device_info) is the shared
    seed shape of :class:`neurenix_core.plugins.seed_api.DeviceBackend`.
    """

    device_type = "tpu"
    backend_class = "neurenix_tpu.backend:JaxTPUBackend"

    # Short spellings kept from this plugin's first API; device_info gives chip version,
    # TensorCores, HBM, bytes in use (ours and the runtime's) and emulation.
    device_count = DeviceBackend.get_device_count
    device_info = DeviceBackend.get_device_info

    def devices(self) -> list[Device]:
        return list(self.backend.devices())

    def memory_stats(self, index: int = 0) -> Any:
        return nx.memory_stats(Device(DeviceType.TPU, index))

    def set_memory_limit(self, nbytes: int | None, index: int = 0) -> None:
        nx.set_memory_limit(Device(DeviceType.TPU, index), nbytes)

    def compile_graph(
        self, graph: Any, *, index: int = 0, precision: str | None = None,
        batch_buckets: tuple[int, ...] = (), data_parallel: bool | int = False,
    ) -> Any:
        """Compile a ``neurenix_core.graph.ir.Graph`` (concrete input shapes) for ``tpu:index``.

        ``nx.compile(model, device="tpu:0", ...)`` is the usual entry; this serves graphs built
        by hand and tools that already hold a Graph.
        """
        from neurenix_core.contract import CompileOptions
        from neurenix_tpu.compiled import compile_graph

        extra = {"batch_buckets": tuple(batch_buckets), "data_parallel": data_parallel}
        options = CompileOptions(device=Device(DeviceType.TPU, index), precision=precision, extra=extra)
        return compile_graph(self.backend, graph, options)

    def __repr__(self) -> str:
        state = "not initialized" if self._backend is None else f"{self.device_count()} device(s){' (emulated)' if self.emulated else ''}"
        return f"TPUBackend({state})"
