"""``nx.compile``: a model lowered whole for one device, compiled once per input shape.

The model is walked once into a :class:`~neurenix_core.graph.ir.Graph`. On the first call with a
new input shape the graph gets those shapes, shapes are checked layer by layer, and the
device's plugin lowers it through its ``neurenix_compile`` hook when its manifest declares
``capabilities.compiles_models``; otherwise (the CPU backend included) the graph runs eagerly
node by node through the device's op table. Quantization (int8/int16 static, or dynamic) is
computed here, once, by ``neurenix_core.graph.quantization``; backends only lower the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from neurenix_core.tensor import fallback
from neurenix_core.device import Device, DeviceLike
from neurenix_core.errors import (
    CompilationError, QuantizationError, ShapeError, UnsupportedOperationError,
)
from neurenix_core.graph.inputs import check_outputs, deliver_tensors, to_device_input
from neurenix_core.graph.ir import CompileOptions, Graph, QuantizationPlan
from neurenix_core.plugins.backend import CompiledModel
from neurenix_core.tensor.tensor import Tensor

__all__ = ["compile", "Compiled", "PRECISIONS"]

PRECISIONS = ("fp32", "fp16", "bf16", "tf32", "int8", "int16")
_QUANTIZE = (None, False, True, "int8", "int16", "dynamic")

#: Runs one compiled shape: backend-native input arrays in, Tensors on the device out.
Runner = Callable[..., tuple[Tensor, ...]]


def compile(  # noqa: A001 - the public name the seeds and DESIGN.md use
    model: Any,
    device: DeviceLike | None = None,
    precision: str | None = None,
    quantize: bool | str | QuantizationPlan | None = None,
    calibration: Iterable[Any] | None = None,
    *,
    calibration_method: str = "minmax",
    progress: bool = True,
    outputs: str = "device",
    **extra: Any,
) -> Compiled:
    """Compile ``model`` (a ``neurenix_core.nn`` Module or a Graph) for ``device``.

    ``precision``: one of PRECISIONS or None (the backend's default, stated in ``.summary``).
    ``quantize``: True / "int8" / "int16" (static: needs ``calibration`` batches), "dynamic"
    (int8 Linear weights), or a ready ``QuantizationPlan``. ``outputs``: "device" (Tensors on
    ``device``) or "host" (NumPy arrays); inputs follow ``neurenix_core.graph.inputs``.
    ``extra`` goes to the backend (``CompileOptions.extra``), e.g. ``optimize_for="performance"``.
    """
    from neurenix_core.plugins.state import registry
    from neurenix_core.tensor.placement import default_backend

    backend, dev, _ = default_backend(device)
    record = registry().plugin_for(dev)
    graph = _graph_of(model)
    precision, plan, graph = _quantization(graph, dev, precision, quantize, calibration, calibration_method, progress)
    return Compiled(graph, dev, backend, record, precision, plan, dict(extra), outputs=check_outputs(outputs, dev))


def _graph_of(model: Any) -> Graph:
    if isinstance(model, Graph):
        return model
    from neurenix_core.nn.module import Module

    if not isinstance(model, Module):
        raise CompilationError(
            f"nx.compile expects a neurenix_core.nn Module or a Graph, got {type(model).__name__}; "
            "import a PyTorch model first with nx.nn.from_torch(model)"
        )
    return model.to_graph()


def _quantization(graph: Graph, dev: Device, precision: str | None, quantize: Any, calibration: Iterable[Any] | None,
                  method: str, progress: bool) -> tuple[str | None, QuantizationPlan | None, Graph]:
    from neurenix_core.graph import quantization as Q

    if precision is not None and precision not in PRECISIONS:
        raise CompilationError(f"{dev}: precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if isinstance(quantize, QuantizationPlan):
        Q.check_plan(graph, quantize)
        return f"int{quantize.bits}", quantize, graph
    if quantize not in _QUANTIZE:
        raise QuantizationError(f"{dev}: quantize={quantize!r}; use True, 'int8', 'int16', 'dynamic' or a QuantizationPlan")
    if quantize == "dynamic":
        return "int8", Q.dynamic_plan(graph), graph
    wants_int = precision in ("int8", "int16")
    if quantize is False and wants_int:
        raise QuantizationError(f"{dev}: precision={precision!r} needs quantization; drop quantize=False")
    if not quantize and not wants_int:
        return precision, None, graph
    bits_name = quantize if isinstance(quantize, str) else (precision if wants_int else "int8")
    if precision is not None and precision != bits_name:
        raise QuantizationError(f"{dev}: quantize={quantize!r} conflicts with precision={precision!r}")
    if calibration is None:
        raise QuantizationError(
            f"{dev}: {bits_name} quantization needs calibration data: nx.compile(model, ..., quantize={quantize!r}, "
            "calibration=[batch1, batch2, ...]) with a few representative input batches (or quantize='dynamic')"
        )
    folded = Q.fold_batch_norm(graph)
    plan = Q.calibrate(folded, calibration, bits=8 if bits_name == "int8" else 16, method=method, progress=progress)
    return bits_name, plan, folded


class Compiled:
    """A compiled model: call it with Tensors on its device or host data (copied in; see
    ``neurenix_core.graph.inputs``); results are Tensors on its device, or NumPy arrays when
    compiled with ``outputs="host"``.

    Introspection: ``.device``, ``.precision``, ``.summary`` (what the backend did),
    ``.compiled_shapes`` (input shapes compiled so far), ``.graph``, ``.plan``, ``.native(shapes)``
    (the plugin's compiled model, e.g. to read its runtime configuration back).
    """

    def __init__(self, graph: Graph, device: Device, backend: Any, record: Any, precision: str | None,
                 plan: QuantizationPlan | None, extra: Mapping[str, Any], *, outputs: str = "device") -> None:
        self.graph = graph
        self.outputs = outputs
        self.device = device
        self.precision = precision
        self.plan = plan
        self.extra = dict(extra)
        self._backend = backend
        self._record = record
        self._runners: dict[tuple[tuple[int, ...], ...], Runner] = {}
        self._summaries: dict[tuple[tuple[int, ...], ...], str] = {}
        self._natives: dict[tuple[tuple[int, ...], ...], Any] = {}
        # One-input models compiled by a plugin: (placement, input shape, run) of the first shape.
        self._fast: tuple[Any, tuple[int, ...], Callable[[Any], Any]] | None = None
        self._eager: Any = None

    # ------------------------------------------------------------------ introspection
    @property
    def compiled_shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        return list(self._runners)

    @property
    def summary(self) -> str:
        if not self._summaries:
            return f"{self.device}: not compiled yet (compiles on the first call per input shape), {len(self.graph.nodes)} layers"
        return "; ".join(f"{shapes}: {text}" for shapes, text in self._summaries.items())

    def __repr__(self) -> str:
        return f"Compiled(device='{self.device}', precision={self.precision!r}, shapes={self.compiled_shapes})"

    def native(self, *shapes: tuple[int, ...]) -> Any:
        """The plugin's compiled model for these input shapes (the only one when none are given);
        None where the model runs eagerly or on the core's integer kernels."""
        key = tuple(tuple(int(d) for d in s) for s in shapes) if shapes else None
        if key is None:
            if len(self._runners) != 1:
                raise ShapeError(f"compiled model on {self.device} has {len(self._runners)} compiled shape(s); pass the input shapes")
            key = next(iter(self._runners))
        if key not in self._runners:
            raise ShapeError(f"compiled model on {self.device} was not compiled for {list(key)}; call it once with inputs of that shape")
        return self._natives.get(key)

    # ------------------------------------------------------------------ calling
    def __call__(self, *inputs: Any) -> Any:
        # The hot path of every compiled-model call: inputs become backend-native arrays directly
        # (no Tensor, registry or dtype-table round trip), and the runner for their shapes is one
        # dict lookup. Benchmarks compare this against the bare runtime, so it stays lean.
        fast = self._fast
        if fast is not None and len(inputs) == 1:
            # A Tensor already on the model's device (same placement object) with the compiled
            # shape goes straight to the plugin's model: no list, shape tuple or runner lookup.
            x = inputs[0]
            if type(x) is Tensor and x._p is fast[0] and self._backend._shape_of(x._data) == fast[1]:
                return fast[2](x._data)
        if len(inputs) != len(self.graph.inputs):
            raise ShapeError(f"compiled model on {self.device} takes {len(self.graph.inputs)} input(s), got {len(inputs)}")
        natives = [self._native(x, i) for i, x in enumerate(inputs)]
        shape_of = self._backend._shape_of
        shapes = tuple(tuple(shape_of(n)) for n in natives)
        runner = self._runners.get(shapes)
        if runner is None:
            runner = self._build(shapes)
            self._runners[shapes] = runner
            self._set_fast(shapes)
        outs = runner(*natives)
        if self.outputs != "device":
            outs = deliver_tensors(outs, self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _set_fast(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        native = self._natives.get(shapes)
        if self._fast is not None or native is None or len(shapes) != 1 or self.outputs != "device":
            return
        from neurenix_core.tensor.tensor import wrap

        be, dev = self._backend, self.device
        index = dev.index
        call = native._run if isinstance(native, CompiledModel) else native  # natives in: the hook's contract

        def run(x: Any) -> Any:
            out = call(x)
            if type(out) is tuple or type(out) is list:
                outs = tuple(o if isinstance(o, Tensor) else wrap(o, be, dev, index) for o in out)
                return outs[0] if len(outs) == 1 else outs
            return out if isinstance(out, Tensor) else wrap(out, be, dev, index)

        self._fast = (be.placement(index), shapes[0], run)

    def _native(self, x: Any, i: int) -> Any:
        """Input ``i`` as a native array on the model's device: the one rule of graph.inputs."""
        return to_device_input(x, i, self.device, self._backend)

    def _tensors(self, natives: tuple[Any, ...]) -> tuple[Tensor, ...]:
        from neurenix_core.tensor.tensor import wrap

        be, dev = self._backend, self.device
        return tuple(wrap(n, be, dev, dev.index) for n in natives)

    def _build(self, shapes: tuple[tuple[int, ...], ...]) -> Runner:
        from neurenix_core.graph.shapes import infer_shapes

        graph = self.graph.with_input_shapes(*shapes)
        try:
            infer_shapes(graph)
        except ShapeError as exc:
            expected = [s.shape for s in self.graph.inputs if s.shape]
            hint = f" (traced for {expected})" if expected else ""
            raise ShapeError(f"compiled model on {self.device}: input shape(s) {list(shapes)} do not fit the model{hint}: {exc}") from exc
        runner, summary = self._lower(graph)
        self._summaries[shapes] = summary
        return runner

    def _lower(self, graph: Graph) -> tuple[Runner, str]:
        from neurenix_core.plugins.state import registry

        reg, rec = registry(), self._record
        if rec.manifest.capabilities.compiles_models and reg.implements(rec, "neurenix_compile"):
            options = CompileOptions(device=self.device, precision=self.precision, quantization=self.plan, extra=self.extra)
            try:
                native = reg.call(rec, "neurenix_compile", backend=self._backend, graph=graph, options=options)
            except UnsupportedOperationError as exc:
                return self._fallback(exc)
            if native is not None:
                self._natives[tuple(tuple(s.shape) for s in graph.inputs)] = native
                return self._native_runner(native), str(getattr(native, "summary", "") or f"compiled by plugin {rec.name}")
        return self._local_runner()

    def _fallback(self, exc: UnsupportedOperationError) -> tuple[Runner, str]:
        where = f"{self.device} (plugin {self._record.name})"
        if self.plan is not None or self.precision not in (None, "fp32"):
            raise CompilationError(f"{where} cannot lower the model at {self.precision}: {exc}; no eager equivalent exists") from exc
        if fallback.get_fallback_policy() == "error":
            raise CompilationError(
                f"{where} cannot lower the model: {exc}. The fallback policy is 'error'; allow eager execution with "
                "nx.fallback_policy('allow') or remove the layer"
            ) from exc
        fallback.record("nx.compile", self._record.name, str(self.device))
        runner, _ = self._local_runner()
        return runner, f"eager on {self.device} (the plugin could not lower the model: {exc})"

    def _native_runner(self, native: Any) -> Runner:
        from neurenix_core.tensor.tensor import wrap

        be, dev = self._backend, self.device

        # The plugin's _run takes native arrays (the hook's contract); a runtime model's own
        # __call__ is for users calling it directly (graph.inputs.call_runtime).
        direct = isinstance(native, CompiledModel)

        def run(*natives: Any) -> tuple[Tensor, ...]:
            out = native._run(*natives) if direct else native(*natives)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            return tuple(o if isinstance(o, Tensor) else wrap(o, be, dev, dev.index) for o in outs)

        return run

    def _local_runner(self) -> tuple[Runner, str]:
        """No plugin compile: integer reference on the CPU for quantized models, else eager."""
        if self.plan is not None:
            if str(self.device.type) != "cpu":
                raise UnsupportedOperationError(
                    f"{self.device} (plugin {self._record.name}) does not compile models, so it cannot run {self.precision} "
                    "quantized models; compile for 'cpu' (NumPy integer kernels) or a device whose plugin compiles models"
                )
            return self._integer_runner(), f"NumPy integer kernels on {self.device} ({self.precision}, TFLite arithmetic)"
        if self.precision not in (None, "fp32"):
            raise UnsupportedOperationError(
                f"{self.device} (plugin {self._record.name}) runs models eagerly in fp32 only; precision={self.precision!r} "
                "needs a plugin that compiles models (or leave precision unset)"
            )
        if self._eager is None:
            from neurenix_core.graph.executor import EagerGraph

            eager = EagerGraph(self.graph, self.device)
            self._eager = lambda *natives: eager(*self._tensors(natives))
        return self._eager, f"eager on {self.device} through the {self._backend.name} op table, fp32, {len(self.graph.nodes)} layers"

    def _integer_runner(self) -> Runner:
        from neurenix_core.tensor.creation import asarray
        from neurenix_core.graph.reference import run_quantized

        graph, plan, dev = self.graph, self.plan, self.device
        assert plan is not None

        to_host = self._backend._to_host

        def run(*natives: Any) -> tuple[Tensor, ...]:
            out = run_quantized(graph, plan, *(to_host(n) for n in natives))
            outs = out if isinstance(out, tuple) else (out,)
            return tuple(asarray(np.asarray(o, np.float32), device=dev) for o in outs)

        return run
