"""ONNX import handlers: control flow, sequences and optionals (ONNX's controlflow, sequence and optional families).

Top level: ``If`` / ``Loop`` / ``Scan`` / ``SequenceMap`` become one node per used output
(``opset.controlflow``) whose body attributes are :class:`OnnxBody` objects, and whose inputs are
the ONNX inputs followed by the enclosing graph's values the subgraphs read (lexical capture).
The output's static type is the model's declared one (ONNX shape inference first), else what the
subgraph declares; a tensor output without a static shape is refused.

Bodies run eagerly, per call, with the values they get: each ONNX node goes through its import
handler with constant inputs, so the builder folds it with the opset's reference semantics (the
ops cpu:0 runs), and sequence / optional / control-flow nodes run their opset semantics directly.
Every size inside a body is then the run's own (a Slice bounded by the iteration number, the Shape
of a sequence element), which a body graph built once with static shapes could not give.

Sequences and optionals are values of kind ``seq(<dtype>)`` / ``optional(<...>)``
(``opset.VALUE_KINDS``); a graph input of such a type takes a list of arrays / an array or None.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Final, final

import numpy as np

from neurenix_core.errors import NeurenixError, UnsupportedOperationError
from neurenix_core.graph import opset
from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import REMEDY, Handler, OnnxNode, ValueInputNeeded, _value_source, fail
from neurenix_core.graph.importers.onnx_common import symbolic_const as _symbolic
from neurenix_core.graph.ir.symbolic import NotSymbolicError
from neurenix_core.graph.opset import controlflow as CF
from neurenix_core.graph.opset.sequence import is_kind, optional_of, seq_of

__all__ = ["HANDLERS", "OnnxBody", "batched_scan8", "bind", "value_kind"]

#: What the eager body runner takes from ``onnx_import`` (which imports this module): the merged
#: handler table, the Constant-node reader, the attribute decoder and the per-node import
#: (see :func:`bind`): importing ``onnx_import`` here would be an import cycle.
_BOUND: dict[str, Any] = {}


def bind(handlers: Mapping[str, Handler], constant: Any, attr: Any, import_node: Any) -> None:
    """Called once by ``onnx_import``: the handlers bodies run through, and its per-node import."""
    _BOUND.update(handlers=handlers, constant=constant, attr=attr, import_node=import_node)


# ----------------------------------------------------------------------------- ONNX types
def _elem_dtype(elem_type: int) -> str:
    from onnx import helper

    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    return "bool" if dtype == np.bool_ else str(dtype)


def _type_of(tp: Any) -> tuple[tuple[int, ...] | None, str] | None:
    """(static shape or None when not fully known, dtype or value kind) of an ONNX TypeProto;
    None when the type is not given or is not one the opset carries."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        t = tp.tensor_type
        if not t.elem_type:
            return None
        dtype = _elem_dtype(t.elem_type)
        if dtype not in opset.DTYPES:
            return None
        known = t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim)
        return (tuple(int(d.dim_value) for d in t.shape.dim) if known else None), dtype
    if which == "sequence_type":
        inner = _type_of(tp.sequence_type.elem_type)
        return None if inner is None or is_kind(inner[1]) else ((), seq_of(inner[1]))
    if which == "optional_type":
        inner = _type_of(tp.optional_type.elem_type)
        return None if inner is None or inner[1].startswith("optional(") else ((), optional_of(inner[1]))
    return None


def value_kind(tp: Any) -> str | None:
    """The value kind of a sequence / optional graph input's ONNX type, None for a tensor type;
    a type the opset does not carry (a map, a sequence of sequences) is refused."""
    if tp.WhichOneof("value") == "tensor_type":
        return None
    got = _type_of(tp)
    if got is None:
        raise UnsupportedOperationError(f"from_onnx: a graph input has ONNX type {tp.WhichOneof('value')} with an element type "
                                        "neurenix does not carry (tensors, sequences of tensors and optionals of those); " + REMEDY)
    return got[1]


def _declared(b: GraphBuilder) -> dict[str, Any]:
    """Every value's ONNX type in the model being imported (after ONNX shape inference), the
    top graph's first, then its subgraphs' (ONNX names each value once in a model)."""
    cached = getattr(b, "_cf_types", None)
    if cached is not None:
        return cached
    types: dict[str, Any] = {}
    model = getattr(b, "onnx_model", None)
    if model is not None:
        import onnx

        with contextlib.suppress(Exception):  # inference only adds types; the model's own value_info stays
            model = onnx.shape_inference.infer_shapes(model)
        pending = [model.graph]  # subgraphs too: their values' types (inference records them there)
        while pending:
            g = pending.pop()
            for vi in [*g.value_info, *g.input, *g.output]:
                types.setdefault(vi.name, vi.type)
            pending.extend(sg for node in g.node for sg in _subgraphs(node))
    b._cf_types = types  # type: ignore[attr-defined]
    return types


