"""ATen -> opset mappings (PyTorch is not imported here); merged into ``torch_export``'s table.

torch.fft and the complex values it makes. Neurenix tensors have no complex dtype, so a complex
value is carried inside the import as a real one with a trailing axis of 2 (real, imaginary), the
form the opset's ``dft`` / ``stft`` take (``opset/signal.py``). The mark is the fx node's own
traced dtype: a node whose ``meta['val']`` is complex has its value in that form (``carried``
gives the shape and dtype ``torch_export`` checks it against), so nothing else needs to be
recorded. Every node that reads or makes a complex value goes through :func:`complex_call`:

* ``_fft_r2c`` / ``_fft_c2r`` / ``_fft_c2c``: one ``dft`` per transformed axis (the last axis of
  ``dim`` one-sided for r2c / c2r), then PyTorch's normalization (0 none, 1 1/sqrt(n), 2 1/n,
  whatever the direction; ``dft``'s inverse already divides by n).
* ``_to_copy`` to or from a complex dtype, ``view_as_real`` / ``view_as_complex`` (the carried
  form itself), ``real`` / ``imag``, ``_conj`` / ``conj_physical`` / ``resolve_conj``, ``abs``,
  ``+`` / ``-`` / ``*`` and ``/`` by a real value.
* data movement (views, slices, transposes, concatenation, indexing with real indices): the
  op's own handler run on the real and the imaginary part, the results joined again.

Anything else that reads a complex value is refused by name, and so is a complex output of the
graph (``refuse_complex_outputs``): return ``torch.view_as_real`` of it, or its real part,
imaginary part or magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.importers.builder import Const, Value
from neurenix_core.graph.importers.torch_ops import Handler, Unavailable, _arg, _emit, _out_dtype, _scalar

__all__ = ["HANDLERS", "carried", "complex_call", "is_complex", "refuse_complex_inputs", "refuse_complex_outputs", "touches_complex"]

#: a complex dtype -> the real dtype of its parts
_PART_DTYPE: Final = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}

#: ops whose own handler is right for each part of a complex value separately (data movement,
#: and negation): the real and imaginary parts are moved (or negated) alike
_PARTWISE: Final = frozenset({
    "clone", "alias", "contiguous", "detach", "lift_fresh_copy", "view", "reshape", "_unsafe_view", "flatten", "expand",
    "permute", "transpose", "t", "unsqueeze", "squeeze", "select", "slice", "cat", "concat", "stack", "split",
    "split_with_sizes", "unbind", "flip", "roll", "repeat", "tile", "index", "index_select", "gather", "as_strided", "neg",
})


# ----------------------------------------------------------------------------- the mark
def is_complex(v: Any) -> bool:
    """Whether ``v`` is an fx node whose traced value is a complex tensor."""
    val = getattr(v, "meta", {}).get("val") if hasattr(v, "meta") else None
    return bool(getattr(getattr(val, "dtype", None), "is_complex", False))


def touches_complex(n: Any) -> bool:
    """Whether the fx node makes or reads a complex value."""
    return is_complex(n) or any(is_complex(i) for i in n.all_input_nodes)


def carried(shape: tuple[int, ...], dtype: str) -> tuple[tuple[int, ...], str]:
    """The graph's (shape, dtype) for a value PyTorch traced with ``shape`` and ``dtype``."""
    return (shape + (2,), _PART_DTYPE[dtype]) if dtype in _PART_DTYPE else (shape, dtype)


def refuse_complex_inputs(source: str, inputs: Sequence[Any]) -> None:
    """A complex graph input cannot be fed from a neurenix tensor: refused, naming it."""
    for o in inputs:
        if is_complex(o):
            raise UnsupportedOperationError(
                f"{source}: input {o.name!r} is a complex tensor, and neurenix tensors have no complex dtype; pass "
                "torch.view_as_real(...) of it (real and imaginary parts on a last axis of 2) and call "
                "torch.view_as_complex on it inside forward")


