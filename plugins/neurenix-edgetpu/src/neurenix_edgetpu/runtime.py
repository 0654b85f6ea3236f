"""LiteRT loading, the Edge TPU delegate, and a thread-safe interpreter wrapper.

Imported only by the backend factory (never at ``import neurenix_core``): it imports LiteRT.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from neurenix_core.errors import BackendUnavailableError, CompilationError, ShapeError
from neurenix_edgetpu.amx import amx_state
from neurenix_edgetpu.native_log import native_stderr_to_logging

__all__ = ["KERNELS", "Runner", "delegation", "load_litert"]

#: neurenix's names for LiteRT's CPU kernel sets (``OpResolverType`` members).
KERNELS = {"xnnpack": "BUILTIN", "optimized": "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "reference": "BUILTIN_REF"}


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


def delegation(interpreter: Any) -> tuple[tuple[str, bool], ...]:
    """Each op of the loaded model and whether a delegate runs it (XNNPACK on the CPU, the Edge TPU).

    LiteRT appends one DELEGATE node per delegated partition; the ops it replaced are those
    between the partition's outputs and its inputs. An op left out ran on LiteRT's own kernels
    (for example int8 AVERAGE_POOL_2D, which XNNPACK has no QS8 kernel for).
    """
    details = interpreter._get_ops_details()  # the only per-node view LiteRT's Python API has
    ops = [d for d in details if d["op_name"] != "DELEGATE"]
    producer = {int(t): i for i, d in enumerate(ops) for t in d["outputs"]}
    taken: set[int] = set()
    for node in (d for d in details if d["op_name"] == "DELEGATE"):
        boundary = {int(t) for t in node["inputs"]}
        stack = [int(t) for t in node["outputs"]]
        while stack:
            t = stack.pop()
            i = producer.get(t)
            if i is None or i in taken or t in boundary:
                continue
            taken.add(i)
            stack.extend(int(x) for x in ops[i]["inputs"] if x >= 0)
    return tuple((d["op_name"], i in taken) for i, d in enumerate(ops))


def _has_direct_calls(interpreter: Any) -> bool:
    """Whether the interpreter exposes the bindings its public methods forward to (LiteRT and
    tflite_runtime both keep them as ``_interpreter``; another build may not)."""
    binding = getattr(interpreter, "_interpreter", None)
    return all(callable(getattr(binding, name, None)) for name in ("SetTensor", "Invoke", "GetTensor"))


class Runner:
    """One LiteRT interpreter with a lock: ``invoke`` is safe to call from several threads.

    A TFLite interpreter owns its input/output buffers, so set_tensor + invoke + get_tensor must
    not interleave between threads; one lock per interpreter (per model and device) keeps
    different devices and models running in parallel. ``config`` is the configuration it runs
    with, as LiteRT reports it (kernels, which ops the delegate took) plus the thread count
    it was created with (LiteRT has no getter for it).
    """

    __slots__ = (
        "_in0",
        "_inputs",
        "_lock",
        "_out0",
        "_outputs",
        "_where",
        "config",
        "input_details",
        "interpreter",
        "invoke1",
        "output_details",
    )

    def __init__(self, interpreter: Any, source: str, config: dict[str, Any] | None = None) -> None:
        self._where = source
        try:
            with native_stderr_to_logging():  # LiteRT's "INFO: Created ... XNNPACK delegate" line goes to logging
                interpreter.allocate_tensors()
        except RuntimeError as exc:
            raise CompilationError(f"{source}: LiteRT could not prepare the model: {exc}") from exc
        self.interpreter = interpreter
        self._lock = threading.Lock()
        self.input_details = interpreter.get_input_details()
        self.output_details = interpreter.get_output_details()
        self._inputs = [d["index"] for d in self.input_details]
        self._outputs = [d["index"] for d in self.output_details]
        # A segment can have no outputs (a dead node the partitioner gave a segment: std's unused
        # squeeze) or no inputs; -1 is never read then (invoke1 needs one input and one output).
        self._in0 = self._inputs[0] if self._inputs else -1
        self._out0 = self._outputs[0] if self._outputs else -1
        self.config = dict(config or {})
        ops = delegation(interpreter)
        self.config["delegated_ops"] = f"{sum(1 for _, d in ops if d)}/{len(ops)}"
        self.config["cpu_kernel_ops"] = ",".join(sorted({name for name, d in ops if not d})) or "-"
        self.config["x86_amx"] = amx_state()  # after allocate_tensors: XNNPACK has asked for AMX by now
        #: One input, one output: the hot path of a compiled model (no lists).
        self.invoke1 = self._invoke1_direct if _has_direct_calls(interpreter) else self._invoke1_public

    def _invoke1_direct(self, array: np.ndarray) -> np.ndarray:
        # LiteRT's Python ``set_tensor``/``invoke``/``get_tensor`` forward to these bindings after
        # ``_ensure_safe``, a reference count check that guards ``tensor()`` views of internal
        # buffers; a Runner never creates such views, so the check has nothing to find here. The
        # binding is looked up per call (holding it would make the public methods' check fail).
        with self._lock:
            it = self.interpreter._interpreter
            try:
                it.SetTensor(self._in0, array)
            except ValueError as exc:
                self._retyped(it.SetTensor, array, exc)  # the usual path pays nothing for it
            it.Invoke()
            return it.GetTensor(self._out0, 0)

    def _invoke1_public(self, array: np.ndarray) -> np.ndarray:
        it = self.interpreter
        with self._lock:
            try:
                it.set_tensor(self._in0, array)
            except ValueError as exc:
                self._retyped(it.set_tensor, array, exc)
            it.invoke()
            return it.get_tensor(self._out0)

    def _retyped(self, set_tensor: Callable[[int, np.ndarray], None], array: np.ndarray, exc: ValueError) -> None:
        """After LiteRT refused ``array`` as input 0: set it again under NumPy's canonical type
        number (:func:`_tflite_typed`), or raise the refusal, typed."""
        same = _tflite_typed(array)
        if same is array:
            raise self._refused(exc) from exc
        try:
            set_tensor(self._in0, same)
        except ValueError as again:
            raise self._refused(again) from again

    def _refused(self, exc: ValueError) -> ShapeError:
        # Callers convert inputs first (EdgeTPUModel._in, nx.compile's checked fast path), so
        # this is a direct caller's array of the wrong dtype or shape: LiteRT's words, our type.
        return ShapeError(f"{self._where}: LiteRT refused the input ({exc}); pass a {self.input_details[0]['dtype'].__name__} "
                         f"array of shape {tuple(int(d) for d in self.input_details[0]['shape'])}")

    def invoke(self, *arrays: np.ndarray) -> list[np.ndarray]:
        it = self.interpreter
        with self._lock:
            for index, array in zip(self._inputs, arrays):
                it.set_tensor(index, _tflite_typed(array))
            it.invoke()
            # get_tensor returns a copy, so results stay valid after the lock is released.
            return [it.get_tensor(i) for i in self._outputs]


def _tflite_typed(array: np.ndarray) -> np.ndarray:
    """``array`` viewed with NumPy's canonical type for its dtype where its type number differs:
    an int64 array can be NumPy's ``longlong`` (ONNX Runtime returns those on Linux, where
    ``np.int64`` is ``long``), and LiteRT's binding maps type numbers, so it refuses it as NOTYPE
    although the dtype is int64."""
    dtype = array.dtype
    if dtype.kind not in "iu":
        return array
    canonical = np.dtype(dtype.str)
    return array if canonical.num == dtype.num else array.view(canonical)
