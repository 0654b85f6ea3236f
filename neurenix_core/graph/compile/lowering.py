"""Per-shape compilation: a call with new input shapes specializes the graph to them, places its
nodes (device, or cpu:0 where the device lacks an op or dtype), asks the plugin to compile what it
runs, and falls back (eager ops, cpu:0 segments) under the fallback policy, reported."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from neurenix_core.errors import CompilationError, ShapeError, UnsupportedOperationError
from neurenix_core.graph.compile.runners import NodeRefused, Runners
from neurenix_core.graph.compile.state import Runner
from neurenix_core.graph.ir import CompileOptions, Graph
from neurenix_core.graph.opset.schema import VALUE_KINDS
from neurenix_core.tensor import fallback

__all__ = ["Lowering"]


class Lowering(Runners):
    """Builds the runner for each input shape and records its placement and summary."""

    def _build(self, shapes: tuple[tuple[int, ...], ...], values: Mapping[str, np.ndarray] | None = None) -> Runner:
        from neurenix_core.graph.ir.cached_attention import split_cached_attention
        from neurenix_core.graph.ir.grouped_attention import fold_repeated_kv
        from neurenix_core.graph.ir.shapes import infer_shapes
        from neurenix_core.graph.ir.specialize import fold_size_constants

        base = self.graph if values is None else self._values.graph_for_values(shapes, values)
        try:
            graph = base.with_input_shapes(*shapes)
            if base.dynamic:  # sizes known: fold what they built, as a static import would have
                graph = fold_size_constants(graph)
            infer_shapes(graph)
            if self.plan is None:  # an int8 plan names the values these rewrite: its graph stays as planned
                graph = split_cached_attention(fold_repeated_kv(graph))
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
            except NodeRefused as retry:
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
            plan = self.plan if self.plan is not None else self.weights
            options = CompileOptions(device=self.device, precision=self.precision, quantization=plan, extra=self.extra)
            try:
                native = self._plugin_compile(placement.graph, options)
            except UnsupportedOperationError as exc:
                self._check_refused(exc, placement.graph, refused)
                return self._fallback(exc, graph)
            if native is not None:
                self._natives[tuple(tuple(s.shape) for s in graph.inputs)] = native
                return self._native_runner(native), str(getattr(native, "summary", "") or f"compiled by plugin {rec.name}")
        return self._local_runner(graph)

    def _place(self, graph: Graph, compiles: bool, refused: Mapping[str, str] | None = None) -> Any:
        """Which nodes the device runs: declared ops and dtypes (capabilities as data)."""
        from neurenix_core.graph import opset
        from neurenix_core.graph.compile.executor import EAGER_OPS
        from neurenix_core.graph.compile.placement import place

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
        placement = place(graph, declared, dtypes, str(self.device), plugin, decompose=self.plan is None, missing=missing, refused=refused)
        if not self._record.emulated:
            return placement
        from neurenix_core.plugins.backend_info import emulation_note

        return dataclasses.replace(placement, emulation=emulation_note(caps))

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
        rest = "in fp32" if self.plan is None else (f"in {self.precision} on the host runtime each cpu:0 segment's line in the placement "
                                                     "report names, or the integer reference; boundary values cross dequantized")
        return runner, f"partitioned: {placement.line()} ({segs} device segment(s), the rest on the CPU backend {rest})"

    def _fallback(self, exc: UnsupportedOperationError, graph: Graph) -> tuple[Runner, str]:
        where = f"{self.device} (plugin {self._record.name})"
        if self.plan is not None or self.weights is not None or self.precision not in (None, "fp32"):
            at = self.precision if self.weights is None else self.weights_note
            raise CompilationError(f"{where} cannot lower the model at {at}: {exc}; no eager equivalent exists") from exc
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
