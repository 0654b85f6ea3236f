"""cpu:0's OpenVINO runtime keeping a step graph's cache between calls (``compile_stateful``, API 1.7).

A language model's step graph reads the past keys/values of each layer and joins the step's new
ones to them (``concat(past, new)``); ``neurenix_core.graph.ir.host_state`` names those pairs. Here
each past input becomes OpenVINO state: a ``ReadValue`` of a variable in place of the input and an
``Assign`` of the joined value in place of the output (OpenVINO's stateful models, as OpenVINO
GenAI builds its language models). The state lives in the infer request and is updated in place,
so nothing of the cache crosses to the host, and one compiled model, with the batch, the new-token
count and the past length dynamic, serves the prompt and every decode step: one copy of the weights.

The shape OpenVINO's CPU device turns into its fused key/value-cache attention (one kernel that
appends the new keys in place and attends over the cache without joining it): ``ReadValue ->
Gather(beam_idx) -> Concat -> [Unsqueeze -> Broadcast -> Reshape] -> ScaledDotProductAttention``
with the ``Assign`` reading the ``Concat``. The ``Gather`` is the beam reorder OpenVINO GenAI's
models carry; here it is always the identity (``beam_idx = arange(batch)``), and the pattern
requires it. The bracket is transformers' ``repeat_kv`` for grouped-query attention, which the
lowering leaves as it is (the core's query stacking, ``grouped_attention.py``, is not applied to
a stateful step: the fused kernel reads the query and key lengths as equal). The summary counts
the attention layers that run fused.

Both specializations of the graph are lowered and must be the same OpenVINO model up to their
input sizes (``shape_sharing.signature``); the axes where they differ are compiled dynamic.

A language model's step (``nx.generation``'s inputs, every state read by an attention layer) then
runs on PagedAttention instead (``paged.py``): the same stateful model through OpenVINO's
``paged_attention_transformation``, which skips a prompt's masked scores. Any other step keeps the
variables and the fused attention.

Stored (API 1.8, ``stores_state_models``): given a folder, the stateful OpenVINO model is written
there as IR (``model.xml`` / ``model.bin``, weights as they are: f32, or the compressed int8/int4
constants) with ``openvino.json`` (what the wrapper needs without the graph); ``load_stateful``
compiles it from there. OpenVINO maps ``model.bin`` rather than reading it, so a process that loads
an entry holds the weights once in the file's pages and once in the CPU device's packed layout,
never as a float model beside them.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Graph, HostOptions, StatefulModel, StateSpec, scheme_of
from neurenix_core.errors import CompilationError, ModelFormatError, OperationError
from neurenix_npu_openvino.activation_probe import check_activation_quantization
from neurenix_npu_openvino.config import cpu_host_properties, weights_summary
from neurenix_npu_openvino.int64_guard import check_fits_int32, int64_use
from neurenix_npu_openvino.paged import BLOCK, OpenVINOPagedModel, paged
from neurenix_npu_openvino.shape_sharing import first_line, signature

__all__ = ["OpenVINOStatefulModel", "compile_stateful", "load_stateful"]

#: The CPU device's attention layer; fused with the key/value cache it also returns the cache
#: (its present keys and values: three outputs, where the plain attention has one).
_ATTENTION: Final = "ScaledDotProductAttention"
_BEAM: Final = "beam_idx"
#: A stored model's files (``folder=``); the json holds the wrapper's facts and this version.
_XML: Final = "model.xml"
_FACTS: Final = "openvino.json"
#: 2: the weights named by their scheme ("scheme"; 1 had their bit width).
_FACTS_FORMAT: Final = 2


def compile_stateful(core: Any, tensor: Any, graph: Graph, other: Graph, states: tuple[StateSpec, ...],
                     options: HostOptions, folder: Path | None = None) -> StatefulModel:
    """One compiled model for ``graph`` at every input size, keeping ``states`` in OpenVINO state
    (``core``: the runtime's ``openvino.Core``, ``tensor``: ``openvino.Tensor``); written into
    ``folder`` too where one is given (``load_stateful`` reads it)."""
    from neurenix_npu_openvino.lowering import lower_graph

    if options.plan is not None or options.precision != "fp32":
        raise CompilationError(f"host runtime openvino keeps a cache for float steps (fp32, or int8/int4 weights), not "
                               f"precision={options.precision!r} with a static plan; generate with cache='fixed'")
    scheme = None if options.weights is None else scheme_of(options.weights)
    props = _properties(core, options.threads, scheme)
    model = lower_graph(graph, options.weights, device="cpu:0")
    if signature(model, props) != signature(lower_graph(other, options.weights, device="cpu:0"), props):
        raise CompilationError("host runtime openvino: the step graph lowers to different OpenVINO models at two sets of "
                               "input sizes (a size is part of its lowering), so one model cannot serve every step; "
                               "generate with cache='fixed'")
    sizes = [(tuple(a.shape), tuple(b.shape)) for a, b in zip(graph.inputs, other.inputs, strict=True)]
    kept = [k for k in range(len(graph.inputs)) if k not in {s.past for s in states}]
    stateful = _with_state(model, states, [sizes[k] for k in kept])
    del model
    guarded = tuple(kept.index(k) for k in int64_use(graph)[1] if k in kept)
    facts: dict[str, Any] = {"inputs": len(kept), "guarded": list(guarded), "states": len(states), "scheme": scheme}
    found = paged(stateful, len(states))  # a language model's step: on PagedAttention (paged.py)
    facts["paged"] = found is not None
    if folder is not None:
        # The model before the transformation: PagedAttention's runtime info (head counts) does
        # not survive OpenVINO's IR, so the load transforms again, as OpenVINO GenAI does.
        _store(stateful, folder, facts)
    if found is not None:
        del stateful
        return _compiled_paged(core, tensor, found[0], props, found[1], guarded, scheme)
    return _compiled(core, tensor, stateful, props, facts)


def _properties(core: Any, threads: int | None, scheme: str | None) -> dict[str, Any]:
    """The stateful step's compile properties (its weights quantized as ``scheme`` says)."""
    check_activation_quantization(core, scheme, "host runtime openvino (cpu:0)")
    props = cpu_host_properties(threads, scheme=scheme)
    props["KV_CACHE_PRECISION"] = "f32"  # the cache kept as computed (the CPU device may default to u8 for it)
    return props


def _compiled(core: Any, tensor: Any, stateful: Any, props: dict[str, Any], facts: dict[str, Any]) -> StatefulModel:
    """The compiled step of ``stateful`` as ``facts`` describe it (stored with it by ``_store``)."""
    guarded, scheme, states = tuple(int(k) for k in facts["guarded"]), facts["scheme"], int(facts["states"])
    if facts.get("paged"):
        found = paged(stateful, states)
        if found is None:
            raise CompilationError("host runtime openvino: the step that ran on PagedAttention no longer transforms to it")
        return _compiled_paged(core, tensor, found[0], props, found[1], guarded, scheme)
    return _compiled_step(core, tensor, stateful, props, int(facts["inputs"]), guarded, states, scheme)


def _compiled_paged(core: Any, tensor: Any, model: Any, props: dict[str, Any], geo: tuple[int, ...], guarded: tuple[int, ...],
                    scheme: str | None) -> OpenVINOPagedModel:
    try:
        compiled = core.compile_model(model, "CPU", props)
    except RuntimeError as exc:
        raise CompilationError(f"host runtime openvino could not compile the paged step: {first_line(exc)}") from exc
    threads = int(compiled.get_property("INFERENCE_NUM_THREADS")) or None
    weight_line = "" if scheme is None else f", {weights_summary(scheme)}"
    summary = (f"OpenVINO CPU on cpu:0, INFERENCE_PRECISION_HINT=f32, {threads or 'default'} thread(s){weight_line}, "
               f"stateful: one compiled model for the prompt and every step, {geo[0]} attention layer(s) on OpenVINO's "
               f"PagedAttention (the cache in blocks of {BLOCK} tokens, f32; a prompt's masked scores are skipped)")
    return OpenVINOPagedModel(compiled, tensor, (geo[0], geo[1], geo[2]), guarded, summary)


def _compiled_step(core: Any, tensor: Any, stateful: Any, props: dict[str, Any], inputs: int, guarded: tuple[int, ...], states: int,
                   scheme: str | None) -> OpenVINOStatefulModel:
    try:
        compiled = core.compile_model(stateful, "CPU", props)
    except RuntimeError as exc:
        raise CompilationError(f"host runtime openvino could not compile the stateful step: {first_line(exc)}") from exc
    step = OpenVINOStatefulModel(compiled, tensor, inputs, guarded, states, scheme)
    if 2 * step.fused != states:
        # Only the fused attention's own state handling is sound here: a plain ReadValue/Assign on
        # OpenVINO 2026.4's CPU device keeps reading the old values after reset_state() (and
        # garbage in a new infer request), which would give wrong tokens without a word.
        raise CompilationError(f"host runtime openvino fused {step.fused} attention layer(s) with the cache, for {states} "
                               f"cache values (two per layer); OpenVINO's state outside its fused attention is not reliable, "
                               "so it keeps no cache for this model: generate with cache='fixed'")
    return step


def _store(stateful: Any, folder: Path, facts: dict[str, Any]) -> None:
    """The stateful model as IR in ``folder`` (its weights as they are: never converted to f16)."""
    import openvino as ov

    ov.save_model(stateful, str(folder / _XML), compress_to_fp16=False)
    (folder / _FACTS).write_text(json.dumps({"format": _FACTS_FORMAT, **facts}), encoding="utf-8")


def load_stateful(core: Any, tensor: Any, folder: Path, options: HostOptions) -> StatefulModel:
    """The model ``compile_stateful(..., folder=folder)`` wrote, compiled with ``options``' threads."""
    try:
        facts = json.loads((folder / _FACTS).read_text(encoding="utf-8"))
        if facts.get("format") != _FACTS_FORMAT:
            raise ValueError(f"format {facts.get('format')!r}, not {_FACTS_FORMAT}")
        model = core.read_model(str(folder / _XML))
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelFormatError(f"host runtime openvino: the stored stateful model in {folder} cannot be read ({first_line(exc)})") from exc
    return _compiled(core, tensor, model, _properties(core, options.threads, facts["scheme"]), facts)


def _with_state(model: Any, states: tuple[StateSpec, ...], sizes: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> Any:
    """``model`` with each state's input read from a variable and its joined output assigned to
    it; the other inputs' axes that differ between the two specializations made dynamic."""
    import openvino as ov
    import openvino.opset16 as op
    from openvino import opset6
    from openvino.op.util import Variable, VariableInfo

    params, results = list(model.get_parameters()), list(model.get_results())
    beam = op.parameter([-1], ov.Type.i32, name=_BEAM)
    batch = op.gather(op.shape_of(params[0], "i64"), op.constant(np.array([0], np.int64)), op.constant(np.int64(0)))
    # The empty length computed (batch * 0), not a constant 0: OpenVINO 2026.4's CPU device fixes a
    # state's memory to the shape of a constant initializer, and the first Assign of a longer value
    # fails ("Can not clone with new dims"); a computed size leaves the length dynamic.
    empty_length = op.multiply(batch, op.constant(np.array([0], np.int64)))
    sinks = []
    for k, state in enumerate(states):
        past, joined = params[state.past], results[state.joined].input_value(0)
        shape = list(past.get_output_shape(0))
        info = VariableInfo()
        info.variable_id, info.data_type = f"state_{k}", past.get_element_type()
        info.data_shape = ov.PartialShape([-1 if a in (0, state.axis) else d for a, d in enumerate(shape)])
        variable = Variable(info)
        dims = [batch, *(empty_length if a == state.axis else op.constant(np.array([d], np.int64)) for a, d in enumerate(shape) if a)]
        empty = op.broadcast(op.constant(np.zeros((), past.get_element_type().to_dtype())), op.concat(dims, 0))
        read = opset6.read_value(empty, variable)
        past.output(0).replace(op.gather(read, beam, op.constant(np.int64(0))).output(0))
        sinks.append(op.assign(joined.get_node(), variable))  # a Concat: one output
        # The joined value's Result goes: the fused attention takes a join read only by the
        # attention and its Assign.
        results[state.joined].input(0).replace_source_output(op.constant(np.zeros(0, np.float32)).output(0))
    skip = {s.joined for s in states}
    keep = [p for k, p in enumerate(params) if k not in {s.past for s in states}]
    out = ov.Model([r for j, r in enumerate(results) if j not in skip], sinks, [*keep, beam], "neurenix_stateful_step")
    out.reshape({p.output(0): ov.PartialShape([-1 if x != y else x for x, y in zip(a, b, strict=True)])
                 for p, (a, b) in zip(keep, sizes, strict=True)})
    return out


class OpenVINOStatefulModel(StatefulModel):
    """One compiled stateful model and its infer request (the state lives in the request)."""

    def __init__(self, compiled: Any, tensor: Any, inputs: int, guarded: tuple[int, ...], states: int, scheme: str | None) -> None:
        from neurenix_npu_openvino.compiled import _native_infer

        self.compiled = compiled
        self._tensor, self._inputs, self._guarded = tensor, inputs, guarded
        self._request = compiled.create_infer_request()
        self._infer = _native_infer(self._request)
        self._outputs = len(compiled.outputs)
        self._lock = threading.Lock()
        self.threads = int(compiled.get_property("INFERENCE_NUM_THREADS")) or None
        self.fused = sum(op.get_rt_info()["layerType"].astype(str) == _ATTENTION and op.get_output_size() == 3
                         for op in compiled.get_runtime_model().get_ordered_ops())
        weight_line = "" if scheme is None else f", {weights_summary(scheme)}"
        self.summary = (f"OpenVINO CPU on cpu:0, INFERENCE_PRECISION_HINT=f32, {self.threads or 'default'} thread(s){weight_line}, "
                        f"stateful: one compiled model for the prompt and every step, {states} cache values kept in its state "
                        f"(KV_CACHE_PRECISION=f32), {self.fused} attention layer(s) on its fused key/value-cache attention")

    def reset(self) -> None:
        with self._lock:
            self._request.reset_state()

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        if len(inputs) != self._inputs:
            raise OperationError(f"the stateful step takes {self._inputs} input(s) (the cache is in its state), got {len(inputs)}")
        for i in self._guarded:
            check_fits_int32(inputs[i], i)
        feed = {i: self._tensor(np.ascontiguousarray(x), shared_memory=True) for i, x in enumerate(inputs)}
        feed[self._inputs] = self._tensor(np.arange(inputs[0].shape[0], dtype=np.int32))  # beam_idx: no reorder
        with self._lock:
            self._infer(self._request, feed, True, False)
            return tuple(self._request.get_output_tensor(i).data.copy() for i in range(self._outputs))
