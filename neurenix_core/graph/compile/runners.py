"""A lowered graph as a callable (``Runner``): the plugin's compiled model, a device segment, a
cpu:0 segment, the host runtime host_select chose, the NumPy interpreter, the integer reference,
or eager ops; and the partitioned runner that moves values between device and host segments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from neurenix_core.errors import QuantizationError, UnsupportedOperationError
from neurenix_core.graph.compile.placement import count_nodes
from neurenix_core.graph.compile.state import CompiledState, Runner, part_key
from neurenix_core.graph.ir import CompileOptions, Graph
from neurenix_core.graph.opset.schema import STORAGE_DTYPES, VALUE_KINDS
from neurenix_core.plugins.backend import CompiledModel
from neurenix_core.tensor.dtypes import PLAIN_DTYPES, contiguous
from neurenix_core.tensor.tensor import Tensor

__all__ = ["NodeRefused", "Runners"]


class NodeRefused(Exception):
    """Internal: a plugin refused one node of a quantized model; place it on cpu:0 and retry."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(node)
        self.node, self.reason = node, reason


class Runners(CompiledState):
    """The runners a compiled model is made of (per-shape compilation picks among them)."""

    def _plugin_compile(self, graph: Graph, options: CompileOptions) -> Any:
        """The plugin's compiled model of ``graph`` (the whole model or one device segment): the one
        nx.load_compiled restored for it, else the ``neurenix_compile`` hook's; kept for save()."""
        from neurenix_core.plugins.state import registry

        key = part_key(graph)
        native = self._restored.get(key)
        if native is None:
            native = registry().call(self._record, "neurenix_compile", backend=self._backend, graph=graph, options=options)
        if native is not None:
            self._parts[key] = native
        return native

    def _check_refused(self, exc: Exception, graph: Graph, refused: Mapping[str, str]) -> None:
        """Raise NodeRefused when a quantized model's lowering refused one named node it had not
        refused before (the caller places it on cpu:0 and tries again); else return."""
        node = getattr(exc, "node", None)
        if self.plan is None or node is None or node in refused or node not in {n.name for n in graph.nodes}:
            return
        raise NodeRefused(node, f"plugin {self._record.name} cannot lower it: {exc}") from exc

    def _segment_fn(self, sub: Graph, compiles: bool) -> Callable[..., tuple[Any, ...]]:
        """A device segment as natives -> natives: the plugin's compiled form, else eager ops. A
        quantized model's segment is compiled with the plan restricted to its values: it takes
        and returns float (dequantized) values, quantizing them with the whole plan's parameters."""
        from neurenix_core.graph.ir.qmath import restrict_plan

        if compiles:
            sub_plan = self.weights if self.plan is None else restrict_plan(self.plan, sub)
            options = CompileOptions(device=self.device, precision=self.precision, quantization=sub_plan, extra=self.extra)
            native = self._plugin_compile(sub, options)
            if native is not None:
                def run_native(*args: Any) -> tuple[Any, ...]:
                    out = native(*args)
                    outs = out if isinstance(out, (tuple, list)) else (out,)
                    return tuple(o._data if isinstance(o, Tensor) else o for o in outs)

                return run_native
        from neurenix_core.graph.compile.executor import EagerGraph

        eager = EagerGraph(sub, self.device)
        return lambda *args: tuple(t._data for t in eager(*self._tensors(args)))

    def _partition_runner(self, placement: Any, compiles: bool) -> tuple[Runner, Any]:
        from neurenix_core.graph.compile.placement import moved_to_cpu
        from neurenix_core.graph.ir.shapes import infer_values

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
        """A CPU segment as host arrays -> host arrays, on the host runtime host_select chooses:
        for a float model measured against the float32 interpreter, for a quantized one against
        the integer reference on the segment with the restricted plan (which runs it where no
        runtime takes the segment). A quantized segment's float inputs arrive dequantized,
        ``(q - zp) * scale``, and are quantized again with the same parameters, which gives back
        ``q`` exactly; its outputs leave dequantized (float32)."""
        from neurenix_core.graph.reference.run import run_graph, run_quantized

        what = f"segment {sub.nodes[0].name!r}" if sub.nodes else "segment"
        if self.plan is None:
            if self.weights is not None:  # a planned layer on cpu:0 computes with the quantized weights too
                from neurenix_core.graph.quantization.weights import dequantized

                sub = dequantized(sub, self.weights)
            interpret = lambda *hosts: run_graph(sub, *hosts, float_dtype=None)
            choice = self._choose_host(sub, interpret, what)
            if choice is None or choice.model is None:
                return interpret
            model: Callable[..., Any] = choice.model
            return model
        from neurenix_core.graph.ir.qmath import restrict_plan

        # Constants the segment reads are data: they go into its graph rather than arrive as
        # (unquantized) inputs, so the segment's graph checks against its plan like any other.
        consts = {n.output: n for n in whole.nodes if n.op == "constant"}
        keep = [k for k, spec in enumerate(sub.inputs) if spec.name not in consts]
        inline = tuple(consts[spec.name] for spec in sub.inputs if spec.name in consts)
        graph = Graph(tuple(sub.inputs[k] for k in keep), inline + sub.nodes, sub.outputs)
        plan = restrict_plan(self.plan, graph)

        def integer(*kept: Any) -> tuple[Any, ...]:
            out = run_quantized(graph, plan, *kept, float_inputs=True)
            return tuple(_float32(o) for o in (out if isinstance(out, tuple) else (out,)))

        # A dynamic plan quantizes per call, which no host runtime's kernels take; a graph per
        # input value would be measured once per value.
        choice = None if plan.dynamic or self._values is not None else self._choose_host(graph, integer, what, plan=plan)
        chosen: Callable[..., Any] = integer if choice is None or choice.model is None else choice.model

        def run(*hosts: Any) -> tuple[Any, ...]:
            out = chosen(*(hosts[k] for k in keep))
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)

        return run

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
            return self._quantized_cpu_runner(graph)
        if self.precision not in (None, "fp32"):
            raise UnsupportedOperationError(
                f"{self.device} (plugin {self._record.name}) runs models eagerly in fp32 only; precision={self.precision!r} "
                "needs a plugin that compiles models (or leave precision unset)"
            )
        if str(self.device.type) == "cpu":
            return self._cpu_runner(graph)
        if self.graph.dynamic or self._values is not None:  # the graph differs per input shape (or value): one eager graph each
            from neurenix_core.graph.compile.executor import EagerGraph

            shaped = EagerGraph(graph, self.device)
            return (lambda *natives: shaped(*self._tensors(natives))), f"eager on {self.device} through the {self._backend.name} op table, fp32, {len(graph.nodes)} layers"
        if self._eager is None:
            from neurenix_core.graph.compile.executor import EagerGraph

            eager = EagerGraph(self.graph, self.device)
            self._eager = lambda *natives: eager(*self._tensors(natives))
        return self._eager, f"eager on {self.device} through the {self._backend.name} op table, fp32, {len(self.graph.nodes)} layers"

    def _choose_host(self, graph: Graph, interpret: Callable[..., Any], what: str, weights: Any = None, plan: Any = None) -> Any:
        """The host runtime for ``graph`` on cpu:0 (graph.host_select), noted for the placement
        report; None where the graph cannot leave the interpreter (sequences, optionals)."""
        from neurenix_core.graph.compile import host_select
        from neurenix_core.graph.compile.placement import node_flops
        from neurenix_core.graph.ir.shapes import infer_values
        from neurenix_core.plugins.state import registry

        key = part_key(graph)
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
                                    state_dir=registry().config.state_dir, weights=weights, plan=plan)
        if key in self._host_pins:  # the artifact asked for it, not the user's runtime=
            choice = dataclasses.replace(choice, reason="the runtime this part ran on when the artifact was saved")
        elif self.runtime_reason is not None and runtime == self.extra.get("runtime"):
            choice = dataclasses.replace(choice, reason=self.runtime_reason)
        self._host_lines.append(f"{what} on cpu:0: {choice.line()}")
        self._host_parts[key] = choice.runtime
        return choice

    def _quantized_cpu_runner(self, graph: Graph) -> tuple[Runner, str]:
        """A static int8/int16 cpu:0 graph on the host runtime whose integer kernels host_select
        chooses (measured against the core's integer reference, and within its bound), the
        integer reference itself last."""
        from neurenix_core.backends import cpu_threads
        from neurenix_core.graph.reference.run import run_quantized

        plan = self.plan
        reference = f"NumPy integer kernels on {self.device} ({self.precision}, TFLite arithmetic)"
        # A graph per input value: measuring runtimes for each would cost more than it saves. A
        # dynamic plan quantizes activations per call, which no host runtime's kernels take.
        if self._values is not None or plan is None or plan.dynamic:
            return self._integer_runner(graph), reference

        threads = cpu_threads.checked(self.extra.get("threads"))

        def interpret(*hosts: Any) -> tuple[Any, ...]:  # measured as it will run: with its threads
            with cpu_threads.using(threads):
                out = run_quantized(graph, plan, *hosts)
            return tuple(_float32(o) for o in (out if isinstance(out, tuple) else (out,)))

        choice = self._choose_host(graph, interpret, "model", plan=plan)
        if choice is None or choice.model is None:
            return self._integer_runner(graph), reference + ("" if choice is None else f"; {choice.line()}")
        self._natives[tuple(tuple(s.shape) for s in graph.inputs)] = choice.model
        return self._host_model_runner(choice.model), f"{choice.model.summary}; {choice.line()}"

    def _cpu_runner(self, graph: Graph) -> tuple[Runner, str]:
        """A cpu:0 fp32 graph on the host runtime host_select chooses, the interpreter last."""
        from neurenix_core.backends import cpu_threads
        from neurenix_core.graph.quantization.weights import dequantized
        from neurenix_core.graph.reference.run import run_graph

        # Weight-only quantization kept as a plan (compiler._weight_only: a host runtime lowers its
        # scheme): that runtime gets the plan, the interpreter the dequantized graph, same values.
        # The dequantized graph is a float copy of the weights: it lives only while the choice is
        # measured against it, or as long as the interpreter is the runtime.
        weights = self.weights if self.plan is None else None
        made: list[Graph] = []  # built on first use: a cached choice of a runtime never needs it

        def floats() -> Graph:
            if weights is None:
                return graph
            if not made:
                made.append(dequantized(graph, weights))
            return made[0]

        threads = self.extra.get("threads")
        eager = f"eager on {self.device} (the NumPy opset interpreter), fp32, {count_nodes(graph.nodes)}" + (
            "" if threads is None else f", {threads} thread{'s' if threads != 1 else ''}")
        if weights is not None:
            eager += ", weights dequantized"
        if self._values is not None:  # a graph per input value: measuring runtimes for each would cost more than it saves
            return self._interpreter_runner(floats()), eager

        def interpret(*hosts: Any) -> Any:  # measured against the host runtimes as it will run: with its threads
            with cpu_threads.using(cpu_threads.checked(threads)):
                return run_graph(floats(), *hosts, float_dtype=None)

        choice = self._choose_host(graph, interpret, "model", weights)
        if choice is None or choice.model is None:
            return self._interpreter_runner(floats()), eager + ("" if choice is None else f"; {choice.line()}")
        if made:  # the interpreter's plan cache would keep the float copy alive
            from neurenix_core.graph.reference.interpreter import forget

            forget(made.pop())
        self._natives[tuple(tuple(s.shape) for s in graph.inputs)] = choice.model  # .native(), and the one-input fast path
        return self._host_model_runner(choice.model), f"{choice.model.summary}; {choice.line()}"

    def _host_model_runner(self, model: Any) -> Runner:
        from neurenix_core.tensor.tensor import wrap_on

        p, to_host = self._backend.placement(self.device.index), self._backend._to_host

        def run(*natives: Any) -> tuple[Tensor, ...]:
            # cpu:0's natives are host arrays already: handed over as they are (a host model reads
            # its inputs and never writes them), not copied (a language model's key/value cache,
            # 60 MB at 1,280 positions, per decode step). An output that is an input, or a view
            # of one, becomes a view of the caller's Tensor in views_of.
            hosts = (n if type(n) is np.ndarray else to_host(n) for n in natives)
            return tuple(wrap_on(contiguous(np.asarray(o)), p) for o in model(*hosts))

        return run

    def _interpreter_runner(self, graph: Graph) -> Runner:
        """The CPU backend's whole-opset path: the reference semantics on host arrays, every value
        in the dtype the graph declares."""
        from neurenix_core.backends import cpu_threads
        from neurenix_core.graph.reference.run import run_graph
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
        from neurenix_core.backends import cpu_threads
        from neurenix_core.graph.reference.run import run_quantized
        from neurenix_core.tensor.creation import asarray

        plan, dev = self.plan, self.device
        assert plan is not None

        to_host = self._backend._to_host
        # threads= reaches the integer kernels as it reaches the float interpreter: they split
        # their blocks over that many cores, BLAS at one thread per block.
        threads = cpu_threads.checked(self.extra.get("threads"))

        def run(*natives: Any) -> tuple[Tensor, ...]:
            with cpu_threads.using(threads):
                out = run_quantized(graph, plan, *(to_host(n) for n in natives))
            outs = out if isinstance(out, tuple) else (out,)
            # Float results leave dequantized in float32; integer and bool results (an argmax's
            # ids, a mask) keep their dtype, as every host runtime returns them.
            return tuple(asarray(_float32(o), device=dev) for o in outs)

        return run


def _float32(value: Any) -> np.ndarray:
    """An integer reference result as a quantized model returns it: float values dequantized in
    float32, integer and bool values as they are."""
    arr = np.asarray(value)
    return arr.astype(np.float32) if arr.dtype.kind == "f" else arr
