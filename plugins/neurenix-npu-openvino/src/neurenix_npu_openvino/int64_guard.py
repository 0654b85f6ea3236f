"""int64 values on OpenVINO's CPU device, which holds them as int32: which graphs it must refuse
and which inputs each call must check (cpu:0's openvino runtime, host.py and stateful.py)."""

from __future__ import annotations

from typing import Final

import numpy as np

from neurenix_core.contract import Graph
from neurenix_core.errors import OperationError

__all__ = ["check_fits_int32", "int64_use"]


#: Operand positions where an int64 value is an index (token ids, a gather's or a scatter's
#: indices): held as int32 by OpenVINO's CPU plugin, still exact, since no index reaches 2**31.
_INDEX_OPERANDS: Final = {"embedding": (0,), "gather": (1,), "scatter_elements": (1,)}


#: The values an int64 input read as data may hold: OpenVINO's CPU device holds it as int32.
_INT32_RANGE: Final = (-(2**31), 2**31 - 1)


def check_fits_int32(x: np.ndarray, position: int) -> None:
    """Refuse a call whose int64 input (read as data, not as an index) leaves 32 bits: OpenVINO
    would compute with the truncated value and return a wrong answer without a word."""
    if x.dtype == np.int64 and x.size and (int(x.min()) < _INT32_RANGE[0] or int(x.max()) > _INT32_RANGE[1]):
        bad = int(x.max()) if int(x.max()) > _INT32_RANGE[1] else int(x.min())
        raise OperationError(f"cpu:0's openvino runtime holds 64-bit integers as 32-bit ones: input {position} holds {bad}, "
                             f"beyond 2**31; compile with runtime='onnxruntime' or runtime='numpy' for such values")


#: Ops whose result holds only elements of their inputs (moved, repeated or dropped, never
#: computed): an int64 value they carry is exact as int32 wherever its sources are.
_CARRYING_OPS: Final = frozenset({"unsqueeze", "squeeze", "reshape", "flatten", "transpose", "slice", "expand", "concat"})


def int64_use(graph: Graph) -> tuple[str | None, tuple[int, ...]]:
    """(Why OpenVINO's CPU device must not run ``graph``, the graph inputs each call must check).

    The device holds 64-bit integers as 32-bit ones, so int64 arithmetic and results beyond 2**31
    come back silently wrong ((2**62 + 1) // 3 gave 0): a layer computing int64 values, or an int64
    result, refuses the graph. An int64 value read only as an index (token ids into an embedding,
    a gather's index) is exact as int32. An int64 *input* read as data by a layer whose result is
    not int64 (BERT's attention mask cast to bool; a language model's position ids, unsqueezed,
    then cast for the rotary angles) is exact whenever the input fits 32 bits, also through layers
    that only move its elements (``_CARRYING_OPS``): those inputs are checked on every call
    (``check_fits_int32``) instead of refusing the graph, and an int64 constant read as data is
    taken when its values fit."""
    from neurenix_core.contract import infer_values

    specs = infer_values(graph)
    wide = {name for name, spec in specs.items() if str(spec.dtype) == "int64"}
    if not wide:
        return None, ()
    # The graph inputs each exact-as-int32 int64 value holds elements of (none for a constant).
    sources: dict[str, frozenset[int]] = {spec.name: frozenset({k}) for k, spec in enumerate(graph.inputs) if spec.name in wide}
    sources.update({node.output: frozenset() for node in graph.nodes
                    if node.op == "constant" and node.output in wide and _fits_int32(np.asarray(node.params["value"]))})
    guarded: set[int] = set()
    for node in graph.nodes:
        data = [name for k, name in enumerate(node.inputs) if name in wide and k not in _INDEX_OPERANDS.get(node.op, ())]
        unknown = [name for name in data if name not in sources]
        if unknown:
            return (f"openvino holds 64-bit integers as 32-bit ones: layer {node.name!r} ({node.op}) reads "
                    f"{specs[unknown[0]].dtype} {unknown[0]!r} as data, which would be wrong beyond 2**31"), ()
        if node.output in wide and node.op != "constant":
            if node.op not in _CARRYING_OPS:
                return (f"openvino holds 64-bit integers as 32-bit ones: layer {node.name!r} ({node.op}) computes "
                        f"{specs[node.output].dtype} values, which would be wrong beyond 2**31"), ()
            sources[node.output] = frozenset().union(*(sources[name] for name in data))
            continue
        for name in data:
            guarded.update(sources[name])
    results = [o for o in graph.outputs if o in wide]
    if results:
        return f"openvino holds 64-bit integers as 32-bit ones: the graph returns {specs[results[0]].dtype} {results[0]!r}", ()
    return None, tuple(sorted(guarded))


def _fits_int32(value: np.ndarray) -> bool:
    return not value.size or (int(value.min()) >= _INT32_RANGE[0] and int(value.max()) <= _INT32_RANGE[1])
