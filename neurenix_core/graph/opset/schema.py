"""The opset's schema: every op a :class:`~neurenix_core.graph.ir.Node` may carry, in one table.

Each :class:`OpDef` says what the op reads (``inputs``: values, ``params``: weights carried on the
node), its attributes with their defaults, how the output's static shape and dtype follow from
the inputs' (``infer``), what it computes (``ref``: a NumPy implementation that keeps its input
float dtype, so the float64 reference and the float32 CPU backend share it), and for a composite
op its decomposition into other ops (``decompose``). Semantics follow ONNX / the array API
(broadcasting, negative axes, ``keepdims``) so that the torch.export and ONNX importers map
nearly one to one; where PyTorch and ONNX differ the attribute says which (``flatten`` keeps
PyTorch's ``start_dim``/``end_dim``, ``reshape`` takes ONNX's ``0`` = "copy this dimension").

Composite ops keep their own node kind so that a backend that fuses them natively sees them; the
core applies ``decompose`` (recursively) for a backend that does not declare the op. The first
17 ops of the first release (``LEGACY_OPS``) keep their names, attributes and params, so plugins
written against it lower what they always lowered.

``docs/models.md`` carries a table generated from OPSET by :func:`markdown_table`.

The ops themselves are defined by family, as ONNX lays out its own schemas
(``onnx/defs/<family>``): ``math``, ``nn``, ``reduction``, ``tensor`` ... beside this file; the
package ``neurenix_core.graph.opset`` imports every family, so ``OPSET`` is whole there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, final

import numpy as np

__all__ = [
    "DTYPES",
    "LEGACY_OPS",
    "OPSET",
    "REQUIRED",
    "STORAGE_DTYPES",
    "STORAGE_OPS",
    "VALUE_KINDS",
    "Builder",
    "OpDef",
    "attrs_of",
    "evaluate",
    "infer",
    "markdown_table",
]

Shape = tuple[int, ...]
Arrays = list[np.ndarray]
Params = Mapping[str, np.ndarray]
Attrs = Mapping[str, Any]

#: ONNX's low-precision storage dtypes, named as ml_dtypes names them: float8 (e4m3fn, e4m3fnuz, e5m2,
#: e5m2fnuz), the power-of-two scale type e8m0, float4 e2m1 and the 4 and 2-bit integers. Graphs carry
#: them between conversions (Cast, QuantizeLinear, DequantizeLinear) and through data movement
#: (``STORAGE_OPS``); no other op computes on them (``infer`` refuses it), and no device plugin
#: declares them, so their nodes run on cpu:0.
STORAGE_DTYPES: Final = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn",
                         "int4", "uint4", "int2", "uint2")

#: Value dtypes a graph may carry: the ones ops compute on, then the storage dtypes.
DTYPES: Final = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
                 *STORAGE_DTYPES)

#: The ops that take or make storage dtypes: ONNX's type constraints allow them in conversions,
#: constants, data movement and IsNaN / IsInf (float8) only (the control-flow and sequence ops
#: pass any value through as well).
STORAGE_OPS: Final = frozenset({
    "cast", "quantize_linear", "dequantize_linear", "constant", "identity", "dropout", "reshape", "flatten", "squeeze",
    "unsqueeze", "transpose", "expand", "pad", "tensor_scatter", "isnan", "isinf",
})

#: Values that are not tensors (ONNX sequences and optionals), run on cpu:0 only: at run time a
#: sequence is a Python list of arrays, an optional is its element or None (empty); their static
#: shape is () (the elements' shapes are known per call only).
VALUE_KINDS: Final = frozenset(
    [f"seq({d})" for d in DTYPES] + [f"optional({d})" for d in DTYPES] + [f"optional(seq({d}))" for d in DTYPES])

#: The op categories whose values may be sequences or optionals.
_VALUE_KIND_CATEGORIES: Final = frozenset({"sequence", "control"})

#: The ops of the first release: a plugin whose manifest declares no ``graph_ops`` lowers these.
LEGACY_OPS: Final = frozenset({
    "linear", "conv2d", "relu", "gelu", "sigmoid", "tanh", "softmax", "max_pool2d", "avg_pool2d",
    "adaptive_avg_pool2d", "flatten", "batch_norm2d", "layer_norm", "dropout",
    "multihead_attention", "add", "mul",
})


class _Required:
    def __repr__(self) -> str:
        return "required"


#: Attribute default meaning "the node must set it".
REQUIRED: Final = _Required()


class Builder(Protocol):
    """What a decomposition writes into (``neurenix_core.graph.ir.decompose`` implements it)."""

    def op(self, op: str, inputs: Sequence[str], attrs: Attrs | None = None, params: Params | None = None) -> str:
        """Append a node; returns its output value name."""
        ...

    def const(self, value: np.ndarray) -> str:
        """A ``constant`` node holding ``value``; returns its output value name."""
        ...


Infer = Callable[[Attrs, list[Shape], list[str], Params], tuple[Shape, str]]
#: A reference implementation: an array, or for sequence / optional ops a list of arrays or None.
Ref = Callable[[Attrs, Arrays, Params], "np.ndarray | list[np.ndarray] | None"]
Decompose = Callable[[Builder, list[str], Attrs, Params], str]


@final
@dataclass(frozen=True, slots=True)
class OpDef:
    """One op. ``inputs`` names end in ``?`` when optional and ``*`` when variadic; ``params`` are
    weights on the node (``?`` optional)."""

    name: str
    category: str
    doc: str
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    params: tuple[str, ...]
    infer: Infer
    ref: Ref
    decompose: Decompose | None = None
    flops: Callable[[Attrs, list[Shape], Shape, Params], int] | None = None
    tags: frozenset[str] = field(default_factory=frozenset)

    @property
    def composite(self) -> bool:
        return self.decompose is not None


OPSET: dict[str, OpDef] = {}


def _def(name: str, category: str, doc: str, inputs: Sequence[str], infer: Infer, ref: Ref, *,
         attrs: Mapping[str, Any] | None = None, params: Sequence[str] = (), decompose: Decompose | None = None,
         flops: Callable[[Attrs, list[Shape], Shape, Params], int] | None = None) -> None:
    OPSET[name] = OpDef(name, category, doc, tuple(inputs), dict(attrs or {}), tuple(params), infer, ref, decompose, flops)


def attrs_of(op: str, attrs: Attrs) -> dict[str, Any]:
    """``attrs`` completed with the op's defaults; raises ValueError on unknown or missing ones."""
    spec = OPSET[op].attrs
    unknown = set(attrs) - set(spec)
    if unknown:
        raise ValueError(f"op {op!r} has no attribute(s) {sorted(unknown)}; it takes {sorted(spec) or 'none'}")
    out = {k: attrs.get(k, v) for k, v in spec.items()}
    missing = [k for k, v in out.items() if v is REQUIRED]
    if missing:
        raise ValueError(f"op {op!r} needs attribute(s) {missing}")
    return out


