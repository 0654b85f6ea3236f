"""Sequences and optionals (ONNX's sequence and optional families).

At run time a sequence is a Python list of arrays and an optional is its element (an array or a
list) or None when empty; they run on cpu:0. Their static dtype is a value kind
(``schema.VALUE_KINDS``: ``seq(float32)``, ``optional(int64)``, ``optional(seq(float32))``) with
shape (): the elements' shapes are known per call only. An op that gives a tensor out of one
(``sequence_at``, ``concat_from_sequence``, ``optional_get_element``) carries its static
``shape`` as an attribute (the model's declared type) and checks the value against it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurenix_core.graph.opset.schema import DTYPES, REQUIRED, Arrays, Attrs, Params, Shape, _axis, _def

__all__ = ["check_tensor", "element", "is_kind", "optional_of", "seq_of"]


def seq_of(dtype: str) -> str:
    return f"seq({dtype})"


def optional_of(dtype: str) -> str:
    return f"optional({dtype})"


def is_kind(dtype: str) -> bool:
    """Whether ``dtype`` names a sequence or an optional rather than a tensor dtype."""
    return dtype.startswith(("seq(", "optional("))


def element(dtype: str, kind: str) -> str:
    """The element dtype of a ``kind`` ("seq" / "optional") value; ValueError for another value."""
    if not dtype.startswith(kind + "(") or not dtype.endswith(")"):
        raise ValueError(f"expects a {'sequence' if kind == 'seq' else 'optional'}, got a {dtype} value")
    return dtype[len(kind) + 1:-1]


def _tensor_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"expects a tensor, got a {dtype} value")
    return dtype


def _dtype_name(x: np.ndarray) -> str:
    return "bool" if x.dtype == np.bool_ else str(x.dtype)


def check_tensor(what: str, x: Any, shape: Sequence[int | None] | None, dtype: str) -> np.ndarray:
    """``x`` when it is a tensor of ``dtype`` and ``shape`` (None entries: any size); ValueError
    otherwise (a model whose declared type differs from what it computes is refused, not trusted)."""
    if x is None or isinstance(x, list):
        raise ValueError(f"{what} is {'an empty optional' if x is None else 'a sequence'}, where the model declares a {dtype} tensor")
    arr = np.asarray(x)
    if _dtype_name(arr) != dtype:
        raise ValueError(f"{what} has dtype {arr.dtype}, where the model declares {dtype}")
    if shape is not None and (arr.ndim != len(shape) or any(d is not None and d != n for d, n in zip(shape, arr.shape))):
        raise ValueError(f"{what} has shape {arr.shape}, where the model declares {tuple(shape)}")
    return arr


def _declared_shape(a: Attrs) -> Shape:
    return tuple(int(d) for d in a["shape"])


def _seq(x: Any, what: str = "input") -> list[np.ndarray]:
    if not isinstance(x, list):
        raise ValueError(f"{what} is not a sequence")  # noqa: TRY004 - an op's bad operand is a ValueError, as every opset reference raises
    return x


def _position(p: Any, n: int, insert: bool) -> int:
    pos = int(np.asarray(p).reshape(-1)[0])
    hi = n if insert else n - 1
    if not -n <= pos <= hi:
        raise ValueError(f"position {pos} is out of range for a sequence of {n} tensor(s)")
    return pos + n if pos < 0 else pos


# ----------------------------------------------------------------------------- construction
def _empty_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return (), seq_of(_tensor_dtype(a["dtype"]))


_def("sequence_empty", "sequence", "an empty sequence of dtype tensors", (), _empty_rule,
     lambda a, x, p: [], attrs={"dtype": "float32"})


def _construct_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not d or any(t != d[0] for t in d):
        raise ValueError(f"takes one or more tensors of one dtype, got {d}")
    return (), seq_of(_tensor_dtype(d[0]))


_def("sequence_construct", "sequence", "the sequence of its input tensors", ("inputs*",), _construct_rule,
     lambda a, x, p: [np.asarray(v) for v in x])


def _insert_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if element(d[0], "seq") != d[1]:
        raise ValueError(f"inserts a {d[1]} tensor into a {d[0]}")
    return (), d[0]


def _insert_ref(a: Attrs, x: Arrays, p: Params) -> list[np.ndarray]:
    seq = list(_seq(x[0]))
    pos = len(seq) if len(x) < 3 or x[2] is None else _position(x[2], len(seq), insert=True)
    seq.insert(pos, np.asarray(x[1]))
    return seq


_def("sequence_insert", "sequence", "the sequence with tensor inserted at position (default: at the end; negative counts from the back)",
     ("sequence", "tensor", "position?"), _insert_rule, _insert_ref)


def _erase_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    element(d[0], "seq")
    return (), d[0]


def _erase_ref(a: Attrs, x: Arrays, p: Params) -> list[np.ndarray]:
    seq = list(_seq(x[0]))
    pos = len(seq) - 1 if len(x) < 2 or x[1] is None else _position(x[1], len(seq), insert=False)
    if not seq:
        raise ValueError("erases from an empty sequence")
    del seq[pos]
    return seq


_def("sequence_erase", "sequence", "the sequence without the tensor at position (default: the last)", ("sequence", "position?"),
     _erase_rule, _erase_ref)


def _length_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    element(d[0], "seq")
    return (), "int64"


_def("sequence_length", "sequence", "the number of tensors in the sequence (int64 scalar)", ("sequence",), _length_rule,
     lambda a, x, p: np.asarray(len(_seq(x[0])), np.int64))


# ----------------------------------------------------------------------------- tensors out of sequences
def _at_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return _declared_shape(a), element(d[0], "seq")


def _at_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    seq = _seq(x[0])
    out = seq[_position(x[1], len(seq), insert=False)]
    return check_tensor("the sequence's tensor", out, _declared_shape(a), _dtype_name(np.asarray(out)))


_def("sequence_at", "sequence", "the tensor at position (negative counts from the back); shape: its static shape",
     ("sequence", "position"), _at_rule, _at_ref, attrs={"shape": REQUIRED})


def _concat_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return _declared_shape(a), element(d[0], "seq")


def _concat_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    seq = _seq(x[0])
    if not seq:
        raise ValueError("concatenates an empty sequence")
    ndim = seq[0].ndim
    if a["new_axis"]:
        out = np.stack(seq, axis=_axis(int(a["axis"]), ndim + 1))
    else:
        if ndim == 0:
            raise ValueError("concatenates scalars without new_axis")
        out = np.concatenate(seq, axis=_axis(int(a["axis"]), ndim))
    return check_tensor("the concatenation", out, _declared_shape(a), _dtype_name(seq[0]))


_def("concat_from_sequence", "sequence", "the sequence's tensors concatenated along axis (new_axis=1: stacked on a new axis)",
     ("sequence",), _concat_rule, _concat_ref, attrs={"axis": REQUIRED, "new_axis": 0, "shape": REQUIRED})


def _split_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _axis(int(a["axis"]), len(s[0]))
    if len(d) > 1 and d[1] not in ("int32", "int64"):
        raise ValueError(f"split sizes must be int32 or int64, got {d[1]}")
    return (), seq_of(_tensor_dtype(d[0]))


def _split_ref(a: Attrs, x: Arrays, p: Params) -> list[np.ndarray]:
    data = np.asarray(x[0])
    axis = _axis(int(a["axis"]), data.ndim)
    n = data.shape[axis]
    split = None if len(x) < 2 or x[1] is None else np.asarray(x[1])
    if split is None:  # one piece per index, keepdims decides whether the axis stays
        pieces = [np.take(data, [i], axis=axis) for i in range(n)]
        return pieces if a["keepdims"] else [np.squeeze(v, axis=axis) for v in pieces]
    if split.ndim == 0:  # equal pieces of that size, the last one smaller
        size = int(split)
        if size <= 0:
            raise ValueError(f"split size {size} must be positive")
        sizes = [min(size, n - i) for i in range(0, n, size)]
    else:
        sizes = [int(v) for v in split]
        if any(v < 0 for v in sizes) or sum(sizes) != n:
            raise ValueError(f"split sizes {sizes} do not add up to the axis' {n}")
    bounds = np.cumsum([0] + sizes)
    return [np.take(data, np.arange(lo, hi), axis=axis) for lo, hi in itertools.pairwise(bounds)]


_def("split_to_sequence", "sequence", "data split along axis into a sequence: by split (a size or sizes), else in pieces of 1 "
     "(keepdims=0 drops the axis then)", ("input", "split?"), _split_rule, _split_ref, attrs={"axis": 0, "keepdims": 1})


# ----------------------------------------------------------------------------- optionals
def _optional_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d:
        return (), optional_of(d[0])
    if a["dtype"] is None:
        raise ValueError("an empty optional needs its element type (the type attribute)")
    return (), optional_of(a["dtype"])


_def("optional", "sequence", "an optional holding value, or an empty one of dtype (a tensor dtype or seq(...)) without it",
     ("value?",), _optional_rule, lambda a, x, p: x[0] if x else None, attrs={"dtype": None})


def _has_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return (), "bool"


_def("optional_has_element", "sequence", "whether the optional holds a value (a tensor or sequence does; no input: false)",
     ("value?",), _has_rule, lambda a, x, p: np.asarray(bool(x) and x[0] is not None))


def _get_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    inner = d[0][len("optional("):-1] if d[0].startswith("optional(") else d[0]
    if inner in DTYPES:
        if a["shape"] is None:
            raise ValueError("the optional's tensor has no static shape in the model")
        return _declared_shape(a), inner
    return (), inner


def _get_ref(a: Attrs, x: Arrays, p: Params) -> Any:
    if x[0] is None:
        raise ValueError("the optional is empty")
    if isinstance(x[0], list):
        return x[0]
    return check_tensor("the optional's tensor", x[0], None if a["shape"] is None else _declared_shape(a), _dtype_name(np.asarray(x[0])))


_def("optional_get_element", "sequence", "the optional's value (an error when it is empty); a tensor or sequence passes through",
     ("value",), _get_rule, _get_ref, attrs={"shape": None})
