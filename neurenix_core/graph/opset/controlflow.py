"""Control flow: ops whose attributes hold subgraphs (If, Loop, Scan, SequenceMap).

A body is an attribute holding a callable ``body(inputs, outer) -> outputs``: ``inputs`` are the
subgraph's formal inputs in order (run-time values: arrays, lists for sequences, None for empty
optionals), ``outer`` maps the names of the enclosing graph's values the subgraph reads to their
values. The node's own inputs list those outer values after its ONNX inputs (attribute
``outer`` names them), so the graph orders and transfers them like any other value. The ONNX
importer builds the bodies (``importers.onnx_controlflow``); this module is the ops' semantics,
which run on cpu:0.

The IR's nodes have one output: an ONNX control-flow node with several outputs becomes one node
per used output (attribute ``output``), each with the output's static type (``shape``, ``dtype``,
the model's declared type); the value computed is checked against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from neurenix_core.graph.opset.schema import REQUIRED, Arrays, Attrs, Params, Shape, _axis, _def, _np_dtype
from neurenix_core.graph.opset.sequence import check_tensor, element, is_kind

__all__ = ["Body", "run_if", "run_loop", "run_map", "run_scan"]

#: A subgraph: (formal inputs, outer-scope values by name) -> its outputs.
Body = Callable[[list[Any], Mapping[str, Any]], list[Any]]

_COMMON = {"outer": (), "output": 0, "shape": (), "dtype": REQUIRED}


def _rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return tuple(int(n) for n in a["shape"]), a["dtype"]


def _check(what: str, value: Any, shape: Sequence[int] | None, dtype: str) -> Any:
    """``value`` when it has the static type ``dtype`` / ``shape``, else ValueError."""
    if dtype.startswith("optional("):
        return None if value is None else _check(what, value, shape, element(dtype, "optional"))
    if dtype.startswith("seq("):
        if not isinstance(value, list):
            raise ValueError(f"{what} is not a sequence, where the model declares a {dtype}")
        inner = element(dtype, "seq")
        return [check_tensor(f"{what}[{k}]", v, None, inner) for k, v in enumerate(value)]
    return check_tensor(what, value, shape, dtype)


def _result(a: Attrs, outs: Sequence[Any], n_outputs: int) -> Any:
    if len(outs) != n_outputs:
        raise ValueError(f"the body gives {len(outs)} output(s), the node has {n_outputs}")
    k = int(a["output"])
    return _check(f"output {k}", outs[k], None if is_kind(a["dtype"]) else a["shape"], a["dtype"])


def _flag(x: Any, what: str) -> bool:
    arr = np.asarray(x)
    if arr.size != 1:
        raise ValueError(f"{what} must hold one value, got shape {arr.shape}")
    return bool(arr.reshape(-1)[0])


def _outer(a: Attrs, values: Sequence[Any]) -> dict[str, Any]:
    names = tuple(a["outer"])
    if len(values) != len(names):
        raise ValueError(f"reads {len(names)} outer value(s) {list(names)}, got {len(values)}")
    return dict(zip(names, values))


# ----------------------------------------------------------------------------- the semantics, every output at once
def run_if(cond: Any, then_branch: Body, else_branch: Body, outer: Mapping[str, Any]) -> list[Any]:
    return (then_branch if _flag(cond, "If's condition") else else_branch)([], outer)


def _stacked(parts: list[Any], declared: Sequence[int] | None, dtype: str | None) -> np.ndarray:
    if parts:
        return np.stack([np.asarray(v) for v in parts])
    if declared is None or dtype is None or is_kind(dtype):
        raise ValueError("ran no iteration, so a scan output has no element type")
    return np.zeros((0, *tuple(declared)[1:]), _np_dtype(dtype))  # no iteration: an empty stack of the declared shape


def run_loop(trip: Any, cond: Any, carried: list[Any], body: Body, outer: Mapping[str, Any], n_outputs: int,
             declared: Mapping[int, tuple[Sequence[int], str]] | None = None) -> list[Any]:
    """ONNX Loop: ``trip`` (None: no trip count) and ``cond`` (None: no condition, and the body's
    is ignored) bound the iterations; ``declared`` gives scan outputs' static types for a loop
    that runs no iteration."""
    limit = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    has_cond = cond is not None
    go = _flag(cond, "Loop's condition") if has_cond else True
    n = len(carried)
    scans: list[list[Any]] = [[] for _ in range(n_outputs - n)]
    i = 0
    while go and (limit is None or i < limit):
        outs = body([np.asarray(i, np.int64), np.asarray(go), *carried], outer)
        if len(outs) != 1 + n_outputs:
            raise ValueError(f"the body gives {len(outs)} output(s); a Loop with {n} carried value(s) and {n_outputs - n} scan "
                             f"output(s) needs {1 + n_outputs}")
        go = _flag(outs[0], "the body's condition") if has_cond else True
        carried = list(outs[1:1 + n])
        for k, v in enumerate(outs[1 + n:]):
            scans[k].append(v)
        i += 1
    spec = declared or {}
    return carried + [_stacked(parts, *spec.get(n + k, (None, None))) for k, parts in enumerate(scans)]


def run_scan(values: list[Any], body: Body, outer: Mapping[str, Any], num_scan_inputs: int, layout: Mapping[str, Any],
             n_outputs: int) -> list[Any]:
    """ONNX Scan (opset 9+); ``layout`` holds the scan_input/output_axes/directions attributes."""
    m = int(num_scan_inputs)
    n = len(values) - m
    if n < 0 or m < 1:
        raise ValueError(f"has {len(values)} input(s) for {m} scan input(s)")
    states, seqs = list(values[:n]), [np.asarray(v) for v in values[n:]]
    in_dirs = list(layout.get("scan_input_directions") or [0] * m)
    axes = [_axis(int(ax), s.ndim) for ax, s in zip(layout.get("scan_input_axes") or [0] * m, seqs)]
    lengths = {s.shape[ax] for s, ax in zip(seqs, axes)}
    if len(lengths) != 1:
        raise ValueError(f"scan inputs of different lengths {sorted(lengths)}")
    steps = lengths.pop()
    scans: list[list[np.ndarray]] = [[] for _ in range(n_outputs - n)]
    for t in range(steps):
        slices = [np.take(s, steps - 1 - t if d else t, axis=ax) for s, ax, d in zip(seqs, axes, in_dirs)]
        outs = body([*states, *slices], outer)
        if len(outs) != n_outputs:
            raise ValueError(f"the body gives {len(outs)} output(s), the Scan has {n_outputs}")
        states = list(outs[:n])
        for j, v in enumerate(outs[n:]):
            scans[j].append(np.asarray(v))
    if steps == 0 and scans:
        raise ValueError("scans zero steps, so its scan outputs have no element shape")
    out_axes = list(layout.get("scan_output_axes") or [0] * len(scans))
    out_dirs = list(layout.get("scan_output_directions") or [0] * len(scans))
    stacked = [np.stack(parts[::-1] if d else parts, axis=_axis(int(ax), parts[0].ndim + 1))
               for parts, ax, d in zip(scans, out_axes, out_dirs)]
    return states + stacked


def run_map(values: list[Any], body: Body, outer: Mapping[str, Any], n_outputs: int) -> list[Any]:
    """ONNX SequenceMap: the body at each position of the sequences (tensors passed whole)."""
    if not values or not isinstance(values[0], list):
        raise ValueError("maps over a sequence (its first input)")
    count = len(values[0])
    if any(isinstance(v, list) and len(v) != count for v in values):
        raise ValueError(f"maps over sequences of different lengths {[len(v) for v in values if isinstance(v, list)]}")
    results: list[list[Any]] = [[] for _ in range(n_outputs)]
    for i in range(count):
        outs = body([v[i] if isinstance(v, list) else v for v in values], outer)
        if len(outs) != n_outputs:
            raise ValueError(f"the body gives {len(outs)} output(s), the SequenceMap has {n_outputs}")
        for k, v in enumerate(outs):
            results[k].append(v)
    return results


# ----------------------------------------------------------------------------- the ops
def _split(a: Attrs, x: Arrays) -> tuple[list[Any], dict[str, Any]]:
    """The node's ONNX inputs and its outer values by name."""
    k = len(x) - len(a["outer"])
    return list(x[:k]), _outer(a, x[k:])


