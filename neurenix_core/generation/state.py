"""``cache="state"``: the step model compiled by a host runtime that keeps the cache itself.

The step graph (``step.py``) joins each layer's past keys/values to the step's new ones
(``concat(past, new)``, transformers' cache update) and returns the new part. Here the graph is
handed to the runtime returning the joined values instead, with each (past input, joined output)
pair named as a state (``neurenix_core.graph.ir.host_state``): the runtime keeps the joined value
after every call and reads it as the past of the next. The host feeds only the token ids, the
mask and the positions, and gets the logits back; one compiled model serves the prompt and every
decode step at any length (on cpu:0, OpenVINO's runtime: PagedAttention over cache blocks it
writes in place, or its fused key/value-cache attention over a stateful model's variables).

The runtime gets the graph specialized at two sets of sizes (batch, new tokens, past length) and
compiles the axes that differ dynamic, refusing where the two lower differently. The core's
attention rewrites of per-shape compilation (``grouped_attention``, ``cached_attention``) are not
applied: the runtime's own kernel attends over its state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from neurenix_core.generation.errors import GenerationError

if TYPE_CHECKING:
    from neurenix_core.generation.step import StepSpec
    from neurenix_core.graph.ir import Graph
    from neurenix_core.graph.ir.host import HostRuntime
    from neurenix_core.graph.ir.host_state import StatefulModel, StateSpec

__all__ = ["StatefulStep", "default_cache", "joined_states"]

#: The step graph's inputs before the past keys/values: input_ids, mask, position_ids.
_LEADING: Final = 3
#: The sequence axis of a cache value (B, heads, S, head_dim).
_SEQ: Final = 2


def joined_states(graph: Graph) -> tuple[Graph, tuple[StateSpec, ...]]:
    """``graph`` returning the logits and each layer's joined keys/values (in place of the new
    ones), and the states pairing each past input with its joined output."""
    from neurenix_core.graph.ir.grouped_attention import without_unread
    from neurenix_core.graph.ir.host_state import StateSpec

    joins = {n.inputs[0]: n for n in graph.nodes if n.op == "concat" and len(n.inputs) == 2}
    outputs, states = [graph.outputs[0]], []
    for k, spec in enumerate(graph.inputs[_LEADING:], start=_LEADING):
        join = joins.get(spec.name)
        if join is None or int(join.attrs.get("axis", 0)) % 4 != _SEQ:
            raise GenerationError(f"cache='state': the step graph does not join past input {spec.name!r} to the new keys/values "
                                  "along the sequence axis (a cache other than transformers' DynamicCache); use cache='fixed'")
        states.append(StateSpec(past=k, joined=len(outputs), axis=_SEQ))
        outputs.append(join.output)
    return without_unread(replace(graph, outputs=tuple(outputs))), tuple(states)


def _specialized(graph: Graph, spec: StepSpec, batch: int, new: int, past: int) -> Graph:
    """``graph`` at these sizes, its size-built constants folded (as nx.compile specializes)."""
    from neurenix_core.graph.ir.shapes import infer_shapes
    from neurenix_core.graph.ir.specialize import fold_size_constants

    cache = (batch, spec.kv_heads, past, spec.head_dim)
    shapes = [(batch, new), (batch, 1, new, past + new), (batch, new), *([cache] * (len(graph.inputs) - _LEADING))]
    static = fold_size_constants(graph.with_input_shapes(*shapes))
    infer_shapes(static)
    return static


class StatefulStep:
    """The step model on a runtime that keeps the cache: ``reset()`` per generation, then
    ``(ids, mask, positions) -> logits`` per step."""

    def __init__(self, graph: Graph, spec: StepSpec, runtime: HostRuntime, options: Any, folder: Path | None = None) -> None:
        """Compile ``graph``; ``folder``: where the runtime also writes the model (state_store.py)."""
        from neurenix_core.graph.ir.host_state import SIZES

        stateful, states = joined_states(graph)
        first, second = (_specialized(stateful, spec, *sizes) for sizes in SIZES)
        where = {} if folder is None else {"folder": folder}  # a runtime of API 1.7 takes no folder
        self.model: StatefulModel = runtime.compile_stateful(first, second, states, options, **where)
        self.summary = f"cpu:0, runtime {runtime.name} ({runtime.version}): {self.model.summary}"

    @classmethod
    def loaded(cls, model: StatefulModel, runtime: HostRuntime, folder: Path) -> StatefulStep:
        """A step around ``model``, which ``runtime`` compiled from the stored entry ``folder``."""
        step = cls.__new__(cls)
        step.model = model
        step.summary = f"cpu:0, runtime {runtime.name} ({runtime.version}): {model.summary}; loaded from the stored step model {folder}"
        return step

    @property
    def compiled_shapes(self) -> tuple[str, ...]:
        """One model for every input shape (CausalLM.compilations counts it once)."""
        return ("every shape",)

    def reset(self) -> None:
        self.model.reset()

    def __call__(self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self.model(ids, mask, positions)[0]


def default_cache(device: Any, capacity: int | None, precision: str | None, options: Mapping[str, Any]) -> str:
    """"state" on cpu:0 where OpenVINO's runtime (plugin npu) keeps the cache and nothing asks for
    another runtime, a capacity or a precision other than fp32; "fixed" otherwise.

    A stateful model is one compiled model for the prompt and every decode step, its cache written
    in place by OpenVINO's PagedAttention (a language model's step; the fused key/value-cache
    attention otherwise): on the 2-vCPU AMD EPYC it decodes the 135M model at the fixed cache's
    speed (within the run-to-run noise), reaches the first token sooner (the prompt's masked scores
    skipped), and with int8/int4 weights peaks at 62-65% of the memory (docs/generation.md).
    """
    from neurenix_core.graph.compile.host_select import host_runtime_named, requested_runtime
    from neurenix_core.graph.ir.host import HostRuntime

    if device.type != "cpu" or capacity is not None or precision not in (None, "fp32") or options.get("runtime", "openvino") != "openvino":
        return "fixed"
    if set(options) - {"runtime", "threads"} or requested_runtime({}) is not None:
        return "fixed"  # other compile options, or NEURENIX_CPU_RUNTIME naming a runtime: nx.compile's path
    runtime = host_runtime_named("openvino").get("openvino")
    return "state" if isinstance(runtime, HostRuntime) and runtime.keeps_state else "fixed"