def refuse_complex_outputs(source: str, outputs: Sequence[Any]) -> None:
    """A complex graph output cannot be a neurenix tensor: refused, naming it."""
    for i, o in enumerate(outputs):
        if is_complex(o):
            raise UnsupportedOperationError(
                f"{source}: output {i} ({o.name!r}) is a complex tensor, and neurenix tensors have no complex dtype; return "
                "torch.view_as_real(...) of it (real and imaginary parts on a last axis of 2), or its .real, .imag or .abs()")


def complex_call(c: Any, n: Any, name: str, handler: Handler | None, a: list[Any], k: dict[str, Any]) -> Any:
    """Node ``n`` (op ``name``, whose plain handler is ``handler``) on complex values."""
    own = _ON_COMPLEX.get(name)
    if own is not None:
        return own(c, n, a, k, handler)
    if name in _PARTWISE and handler is not None:
        return _partwise(c, n, handler, a, k)
    raise c.fail(n, "computes on a complex tensor; neurenix carries complex values through torch.fft's transforms, "
                    "view_as_real / view_as_complex, real / imag / abs / conj, +, -, * (and / by a real value) and data "
                    "movement only: take view_as_real (or .real / .imag / .abs()) before this op")


# ----------------------------------------------------------------------------- parts
def _carry(v: Any) -> Any:
    """A complex operand in the carried form (a folded complex constant stacked); others as they are."""
    if isinstance(v, Const) and np.iscomplexobj(v.array):
        return Const(np.stack([v.array.real, v.array.imag], axis=-1))
    return v


def _part(c: Any, n: Any, v: Value, i: int) -> Value:
    """The real (0) or imaginary (1) part of a carried value."""
    return _emit(c, n, ("re", "im")[i], "gather", [_carry(v), Const(np.asarray(i, np.int64))], {"axis": -1})


def _join(c: Any, n: Any, re: Any, im: Any) -> Any:
    """Two parts as one carried value."""
    if isinstance(re, Unavailable):
        return re
    parts = [_emit(c, n, f"{tag}.pair", "unsqueeze", [v], {"axes": (-1,)}) for tag, v in (("re", re), ("im", im))]
    return _emit(c, n, "", "concat", parts, {"axis": -1})


def _parts_of(c: Any, n: Any, fx: Any, v: Any, i: int) -> Any:
    """Argument ``v`` (traced as ``fx``) with each complex value in it replaced by its part ``i``."""
    if isinstance(fx, (list, tuple)) and isinstance(v, (list, tuple)):
        return [_parts_of(c, n, f, x, i) for f, x in zip(fx, v)]
    return _part(c, n, v, i) if is_complex(fx) else v


def _partwise(c: Any, n: Any, handler: Handler, a: list[Any], k: dict[str, Any]) -> Any:
    """The op's handler on the real parts and on the imaginary parts, joined again."""
    outs = []
    for i in (0, 1):
        args = [_parts_of(c, n, fx, v, i) for fx, v in zip(n.args, a)]
        kwargs = {key: _parts_of(c, n, n.kwargs.get(key), v, i) for key, v in k.items()}
        outs.append(handler(c, n, args, kwargs))
    re, im = outs
    if isinstance(re, list):
        return [_join(c, n, r, j) for r, j in zip(re, im)]
    return _join(c, n, re, im)


def _real_parts(c: Any, n: Any, fx: Any, v: Any, dtype: str) -> tuple[Any, Any]:
    """(real, imaginary) of an operand; a real operand (tensor or number) has imaginary part 0
    (a tensor's zero keeps its shape, which broadcasting may need)."""
    if is_complex(fx):
        return _part(c, n, v, 0), _part(c, n, v, 1)
    if isinstance(v, complex):  # a Python complex number
        return v.real, v.imag
    if isinstance(v, (str, Const)):
        shape = tuple(c.sym_shape(fx)) if hasattr(fx, "meta") else c.b.spec(v).shape
        zero = _emit(c, n, "zero", "expand", [Const(np.zeros((1,) * len(shape), np.dtype(dtype)))], {"shape": shape})
        return c.b.cast_to(f"{c.name(n)}.real", v, dtype), zero
    return v, 0