# ----------------------------------------------------------------------------- shared helpers
def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"axis {axis} is out of range for a {ndim}-D value")
    return axis % max(ndim, 1)


def _axes(axes: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if axes is None else tuple(sorted(_axis(a, ndim) for a in axes))


def _promote(dtypes: Sequence[str]) -> str:
    floats = [d for d in dtypes if _is_float(d)]
    if floats:
        return max(floats, key=lambda d: ("float16", "bfloat16", "float32", "float64").index(d))
    if all(d == "bool" for d in dtypes):
        return "bool"
    return str(np.result_type(*[np.dtype(d) for d in dtypes if d != "bool"] or [np.dtype(np.bool_)]))


def _broadcast(shapes: Sequence[Shape]) -> Shape:
    return tuple(int(d) for d in np.broadcast_shapes(*shapes))


def _same(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return s[0], d[0]


def _float_only(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not _is_float(d[0]):
        raise ValueError(f"expects a floating-point input, got {d[0]}")
    return s[0], d[0]


def _elementwise(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return _broadcast(s), _promote(d)


def _compare(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return _broadcast(s), "bool"


def _f(x: np.ndarray, value: float) -> np.ndarray:
    """A scalar in ``x``'s dtype (keeps float32 math float32)."""
    return np.asarray(value, dtype=x.dtype if x.dtype.kind == "f" else np.float64)


def _numel(s: Shape) -> int:
    return int(math.prod(s))


def _elementwise_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    return _numel(out)



def _np_dtype(name: str) -> np.dtype[Any]:
    if name == "bfloat16" or name in STORAGE_DTYPES:
        import ml_dtypes  # a core dependency; only bfloat16 and the storage dtypes need it

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _const_dtype(v: np.ndarray) -> str:
    return "bool" if v.dtype == np.bool_ else str(v.dtype)


# ----------------------------------------------------------------------------- entry points
def infer(op: str, attrs: Attrs, shapes: list[Shape], dtypes: list[str], params: Params) -> tuple[Shape, str]:
    """Output (shape, dtype) of one node; raises ValueError explaining a mismatch."""
    d = OPSET[op]
    required = sum(1 for i in d.inputs if not i.endswith(("?", "*")))
    variadic = any(i.endswith("*") for i in d.inputs)
    if len(shapes) < required or (not variadic and len(shapes) > len(d.inputs)):
        raise ValueError(f"takes inputs {list(d.inputs)}, got {len(shapes)}")
    gated = op not in STORAGE_OPS and d.category not in _VALUE_KIND_CATEGORIES
    if gated:
        _no_storage(op, dtypes)
    shape, dtype = d.infer(attrs_of(op, attrs), shapes, dtypes, params)
    if gated:
        _no_storage(op, [dtype])
    return shape, dtype


def _no_storage(op: str, dtypes: Sequence[str]) -> None:
    """Refuses a storage dtype (float8, int4 ...) where ``op`` would compute on it: NumPy would
    round every step to that type (or not compute at all), which is not what the op means."""
    storage = sorted({d for d in dtypes if d in STORAGE_DTYPES})
    if storage:
        raise ValueError(f"op {op!r} does not compute on {', '.join(storage)} values; those are storage types, which "
                         "Cast, QuantizeLinear and DequantizeLinear convert (and data movement ops carry): convert them first")


def evaluate(op: str, attrs: Attrs, inputs: Arrays, params: Params) -> np.ndarray:
    """The op's reference semantics on NumPy arrays (float precision follows the inputs); a
    sequence (a list of arrays) or an empty optional (None) from a sequence or control-flow op
    comes back as it is."""
    d = OPSET[op]
    if op == "identity" and inputs and (inputs[0] is None or isinstance(inputs[0], list)):
        return inputs[0]  # a copied graph output or ONNX Identity of a sequence / optional
    out = d.ref(attrs_of(op, attrs), inputs, params)
    if d.category in _VALUE_KIND_CATEGORIES and (out is None or isinstance(out, list)):
        return out  # type: ignore[return-value]  # a sequence (list) or an empty optional (None), as the docstring says
    return np.asarray(out)


def markdown_table(native: Mapping[str, Sequence[str]] | None = None) -> str:
    """The opset as a Markdown table (docs/models.md embeds it; a test keeps it current).
    ``native`` (device type -> the ops its plugin declares) adds a column naming, per op, the
    devices that lower it natively (cpu runs every op)."""
    head = "| op | kind | inputs | attributes (default) | params | semantics |"
    rows = [head + (" native on |" if native is not None else ""), "|---|---|---|---|---|---|" + ("---|" if native is not None else "")]
    for name in sorted(OPSET, key=lambda n: (OPSET[n].category, n)):
        d = OPSET[name]
        attrs = ", ".join(f"{k}={v!r}" for k, v in d.attrs.items()) or "-"
        kind = f"{d.category}, composite" if d.composite else d.category
        row = f"| `{name}` | {kind} | {', '.join(d.inputs) or '-'} | {attrs} | {', '.join(d.params) or '-'} | {d.doc.replace('|', '/')} |"
        if native is not None:
            row += " " + ", ".join(["cpu"] + [dev for dev, ops in native.items() if name in ops]) + " |"
        rows.append(row)
    return "\n".join(rows) + "\n"

