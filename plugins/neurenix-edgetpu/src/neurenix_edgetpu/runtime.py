"""LiteRT loading, the Edge TPU delegate, and a thread-safe interpreter wrapper.

Imported only by the backend factory (never at ``import neurenix_core``): it imports LiteRT.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

import numpy as np
from neurenix_core.errors import BackendUnavailableError, CompilationError

__all__ = ["load_litert", "Runner"]


def load_litert() -> ModuleType:
    """``ai_edge_litert.interpreter``, or ``tflite_runtime.interpreter`` where that one works."""
    try:
        from ai_edge_litert import interpreter

        return interpreter
    except ImportError as litert_error:
        try:
            from tflite_runtime import interpreter  # type: ignore[import-not-found, no-redef]
        except ImportError as exc:
            raise BackendUnavailableError(
                "edgetpu: neither ai_edge_litert nor tflite_runtime can be imported "
                f"(ai_edge_litert: {litert_error}); pip install ai-edge-litert"
            ) from exc
        return interpreter


class Runner:
    """One LiteRT interpreter with a lock: ``invoke`` is safe to call from several threads.

    A TFLite interpreter owns its input/output buffers, so set_tensor + invoke + get_tensor must
    not interleave between threads; one lock per interpreter (per model and device) keeps
    different devices and models running in parallel.
    """

    __slots__ = ("interpreter", "_lock", "_inputs", "_outputs", "input_details", "output_details")

    def __init__(self, interpreter: Any, source: str) -> None:
        try:
            interpreter.allocate_tensors()
        except RuntimeError as exc:
            raise CompilationError(f"{source}: LiteRT could not prepare the model: {exc}") from exc
        self.interpreter = interpreter
        self._lock = threading.Lock()
        self.input_details = interpreter.get_input_details()
        self.output_details = interpreter.get_output_details()
        self._inputs = [d["index"] for d in self.input_details]
        self._outputs = [d["index"] for d in self.output_details]

    def invoke(self, *arrays: np.ndarray) -> list[np.ndarray]:
        it = self.interpreter
        with self._lock:
            for index, array in zip(self._inputs, arrays):
                it.set_tensor(index, array)
            it.invoke()
            # get_tensor returns a copy, so results stay valid after the lock is released.
            return [it.get_tensor(i) for i in self._outputs]