# ----------------------------------------------------------------------------- conversions
ComplexHandler = Callable[[Any, Any, list[Any], dict[str, Any], "Handler | None"], Any]


def _part_dtype(c: Any, n: Any) -> str:
    return carried((), _out_dtype(c, n))[1]


def _to_copy(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None) -> Value:
    """_to_copy to or from a complex dtype: a real value gets a zero imaginary part, a complex
    one cast to a real dtype keeps its real part (PyTorch discards the imaginary one)."""
    x, src = a[0], n.args[0]
    target = _out_dtype(c, n)
    if not is_complex(src):
        part = carried((), target)[1]
        lifted = _emit(c, n, "pair", "unsqueeze", [c.b.cast_to(f"{c.name(n)}.part", x, part)], {"axes": (-1,)})
        pads = ((0, 0),) * len(c.b.spec(lifted).shape[:-1]) + ((0, 1),)
        return _emit(c, n, "", "pad", [lifted], {"pads": pads})
    if target in _PART_DTYPE:
        return c.b.cast_to(c.name(n), _carry(x), _PART_DTYPE[target])
    return c.b.cast_to(c.name(n), _part(c, n, x, 0), target)


def _view_as_real(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None = None) -> Value:
    """view_as_real / view_as_complex: the carried form is both."""
    return _emit(c, n, "", "identity", [_carry(a[0])])


def _real_imag(i: int) -> ComplexHandler:
    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None = None) -> Value:
        if not is_complex(n.args[0]):
            if i:
                raise c.fail(n, "takes the imaginary part of a real tensor, which PyTorch refuses too")
            return a[0]
        return _part(c, n, a[0], i)

    return run


def _conj(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None = None) -> Value:
    """_conj / conj_physical: the imaginary part negated (a real tensor is its own conjugate).
    resolve_conj / resolve_neg only materialize a view: the carried value already is it."""
    if not is_complex(n.args[0]) or "resolve" in str(getattr(getattr(n.target, "overloadpacket", None), "__name__", "")):
        return a[0]
    x = _carry(a[0])
    flip = Const(np.asarray([1.0, -1.0], np.dtype(c.b.spec(x).dtype)))
    return _emit(c, n, "", "mul", [x, flip])


def _neg_view(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None = None) -> Value:
    """_neg_view (the negative bit of imag(conj(z)) and the like): a negation."""
    return _emit(c, n, "", "neg", [_carry(a[0])])


def _abs(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None) -> Value:
    """|z| = sqrt(re^2 + im^2), a real value."""
    return _emit(c, n, "", "reduce_l2", [_carry(a[0])], {"axes": (-1,), "keepdims": False})


