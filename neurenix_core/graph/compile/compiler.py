"""``nx.compile``: a model lowered whole for one device, compiled once per input shape.

The model is walked once into a :class:`~neurenix_core.graph.ir.Graph`. On the first call with a
new input shape the graph gets those shapes, shapes are checked layer by layer, and the
device's plugin lowers it through its ``neurenix_compile`` hook when its manifest declares
``capabilities.compiles_models``; otherwise (the CPU backend included) the graph runs eagerly
node by node through the device's op table. Quantization (int8/int16 static, or dynamic) is
computed here, once, by ``neurenix_core.graph.quantization``; backends only lower the plan.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from neurenix_core.device import Device, DeviceLike
from neurenix_core.errors import (
    CompilationError,
    QuantizationError,
    ShapeError,
)
from neurenix_core.graph.compile.inputs import check_outputs, deliver_tensors, host_array, to_device_input
from neurenix_core.graph.compile.lowering import Lowering
from neurenix_core.graph.compile.options import checked as checked_options
from neurenix_core.graph.compile.report import summary
from neurenix_core.graph.compile.state import Runner
from neurenix_core.graph.compile.verification import verify_compiled
from neurenix_core.graph.ir import Graph, QuantizationPlan
from neurenix_core.graph.ir.host import HostModel
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.plugins.backend import CompiledModel
from neurenix_core.tensor.tensor import Tensor, _fresh, adopt, views_of, wrap_results

__all__ = ["PRECISIONS", "Compiled", "compile"]

PRECISIONS = ("fp32", "fp16", "bf16", "tf32", "int8", "int16")
_QUANTIZE = (None, False, True, "int8", "int16", "dynamic")



def compile(  # the public name the seeds and DESIGN.md use
    model: Any,
    device: DeviceLike | None = None,
    precision: str | None = None,
    quantize: bool | str | QuantizationPlan | None = None,
    calibration: Iterable[Any] | None = None,
    *,
    calibration_method: str = "histogram",
    progress: bool = True,
    outputs: str = "device",
    buckets: Any = None,
    pad_values: Mapping[Any, Any] | None = None,
    verify: bool = True,
    mixed_precision: bool = True,
    options: Mapping[str, Any] | None = None,
    **extra: Any,
) -> Compiled:
    """Compile ``model`` (a ``neurenix_core.nn`` Module or a Graph) for ``device``.

    ``precision``: one of PRECISIONS or None (the backend's default, stated in ``.summary``).
    ``quantize``: True / "int8" / "int16" (static: needs ``calibration`` batches), "dynamic"
    (int8 Linear weights), "int8-weights" / "int4-weights" (weight-only: int8 per channel or int4
    per group, activations in float; ``neurenix_core.graph.quantization.weights``),
    "int8-weights-int8-activations" / "int4-weights-int8-activations" (the same weights, each
    layer's input quantized to int8 at run time in groups of 32), or a ready
    ``QuantizationPlan``. ``outputs``: "device" (Tensors on
    ``device``) or "host" (NumPy arrays); inputs follow ``neurenix_core.graph.compile.inputs``.
    ``options`` ({name: value}) are the device's own options: the core's ``runtime`` and
    ``threads`` and those its plugin declares (``Capabilities.compile_options``), passed to the
    plugin as ``CompileOptions.extra``; the same names are taken as keywords (``threads=2``).
    An undeclared name is a TypeError naming the closest valid one, a bad value an
    InvalidOptionError, both before anything compiles (``graph.compile_options``, docs/errors.md).
    ``buckets`` (True / "pow2", a list of batch sizes, or {input: {axis: sizes}}) compiles once
    per bucket and pads to it where the graph proves padding changes no result; ``pad_values``
    ({input: value}, default 0) fills the padding (``neurenix_core.graph.compile.buckets``, docs/shape-buckets.md).
    ``calibration_method``: how ``calibration`` sets each activation's range: "histogram" (the
    range of least quantization error, ``quantization/histogram.py``), "minmax" or "percentile".
    ``verify``: a static int8/int16 compile with ``calibration`` runs its first batches through the
    compiled model and the core's integer and float references and raises CompilationError where
    they disagree beyond rounding (``neurenix_core.graph.quantization.verify``); the result is in ``.summary``.
    ``mixed_precision``: where a calibrated plan's integer reference is too far from float (over
    5% on a device that computes float layers in place, over the check's 30% where they run on
    the host: ``mixed.mix_for_device``), the layers whose rounding loses the model stay in float, toward
    ``mixed.MIXED_TARGET`` (5%) (``neurenix_core.graph.quantization.mixed``; named in ``.summary`` and
    ``.float_layers``); False keeps every layer quantized and the check refuses as before. Part of
    the verification: ``verify=False`` mixes nothing. A plan given as ``quantize=`` is never changed.
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
    weights, note = None, None
    if isinstance(quantize, str) and "-weights" in quantize:  # "int8-weights", "int4-weights-int8-activations", ...
        graph, weights, note = _weight_only(graph, dev, record, quantize, extra)
        quantize = None
    precision, plan, graph = _quantization(graph, dev, precision, quantize, calibration, calibration_method, progress)
    mixed = None
    if mixed_precision and verify and calibration and plan is not None and not plan.dynamic and not isinstance(quantize, QuantizationPlan):
        from neurenix_core.graph.quantization import mixed as M  # a calibrated plan, checked before the device compiles it

        mixed = M.mix_for_device(graph, plan, calibration, device=str(dev), host=M.float_layers_on_host(record), progress=progress)
        plan = plan if mixed is None else mixed.plan
    compiled = Compiled(graph, dev, backend, record, precision, plan, dict(extra), outputs=check_outputs(outputs, dev))
    compiled._mixed = mixed
    compiled.weights, compiled.weights_note = weights, note
    compiled._values = values
    if buckets is not None and buckets is not False:
        from neurenix_core.graph.compile.buckets import check_early, parse_buckets

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