def _if_ref(a: Attrs, x: Arrays, p: Params) -> Any:
    ins, outer = _split(a, x)
    return _result(a, run_if(ins[0], a["then_branch"], a["else_branch"], outer), int(a["n_outputs"]))


_def("if", "control", "ONNX If: then_branch or else_branch (subgraphs) by cond; outer: the enclosing values they read",
     ("cond", "outer*"), _rule, _if_ref, attrs={"then_branch": REQUIRED, "else_branch": REQUIRED, "n_outputs": 1, **_COMMON})


def _loop_ref(a: Attrs, x: Arrays, p: Params) -> Any:
    ins, outer = _split(a, x)
    trip = ins.pop(0) if a["has_max"] else None
    cond = ins.pop(0) if a["has_cond"] else None
    k = int(a["output"])
    outs = run_loop(trip, cond, ins, a["body"], outer, int(a["n_outputs"]), {k: (a["shape"], a["dtype"])})
    return _result(a, outs, int(a["n_outputs"]))


_def("loop", "control", "ONNX Loop: body run while cond and fewer than M iterations (has_max / has_cond: whether those inputs "
     "are given), carrying values; outputs: the final carried values, then the scan outputs stacked",
     ("inputs*",), _rule, _loop_ref,
     attrs={"body": REQUIRED, "has_max": True, "has_cond": True, "n_outputs": 1, **_COMMON})

_LAYOUT = ("scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions")


def _scan_ref(a: Attrs, x: Arrays, p: Params) -> Any:
    ins, outer = _split(a, x)
    outs = run_scan(ins, a["body"], outer, int(a["num_scan_inputs"]), {k: a[k] for k in _LAYOUT}, int(a["n_outputs"]))
    return _result(a, outs, int(a["n_outputs"]))


_def("scan", "control", "ONNX Scan (opset 9+): body run over slices of the scan inputs along their axes, carrying state; outputs: "
     "the final states, then the per-step outputs stacked", ("inputs*",), _rule, _scan_ref,
     attrs={"body": REQUIRED, "num_scan_inputs": REQUIRED, **dict.fromkeys(_LAYOUT), "n_outputs": 1, **_COMMON})


def _map_ref(a: Attrs, x: Arrays, p: Params) -> Any:
    ins, outer = _split(a, x)
    return _result(a, run_map(ins, a["body"], outer, int(a["n_outputs"])), int(a["n_outputs"]))


_def("sequence_map", "control", "ONNX SequenceMap: body applied to each position of the input sequences (tensor inputs passed "
     "whole); each output is the sequence of the body's outputs", ("inputs*",), _rule, _map_ref,
     attrs={"body": REQUIRED, "n_outputs": 1, **_COMMON})