# ----------------------------------------------------------------------------- arithmetic
def _add_sub(op: str) -> ComplexHandler:
    """a + alpha * b / a - alpha * b with a real operand's imaginary part 0."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None) -> Value:
        dtype = _part_dtype(c, n)
        (ar, ai), (br, bi) = (_real_parts(c, n, fx, v, dtype) for fx, v in zip(n.args[:2], a[:2]))
        alpha = float(_arg(a, k, 2, "alpha", 1))
        parts = []
        for tag, x, y in (("re", ar, br), ("im", ai, bi)):
            x, y = (v if isinstance(v, (str, Const)) else _scalar(float(v), dtype) for v in (x, y))
            if alpha != 1:
                y = _emit(c, n, f"{tag}.alpha", "mul", [y, _scalar(alpha, dtype)])
            parts.append(_emit(c, n, tag, op, [x, y]))
        return _join(c, n, *parts)

    return run


def _complex_operand(fx: Any, v: Any) -> bool:
    return is_complex(fx) or isinstance(v, complex)


def _operand_parts(c: Any, n: Any, fx: Any, v: Any, dtype: str) -> list[Value]:
    """(real, imaginary) of an operand as graph values or constants in ``dtype``."""
    return [p if isinstance(p, (str, Const)) else _scalar(float(p), dtype) for p in _real_parts(c, n, fx, v, dtype)]


def _mul(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None) -> Value:
    """(a + bi)(c + di) = (ac - bd) + (ad + bc)i, a real operand promoted to complex first as
    PyTorch does (so inf * 0 in the cross terms gives NaN there too)."""
    dtype = _part_dtype(c, n)
    (ar, ai), (br, bi) = (_operand_parts(c, n, fx, v, dtype) for fx, v in zip(n.args[:2], a[:2]))
    re = _emit(c, n, "re", "sub", [_emit(c, n, "ac", "mul", [ar, br]), _emit(c, n, "bd", "mul", [ai, bi])])
    im = _emit(c, n, "im", "add", [_emit(c, n, "ad", "mul", [ar, bi]), _emit(c, n, "bc", "mul", [ai, br])])
    return _join(c, n, re, im)


def _div(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None) -> Value:
    """A complex value over a real one: both parts divided."""
    if _complex_operand(n.args[1], a[1]) or k.get("rounding_mode") is not None:
        raise c.fail(n, "divides by a complex tensor (or rounds a complex quotient); neurenix divides complex values by "
                        "real ones only: multiply by the conjugate and divide by |z|^2 instead")
    dtype = _part_dtype(c, n)
    divisor = c.b.cast_to(f"{c.name(n)}.divisor", a[1], dtype) if isinstance(a[1], (str, Const)) else _scalar(float(a[1]), dtype)
    re, im = (_emit(c, n, tag, "div", [p, divisor]) for tag, p in zip(("re", "im"), _operand_parts(c, n, n.args[0], a[0], dtype)))
    return _join(c, n, re, im)


def _pad(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None) -> Value:
    """constant_pad_nd(x, pad, value): the imaginary part is padded with 0."""
    x, value = a[0], float(_arg(a, k, 2, "value", 0.0))
    parts = []
    for i, fill in ((0, value), (1, 0.0)):
        pairs = [(0, 0)] * len(c.sym_shape(n.args[0]))
        flat = [int(p) for p in a[1]]
        for j in range(len(flat) // 2):  # PyTorch lists (before, after) from the last axis backwards
            pairs[len(pairs) - 1 - j] = (flat[2 * j], flat[2 * j + 1])
        parts.append(_emit(c, n, ("re", "im")[i], "pad", [_part(c, n, x, i)], {"pads": tuple(pairs), "value": fill}))
    return _join(c, n, *parts)


# ----------------------------------------------------------------------------- transforms
def _dims(c: Any, n: Any, dim: Sequence[int]) -> list[int]:
    """``dim`` against the complex (or real) input's own rank."""
    rank = len(c.sym_shape(n.args[0]))
    return [int(d) % rank for d in dim]


def _static_sizes(c: Any, n: Any, shape: Sequence[Any], dims: Sequence[int]) -> list[int]:
    sizes = [shape[d] for d in dims]
    if not all(isinstance(s, int) for s in sizes):
        raise c.fail(n, "transforms a dynamic axis; import the model with static=True")
    return [int(s) for s in sizes]


def _normalized(c: Any, n: Any, x: Value, mode: int, count: int, divided: bool) -> Value:
    """PyTorch's normalization (0 none, 1 1/sqrt(n), 2 1/n, either direction) of a result that
    ``dft`` left divided by n (inverse transforms) or not."""
    want = (1.0, 1.0 / math.sqrt(count), 1.0 / count)[int(mode)]
    factor = want * count if divided else want
    if factor == 1.0:
        return _emit(c, n, "", "identity", [x])
    return _emit(c, n, "", "mul", [x, _scalar(factor, str(c.b.spec(x).dtype))])


