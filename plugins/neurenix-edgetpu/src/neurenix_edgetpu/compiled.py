"""Compiled models: a written or loaded .tflite run by LiteRT.

Models written here take and return float32 NCHW arrays and quantize/transpose inside the model,
so a call is a shape check, ``set_tensor``, ``invoke`` and ``get_tensor`` (the one allocation is
the result). Models with int8 or NHWC edges (``io="int8"``, or loaded .tflite files) quantize
and transpose on the host in one vectorised step per edge.

``compile_graph`` is what the ``neurenix_compile`` hook calls; ``load_model`` turns any existing
.tflite file (compiled for the Edge TPU or not) into the same kind of object.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.contract import CompiledModel, CompileOptions, Device, Graph, call_runtime, check_outputs
from neurenix_core.errors import ModelFormatError, ShapeError
from neurenix_edgetpu.compile_cache import cached_tflite
from neurenix_edgetpu.compiler import CompilerReport, run_edgetpu_compiler
from neurenix_edgetpu.edges import Edge
from neurenix_edgetpu.lower_s2d import choose_stem
from neurenix_edgetpu.lowering import lower
from neurenix_edgetpu.verify import ModelInfo, inspect_model

if TYPE_CHECKING:
    from neurenix_edgetpu.backend import LiteRTBackend

__all__ = ["EdgeTPUModel", "compile_graph", "load_model"]


class EdgeTPUModel(CompiledModel):
    """A .tflite model on one edgetpu device.

    Called directly: NumPy arrays in, NumPy arrays out, as LiteRT does; any other input follows
    the compiled-model rule (``neurenix_core.graph.compile.inputs``: host data such as cpu tensors is
    copied in, edgetpu tensors are used, other accelerators are refused) and gives edgetpu
    tensors, or NumPy arrays when ``result="host"``. Through ``nx.compile`` the core feeds ``_run``.
    """

    def __init__(self, backend: LiteRTBackend, data: bytes, info: ModelInfo, inputs: Sequence[Edge], outputs: Sequence[Edge],
                 *, index: int, source: str, num_threads: int | None = None, report: CompilerReport | None = None,
                 kernels: str | None = None, result: str = "device", stem: str | None = None) -> None:
        self.backend = backend
        #: "space_to_depth" or "plain" for a model the writer wrote (lower_s2d.py); None when loaded.
        self.stem = stem
        self.device = Device("edgetpu", index)
        self.result = check_outputs(result, self.device)
        self.tflite_bytes = data
        self.info = info
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.index = index
        self.source = source
        self.compiler_report = report
        self.runner = backend.interpreter(data, index, info, source=source, num_threads=num_threads, kernels=kernels)
        # Edges with nothing for the host to do: the call passes the array straight to LiteRT.
        self._plain = len(self.inputs) == 1 and len(self.outputs) == 1 and _plain(self.inputs[0]) and _plain(self.outputs[0])
        self._shape0 = self.inputs[0].shape if self.inputs else ()
        self.summary = self._summary()

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(e.shape for e in self.inputs)

    @property
    def emulated(self) -> bool:
        return self.backend.emulated

    def _summary(self) -> str:
        ops = Counter(self.info.ops)
        kinds = "int8" if "QUANTIZE" in ops or any(e.dtype == np.int8 for e in self.inputs) else str(self.inputs[0].dtype) if self.inputs else "?"
        where = (
            f"edgetpu:{self.index} emulated on the host CPU by LiteRT (no Edge TPU delegate)"
            if self.emulated else f"edgetpu:{self.index} ({self.backend.device_names[self.index]}) through {self.backend.library}"
        )
        ops_text = ", ".join(f"{name} x{n}" for name, n in sorted(ops.items()))
        mapped = f"; edgetpu_compiler mapped {self.compiler_report.mapped}/{self.compiler_report.total} ops" if self.compiler_report else ""
        cfg = self.runner.config
        kernels = f"; kernels {cfg['kernels']}, delegate took {cfg['delegated_ops']} ops (LiteRT kernels: {cfg['cpu_kernel_ops']})"
        stem = "; space-to-depth stem" if self.stem == "space_to_depth" else ""
        return f"LiteRT {kinds} TFLite model {self.source}: {len(self.info.ops)} ops ({ops_text}) on {where}{mapped}{kernels}{stem}"

    @property
    def config(self) -> dict[str, Any]:
        """The effective configuration: runtime, threads, kernels, ops the delegate runs, and for
        written models the stem the writer chose ("space_to_depth" or "plain")."""
        cfg = dict(self.runner.config)
        if self.stem is not None:
            cfg["stem"] = self.stem
        return cfg

    def save(self, path: str | Path) -> Path:
        """Write the .tflite file (feed it to edgetpu_compiler or another LiteRT runtime)."""
        target = Path(path)
        target.write_bytes(self.tflite_bytes)
        return target

    def __call__(self, *inputs: Any) -> Any:
        return call_runtime(self._run, inputs, self.device, self.backend, self.result)

    def fast_entry(self, shape: tuple[int, ...]) -> Any:
        """For ``nx.compile``'s per-call path (float32 NumPy arrays of exactly ``shape``, checked
        by the core): the interpreter call itself, when the edges leave the host nothing to do."""
        return self.runner.invoke1 if self._plain and shape == self._shape0 else None

    def _run(self, *inputs: Any) -> Any:
        if self._plain and len(inputs) == 1:
            x = inputs[0]
            # The batch-1 hot path: LiteRT copies the array in and the result out; set_tensor
            # itself rejects a wrong dtype, so only the shape (our error message) is checked here.
            if type(x) is np.ndarray and x.shape == self._shape0 and x.dtype == np.float32:
                return self.runner.invoke1(x)
            return self.runner.invoke1(self._in(self.inputs[0], x))
        if len(inputs) != len(self.inputs):
            raise ShapeError(f"{self.source} on edgetpu:{self.index} takes {len(self.inputs)} input(s), got {len(inputs)}")
        if len(inputs) == 1:  # the batch-1 hot path: no list building
            results = self.runner.invoke(self._in(self.inputs[0], inputs[0]))
            return self._out(self.outputs[0], results[0]) if len(results) == 1 else tuple(map(self._out, self.outputs, results))
        arrays = [self._in(edge, x) for edge, x in zip(self.inputs, inputs)]
        results = [self._out(edge, r) for edge, r in zip(self.outputs, self.runner.invoke(*arrays))]
        return results[0] if len(results) == 1 else tuple(results)

    def _in(self, edge: Edge, x: Any) -> np.ndarray:
        if type(x) is not np.ndarray:
            x = np.asarray(x)
        if x.shape != edge.shape:
            raise ShapeError(
                f"{self.source} on edgetpu:{self.index}: input {edge.name!r} has shape {tuple(x.shape)}, the model was compiled "
                f"for {edge.shape}; the Edge TPU runs static shapes (compile again for the new shape)"
            )
        if edge.nhwc:
            x = x.transpose(0, 2, 3, 1)
        if edge.quant is not None and x.dtype != edge.dtype:
            return edge.quantizer.quantize(x)  # type: ignore[union-attr]
        return x if x.dtype == edge.dtype and x.flags.c_contiguous else np.ascontiguousarray(x, dtype=edge.dtype)

    def _out(self, edge: Edge, y: np.ndarray) -> np.ndarray:
        if edge.quant is not None:
            y = edge.quantizer.dequantize(y)  # type: ignore[union-attr]
        return np.ascontiguousarray(y.transpose(0, 3, 1, 2)) if edge.nhwc else y


def _plain(edge: Edge) -> bool:
    return not edge.nhwc and edge.quant is None and edge.dtype == np.float32


# ---------------------------------------------------------------------- whole-model compile
_cache: dict[tuple[Any, ...], tuple[bytes, ModelInfo, tuple[Edge, ...], tuple[Edge, ...], CompilerReport | None, str | None, str]] = {}
_cache_lock = threading.Lock()


def compile_graph(backend: LiteRTBackend, graph: Graph, options: CompileOptions) -> EdgeTPUModel:
    """Lower ``graph`` to TFLite (int8 when a quantization plan is given, else float32) and load it.

    Options (``extra``): ``io``, ``kernels``, ``num_threads`` and ``stem`` ("auto", the default:
    the space-to-depth stem where XNNPACK runs int8 on AMX tiles; "space_to_depth"; "plain").
    """
    plan = options.quantization
    precision = options.precision or ("int8" if plan is not None else "fp32")
    index = int(getattr(options.device, "index", 0))
    extra = dict(options.extra)
    io = extra.get("io", "float")
    stem = choose_stem(extra.get("stem", "auto"), precision=precision, kernels=extra.get("kernels") or "xnnpack",
                       emulated=backend.emulated, amx=backend.xnnpack_amx)
    key = (graph.fingerprint(), precision, (None if plan is None else plan.fingerprint()), io, stem)
    with _cache_lock:
        entry = _cache.get(key)
    if entry is None:
        def write() -> tuple[bytes, tuple[Edge, ...], tuple[Edge, ...], CompilerReport | None, str | None]:
            lowered = lower(graph, precision, plan, io=io, stem=stem)
            report = run_edgetpu_compiler(lowered.data) if precision == "int8" else None
            data = report.compiled if report is not None and report.compiled is not None and not backend.emulated else lowered.data
            ins = tuple(Edge(s.name, s.shape, s.nhwc, s.dtype, s.quant) for s in lowered.inputs)
            outs = tuple(Edge(s.name, s.shape, s.nhwc, s.dtype, s.quant) for s in lowered.outputs)
            return data, ins, outs, report, lowered.stem

        # The persistent cache (other processes' compiles) behind this process's own.
        result = cached_tflite(backend, graph, precision, plan, io, stem, write)
        data, ins, outs, report, written_stem = result.value
        info = inspect_model(data, source="the written model")
        entry = (data, info, ins, outs, report, written_stem, result.line() if result.state != "off" else "")
        with _cache_lock:
            _cache[key] = entry
    data, info, ins, outs, report, applied, cache_line = entry
    name = f"<{precision} graph {key[0][:8]}>"
    model = EdgeTPUModel(backend, data, info, ins, outs, index=index, source=name, num_threads=extra.get("num_threads"), report=report,
                         kernels=extra.get("kernels"), stem=applied)
    if cache_line:
        model.summary += f"; {cache_line}"
    return model




# ---------------------------------------------------------------------- existing .tflite files
def load_model(source: str | Path | bytes, backend: LiteRTBackend, *, index: int = 0, num_threads: int | None = None,
               kernels: str | None = None, result: str = "device") -> EdgeTPUModel:
    """Load an existing .tflite (edgetpu_compiler output or not); edges quantize/dequantize automatically."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = bytes(source), "<tflite bytes>"
    else:
        path = Path(source)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ModelFormatError(f"cannot read TFLite model {path}: {exc}") from exc
        name = str(path)
    info = inspect_model(data, source=name)
    ins = tuple(Edge(t.name, t.shape, False, t.dtype, t.quant if t.dtype in (np.int8, np.uint8) else None) for t in info.inputs)
    outs = tuple(Edge(t.name, t.shape, False, t.dtype, t.quant if t.dtype in (np.int8, np.uint8) else None) for t in info.outputs)
    return EdgeTPUModel(backend, data, info, ins, outs, index=index, source=name, num_threads=num_threads, kernels=kernels, result=result)