def _weight_only(graph: Graph, dev: Device, record: Any, scheme: str, extra: Mapping[str, Any]) -> tuple[Graph, QuantizationPlan | None, str]:
    """Weight-only quantization (graph.quantization.weights): the plan, handed to a plugin that
    lists the scheme in ``Capabilities.quantization`` (on cpu:0: to a host runtime listing it in
    ``weight_schemes``); elsewhere the dequantized float graph, which computes the quantized
    model's values at fp32's memory and speed, with a warning."""
    from neurenix_core.graph.compile import host_select
    from neurenix_core.graph.quantization import weights as W

    if scheme not in W.WEIGHT_SCHEMES:
        raise QuantizationError(f"{dev}: quantize={scheme!r}; weight quantization is one of {', '.join(W.WEIGHT_SCHEMES)}")
    plan = W.weight_plan(graph, scheme)
    tables = W.tables(graph, plan)
    linear = [q for name, q in plan.weights.items() if name not in tables]
    groups = {q.scale.shape[1] for q in linear if q.scale.ndim == 2}
    int8 = sum(q.bits == 8 for q in linear) if plan.bits == 4 else 0
    what = (f"{scheme} ({len(linear)} linear weights" + (f", groups per row {sorted(groups)}" if groups else ", per channel")
            + (f", {int8} kept int8 per channel (the output head)" if int8 else "")
            + (f", {len(tables)} embedding table(s) int8 per row" if tables else "") + ")")
    manifest = record.manifest
    if manifest is not None and scheme in manifest.capabilities.quantization:
        return graph, plan, f"{what}, lowered by plugin {record.name}"
    runtimes = host_select.weight_runtimes(scheme, extra) if str(dev.type) == "cpu" else []
    if runtimes:
        # Offered, not yet run: each input shape's line names the runtime that ran it (a runtime
        # listing the scheme may still refuse a graph, and the shape then runs dequantized).
        return graph, plan, f"{what}, for host runtime {' or '.join(runtimes)}"
    from neurenix_core.tensor.fallback import FallbackWarning
    from neurenix_core.user_frame import user_stacklevel

    note = (f"{what} dequantized to float: plugin {record.name} lowers no {scheme} kernels, so {dev} computes the quantized "
            "model's values with fp32 memory and speed")
    warnings.warn(f"{dev}: {note}", FallbackWarning, stacklevel=user_stacklevel())
    return W.dequantized(graph, plan), None, note


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
        raise QuantizationError(f"{dev}: quantize={quantize!r}; use True, 'int8', 'int16', 'dynamic', 'int8-weights', "
                                "'int4-weights' (optionally '...-int8-activations') or a QuantizationPlan")
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


def _host_runner(compiled: Compiled) -> Callable[..., list[np.ndarray]]:
    """``compiled`` as host arrays in -> a list of host arrays out, whatever its ``outputs=``."""
    def run(*inputs: np.ndarray) -> list[np.ndarray]:
        out = compiled(*inputs)
        return list(_deliver(tuple(out) if isinstance(out, tuple) else (out,), "host"))
    return run


class Compiled(Lowering):
    """A compiled model: call it with Tensors on its device or host data (copied in; see
    ``neurenix_core.graph.compile.inputs``); results are Tensors on its device, or NumPy arrays when
    compiled with ``outputs="host"``.

    Introspection: ``.device``, ``.precision``, ``.summary`` (what the backend did),
    ``.compiled_shapes`` (input shapes compiled so far), ``.graph``, ``.plan``, ``.native(shapes)``
    (the plugin's compiled model, e.g. to read its runtime configuration back).

    This class is the call path; the other concerns live in their own files on the shared state
    (``state.CompiledState``): per-shape compilation in ``lowering``, the runners in ``runners``,
    saving in ``artifact``, verification in ``verification``, the summary in ``report``.
    """

    #: The mixed-precision choice of a calibrated int8/int16 plan (graph.quantization.mixed), or None.
    _mixed: Any = None

    @property
    def summary(self) -> str:
        return summary(self)

    def __repr__(self) -> str:
        return f"Compiled(device='{self.device}', precision={self.precision!r}, shapes={self.compiled_shapes})"

    @strict_kwargs("Compiled.save")
    def save(self, path: Any) -> Any:
        """Write this model, as compiled so far, to the folder ``path``: each plugin-compiled part
        in the plugin's native format beside a JSON manifest (docs/deploy.md); returns the folder.
        ``nx.load_compiled(path)`` reads it back with only the core and that plugin's runtime."""
        from neurenix_core.graph.compile.artifact import save_compiled

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
    def float_layers(self) -> tuple[Any, ...]:
        """The layers a mixed-precision int8/int16 compile kept in float, each with why
        (``graph.quantization.mixed.FloatLayer``); empty where every layer is quantized."""
        return () if self._mixed is None else self._mixed.float_layers

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
        extra = dict(self.extra)
        extra.pop("shape_buckets", None)
        runtimes = set(self._host_parts.values())
        if str(self.device.type) == "cpu" and "runtime" not in extra and len(runtimes) == 1:
            # Prefixes are located on the runtime that runs the model: left to choose, a small
            # prefix would run on the integer reference and never differ from it.
            extra["runtime"] = runtimes.pop()

        def locate(graph: Graph) -> Callable[..., list[np.ndarray]]:
            return _host_runner(compile(graph, self.device, quantize=self.plan, outputs="host", verify=False, progress=False, **extra))

        self._verification = verify_compiled(self, batches, _host_runner(self), locate)
        return self._verification

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
            from neurenix_core.graph.compile.buckets import call_bucketed

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