def _dft(c: Any, n: Any, x: Value, axis: int, tag: str, inverse: bool = False, onesided: bool = False,
         length: int | None = None) -> Value:
    return _emit(c, n, tag, "dft", [x], {"axis": axis, "inverse": inverse, "onesided": onesided, "length": length})


def _fft_r2c(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None = None) -> Value:
    """_fft_r2c(x, dim, normalization, onesided): the last axis of dim transformed from real
    (one-sided: its first n//2+1 frequencies), then the others."""
    dims, mode, onesided = _dims(c, n, a[1]), int(a[2]), bool(a[3])
    sizes = _static_sizes(c, n, tuple(c.sym_shape(n.args[0])), dims)
    dtype = _part_dtype(c, n)
    x = _emit(c, n, "signal", "unsqueeze", [c.b.cast_to(f"{c.name(n)}.in", a[0], dtype)], {"axes": (-1,)})
    out = _dft(c, n, x, dims[-1], f"dft{dims[-1]}", onesided=onesided)
    for d in dims[:-1]:
        out = _dft(c, n, out, d, f"dft{d}")
    return _normalized(c, n, out, mode, int(np.prod(sizes)), divided=False)


def _fft_c2c(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None = None) -> Value:
    """_fft_c2c(x, dim, normalization, forward): each axis of dim transformed."""
    dims, mode, forward = _dims(c, n, a[1]), int(a[2]), bool(a[3])
    sizes = _static_sizes(c, n, tuple(c.sym_shape(n.args[0])), dims)
    out = _carry(a[0])
    for d in dims:
        out = _dft(c, n, out, d, f"dft{d}", inverse=not forward)
    return _normalized(c, n, out, mode, int(np.prod(sizes)), divided=not forward)


def _fft_c2r(c: Any, n: Any, a: list[Any], k: dict[str, Any], handler: Handler | None = None) -> Value:
    """_fft_c2r(x, dim, normalization, last_dim_size): the other axes of dim inverse-transformed,
    then the last one from its one-sided half to last_dim_size real values."""
    dims, mode, last = _dims(c, n, a[1]), int(a[2]), int(a[3])
    sizes = _static_sizes(c, n, tuple(c.sym_shape(n.args[0])), dims[:-1])
    out = _carry(a[0])
    for d in dims[:-1]:
        out = _dft(c, n, out, d, f"dft{d}", inverse=True)
    out = _dft(c, n, out, dims[-1], f"dft{dims[-1]}", inverse=True, onesided=True, length=last)
    out = _emit(c, n, "real", "squeeze", [out], {"axes": (-1,)})
    return _normalized(c, n, out, mode, int(np.prod(sizes)) * last, divided=True)


_ON_COMPLEX: Final[dict[str, ComplexHandler]] = {
    "_fft_r2c": _fft_r2c, "_fft_c2r": _fft_c2r, "_fft_c2c": _fft_c2c,
    "_to_copy": _to_copy, "view_as_real": _view_as_real, "view_as_complex": _view_as_real,
    "real": _real_imag(0), "imag": _real_imag(1),
    "_conj": _conj, "conj": _conj, "conj_physical": _conj, "resolve_conj": _conj, "resolve_neg": _conj, "_conj_physical": _conj,
    "_neg_view": _neg_view,
    "abs": _abs, "add": _add_sub("add"), "sub": _add_sub("sub"), "mul": _mul, "div": _div, "constant_pad_nd": _pad,
}


def _plain(name: str) -> Handler:
    """A complex-only op's entry in the importer's table (it always goes through complex_call)."""
    return lambda c, n, a, k: complex_call(c, n, name, None, a, k)


HANDLERS: dict[str, Handler] = {name: _plain(name) for name in (
    "_fft_r2c", "_fft_c2r", "_fft_c2c", "view_as_real", "view_as_complex", "real", "imag", "_conj", "resolve_conj", "resolve_neg", "_neg_view")}
