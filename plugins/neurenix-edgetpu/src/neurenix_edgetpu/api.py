"""The seed-style Edge TPU API, served by the facade as ``neurenix.hardware.edgetpu``::

    from neurenix.hardware.edgetpu import EdgeTPUBackend, is_edgetpu_available

    edgetpu = EdgeTPUBackend()
    edgetpu.initialize()                   # BackendUnavailableError naming the missing piece
    c = edgetpu.matmul(a, b)               # a cached single-op TFLite model on edgetpu:0
    fast = edgetpu.optimize_model(model, quantize=True, precision="int8", calibration=batches)
    tfl = edgetpu.load_model("mobilenet_edgetpu.tflite")

Everything goes through the core (device resolution, memory accounting, fallback policy,
calibration); this module adds the Edge-TPU-specific entry points and imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.contract import CompileOptions, DeviceBackend, Graph, check_outputs, device_available
from neurenix_core.errors import QuantizationError, ShapeError

if TYPE_CHECKING:
    from neurenix_core.contract import Tensor
    from neurenix_edgetpu.backend import LiteRTBackend
    from neurenix_edgetpu.compiled import EdgeTPUModel

__all__ = ["PRECISIONS", "EdgeTPUBackend", "is_edgetpu_available", "list_edge_tpus"]

PRECISIONS = ("int8", "fp32")


def is_edgetpu_available(*, allow_emulated: bool = True) -> bool:
    """True when an edgetpu device can be used (an emulated one counts unless ``allow_emulated=False``)."""
    return device_available("edgetpu", allow_emulated=allow_emulated)


def list_edge_tpus() -> list[dict[str, Any]]:
    """One dict per Coral device (``edgetpu:i``, its libedgetpu name, emulated or not)."""
    import neurenix_core as nx

    devices = nx.devices("edgetpu")
    if not devices:
        return []
    be = nx.backend(devices[0])
    return [be.device_info(d.index) for d in devices]


class EdgeTPUBackend(DeviceBackend):
    """A Coral Edge TPU (through LiteRT and libedgetpu) as the seed documents describe it."""

    device_type = "edgetpu"
    backend_class = "neurenix_edgetpu.backend:LiteRTBackend"
    backend: LiteRTBackend

    def matmul(self, a: Any, b: Any) -> Tensor:
        """``a @ b`` on this device (inputs on the host or the CPU are copied there explicitly)."""
        import neurenix_core as nx

        return nx.matmul(nx.asarray(a, device=self.device), nx.asarray(b, device=self.device))

    def optimize_model(
        self,
        model: Any,
        *,
        quantize: bool = True,
        precision: str = "int8",
        calibration: Iterable[Any] | None = None,
        input_shape: tuple[int, ...] | None = None,
        num_threads: int | None = None,
        outputs: str = "device",
        stem: str = "auto",
    ) -> EdgeTPUModel:
        """Compile ``model`` (an nx.nn Module or a Graph) into a TFLite model for this device.

        int8 (the only precision the Edge TPU executes) needs ``calibration``: batches of
        representative inputs; the core computes the quantization plan from them. The model
        takes NumPy arrays (NumPy out, as LiteRT) or any other input under the compiled-model
        rule (cpu tensors copied in; edgetpu tensors, or NumPy with ``outputs="host"``, out).
        ``stem`` is the compile option of that name (docs/edgetpu.md, space-to-depth stem).
        """
        from neurenix_edgetpu.compiled import compile_graph

        check_outputs(outputs, self.device)

        precision = precision if quantize else "fp32"
        if precision not in PRECISIONS:
            raise QuantizationError(f"{self.device}: precision must be one of {PRECISIONS}, got {precision!r}")
        batches = None if calibration is None else [np.asarray(getattr(b, "numpy", lambda b=b: b)()) for b in calibration]
        graph = model if isinstance(model, Graph) else model.to_graph()
        shape = input_shape or (tuple(batches[0].shape) if batches else None) or graph.inputs[0].shape
        if shape is None or any(d is None for d in shape):
            raise ShapeError(f"{self.device}: pass input_shape=... or calibration batches; the Edge TPU compiles static shapes")
        graph = graph.with_input_shapes(tuple(shape))
        plan = None
        if precision == "int8":
            if not batches:
                raise QuantizationError(f"{self.device}: int8 needs calibration=[batch, ...] of representative inputs")
            from neurenix_core.contract import calibrate

            plan = calibrate(graph, batches)
        options = CompileOptions(device=self.device, precision=precision, quantization=plan, extra={"num_threads": num_threads, "stem": stem})
        compiled = compile_graph(self.backend, graph, options)
        compiled.result = outputs
        return compiled

    def load_model(self, path: str | Path | bytes, *, num_threads: int | None = None, outputs: str = "device") -> EdgeTPUModel:
        """Load an existing .tflite (edgetpu_compiler output needs a real Coral device); inputs
        and ``outputs`` as for :meth:`optimize_model`."""
        from neurenix_edgetpu.compiled import load_model

        return load_model(path, self.backend, index=self.device.index, num_threads=num_threads, result=outputs)
