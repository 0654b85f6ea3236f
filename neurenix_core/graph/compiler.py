"""``nx.compile``: a model lowered whole for one device, compiled once per input shape.

The model is walked once into a :class:`~neurenix_core.graph.ir.Graph`. On the first call with a
new input shape the graph gets those shapes, shapes are checked layer by layer, and the
device's plugin lowers it through its ``neurenix_compile`` hook when its manifest declares
``capabilities.compiles_models``; otherwise (the CPU backend included) the graph runs eagerly
node by node through the device's op table. Quantization (int8/int16 static, or dynamic) is
computed here, once, by ``neurenix_core.graph.quantization``; backends only lower the plan.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from neurenix_core.device import Device, DeviceLike
from neurenix_core.errors import (
    CompilationError,
    QuantizationError,
    ShapeError,
    UnsupportedOperationError,
)
from neurenix_core.graph.compile_options import checked as checked_options
from neurenix_core.graph.inputs import check_outputs, deliver_tensors, host_array, to_device_input
from neurenix_core.graph.ir import CompileOptions, Graph, QuantizationPlan
from neurenix_core.graph.opset import _np_dtype as opset_dtype
from neurenix_core.graph.opset.schema import STORAGE_DTYPES, VALUE_KINDS
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.plugins.backend import CompiledModel
from neurenix_core.plugins.host import HostModel
from neurenix_core.tensor import fallback
from neurenix_core.tensor.dtypes import PLAIN_DTYPES, contiguous
from neurenix_core.tensor.tensor import Tensor, _fresh, adopt, views_of, wrap_results

__all__ = ["PRECISIONS", "Compiled", "compile"]

PRECISIONS = ("fp32", "fp16", "bf16", "tf32", "int8", "int16")
_QUANTIZE = (None, False, True, "int8", "int16", "dynamic")

#: Runs one compiled shape: backend-native input arrays in, Tensors on the device out.
Runner = Callable[..., tuple[Tensor, ...]]


def compile(  # the public name the seeds and DESIGN.md use
    model: Any,
    device: DeviceLike | None = None,
    precision: str | None = None,
    quantize: bool | str | QuantizationPlan | None = None,
    calibration: Iterable[Any] | None = None,
    *,
    calibration_method: str = "minmax",
    progress: bool = True,
    outputs: str = "device",
    buckets: Any = None,
    pad_values: Mapping[Any, Any] | None = None,
    verify: bool = True,
    options: Mapping[str, Any] | None = None,
    **extra: Any,
) -> Compiled:
    """Compile ``model`` (a ``neurenix_core.nn`` Module or a Graph) for ``device``.

    ``precision``: one of PRECISIONS or None (the backend's default, stated in ``.summary``).
    ``quantize``: True / "int8" / "int16" (static: needs ``calibration`` batches), "dynamic"
    (int8 Linear weights), or a ready ``QuantizationPlan``. ``outputs``: "device" (Tensors on
    ``device``) or "host" (NumPy arrays); inputs follow ``neurenix_core.graph.inputs``.
    ``options`` ({name: value}) are the device's own options: the core's ``runtime`` and
    ``threads`` and those its plugin declares (``Capabilities.compile_options``), passed to the
    plugin as ``CompileOptions.extra``; the same names are taken as keywords (``threads=2``).
    An undeclared name is a TypeError naming the closest valid one, a bad value an
    InvalidOptionError, both before anything compiles (``graph.compile_options``, docs/errors.md).
    ``buckets`` (True / "pow2", a list of batch sizes, or {input: {axis: sizes}}) compiles once
    per bucket and pads to it where the graph proves padding changes no result; ``pad_values``
    ({input: value}, default 0) fills the padding (``neurenix_core.graph.buckets``, docs/shape-buckets.md).
    ``verify``: a static int8/int16 compile with ``calibration`` runs its first batches through the
    compiled model and the core's integer and float references and raises CompilationError where
    they disagree beyond rounding (``neurenix_core.graph.verify``); the result is in ``.summary``.
    """
    from neurenix_core.plugins.state import registry
    from neurenix_core.tensor.placement import default_backend

    backend, dev, _ = default_backend(device)
    record = registry().plugin_for(dev)
    extra = checked_options(dev, record, extra, options, _PARAMETERS)
    graph = _graph_of(model)
    values = model if getattr(model, "value_inputs", ()) else None
    if values is not None and (quantize or precision in ("int8", "int16")):
        raise QuantizationError(f"{dev}: {model!r} is built per value of its inputs {list(values.value_inputs)}, so it has no one graph "
                                "to calibrate; give those inputs as initializers (constants) in the model to quantize it")
    own_plan = getattr(model, "quantization_plan", None)
    if own_plan is not None and quantize in (None, True, "int8", "int16") and precision in (None, "int8", "int16"):
        # A model that arrived quantized (an ONNX QDQ file, a PT2E export) runs with its own
        # scales: no recalibration; ``calibration`` batches, if given, only verify the compile.
        quantize = own_plan
    if calibration is not None and not isinstance(calibration, Sequence):
        calibration = list(calibration)  # read twice: calibration, then verification
    precision, plan, graph = _quantization(graph, dev, precision, quantize, calibration, calibration_method, progress)
    compiled = Compiled(graph, dev, backend, record, precision, plan, dict(extra), outputs=check_outputs(outputs, dev))
    compiled._values = values
    if buckets is not None and buckets is not False:
        from neurenix_core.graph.buckets import check_early, parse_buckets

        if values is not None:
            raise CompilationError(f"{dev}: buckets= need one graph, but {model!r} is built per value of its inputs {list(values.value_inputs)}")
        compiled._buckets = parse_buckets(buckets, graph, pad_values)
        compiled._bucket_args = (buckets, dict(pad_values) if pad_values else None)
        compiled.extra["shape_buckets"] = True  # plugins see bucket shapes only (the TPU plugin then gives no recompilation advice)
        check_early(compiled)
    elif pad_values:
        raise CompilationError(f"{dev}: pad_values= is for bucketed models; pass buckets= too")
    if verify and plan is not None and not plan.dynamic and calibration:
        compiled.verify(calibration)
    return compiled


#: nx.compile's own keyword parameters: a misspelt one (``devcie``) is suggested by the option check.
_PARAMETERS: Final = frozenset(compile.__code__.co_varnames[1:compile.__code__.co_argcount + compile.__code__.co_kwonlyargcount])


class _HostValue:
    """A result kept in host memory because the device cannot hold its dtype (outputs="host")."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _deliver(outs: tuple[Any, ...], outputs: str) -> tuple[Any, ...]:
    """``deliver_tensors``, with a sequence output (a list of Tensors) delivered element by element,
    an empty optional (None) as None and a result kept in host memory as its array."""
    if all(isinstance(o, Tensor) for o in outs):
        return deliver_tensors(outs, outputs)

    def one(o: Any) -> Any:
        if o is None or isinstance(o, np.ndarray):  # an empty optional; a result kept in host memory
            return o
        return [one(v) for v in o] if isinstance(o, list) else deliver_tensors((o,), outputs)[0]

    return tuple(one(o) for o in outs)


def _graph_of(model: Any) -> Graph:
    if isinstance(model, Graph):
        return model
    from neurenix_core.nn.module import Module

    if not isinstance(model, Module):
        raise CompilationError(
            f"nx.compile expects a neurenix_core.nn Module or a Graph, got {type(model).__name__}; "
            "import a PyTorch model first with nx.nn.from_torch(model)"
        )
    symbolic = getattr(model, "symbolic_graph", None)  # an import with dynamic axes keeps them
    return symbolic() if symbolic is not None else model.to_graph()


def _quantization(graph: Graph, dev: Device, precision: str | None, quantize: Any, calibration: Iterable[Any] | None,
                  method: str, progress: bool) -> tuple[str | None, QuantizationPlan | None, Graph]:
    if precision is not None and precision not in PRECISIONS:
        raise CompilationError(f"{dev}: precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if quantize is None and precision not in ("int8", "int16"):
        return precision, None, graph  # a float compile: the quantization modules are not imported
    from neurenix_core.graph import quantization as Q

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


class _NodeRefused(Exception):
    """Internal: a plugin refused one node of a quantized model; place it on cpu:0 and retry."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(node)
        self.node, self.reason = node, reason


def _host_runner(compiled: Compiled) -> Callable[..., list[np.ndarray]]:
    """``compiled`` as host arrays in -> a list of host arrays out, whatever its ``outputs=``."""
    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        out = compiled(*inputs)
        return list(_deliver(tuple(out) if isinstance(out, tuple) else (out,), "host"))
    return run


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
        # One-input models compiled by a plugin, for the first shape compiled: (placement, shape
        # reader or None, input shape, the plugin's entry, array type, dtype reader or None, input
        # dtype), all resolved once (``_set_fast``).
        self._fast: tuple[Any, Callable[[Any], Any] | None, tuple[int, ...], Callable[[Any], Any], type[Any],
                          Callable[[Any], Any] | None, np.dtype[Any] | None] | None = None
        self._eager: Any = None
        # A model with value inputs (GraphModule.value_inputs): graphs are built per shapes and values.
        self._values: Any = None
        self._placements: dict[tuple[tuple[int, ...], ...], Any] = {}
        # Every input in the dtype the model declares (float32 for nn models and most imports;
        # a float16 or float64 model's inputs stay float16 or float64, token ids int64).
        # A sequence / optional input (an ONNX import's) has None: it is passed as it is (list, array or None).
        self._input_dtypes = [None if s.dtype in VALUE_KINDS else opset_dtype(s.dtype) for s in graph.inputs]
        # Shape buckets (graph.buckets): the policy, the padding proof per bucket shape, and per
        # bucket the calls it served (BucketStats); None when the model compiles per shape.
        self._buckets: Any = None
        self._proofs: dict[tuple[tuple[int, ...], ...], Any] = {}
        self._bucket_stats: dict[tuple[tuple[int, ...], ...], Any] = {}
        self._verification: Any = None  # graph.verify.Verification of a quantized compile
        self._host_lines: list[str] = []  # which host runtime runs each cpu:0 graph or segment, and why
        # Compiled artifacts (neurenix_core.deploy): every plugin-compiled model and host-runtime
        # choice by part key (_part_key), so save() finds them; nx.load_compiled fills _restored
        # and _host_pins so the same parts come back without the plugin compiling again.
        self._parts: dict[str, Any] = {}
        self._host_parts: dict[str, str] = {}
        self._restored: dict[str, Any] = {}
        self._host_pins: dict[str, str] = {}
        self._bucket_args: tuple[Any, Any] | None = None  # buckets= and pad_values= as given, for the artifact manifest

    # ------------------------------------------------------------------ introspection
    @property
    def compiled_shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        return list(self._runners)

    @property
    def summary(self) -> str:
        if not self._summaries:
            dynamic = f", dynamic input shapes {[s.display_shape for s in self.graph.inputs]}" if self.graph.dynamic else ""
            return f"{self.device}: not compiled yet (compiles on the first call per input shape), {len(self.graph.nodes)} layers{dynamic}"
        text = "; ".join(f"{shapes}: {text}" for shapes, text in self._summaries.items())
        if self._buckets is not None:
            from neurenix_core.graph.buckets import bucket_report

            text += "; " + bucket_report(self)
        if self._verification is not None:
            text += "; " + self._verification.line()
        return text

    def __repr__(self) -> str:
        return f"Compiled(device='{self.device}', precision={self.precision!r}, shapes={self.compiled_shapes})"

    @strict_kwargs("Compiled.save")
    def save(self, path: Any) -> Any:
        """Write this model, as compiled so far, to the folder ``path``: each plugin-compiled part
        in the plugin's native format beside a JSON manifest (docs/deploy.md); returns the folder.
        ``nx.load_compiled(path)`` reads it back with only the core and that plugin's runtime."""
        from neurenix_core.deploy.artifact import save_compiled

        return save_compiled(self, path)

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

    @property
    def verification(self) -> Any:
        """The last :meth:`verify` result (``graph.verify.Verification``), or None."""
        return self._verification

    @strict_kwargs("Compiled.verify")
    def verify(self, batches: Sequence[Any]) -> Any:
        """Run the first ``verify.VERIFY_BATCHES`` of ``batches`` (calibration-style: an array per
        batch, or a tuple for several inputs) through this quantized model and the core's integer
        and float references; CompilationError names the first diverging layer where they disagree
        beyond rounding. The agreement goes into ``.summary`` and the placement report."""
        from neurenix_core.graph import verify as V
        from neurenix_core.graph.calibration import batch_arrays

        if self.plan is None or self.plan.dynamic:
            raise CompilationError(f"{self.device}: verify() checks a static int8/int16 compile; this model has {self.precision or 'no'} precision plan")
        chosen = [batch_arrays(b, len(self.graph.inputs), i) for i, b in enumerate(list(batches)[: V.VERIFY_BATCHES])]
        extra = dict(self.extra)
        extra.pop("shape_buckets", None)

        def locate(graph: Graph) -> Callable[..., list[np.ndarray]]:
            return _host_runner(compile(graph, self.device, quantize=self.plan, outputs="host", verify=False, progress=False, **extra))

        self._verification = V.verify_outputs(self.graph, self.plan, chosen, _host_runner(self), device=str(self.device), locate=locate)
        return self._verification

    # ------------------------------------------------------------------ calling
    def __call__(self, *inputs: Any) -> Any:
        # The hot path of every compiled-model call: inputs become backend-native arrays directly
        # (no Tensor, registry or dtype-table round trip), and the runner for their shapes is one
        # dict lookup. Benchmarks compare this against the bare runtime, so it stays lean.
        if len(inputs) == 1:
            fast = self._fast
            # A Tensor already on the model's device (same placement object) with the compiled
            # shape goes straight to the plugin's model: no list, shape tuple or runner lookup.
            # ``shape_of`` is None when the backend's ``_shape_of`` is the default
            # ``tuple(native.shape)``: the native attribute is compared, and a shape that only
            # differs in type misses here and takes the general path below, which decides the same.
            # The dtype must be the model's input dtype (float32, or an integer input's declared
            # dtype); another one takes the general path, where the plugin's _run converts or
            # refuses it. ``dtype_of`` is None for NumPy arrays (their own attribute is compared).
            if fast is not None:
                x = inputs[0]
                p, shape_of, shape, call, array_type, dtype_of, dtype = fast
                if (type(x) is Tensor and x._p is p and (x._data.shape if shape_of is None else shape_of(x._data)) == shape
                        and (x._data.dtype if dtype_of is None else dtype_of(x._data)) == dtype):
                    d = x._data
                    out = call(d)
                    if type(out) is not array_type:
                        res = wrap_results(out, p)
                        views_of(res if type(res) is tuple else (res,), inputs)  # made views in place
                        return res
                    if type(out) is np.ndarray and out.base is None and out is not d:
                        return _fresh(out, p)  # a new buffer (NumPy says so): the one constructor
                    return adopt(out, p, inputs)  # maybe the input itself or a view of it: charged as one
        if len(inputs) != len(self.graph.inputs):
            raise ShapeError(f"compiled model on {self.device} takes {len(self.graph.inputs)} input(s), got {len(inputs)}")
        if self._buckets is not None:  # never on the fast path above: _set_fast is not called for it
            from neurenix_core.graph.buckets import call_bucketed

            outs = call_bucketed(self, inputs)
            if self.outputs != "device":
                outs = _deliver(outs, self.outputs)
            return outs[0] if len(outs) == 1 else outs
        natives = [self._native(x, i) for i, x in enumerate(inputs)]
        shape_of = self._backend._shape_of
        # A NumPy array here may be an input kept in host memory (a dtype the device cannot hold).
        shapes = tuple(() if d is None else tuple(n.shape if isinstance(n, np.ndarray) else shape_of(n))
                       for n, d in zip(natives, self._input_dtypes))
        if self._values is not None:
            runner = self._value_runner(shapes, natives)
        else:
            runner = self._runner_for(shapes)
        outs = views_of(runner(*natives), inputs)
        if self.outputs != "device":
            outs = _deliver(outs, self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _value_key(self, shapes: tuple[tuple[int, ...], ...], hosts: Mapping[str, np.ndarray]) -> Any:
        return shapes + tuple((name, str(hosts[name].dtype), hosts[name].tobytes()) for name in self._values.value_inputs)

    def _value_runner(self, shapes: tuple[tuple[int, ...], ...], natives: list[Any]) -> Runner:
        """The runner for these shapes and the values of the model's value inputs, built on a miss
        (building may find more value inputs; the key then names them all)."""
        to_host = self._backend._to_host
        hosts = {spec.name: n if isinstance(n, np.ndarray) else np.asarray(to_host(n)) for spec, n in zip(self.graph.inputs, natives)}
        runner = self._runners.get(self._value_key(shapes, hosts))
        if runner is None:
            runner = self._build(shapes, hosts)
            self._runners[self._value_key(shapes, hosts)] = runner
        return runner

    def _runner_for(self, shapes: tuple[tuple[int, ...], ...]) -> Runner:
        """The runner for these input shapes, built on the first call with them (a bucketed
        model's calls are counted per bucket, so it never takes the one-input fast path)."""
        runner = self._runners.get(shapes)
        if runner is None:
            runner = self._runners[shapes] = self._build(shapes)
            if self._buckets is None:
                self._set_fast(shapes)
        return runner

    def _set_fast(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        """Prebuild the one-input call for the first compiled shape: placement, shape reader and
        the plugin's entry point resolved once (``__call__`` wraps the result)."""
        native = self._natives.get(shapes)
        if self._fast is not None or native is None or len(shapes) != 1 or self.outputs != "device":
            return
        from neurenix_core.plugins.backend import Backend

        be = self._backend
        p = be.placement(self.device.index)
        call = native
        if isinstance(native, CompiledModel):  # natives in: the hook's contract
            # The plugin's entry for exactly this array type and shape (checked below), else _run.
            call = native.fast_entry(shapes[0]) or native._run
        elif isinstance(native, HostModel):  # a cpu:0 host runtime: host arrays in, a tuple out
            if len(self.graph.outputs) != 1:
                return
            call = native.call_one  # a bound method: one call frame on the hot path
        shape_of = None if type(be)._shape_of is Backend._shape_of else be._shape_of
        dtype_of = None if p.array_type is np.ndarray else be._dtype_of
        self._fast = (p, shape_of, shapes[0], call, p.array_type, dtype_of, self._input_dtypes[0])

    def _native(self, x: Any, i: int) -> Any:
        """Input ``i`` as a native array on the model's device: the one rule of graph.inputs
        (float inputs become float32; integer inputs such as token ids keep their declared dtype)."""
        dtype = self._input_dtypes[i]
        if dtype is None:  # a sequence or optional: run by cpu:0 on the host
            return x if x is None else [np.asarray(v) for v in x] if isinstance(x, (list, tuple)) else np.asarray(x)
        if str(self.device.type) != "cpu" and not self._backend.supports_dtype(dtype):
            # A dtype the device cannot hold (int4 on cuda ...): the input stays in host memory;
            # placement runs the nodes that read it on cpu:0 (the plugin does not declare it).
            return host_array(x, i, self.device, dtype)
        return to_device_input(x, i, self.device, self._backend, dtype)

    def _tensors(self, natives: tuple[Any, ...]) -> tuple[Any, ...]:
        """Natives as Tensors on the device; a sequence as a list of them, an empty optional as None."""
        from neurenix_core.tensor.tensor import wrap_on

        p = self._backend.placement(self.device.index)

        def one(n: Any) -> Any:
            if isinstance(n, _HostValue):  # a result in a dtype the device cannot hold (outputs="host" only)
                return n.array
            return None if n is None else [one(e) for e in n] if isinstance(n, list) else wrap_on(n, p)

        return tuple(one(n) for n in natives)

    def _host_only(self, name: str, array: np.ndarray) -> Any:
        """An output the device cannot hold (an int4 result on cuda ...): delivered from host
        memory with outputs="host"; with outputs="device" there is no Tensor to return."""
        from neurenix_core.errors import UnsupportedDTypeError

        if self.outputs != "host":
            raise UnsupportedDTypeError(
                f"{self.device}: output {name!r} is {array.dtype}, which the device (plugin {self._record.name}) cannot hold; "
                "compile with outputs='host' to receive it as a NumPy array")
        return _HostValue(array)

    def _build(self, shapes: tuple[tuple[int, ...], ...], values: Mapping[str, np.ndarray] | None = None) -> Runner:
        from neurenix_core.graph.shapes import infer_shapes
        from neurenix_core.graph.specialize import fold_size_constants

        base = self.graph if values is None else self._values.graph_for_values(shapes, values)
        try:
            graph = base.with_input_shapes(*shapes)
            if base.dynamic:  # sizes known: fold what they built, as a static import would have
                graph = fold_size_constants(graph)
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
        compiles = bool(rec.manifest.capabilities.compiles_models and reg.implements(rec, "neurenix_compile"))
        refused: dict[str, str] = {}
        key = tuple(s.shape for s in graph.inputs)
        while True:
            self._host_lines = []
            kept = set(self._parts)
            try:
                result = self._lower_placed(graph, compiles, refused)
                if self._host_lines and key in self._placements:
                    self._placements[key] = dataclasses.replace(self._placements[key], host_runtime="; ".join(self._host_lines))
                return result
            except _NodeRefused as retry:
                # The plugin's lowering refused one node of a quantized model: that node goes to
                # cpu:0 (the integer reference) and the rest is placed and compiled again. Parts
                # compiled for the abandoned placement are not part of the model (nor its artifact).
                for stale in set(self._parts) - kept:
                    del self._parts[stale]
                refused[retry.node] = retry.reason

    def _lower_placed(self, graph: Graph, compiles: bool, refused: Mapping[str, str]) -> tuple[Runner, str]:
        rec = self._record
        placement = self._place(graph, compiles, refused)
        self._placements[tuple(s.shape for s in graph.inputs)] = placement
        if placement.partitioned:
            return self._partitioned(placement, compiles)
        if str(self.device.type) != "cpu" and all(n.op == "constant" for n in placement.graph.nodes):
            # Nothing to compute (every output is a constant or an input): no runtime is asked to
            # build an empty model; the values are copied to the device.
            runner, _ = self._partition_runner(placement, False)
            return runner, f"no computation on {self.device}: the outputs are constants or inputs, copied to the device"
        if compiles:
            options = CompileOptions(device=self.device, precision=self.precision, quantization=self.plan, extra=self.extra)
            try:
                native = self._plugin_compile(placement.graph, options)
            except UnsupportedOperationError as exc:
                self._check_refused(exc, placement.graph, refused)
                return self._fallback(exc, graph)
            if native is not None:
                self._natives[tuple(tuple(s.shape) for s in graph.inputs)] = native
                return self._native_runner(native), str(getattr(native, "summary", "") or f"compiled by plugin {rec.name}")
        return self._local_runner(graph)

    def _plugin_compile(self, graph: Graph, options: CompileOptions) -> Any:
        """The plugin's compiled model of ``graph`` (the whole model or one device segment): the one
        nx.load_compiled restored for it, else the ``neurenix_compile`` hook's; kept for save()."""
        from neurenix_core.plugins.state import registry

        key = _part_key(graph)
        native = self._restored.get(key)
        if native is None:
            native = registry().call(self._record, "neurenix_compile", backend=self._backend, graph=graph, options=options)
        if native is not None:
            self._parts[key] = native
        return native

    def _check_refused(self, exc: Exception, graph: Graph, refused: Mapping[str, str]) -> None:
        """Raise _NodeRefused when a quantized model's lowering refused one named node it had not
        refused before (the caller places it on cpu:0 and tries again); else return."""
        node = getattr(exc, "node", None)
        if self.plan is None or node is None or node in refused or node not in {n.name for n in graph.nodes}:
            return
        raise _NodeRefused(node, f"plugin {self._record.name} cannot lower it: {exc}") from exc

    def _place(self, graph: Graph, compiles: bool, refused: Mapping[str, str] | None = None) -> Any:
        """Which nodes the device runs: declared ops and dtypes (capabilities as data)."""
        from neurenix_core.graph import opset
        from neurenix_core.graph.executor import EAGER_OPS
        from neurenix_core.graph.placement import place

        caps = self._record.manifest.capabilities
        plugin = self._record.name
        missing = f"op not declared by plugin {plugin}"
        if str(self.device.type) == "cpu":
            declared, dtypes = set(opset.OPSET), set(opset.DTYPES) | VALUE_KINDS
        elif compiles:
            declared = set(caps.graph_ops) if caps.graph_ops is not None else set(opset.LEGACY_OPS)
            dtypes = set(caps.graph_dtypes)
        else:
            # Op by op (a plugin that does not compile, or the eager fallback after its compiler
            # refused the model): what is missing is an eager form, not a declaration.
            declared, dtypes = set(EAGER_OPS), {"float32"}
            missing = f"op has no eager form on {self.device} (plugin {plugin} runs this model op by op)"
        # A quantized model keeps its composites whole: its plan names the calibrated graph's values.
        return place(graph, declared, dtypes, str(self.device), plugin, decompose=self.plan is None, missing=missing, refused=refused)

    @property
    def placement(self) -> Any:
        """Where the nodes run (``graph.placement.Placement``: nodes and estimated FLOPs per device,
        every off-device node with its op and reason) for the last input shapes compiled; a
        graph with static input shapes is compiled for them on first access."""
        if not self._placements:
            shapes = tuple(tuple(s.shape) for s in self.graph.inputs)
            if not all(shapes):
                raise CompilationError(f"{self.device}: the placement is decided per input shape; call the compiled model once first")
            self._runners[shapes] = self._build(shapes)
        last = list(self._placements.values())[-1]
        return last if self._verification is None else dataclasses.replace(last, verification=self._verification.line())

    def _partitioned(self, placement: Any, compiles: bool) -> tuple[Runner, str]:
        where = f"{self.device} (plugin {self._record.name})"
        off = ", ".join(f"node {o.node!r} (op {o.op}): {o.reason}" for o in placement.off_device)
        if self.plan is not None and not compiles:
            raise CompilationError(f"{where} does not compile models, so no part of the {self.precision} model can run on it ({off}); "
                                   "compile for 'cpu' (NumPy integer kernels) or a device whose plugin compiles models")
        if fallback.get_fallback_policy() == "error":
            raise CompilationError(
                f"{where} cannot run {len(placement.off_device)} node(s) of the model: {off}. The fallback policy is 'error'; "
                "allow partitioned execution (those nodes on cpu:0) with nx.fallback_policy('warn') or 'allow'"
            )
        runner, placement = self._partition_runner(placement, compiles)
        self._placements[tuple(s.shape for s in placement.graph.inputs)] = placement
        if fallback.get_fallback_policy() == "warn":
            # The one default-visible line (policy 'allow' keeps it in compiled.placement only).
            from neurenix_core.user_frame import user_stacklevel

            warnings.warn(placement.line(), fallback.FallbackWarning, stacklevel=user_stacklevel())
        segs = sum(1 for s in placement.segments if s.on_device)
        rest = "in fp32" if self.plan is None else f"on the integer reference ({self.precision}; boundary values cross dequantized)"
        return runner, f"partitioned: {placement.line()} ({segs} device segment(s), the rest on the CPU backend {rest})"

    def _segment_fn(self, sub: Graph, compiles: bool) -> Callable[..., tuple[Any, ...]]:
        """A device segment as natives -> natives: the plugin's compiled form, else eager ops. A
        quantized model's segment is compiled with the plan restricted to its values: it takes
        and returns float (dequantized) values, quantizing them with the whole plan's parameters."""
        from neurenix_core.graph.qmath import restrict_plan

        if compiles:
            sub_plan = None if self.plan is None else restrict_plan(self.plan, sub)
            options = CompileOptions(device=self.device, precision=self.precision, quantization=sub_plan, extra=self.extra)
            native = self._plugin_compile(sub, options)
            if native is not None:
                def run_native(*args: Any) -> tuple[Any, ...]:
                    out = native(*args)
                    outs = out if isinstance(out, (tuple, list)) else (out,)
                    return tuple(o._data if isinstance(o, Tensor) else o for o in outs)

                return run_native
        from neurenix_core.graph.executor import EagerGraph

        eager = EagerGraph(sub, self.device)
        return lambda *args: tuple(t._data for t in eager(*self._tensors(args)))

    def _partition_runner(self, placement: Any, compiles: bool) -> tuple[Runner, Any]:
        from neurenix_core.graph.placement import moved_to_cpu
        from neurenix_core.graph.shapes import infer_values

        specs = infer_values(placement.graph)
        steps: list[tuple[bool, Any, Callable[..., Any]]] = []
        for seg in placement.segments:
            sub = seg.graph(specs)
            if seg.on_device:
                try:
                    steps.append((True, seg, self._segment_fn(sub, compiles)))
                    continue
                except (UnsupportedOperationError, QuantizationError) as exc:
                    self._check_refused(exc, sub, {o.node: o.reason for o in placement.off_device})
                    # A quantized segment may read a value without plan parameters (a constant
                    # fed as an input where the device does not declare `constant`): the plugin
                    # refuses it, and the segment runs on the integer reference, reported.
                    placement = moved_to_cpu(placement, seg, f"plugin {self._record.name} refused the segment: {exc}")
            steps.append((False, seg, self._host_fn(sub, placement.graph)))
        be, idx, outputs = self._backend, self.device.index, placement.graph.outputs
        names = [s.name for s in placement.graph.inputs]

        def run(*natives: Any) -> tuple[Tensor, ...]:
            dev: dict[str, Any] = dict(zip(names, natives))
            host: dict[str, Any] = {}

            def to_device(x: Any) -> Any:  # a sequence element by element; an empty optional stays None
                return x if x is None else [to_device(e) for e in x] if isinstance(x, list) else be._from_host(contiguous(x), idx)

            def to_host(x: Any) -> Any:  # a graph input's sequence holds host arrays already
                if x is None or isinstance(x, np.ndarray):
                    return x
                return [to_host(e) for e in x] if isinstance(x, list) else be._to_host(x)

            def on_device(v: str) -> Any:
                if v not in dev:
                    dev[v] = to_device(host[v])  # transfer host -> device
                return dev[v]

            def output(v: str) -> Any:
                value = host.get(v) if v not in dev else None
                if isinstance(value, np.ndarray) and not be.supports_dtype(value.dtype):
                    return self._host_only(v, value)
                return on_device(v)

            def on_host(v: str) -> Any:
                if v not in host:
                    host[v] = to_host(dev[v])  # transfer device -> host
                return host[v]

            for on_dev, seg, fn in steps:
                if on_dev:
                    dev.update(zip(seg.outputs, fn(*(on_device(v) for v in seg.inputs))))
                else:
                    out = fn(*(on_host(v) for v in seg.inputs))
                    host.update(zip(seg.outputs, out if isinstance(out, tuple) else (out,)))
            return self._tensors(tuple(output(o) for o in outputs))

        return run, placement

    def _host_fn(self, sub: Graph, whole: Graph) -> Callable[..., Any]:
        """A CPU segment as host arrays -> host arrays: the float32 interpreter, or for a quantized
        model the integer reference on the segment with the restricted plan. Its float inputs
        arrive dequantized, ``(q - zp) * scale``, and are quantized again with the same
        parameters, which gives back ``q`` exactly; its outputs leave dequantized (float32)."""
        from neurenix_core.graph.reference import run_graph, run_quantized

        if self.plan is None:
            interpret = lambda *hosts: run_graph(sub, *hosts, float_dtype=None)
            choice = self._choose_host(sub, interpret, f"segment {sub.nodes[0].name!r}" if sub.nodes else "segment")
            if choice is None or choice.model is None:
                return interpret
            model: Callable[..., Any] = choice.model
            return model
        from neurenix_core.graph.qmath import restrict_plan

        # Constants the segment reads are data: they go into its graph rather than arrive as
        # (unquantized) inputs, so the segment's graph checks against its plan like any other.
        consts = {n.output: n for n in whole.nodes if n.op == "constant"}
        keep = [k for k, spec in enumerate(sub.inputs) if spec.name not in consts]
        inline = tuple(consts[spec.name] for spec in sub.inputs if spec.name in consts)
        graph = Graph(tuple(sub.inputs[k] for k in keep), inline + sub.nodes, sub.outputs)
        plan = restrict_plan(self.plan, graph)

        def run(*hosts: Any) -> tuple[Any, ...]:
            out = run_quantized(graph, plan, *(hosts[k] for k in keep))
            outs = out if isinstance(out, tuple) else (out,)
            return tuple(o.astype(np.float32) if np.asarray(o).dtype.kind == "f" else o for o in outs)

        return run

    def _fallback(self, exc: UnsupportedOperationError, graph: Graph) -> tuple[Runner, str]:
        where = f"{self.device} (plugin {self._record.name})"
        if self.plan is not None or self.precision not in (None, "fp32"):
            raise CompilationError(f"{where} cannot lower the model at {self.precision}: {exc}; no eager equivalent exists") from exc
        if fallback.get_fallback_policy() == "error":
            raise CompilationError(
                f"{where} cannot lower the model: {exc}. The fallback policy is 'error'; allow eager execution with "
                "nx.fallback_policy('allow') or remove the layer"
            ) from exc
        fallback.record("nx.compile", self._record.name, str(self.device))
        # Eager execution covers the device's op table only (EAGER_OPS): the other nodes go to
        # cpu:0 through the partitioned path, and the placement report names them. The report
        # also says the device's nodes are not one compiled model, and why (the refusal).
        execution = (
            f"eagerly, op by op, not compiled: plugin {self._record.name} refused the model ({exc}); "
            f"an op without a kernel on {self.device} runs on cpu:0 under the fallback policy (nx.fallback_stats())"
        )
        placement = dataclasses.replace(self._place(graph, compiles=False), execution=execution)
        if placement.partitioned:
            runner, placement = self._partition_runner(placement, False)
            self._placements[tuple(s.shape for s in graph.inputs)] = placement
            return runner, f"eager on {self.device} (the plugin could not lower the model: {exc}); {placement.line()}"
        self._placements[tuple(s.shape for s in graph.inputs)] = placement
        runner, _ = self._local_runner(graph)
        return runner, f"eager on {self.device} (the plugin could not lower the model: {exc})"

    def _native_runner(self, native: Any) -> Runner:
        from neurenix_core.tensor.tensor import wrap_on

        p = self._backend.placement(self.device.index)

        # The plugin's _run takes native arrays (the hook's contract); a runtime model's own
        # __call__ is for users calling it directly (graph.inputs.call_runtime).
        direct = isinstance(native, CompiledModel)

        def run(*natives: Any) -> tuple[Tensor, ...]:
            out = native._run(*natives) if direct else native(*natives)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            return tuple(o if isinstance(o, Tensor) else wrap_on(o, p) for o in outs)

        return run

    def _local_runner(self, graph: Graph) -> tuple[Runner, str]:
        """No plugin compile: integer reference on the CPU for quantized models, else eager.
        ``graph`` is the model at this call's input shapes (its size attributes resolved)."""
        if self.plan is not None:
            if str(self.device.type) != "cpu":
                raise UnsupportedOperationError(
                    f"{self.device} (plugin {self._record.name}) does not compile models, so it cannot run {self.precision} "
                    "quantized models; compile for 'cpu' (NumPy integer kernels) or a device whose plugin compiles models"
                )
            return self._integer_runner(graph), f"NumPy integer kernels on {self.device} ({self.precision}, TFLite arithmetic)"
        if self.precision not in (None, "fp32"):
            raise UnsupportedOperationError(
                f"{self.device} (plugin {self._record.name}) runs models eagerly in fp32 only; precision={self.precision!r} "
                "needs a plugin that compiles models (or leave precision unset)"
            )
        if str(self.device.type) == "cpu":
            return self._cpu_runner(graph)
        if self.graph.dynamic or self._values is not None:  # the graph differs per input shape (or value): one eager graph each
            from neurenix_core.graph.executor import EagerGraph

            shaped = EagerGraph(graph, self.device)
            return (lambda *natives: shaped(*self._tensors(natives))), f"eager on {self.device} through the {self._backend.name} op table, fp32, {len(graph.nodes)} layers"
        if self._eager is None:
            from neurenix_core.graph.executor import EagerGraph

            eager = EagerGraph(self.graph, self.device)
            self._eager = lambda *natives: eager(*self._tensors(natives))
        return self._eager, f"eager on {self.device} through the {self._backend.name} op table, fp32, {len(self.graph.nodes)} layers"

    def _choose_host(self, graph: Graph, interpret: Callable[..., Any], what: str) -> Any:
        """The host runtime for ``graph`` on cpu:0 (graph.host_select), noted for the placement
        report; None where the graph cannot leave the interpreter (sequences, optionals)."""
        from neurenix_core.graph import host_select
        from neurenix_core.graph.placement import node_flops
        from neurenix_core.graph.shapes import infer_values
        from neurenix_core.plugins.state import registry

        key = _part_key(graph)
        # A loaded artifact runs each cpu:0 part on the runtime that ran it when saved.
        runtime = self._host_pins.get(key) or host_select.requested_runtime(self.extra)
        specs = infer_values(graph) if graph.nodes else {}
        if not graph.nodes or any(v.dtype in VALUE_KINDS for v in specs.values()) or any(s.dtype in VALUE_KINDS for s in graph.inputs):
            if runtime not in (None, host_select.INTERPRETER) and graph.nodes:
                raise UnsupportedOperationError(f"cpu:0: runtime={runtime!r} was asked, but the {what} carries sequences or optionals, "
                                                "which only the NumPy interpreter runs; pass runtime='auto' or 'numpy'")
            return None

        def reference(*hosts: Any) -> list[np.ndarray]:
            out = interpret(*hosts)
            return list(out) if isinstance(out, (tuple, list)) else [out]

        choice = host_select.choose(graph, threads=self.extra.get("threads"), runtime=runtime,
                                    interpreter=reference, flops=sum(node_flops(n, specs) for n in graph.nodes),
                                    state_dir=registry().config.state_dir)
        if key in self._host_pins:  # the artifact asked for it, not the user's runtime=
            choice = dataclasses.replace(choice, reason="the runtime this part ran on when the artifact was saved")
        self._host_lines.append(f"{what} on cpu:0: {choice.line()}")
        self._host_parts[key] = choice.runtime
        return choice

    def _cpu_runner(self, graph: Graph) -> tuple[Runner, str]:
        """A cpu:0 fp32 graph on the host runtime host_select chooses, the interpreter last."""
        from neurenix_core.backends import cpu_threads
        from neurenix_core.graph.reference import run_graph

        interpreter = self._interpreter_runner(graph)
        threads = self.extra.get("threads")
        eager = f"eager on {self.device} (the NumPy opset interpreter), fp32, {len(graph.nodes)} nodes" + (
            "" if threads is None else f", {threads} thread{'s' if threads != 1 else ''}")
        if self._values is not None:  # a graph per input value: measuring runtimes for each would cost more than it saves
            return interpreter, eager

        def interpret(*hosts: Any) -> Any:  # measured against the host runtimes as it will run: with its threads
            with cpu_threads.using(cpu_threads.checked(threads)):
                return run_graph(graph, *hosts, float_dtype=None)

        choice = self._choose_host(graph, interpret, "model")
        if choice is None or choice.model is None:
            return interpreter, eager + ("" if choice is None else f"; {choice.line()}")
        self._natives[tuple(tuple(s.shape) for s in graph.inputs)] = choice.model  # .native(), and the one-input fast path
        return self._host_model_runner(choice.model), f"{choice.model.summary}; {choice.line()}"

    def _host_model_runner(self, model: Any) -> Runner:
        from neurenix_core.tensor.tensor import wrap_on

        p, to_host = self._backend.placement(self.device.index), self._backend._to_host

        def run(*natives: Any) -> tuple[Tensor, ...]:
            return tuple(wrap_on(contiguous(np.asarray(o)), p) for o in model(*(to_host(n) for n in natives)))

        return run

    def _interpreter_runner(self, graph: Graph) -> Runner:
        """The CPU backend's whole-opset path: the reference semantics on host arrays, every value
        in the dtype the graph declares."""
        from neurenix_core.backends import cpu_threads
        from neurenix_core.graph.reference import run_graph
        from neurenix_core.tensor.creation import asarray
        from neurenix_core.tensor.tensor import wrap_on

        dev, to_host = self.device, self._backend._to_host

        kinds = [s.dtype in VALUE_KINDS for s in graph.inputs]

        p = self._backend.placement(dev.index)

        def tensor(o: Any) -> Any:  # a sequence is a list of Tensors, an empty optional None
            if o is None or isinstance(o, list):
                return o if o is None else [tensor(v) for v in o]
            arr = contiguous(np.asarray(o))
            # The interpreter's own results (plain NumPy dtypes, float8 / int4 storage dtypes held
            # as they are) are wrapped directly: asarray's dtype resolution cost more than a small
            # graph's whole run. Anything else goes through asarray's checks.
            if arr.dtype in PLAIN_DTYPES or str(arr.dtype) in STORAGE_DTYPES:
                return wrap_on(arr, p)
            return asarray(arr, device=dev)

        threads = cpu_threads.checked(self.extra.get("threads"))

        def run(*natives: Any) -> tuple[Tensor, ...]:
            hosts = [n if kind else to_host(n) for n, kind in zip(natives, kinds)]
            if threads is None:
                out = run_graph(graph, *hosts, float_dtype=None)
            else:
                with cpu_threads.using(threads):  # the plan's steps split over that many cores, BLAS at 1
                    out = run_graph(graph, *hosts, float_dtype=None)
            outs = out if isinstance(out, tuple) else (out,)
            return tuple(tensor(o) for o in outs)

        return run

    def _integer_runner(self, graph: Graph) -> Runner:
        from neurenix_core.graph.reference import run_quantized
        from neurenix_core.tensor.creation import asarray

        plan, dev = self.plan, self.device
        assert plan is not None

        to_host = self._backend._to_host

        def run(*natives: Any) -> tuple[Tensor, ...]:
            out = run_quantized(graph, plan, *(to_host(n) for n in natives))
            outs = out if isinstance(out, tuple) else (out,)
            return tuple(asarray(np.asarray(o, np.float32), device=dev) for o in outs)

        return run


def _part_key(graph: Graph) -> str:
    """One compiled part of a model (the whole graph or a segment) at its input shapes: its input
    names, shapes and dtypes and its outputs. Unique within one model; the artifact's index."""
    inputs = ",".join(f"{s.name}:{'x'.join(map(str, s.shape))}:{s.dtype}" for s in graph.inputs)
    return f"{inputs}->{','.join(graph.outputs)}"
