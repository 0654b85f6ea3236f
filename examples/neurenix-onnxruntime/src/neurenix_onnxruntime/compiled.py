"""The ``neurenix_compile`` hook: lower a core Graph, open one ORT session, run it per call.

Sessions are cached per (graph fingerprint, precision, provider, threads), so compiling the same
model twice (or for a second batch size that maps to the same graph) costs one lowering.
``CompileOptions.extra`` may carry ``provider`` (an explicit execution provider: refused with the
list of those this ONNX Runtime has when it is missing) and ``threads`` (ORT intra-op threads).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import helper

from neurenix_core.contract import CompiledModel, CompileOptions, Graph
from neurenix_core.errors import CompilationError, UnsupportedDTypeError
from neurenix_onnxruntime.backend import ORTBackend, ensure_provider
from neurenix_onnxruntime.eager import OPSET, REJECTED_BY_ORT
from neurenix_onnxruntime.lowering import Lowered, lower

__all__ = ["ORTCompiledModel", "compile_graph", "session_config", "session_for"]

_CACHE: dict[tuple[Any, ...], ORTCompiledModel] = {}
_CACHE_SIZE = 32


class ORTCompiledModel(CompiledModel):
    """An ONNX model in an ``InferenceSession``; ``_run`` takes and returns host NumPy arrays."""

    def __init__(self, lowered: Lowered, session: Any, providers: list[str], threads: int) -> None:
        self.lowered = lowered
        self.session = session
        self.providers = providers
        self._feed_names = lowered.input_names
        # Float inputs are float32 at the boundary; token ids (int64) and masks (bool) keep theirs.
        self._feed_dtypes = [np.dtype(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)) for i in lowered.model.graph.input]
        self._out_names = lowered.output_names
        self._single = len(self._out_names) == 1
        self._feed0 = self._feed_names[0] if len(self._feed_names) == 1 else None
        ran = session.get_providers()[0]
        self.summary = (
            f"ONNX Runtime {ort.__version__} {ran}, {lowered.precision}, {lowered.layers} graph nodes -> "
            f"{len(lowered.model.graph.node)} ONNX nodes (opset {OPSET}), intra-op threads: {threads or 'onnxruntime default'}"
            + ("; float16 inside, float32 at the inputs/outputs" if lowered.precision == "fp16" else "")
            + ("; QDQ int8 model from the core's QuantizationPlan" if lowered.precision == "int8" else "")
        )

    @property
    def onnx_model(self) -> Any:
        """The ``onnx.ModelProto`` this model runs (save it with ``onnx.save`` to inspect it)."""
        return self.lowered.model

    @property
    def config(self) -> dict[str, Any]:
        """The session's effective configuration, read back from ONNX Runtime."""
        return session_config(self.session)

    def _run(self, *inputs: Any) -> Any:
        if self._feed0 is not None and len(inputs) == 1 and inputs[0].dtype == self._feed_dtypes[0]:
            outs = self.session.run(self._out_names, {self._feed0: inputs[0]})
            return outs[0] if self._single else tuple(outs)
        for name, x, want in zip(self._feed_names, inputs, self._feed_dtypes):
            if x.dtype != want:
                raise UnsupportedDTypeError(
                    f"compiled model on ort expects input {name!r} as {want}, got {x.dtype}; cast it with nx.astype first"
                )
        outs = self.session.run(self._out_names, dict(zip(self._feed_names, inputs)))
        return outs[0] if self._single else tuple(outs)


def session_config(session: Any) -> dict[str, Any]:
    """Providers and the options that decide speed, as the session reports them."""
    opts = session.get_session_options()
    return {
        "onnxruntime": ort.__version__, "providers": ",".join(session.get_providers()),
        "intra_op_threads": opts.intra_op_num_threads, "inter_op_threads": opts.inter_op_num_threads,
        "graph_optimization_level": str(opts.graph_optimization_level).rsplit(".", 1)[-1],
        "execution_mode": str(opts.execution_mode).rsplit(".", 1)[-1],
        "intra_op_allow_spinning": _config_entry(opts, "session.intra_op.allow_spinning"),
    }


def _config_entry(opts: Any, key: str) -> str:
    # ORT raises for an entry nobody set; unset means its default (worker threads spin between runs).
    try:
        return str(opts.get_session_config_entry(key))
    except RuntimeError:
        return "default"


def session_for(model: Any, backend: ORTBackend, providers: list[str], threads: int) -> Any:
    """An InferenceSession for ``model``; ORT's refusal becomes a CompilationError naming it."""
    try:
        return ort.InferenceSession(model.SerializeToString(), backend.session_options(threads), providers=providers)
    except REJECTED_BY_ORT as exc:
        raise CompilationError(
            f"ONNX Runtime ({providers[0]}) rejected the lowered model: {exc}. The layer is named in ORT's message; "
            "run that model eagerly, pick another precision, or compile for another device."
        ) from exc


def _providers(backend: ORTBackend, options: CompileOptions) -> list[str]:
    requested = options.extra.get("provider")
    if requested:
        wanted = ensure_provider(str(requested), backend.available_providers)
        return [wanted] if wanted == "CPUExecutionProvider" else [wanted, "CPUExecutionProvider"]
    index = getattr(options.device, "index", 0)
    return backend.providers_for(int(index))


def compile_graph(backend: Any, graph: Graph, options: CompileOptions) -> ORTCompiledModel:
    if not isinstance(backend, ORTBackend):
        raise CompilationError(f"neurenix-onnxruntime's compile hook was given a {type(backend).__name__}, not its ORTBackend")
    precision = options.precision or "fp32"
    providers = _providers(backend, options)
    threads = int(options.extra.get("threads", backend.threads))
    plan = options.quantization
    key = (graph.fingerprint(), precision, ("-" if plan is None else plan.fingerprint()), tuple(providers), threads)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    lowered = lower(graph, precision, plan)
    compiled = ORTCompiledModel(lowered, session_for(lowered.model, backend, providers, threads), providers, threads)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))  # oldest first: a session holds the model's weights
    _CACHE[key] = compiled
    return compiled


