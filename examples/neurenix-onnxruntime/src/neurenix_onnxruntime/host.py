"""ONNX Runtime's CPU execution provider as a host runtime for ``cpu:0`` (``runtime="onnxruntime"``).

A third-party plugin offers its runtime to the core the same way the first-party ones do
(``neurenix_core.graph.ir.host``, API 1.2): the graph is exported with this plugin's ONNX
exporter (``lowering.lower``, fp32) and run in an ``InferenceSession`` on
``CPUExecutionProvider`` with every graph optimization, ``intra_op_num_threads`` set from
``threads=`` (read back from the session). The device stays ``cpu:0``.

Static int8 models (API 1.5, ``quantized_precisions``): the core's plan is exported as a QDQ
model (``lowering._QDQExporter``, the one the ``ort`` device uses), which ONNX Runtime's graph
optimizer fuses into QLinearConv / QLinearMatMul / MatMulInteger kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.contract import Graph, HostModel, HostOptions, HostRuntime
from neurenix_core.errors import BackendUnavailableError, CompilationError

__all__ = ["ORTHostModel", "ORTHostRuntime"]

#: Weights of this many bytes or more reach the session from memory, not through the serialized
#: model: embedded, ONNX Runtime held two copies of each (measured: 131 MB per session for a 64 MB
#: weight, 64 MB from memory), plus the protobuf's and its serialization's while it was created.
_EXTERNAL_MIN_BYTES = 1 << 20


class ORTHostModel(HostModel):
    """One ONNX model in one CPU session; host arrays in, a tuple of host arrays out."""

    def __init__(self, session: Any, input_names: list[str], output_names: list[str], version: str, precision: str = "fp32") -> None:
        self.session = session
        self._inputs = input_names
        self._outputs = output_names
        opts = session.get_session_options()
        self.threads = int(opts.intra_op_num_threads) or None  # 0: ORT's default (one per physical core)
        what = "fp32" if precision == "fp32" else f"{precision} with the core's plan (QDQ, fused by ORT's optimizer)"
        self.summary = f"ONNX Runtime {version} CPUExecutionProvider on cpu:0, {what}, {self.threads or 'default'} intra-op thread(s)"

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        return tuple(self.session.run(self._outputs, dict(zip(self._inputs, inputs))))


class ORTHostRuntime(HostRuntime):
    """ONNX Runtime on the CPU, started once per process."""

    name = "onnxruntime"

    def __init__(self, graph_ops: tuple[str, ...], graph_dtypes: tuple[str, ...]) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            raise BackendUnavailableError(f"host runtime onnxruntime (plugin onnxruntime): {exc}; pip install onnxruntime") from exc
        if "CPUExecutionProvider" not in ort.get_available_providers():
            raise BackendUnavailableError(f"host runtime onnxruntime: ONNX Runtime {ort.__version__} has no CPUExecutionProvider")
        self.ort = ort
        self.version = str(ort.__version__)
        self.graph_ops = frozenset(graph_ops)
        self.graph_dtypes = frozenset(graph_dtypes)
        # int4 group-wise weights run on MatMulNBits (lowering._WeightExporter); int8 ones have no
        # fast CPU kernel there, so they are left to runtimes that do.
        self.weight_schemes = frozenset({"int4-weights"})
        self.quantized_precisions = frozenset({"int8"})  # the ort device's QDQ export (lowering._QDQExporter)

    def compile(self, graph: Graph, options: HostOptions) -> ORTHostModel:
        from neurenix_onnxruntime.compiled import REJECTED_BY_ORT
        from neurenix_onnxruntime.lowering import lower

        quantized = options.plan is not None and options.precision in self.quantized_precisions
        if options.precision != "fp32" and not quantized:
            raise CompilationError(f"host runtime onnxruntime compiles cpu:0 graphs in fp32, or int8 with the core's static plan; "
                                   f"not {options.precision!r}")
        if quantized:
            lowered = lower(graph, options.precision, options.plan)
        else:
            lowered = lower(graph, "fp32", external_min_bytes=_EXTERNAL_MIN_BYTES, weights=options.weights)
        opts = self.ort.SessionOptions()
        if lowered.external:  # weights from memory: ORT keeps one copy, the protobuf none
            names = list(lowered.external)
            opts.add_external_initializers(names, [self.ort.OrtValue.ortvalue_from_numpy(lowered.external[n]) for n in names])
        opts.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors only: ORT's warnings would go to the user's stderr
        if options.threads is not None:
            opts.intra_op_num_threads = int(options.threads)
            opts.inter_op_num_threads = 1
        data = lowered.model.SerializeToString()
        note = ""
        try:
            session = self.ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        except REJECTED_BY_ORT as exc:
            if not quantized or "QuantizeLinear" not in str(exc):
                raise CompilationError(f"host runtime onnxruntime rejected the cpu:0 graph: {exc}; pass runtime='auto' to use another") from exc
            # ONNX Runtime 1.32's extended optimizer rewrites a QDQ Gemm whose input is reshaped
            # (BERT's classifier) into a QuantizeLinear declaring int8 output with the plan's
            # uint8 zero point, and then refuses its own node. The basic level (constant folding,
            # QDQ node fusion into integer kernels) does not: used, and said in the summary.
            opts.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            session = self._session(data, opts, exc)
            note = f" (basic graph optimizations: the extended level rejected this QDQ model: {str(exc).splitlines()[0][:160]})"
        model = ORTHostModel(session, lowered.input_names, lowered.output_names, self.version, options.precision)
        model.summary += note
        return model

    def _session(self, data: bytes, opts: Any, first: Exception) -> Any:
        from neurenix_onnxruntime.compiled import REJECTED_BY_ORT

        try:
            return self.ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        except REJECTED_BY_ORT as exc:
            raise CompilationError(f"host runtime onnxruntime rejected the cpu:0 graph: {first}; at the basic optimization level: {exc}; "
                                   "pass runtime='auto' to use another") from exc