def _static(b: GraphBuilder, n: OnnxNode, k: int, fallbacks: Iterable[tuple[tuple[int, ...] | None, str] | None],
            needed: Callable[[], None] | None = None) -> tuple[tuple[int, ...], str]:
    """The static (shape, dtype) of output ``k``: the model's declared type, else the first
    fallback that is complete (taken in order, only as far as needed: a fallback may be a
    generator that derives types); a tensor whose shape nothing states is refused (after
    ``needed``, which raises ValueInputNeeded where an import per value of small graph inputs
    knows it)."""
    name = n.proto.output[k]
    tp = _declared(b).get(name)
    dtype = None
    for c in itertools.chain([None if tp is None else _type_of(tp)], fallbacks):
        if c is not None and (is_kind(c[1]) or c[0] is not None):
            return (c[0] or ()), c[1]
        dtype = dtype or (c[1] if c is not None else None)
    if needed is not None:
        needed()
    if dtype is None:
        raise fail(b, n, f"output {k} ({name!r}) has no type the opset carries in the model")
    raise fail(b, n, f"output {k} ({name!r}) has no static shape in the model (declare it in value_info, or re-export with static shapes)")


# ----------------------------------------------------------------------------- outer scope
def _subgraphs(proto: Any) -> list[Any]:
    from onnx import AttributeProto

    out = []
    for a in proto.attribute:
        if a.type == AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _free_names(graph: Any) -> list[str]:
    """Names ``graph`` (and the subgraphs inside it) reads from enclosing scopes, in order."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    free: dict[str, None] = {}
    for node in graph.node:
        for name in [*node.input, *(x for g in _subgraphs(node) for x in _free_names(g))]:
            if name not in defined:
                free[name] = None
        defined.update(node.output)
    return list(free)


def _outer(b: GraphBuilder, n: OnnxNode, graphs: Sequence[Any]) -> tuple[tuple[str, ...], list[Value]]:
    env: Mapping[str, Any] = getattr(b, "onnx_env", {})
    names = list(dict.fromkeys(x for g in graphs for x in _free_names(g)))
    missing = [x for x in names if env.get(x) is None]
    if missing:
        raise fail(b, n, f"has a subgraph that reads {missing}, which the enclosing graph does not define")
    return tuple(names), [env[x] for x in names]


# ----------------------------------------------------------------------------- emitting
def _append(b: GraphBuilder, name: str, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any]) -> Value:
    """A node that is never folded: its value may be a sequence or optional, which a constant
    (an array) cannot hold; constant inputs become ``constant`` nodes."""
    return b._append(name, op, [b.materialize(v, f"{name}.const") for v in inputs], attrs, {})


def _emit(b: GraphBuilder, name: str, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any]) -> Value:
    if is_kind(str(attrs.get("dtype", ""))) or op in _KIND_OPS:
        return _append(b, name, op, inputs, attrs)
    return b.emit(name, op, inputs, attrs)


_KIND_OPS: Final = frozenset({"sequence_empty", "sequence_construct", "sequence_insert", "sequence_erase", "split_to_sequence", "optional"})


def _cf_outputs(b: GraphBuilder, n: OnnxNode, op: str, inputs: list[Value], attrs: dict[str, Any],
                fallback: Any, needed: Callable[[], None] | None = None) -> list[Value | None]:
    """One ``op`` node per used output, each with its static type (every type is settled before
    a node is emitted)."""
    count = len(n.proto.output)
    types = [_static(b, n, k, fallback(k), needed) if name else None for k, name in enumerate(n.proto.output)]
    outs: list[Value | None] = []
    for k, t in enumerate(types):
        if t is None:
            outs.append(None)
            continue
        node_name = n.name if count == 1 else f"{n.name}.{k}"
        outs.append(_emit(b, node_name, op, inputs, {**attrs, "output": k, "n_outputs": count, "shape": t[0], "dtype": t[1]}))
    return outs


def _graph_outputs(g: Any, k: int) -> tuple[tuple[int, ...] | None, str] | None:
    return _type_of(g.output[k].type) if k < len(g.output) else None


# ----------------------------------------------------------------------------- subgraphs imported through the handlers
def _import_graph(b: GraphBuilder, graph: Any, env: MutableMapping[str, Any], prefix: str) -> list[Any]:
    """Import ``graph``'s nodes into ``b`` through the handlers, as the top-level import does
    (``env`` maps names to values and receives the graph's own); the graph's output values."""
    from onnx import numpy_helper

    previous = getattr(b, "onnx_env", None)
    b.onnx_env = env  # type: ignore[attr-defined]  # nested control flow reads its outer values here
    try:
        for init in graph.initializer:
            env[init.name] = Const(numpy_helper.to_array(init))
        for i, proto in enumerate(graph.node):
            _BOUND["import_node"](b, proto, i, env, prefix)  # the top-level import's one path per node
        missing = [o.name for o in graph.output if o.name not in env]
        if missing:
            raise b.unsupported(prefix, "subgraph", f"returns {missing}, which it does not define", REMEDY)
        return [env[o.name] for o in graph.output]
    finally:
        b.onnx_env = previous  # type: ignore[attr-defined]


#: A body's formal input for :func:`_derive`: its value when known at import, else its (shape, dtype).
Formal = Const | tuple[tuple[int, ...], str]


def _derive(b: GraphBuilder, n: OnnxNode, graph: Any, formal: Sequence[Formal], outer: tuple[tuple[str, ...], list[Value]]) -> list[Any] | None:
    """The values (graph values with static specs, or constants) ``graph`` gives when imported into a
    scratch builder whose inputs have the static types of the formal inputs and of the enclosing
    values it reads; None when that import needs a value (a size computed from an input) or refuses.

    Sound where it is used: every handler infers its output's shape from its inputs' shapes and
    the constants only, so a body whose inputs have these types gives these types on every run
    (callers check that carried values keep their type, so every iteration has these inputs)."""
    if any(s.dynamic for s in b.inputs):  # specs hold the example's sizes only: import static shapes instead
        raise NotSymbolicError(f"node {n.name!r} ({n.op}) has outputs whose shapes the model does not state, which need static input shapes")
    if len(formal) != len(graph.input):
        return None
    sb = GraphBuilder(b.source)
    sb.onnx_opset = getattr(b, "onnx_opset", 0)  # type: ignore[attr-defined]
    sb.onnx_model, sb._cf_types = getattr(b, "onnx_model", None), _declared(b)  # type: ignore[attr-defined]
    env: dict[str, Any] = {"": None}
    for name, v in zip(*outer):
        if isinstance(v, Const):
            env[name] = v
        else:
            spec = b.spec(v)
            env[name] = sb.add_input(name, spec.shape, spec.dtype)
    for vi, f in zip(graph.input, formal):
        env[vi.name] = f if isinstance(f, Const) else sb.add_input(vi.name or "input", f[0], f[1])
    try:
        outs = _import_graph(sb, graph, env, n.name)
    except (NeurenixError, ValueError):  # the body's types depend on values (or it refuses): no static type
        return None
    return [None if v is None else (_spec_of(sb, v), v) for v in outs]


def _spec_of(b: GraphBuilder, v: Value) -> tuple[tuple[int, ...], str]:
    spec = b.spec(v)
    return (() if is_kind(spec.dtype) else tuple(int(d) for d in spec.shape)), spec.dtype


def _steady(derived: Sequence[Any], first: int, initial: Sequence[Value], b: GraphBuilder) -> bool:
    """Whether the carried values the body returns (from ``derived[first]`` on) have the types of
    their initial values: then every iteration runs with those types."""
    return all(derived[first + k] is not None and derived[first + k][0] == _spec_of(b, v) for k, v in enumerate(initial))


def _known(v: Value | None) -> bool:
    return v is None or isinstance(v, Const) and not _symbolic(v)


def _fold(b: GraphBuilder, n: OnnxNode, run: Any) -> list[Value | None] | None:
    """The node's outputs computed now (every input is known at import): its semantics on those
    values, so no static type is needed; None when an output is a sequence or optional (which a
    constant cannot hold: the node stays, typed by its kind)."""
    try:
        outs = run()
    except ValueError as exc:
        raise fail(b, n, f"cannot run on the values it is given ({exc})") from exc
    if len(outs) != len(n.proto.output):
        raise fail(b, n, f"gives {len(outs)} output(s) for {len(n.proto.output)}")
    if any(name and not isinstance(v, (np.ndarray, np.generic)) for name, v in zip(n.proto.output, outs)):
        return None
    return [Const(np.asarray(v)) if name else None for name, v in zip(n.proto.output, outs)]


def _value_needed(b: GraphBuilder, n: OnnxNode, values: Sequence[Value | None], what: str) -> None:
    """Raise ValueInputNeeded when every value ``values`` holds that is not known at import is
    computed from small graph inputs only: the import per value of those inputs knows them all
    (and folds the node); otherwise return."""
    sources = []
    for v in values:
        if _known(v):
            continue
        source = None if _symbolic(v) else _value_source(b, v)  # type: ignore[arg-type]
        if source is None:
            return
        sources.append(source)
    if sources:
        raise ValueInputNeeded(str(fail(b, n, f"has outputs whose shapes depend on {what}, computed from graph input {sources[0]!r}")), sources[0])


# ----------------------------------------------------------------------------- control flow
def _if(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    then_g, else_g = n.attrs["then_branch"], n.attrs["else_branch"]
    cond = n.inputs[0]
    if isinstance(cond, Const) and not _symbolic(cond):
        inlined = _inline_if(b, n, then_g if CF._flag(cond.array, "If's condition") else else_g)
        if inlined is not None:
            return inlined
    outer = _outer(b, n, [then_g, else_g])
    attrs = {"then_branch": OnnxBody(then_g, b.source), "else_branch": OnnxBody(else_g, b.source), "outer": outer[0]}
    derived: list[Any] = []

    def fallback(k: int) -> Iterator[Any]:
        yield _agree(_graph_outputs(then_g, k), _graph_outputs(else_g, k))
        if not derived:  # both branches' types where they agree (the condition is known at run time only)
            derived.extend([_derive(b, n, then_g, [], outer) or [], _derive(b, n, else_g, [], outer) or []])
        yield _agree(*[d[k][0] if k < len(d) and d[k] is not None else None for d in derived])

    return _cf_outputs(b, n, "if", [cond, *outer[1]], attrs, fallback,  # type: ignore[list-item]
                       lambda: _value_needed(b, n, [cond], "the condition"))


def _inline_if(b: GraphBuilder, n: OnnxNode, branch: Any) -> list[Value | None] | None:
    """An If whose condition is known at import is the branch it takes, imported in its place
    (every output then has the type its nodes infer); None when that import refuses (the If
    node then runs the branch at run time, as it would otherwise)."""
    nodes, consts = len(b.nodes), dict(b._const_names)
    try:
        outs = _import_graph(b, branch, ChainMap({}, getattr(b, "onnx_env", {})), n.name)
    except ValueInputNeeded:
        raise
    except UnsupportedOperationError:
        del b.nodes[nodes:]  # what the branch had emitted goes, with the constants it named
        b._const_names = consts
        return None
    if len(outs) != len(n.proto.output):
        raise fail(b, n, f"takes a branch with {len(outs)} output(s), where the node has {len(n.proto.output)}")
    return [v if name else None for name, v in zip(n.proto.output, outs)]


def _agree(a: Any, c: Any) -> Any:
    return a if a == c else None


def _loop(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    body = n.attrs["body"]
    m, cond, given = n.input(0), n.input(1), list(n.inputs[2:])
    if m is None and cond is None:
        raise fail(b, n, "has neither a trip count nor a condition (an endless loop)")
    if any(v is None for v in given):
        raise fail(b, n, "leaves a loop-carried input empty")
    carried = [v for v in given if v is not None]  # every one (checked above)
    outer = _outer(b, n, [body])
    count = len(n.proto.output)
    known = [m, cond, *carried, *outer[1]]
    if all(_known(v) for v in known):
        folded = _fold(b, n, lambda: CF.run_loop(
            None if m is None else m.array, None if cond is None else cond.array,  # type: ignore[union-attr]
            [v.array for v in carried], OnnxBody(body, b.source), {k: v.array for k, v in zip(*outer)}, count,  # type: ignore[union-attr]
            _empty_scans(b, n, body, m, cond, carried, outer)))
        if folded is not None:
            return folded
    attrs = {"body": OnnxBody(body, b.source), "has_max": m is not None, "has_cond": cond is not None, "outer": outer[0]}
    ins = [v for v in (m, cond) if v is not None] + carried + outer[1]
    n_carried = len(carried)
    derived: list[Any] = []

    def fallback(k: int) -> Iterator[Any]:
        if k < n_carried:  # a carried value: what the body declares for it
            yield _graph_outputs(body, 1 + k)
        if not derived:
            # The body runs only while the condition holds, so its cond_in is True; the iteration
            # number and the carried values are run-time values of their (initial) types.
            got = _derive(b, n, body, [((), "int64"), Const(np.asarray(True)), *[_spec_of(b, v) for v in carried]], outer)
            derived.append(got if got is not None and _steady(got, 1, carried, b) else None)
        got = derived[0]
        if k < n_carried:  # the body keeps every carried type, so the final value has its initial type
            yield _spec_of(b, carried[k]) if got is not None else None
        else:
            yield _loop_scan_type(b, m, cond, got, 1 + k)

    return _cf_outputs(b, n, "loop", ins, attrs, fallback, lambda: _value_needed(b, n, known, "its trip count or values"))


def _empty_scans(b: GraphBuilder, n: OnnxNode, body: Any, m: Value | None, cond: Value | None, carried: list[Value],
                 outer: tuple[tuple[str, ...], list[Value]]) -> dict[int, tuple[tuple[int, ...], str]]:
    """The scan outputs' types for a loop that runs no iteration (known at import): the model's
    declared ones, else the per-iteration types the body has at the carried values' types."""
    count, n_carried = len(n.proto.output), len(carried)
    types = {k: t for k in range(n_carried, count) if (t := _declared_type(b, n, k)) is not None}
    runs = (m is None or int(np.asarray(m.array).reshape(-1)[0]) > 0) and (cond is None or CF._flag(cond.array, "Loop's condition"))  # type: ignore[union-attr]
    if runs or len(types) == count - n_carried:
        return types
    got = _derive(b, n, body, [((), "int64"), ((), "bool"), *[_spec_of(b, v) for v in carried]], outer) or []
    for k in range(n_carried, count):
        elem = got[1 + k] if 1 + k < len(got) else None
        if k not in types and elem is not None and not is_kind(elem[0][1]):
            types[k] = ((0, *elem[0][0]), elem[0][1])
    return types


def _loop_scan_type(b: GraphBuilder, m: Value | None, cond: Value | None, got: list[Any] | None, k: int) -> Any:
    """A Loop scan output's type: the body's per-iteration type, stacked once per iteration when
    the iteration count is known at import (a known trip count and a condition that is known to
    stay what it is)."""
    if got is None or got[k] is None or not isinstance(m, Const) or _symbolic(m):
        return None
    trips = int(np.asarray(m.array).reshape(-1)[0])
    if cond is not None:
        stays = got[0] is not None and isinstance(got[0][1], Const) and not _symbolic(got[0][1])
        if not (isinstance(cond, Const) and stays):
            return None
        if not CF._flag(cond.array, "Loop's condition"):
            trips = 0
        elif not CF._flag(got[0][1].array, "the body's condition"):
            trips = min(trips, 1)
    (shape, dtype) = got[k][0]
    return None if is_kind(dtype) else ((max(trips, 0), *shape), dtype)


def _declared_type(b: GraphBuilder, n: OnnxNode, k: int) -> tuple[tuple[int, ...], str] | None:
    tp = _declared(b).get(n.proto.output[k])
    got = None if tp is None else _type_of(tp)
    return got if got is not None and got[0] is not None else None  # type: ignore[return-value]


def _scan(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    body = n.attrs["body"]
    m = int(n.attrs["num_scan_inputs"])
    if any(v is None for v in n.inputs):
        raise fail(b, n, "leaves an input empty (Scan before opset 9 takes sequence lengths first)")
    outer = _outer(b, n, [body])
    layout: dict[str, tuple[int, ...]] = {key: tuple(int(v) for v in n.attrs[key]) for key in _LAYOUT if key in n.attrs}
    count = len(n.proto.output)
    inputs: list[Value] = list(n.inputs)  # type: ignore[arg-type]
    if all(_known(v) for v in [*inputs, *outer[1]]):
        folded = _fold(b, n, lambda: CF.run_scan([v.array for v in inputs], OnnxBody(body, b.source),  # type: ignore[union-attr]
                                                 {k: v.array for k, v in zip(*outer)}, m, layout, count))  # type: ignore[union-attr]
        if folded is not None:
            return folded
    attrs = {"body": OnnxBody(body, b.source), "num_scan_inputs": m, "outer": outer[0], **layout}
    n_state = len(inputs) - m
    if n_state < 0:
        raise fail(b, n, f"has {len(inputs)} input(s) for {m} scan input(s)")
    states, seqs = inputs[:n_state], [b.spec(v).shape for v in inputs[n_state:]]
    in_axes = [int(a) % max(len(s), 1) for a, s in zip(layout.get("scan_input_axes") or (0,) * m, seqs)]
    if any(len(s) == 0 for s in seqs) or len({s[a] for s, a in zip(seqs, in_axes)}) != 1:
        raise fail(b, n, f"scans inputs of shapes {seqs} along axes {in_axes}, which do not have one length")
    steps = seqs[0][in_axes[0]]
    derived: list[Any] = []

    def fallback(k: int) -> Iterator[Any]:
        elem = _graph_outputs(body, k)
        if k < n_state:  # a state: the body's declared type
            yield elem
        if elem is None or elem[0] is None:
            if not derived:  # the states are run-time values of their (initial) types, the slices have theirs
                slices = [(s[:a] + s[a + 1:], b.spec(v).dtype) for s, a, v in zip(seqs, in_axes, inputs[n_state:])]
                got = _derive(b, n, body, [*[_spec_of(b, v) for v in states], *slices], outer)
                derived.append(got if got is not None and _steady(got, 0, states, b) else None)
            got = derived[0]
            if k < n_state:  # the body keeps every state's type, so the final state has its initial type
                yield _spec_of(b, states[k]) if got is not None else None
                return
            elem = got[k][0] if got is not None and got[k] is not None else None
        if k < n_state or elem is None or elem[0] is None or is_kind(elem[1]):
            return
        j = k - n_state
        axis = int((layout.get("scan_output_axes") or (0,) * (j + 1))[j]) % (len(elem[0]) + 1)
        yield (elem[0][:axis] + (_steps(b, n, in_axes[0], steps),) + elem[0][axis:], elem[1])

    return _cf_outputs(b, n, "scan", [*inputs, *outer[1]], attrs, fallback, lambda: _value_needed(b, n, [*inputs, *outer[1]], "its values"))


def _steps(b: GraphBuilder, n: OnnxNode, axis: int, example: int) -> Any:
    """The number of steps of a Scan: the scanned axis's size, symbolic in a graph with dynamic
    axes (the axis may be one), where the model records that input's symbolic shape."""
    if not any(s.dynamic for s in b.inputs):
        return example
    sym = getattr(b, "onnx_sym_shapes", {}).get(n.proto.input[len(n.proto.input) - int(n.attrs["num_scan_inputs"])])
    if sym is None or axis >= len(sym) or sym[axis] is None:
        raise NotSymbolicError(f"node {n.name!r} (Scan) scans an input whose symbolic shape the model does not record")
    return sym[axis]


_LAYOUT: Final = ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions")


def _sequence_map(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    body = n.attrs["body"]
    names, values = _outer(b, n, [body])
    attrs = {"body": OnnxBody(body, b.source), "outer": names}

    def fallback(k: int) -> list[Any]:
        t = _graph_outputs(body, k)
        return [None if t is None or is_kind(t[1]) else ((), seq_of(t[1]))]

    return _cf_outputs(b, n, "sequence_map", [v for v in n.inputs if v is not None] + values, attrs, fallback)


# ----------------------------------------------------------------------------- Scan before opset 9
def batched_scan8(original: Any, lifted: Any) -> Any:
    """``lifted`` (``original``, an opset-8 model, after onnx.version_converter) with its Scan
    nodes given back their batch axis: Scan-8 scans axis 1 of every scan input per item of axis 0
    (states and outputs have that batch axis too), while the converter's Scan-9 node has no batch
    axis and the converter rewrites the graph's input and output types without it. Each becomes a
    Scan over the batch axis whose body is that Scan-9 node (per item: the same scan over time),
    and the graph's types are the original's (the converter refuses a Scan-8 with sequence lengths)."""
    from onnx import helper

    opset = max((o.version for o in original.opset_import if o.domain in ("", "ai.onnx")), default=0)
    scans = {tuple(node.output): node for node in original.graph.node if node.op_type == "Scan" and node.domain in ("", "ai.onnx")}
    if opset >= 9 or not scans:
        return lifted
    model = type(lifted)()
    model.CopyFrom(lifted)
    for i, node in enumerate(model.graph.node):
        if tuple(node.output) not in scans or node.op_type != "Scan":
            continue
        body = next(a.g for a in node.attribute if a.name == "body")
        inner = helper.make_node("Scan", [f"{x}.item" for x in node.input], [f"{y}.item" for y in node.output], name=f"{node.name or 'Scan'}.item")
        for a in node.attribute:
            inner.attribute.add().CopyFrom(a)
            if a.name == "directions":  # Scan-8's name for the scan inputs' directions
                inner.attribute[-1].name = "scan_input_directions"
        kinds = [vi.type.tensor_type.elem_type for vi in body.input]
        outs = [vi.type.tensor_type.elem_type for vi in body.output]
        per_item = helper.make_graph([inner], f"{body.name}.batch",
                                     [helper.make_tensor_value_info(x, k, None) for x, k in zip(inner.input, kinds)],
                                     [helper.make_tensor_value_info(y, k, None) for y, k in zip(inner.output, outs)])
        outer = helper.make_node("Scan", list(node.input), list(node.output), name=node.name, body=per_item, num_scan_inputs=len(node.input))
        model.graph.node[i].CopyFrom(outer)
    for field in ("input", "output", "value_info"):  # the data's types are the original's (with the batch axis)
        del getattr(model.graph, field)[:]
        getattr(model.graph, field).extend(getattr(original.graph, field))
    return model


# ----------------------------------------------------------------------------- sequences and optionals
def _onnx_dtype(b: GraphBuilder, n: OnnxNode, code: int) -> str:
    dtype = _elem_dtype(code)
    if dtype not in opset.DTYPES:
        raise fail(b, n, f"makes a sequence of {dtype}, which the opset does not carry")
    return dtype


def _tensor_out(b: GraphBuilder, n: OnnxNode, op: str, attrs: dict[str, Any]) -> Value:
    shape, _ = _static(b, n, 0, [])
    return b.emit(n.name, op, [v for v in n.inputs if v is not None], {**attrs, "shape": shape})


def _optional(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.input(0)
    if x is not None:
        return _append(b, n.name, "optional", [x], {})
    if "type" not in n.attrs:
        raise fail(b, n, "makes an empty optional without its type attribute")
    got = _type_of(n.attrs["type"])
    if got is None or got[1].startswith("optional("):
        raise fail(b, n, "makes an empty optional of a type the opset does not carry")
    return _append(b, n.name, "optional", [], {"dtype": got[1]})


def _optional_get(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.inputs[0]
    dtype = b.spec(x).dtype  # type: ignore[arg-type]
    if dtype in opset.DTYPES:
        return x  # type: ignore[return-value]  # a tensor is its own element
    if not dtype.startswith("optional(") or is_kind(dtype[len("optional("):-1]):  # a sequence, or an optional one
        return _append(b, n.name, "optional_get_element", [x], {})  # type: ignore[list-item]
    shape, _ = _static(b, n, 0, [])
    return b.emit(n.name, "optional_get_element", [x], {"shape": shape})  # type: ignore[list-item]


HANDLERS: dict[str, Handler] = {
    "If": _if, "Loop": _loop, "Scan": _scan, "SequenceMap": _sequence_map,
    "SequenceEmpty": lambda b, n: _append(b, n.name, "sequence_empty", [], {"dtype": _onnx_dtype(b, n, int(n.attrs.get("dtype", 1)))}),
    "SequenceConstruct": lambda b, n: _append(b, n.name, "sequence_construct", [v for v in n.inputs if v is not None], {}),
    "SequenceInsert": lambda b, n: _append(b, n.name, "sequence_insert", [v for v in n.inputs if v is not None], {}),
    "SequenceErase": lambda b, n: _append(b, n.name, "sequence_erase", [v for v in n.inputs if v is not None], {}),
    "SequenceLength": lambda b, n: b.emit(n.name, "sequence_length", [n.inputs[0]]),  # type: ignore[list-item]
    "SequenceAt": lambda b, n: _tensor_out(b, n, "sequence_at", {}),
    "ConcatFromSequence": lambda b, n: _tensor_out(b, n, "concat_from_sequence", {"axis": int(n.attrs["axis"]),
                                                                                   "new_axis": int(n.attrs.get("new_axis", 0))}),
    "SplitToSequence": lambda b, n: _append(b, n.name, "split_to_sequence", [v for v in n.inputs if v is not None],
                                            {"axis": int(n.attrs.get("axis", 0)), "keepdims": int(n.attrs.get("keepdims", 1))}),
    "Optional": _optional,
    "OptionalHasElement": lambda b, n: b.emit(n.name, "optional_has_element", [v for v in n.inputs if v is not None]),
    "OptionalGetElement": _optional_get,
}


# ----------------------------------------------------------------------------- bodies, run eagerly
class _Empty:
    """An empty optional inside an eagerly run body (None there means "no input")."""

    def __repr__(self) -> str:
        return "EMPTY"


_EMPTY: Final = _Empty()


def _to_eager(v: Any) -> Any:
    if v is None:
        return _EMPTY
    if isinstance(v, list):
        return [np.asarray(e) for e in v]
    return Const(np.asarray(v))


def _to_value(v: Any) -> Any:
    if v is _EMPTY:
        return None
    if isinstance(v, Const):
        return v.array
    return v


def _drain(b: GraphBuilder, name: str) -> np.ndarray:
    """The value of a node a handler emitted into a scratch builder (its inputs are constants)."""
    values: dict[str, Any] = {}
    for node in b.nodes:
        values[node.output] = opset.evaluate(node.op, node.attrs, [values[i] for i in node.inputs], node.params)
    return values[name]


@final
class OnnxBody:
    """An ONNX subgraph as a control-flow op's body: ``body(inputs, outer) -> outputs`` runs it
    with those values (arrays, lists, None), node by node (see the module's docstring)."""

    def __init__(self, graph: Any, source: str) -> None:
        self.graph = graph
        self.source = source
        self.input_names = [i.name for i in graph.input]
        self.output_names = [o.name for o in graph.output]
        self._prepared: list[tuple[Any, int, dict[str, Any]]] | None = None
        self._key: str | None = None

    def __repr__(self) -> str:  # stable: graph fingerprints hash the attributes' repr
        if self._key is None:
            self._key = hashlib.sha256(self.graph.SerializeToString()).hexdigest()[:16]
        return f"OnnxBody({self.graph.name!r}, {self._key})"

    def _nodes(self) -> list[tuple[Any, int, dict[str, Any]]]:
        if self._prepared is None:
            attr = _BOUND["attr"]
            self._prepared = [(p, i, {a.name: attr(a) for a in p.attribute}) for i, p in enumerate(self.graph.node)]
        return self._prepared

    def __call__(self, inputs: list[Any], outer: Mapping[str, Any]) -> list[Any]:
        from onnx import numpy_helper

        if len(inputs) != len(self.input_names):
            raise ValueError(f"subgraph {self.graph.name!r} takes {len(self.input_names)} input(s), got {len(inputs)}")
        env: dict[str, Any] = {k: _to_eager(v) for k, v in outer.items()}
        env.update({i.name: Const(numpy_helper.to_array(i)) for i in self.graph.initializer})
        env.update(zip(self.input_names, (_to_eager(v) for v in inputs)))
        env[""] = None
        for proto, index, attrs in self._nodes():
            outs = _run_node(self.source, proto, index, attrs, [env[x] for x in proto.input], env)
            env.update(zip(proto.output, outs))
        return [_to_value(env[o]) for o in self.output_names]


def _run_node(source: str, proto: Any, index: int, attrs: dict[str, Any], ins: list[Any], env: Mapping[str, Any]) -> list[Any]:
    if proto.domain not in ("", "ai.onnx"):
        raise UnsupportedOperationError(f"{source}: node {proto.name or proto.op_type!r} (op {proto.domain}.{proto.op_type}) in a subgraph "
                                        f"is from a custom domain; {REMEDY}")
    if proto.op_type == "Constant":
        return [_BOUND["constant"](proto)]
    run = _EAGER.get(proto.op_type)
    if run is not None:
        return run(source, proto, attrs, ins, env)
    n = OnnxNode(proto, index, ins, attrs)
    b = GraphBuilder(source)
    if any(isinstance(v, list) or v is _EMPTY for v in ins):
        raise fail(b, n, "reads a sequence or optional where it takes a tensor")
    handler = _BOUND["handlers"].get(proto.op_type)
    if handler is None:
        raise fail(b, n, "has no mapping to the neurenix opset")
    out = handler(b, n)
    outs = out if isinstance(out, list) else [out]
    return [Const(_drain(b, v)) if isinstance(v, str) else v for v in outs]


def _values(ins: Sequence[Any]) -> list[Any]:
    return [_to_value(v) for v in ins if v is not None]


def _eager_op(op: str, attrs: Any = None) -> Any:
    """A sequence / optional op run on the values (no static type to check inside a body)."""
    def run(source: str, proto: Any, a: dict[str, Any], ins: list[Any], env: Mapping[str, Any]) -> list[Any]:
        fixed = attrs(a) if attrs is not None else {}
        vals = [_to_value(v) for v in ins]
        if op == "optional_get_element" and vals and vals[0] is None:
            raise UnsupportedOperationError(f"{source}: node {proto.name or proto.op_type!r} (op OptionalGetElement) reads an empty optional")
        return [_to_eager(_eager_ref(op, fixed, vals))]

    return run


def _eager_ref(op: str, attrs: dict[str, Any], vals: list[Any]) -> Any:
    if op == "optional_get_element":
        return vals[0]
    if op in ("sequence_at", "concat_from_sequence"):
        return _unchecked(op, attrs, [v for v in vals if v is not None])
    return opset.evaluate(op, attrs, [v for v in vals if v is not None], {})


def _unchecked(op: str, attrs: dict[str, Any], vals: list[Any]) -> np.ndarray:
    seq = vals[0]
    if op == "sequence_at":
        pos = int(np.asarray(vals[1]).reshape(-1)[0])
        if not -len(seq) <= pos < len(seq):
            raise ValueError(f"position {pos} is out of range for a sequence of {len(seq)} tensor(s)")
        return np.asarray(seq[pos])
    axis = int(attrs["axis"])
    if not seq:
        raise ValueError("concatenates an empty sequence")
    if attrs.get("new_axis"):
        return np.stack(seq, axis=axis % (seq[0].ndim + 1))
    return np.concatenate(seq, axis=axis % max(seq[0].ndim, 1))


def _eager_optional(source: str, proto: Any, a: dict[str, Any], ins: list[Any], env: Mapping[str, Any]) -> list[Any]:
    present = [v for v in ins if v is not None]
    return [present[0] if present else _EMPTY]


def _eager_has(source: str, proto: Any, a: dict[str, Any], ins: list[Any], env: Mapping[str, Any]) -> list[Any]:
    present = [v for v in ins if v is not None]
    return [Const(np.asarray(bool(present) and present[0] is not _EMPTY))]


def _eager_cf(kind: str) -> Any:
    """A nested If / Loop / Scan / SequenceMap: the opset's semantics, every output at once."""
    def run(source: str, proto: Any, a: dict[str, Any], ins: list[Any], env: Mapping[str, Any]) -> list[Any]:
        graphs = _subgraphs(proto)
        names = list(dict.fromkeys(x for g in graphs for x in _free_names(g)))
        missing = [x for x in names if x not in env]
        if missing:
            raise UnsupportedOperationError(f"{source}: node {proto.name or proto.op_type!r} (op {proto.op_type}) has a subgraph that "
                                            f"reads {missing}, which no enclosing graph defines")
        outer = {x: _to_value(env[x]) for x in names}
        count = len(proto.output)
        if kind == "If":
            outs = CF.run_if(_to_value(ins[0]), OnnxBody(a["then_branch"], source), OnnxBody(a["else_branch"], source), outer)
        elif kind == "Loop":
            outs = CF.run_loop(None if ins[0] is None else _to_value(ins[0]), None if len(ins) < 2 or ins[1] is None else _to_value(ins[1]),
                               [_to_value(v) for v in ins[2:]], OnnxBody(a["body"], source), outer, count)
        elif kind == "Scan":
            keys = ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions")
            outs = CF.run_scan([_to_value(v) for v in ins], OnnxBody(a["body"], source), outer, int(a["num_scan_inputs"]),
                               {k: a.get(k) for k in keys}, count)
        else:
            outs = CF.run_map([_to_value(v) for v in ins if v is not None], OnnxBody(a["body"], source), outer, count)
        return [_to_eager(v) for v in outs]

    return run


def _seq_dtype(a: dict[str, Any]) -> dict[str, Any]:
    return {"dtype": _elem_dtype(int(a.get("dtype", 1)))}


_EAGER: Final[dict[str, Any]] = {
    "If": _eager_cf("If"), "Loop": _eager_cf("Loop"), "Scan": _eager_cf("Scan"), "SequenceMap": _eager_cf("SequenceMap"),
    "SequenceEmpty": _eager_op("sequence_empty", _seq_dtype),
    "SequenceConstruct": _eager_op("sequence_construct"),
    "SequenceInsert": _eager_op("sequence_insert"),
    "SequenceErase": _eager_op("sequence_erase"),
    "SequenceLength": _eager_op("sequence_length"),
    "SequenceAt": _eager_op("sequence_at"),
    "ConcatFromSequence": _eager_op("concat_from_sequence", lambda a: {"axis": int(a["axis"]), "new_axis": int(a.get("new_axis", 0))}),
    "SplitToSequence": _eager_op("split_to_sequence", lambda a: {"axis": int(a.get("axis", 0)), "keepdims": int(a.get("keepdims", 1))}),
    "Optional": _eager_optional,
    "Identity": lambda source, proto, a, ins, env: [ins[0]],  # a tensor, sequence or optional passes through
    "OptionalHasElement": _eager_has,
    "OptionalGetElement": _eager_op("optional_get_element"),
}
