"""Shape manipulation, indexing, padding, casts and constants."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from neurenix_core.graph.opset.schema import (
    DTYPES,
    REQUIRED,
    Arrays,
    Attrs,
    Params,
    Shape,
    _axes,
    _axis,
    _broadcast,
    _const_dtype,
    _def,
    _np_dtype,
    _numel,
    _promote,
)


def _contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous, a 0-d value staying 0-d (``np.ascontiguousarray`` makes it shape (1,))."""
    return np.asarray(a, order="C")


# ----------------------------------------------------------------------------- shape manipulation
def _reshape_target(x: Shape, shape: Sequence[int]) -> Shape:
    dims = [x[i] if v == 0 else int(v) for i, v in enumerate(shape)]  # ONNX: 0 copies the input's dimension
    if dims.count(-1) > 1:
        raise ValueError(f"reshape target {tuple(shape)} has more than one -1")
    if -1 in dims:
        known = _numel(tuple(v for v in dims if v != -1))
        if known == 0 or _numel(x) % known:
            raise ValueError(f"cannot reshape {x} to {tuple(shape)}")
        dims[dims.index(-1)] = _numel(x) // known
    if _numel(tuple(dims)) != _numel(x):
        raise ValueError(f"cannot reshape {x} ({_numel(x)} elements) to {tuple(dims)}")
    return tuple(dims)


_def("reshape", "shape", "same elements, new static shape (-1 inferred once, 0 copies the input dimension)", ("x",),
     lambda a, s, d, p: (_reshape_target(s[0], a["shape"]), d[0]),
     lambda a, x, p: x[0].reshape(_reshape_target(x[0].shape, a["shape"])), attrs={"shape": REQUIRED})


def _flatten_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    if not x:
        raise ValueError("flatten needs at least one dimension")
    i, j = a["start_dim"] % len(x), a["end_dim"] % len(x)
    return x[:i] + (_numel(x[i : j + 1]),) + x[j + 1 :], d[0]


_def("flatten", "shape", "merge dimensions start_dim..end_dim (PyTorch's flatten)", ("x",), _flatten_rule,
     lambda a, x, p: x[0].reshape(_flatten_rule(a, [x[0].shape], [""], p)[0]), attrs={"start_dim": 1, "end_dim": -1})


def _perm(a: Attrs, n: int) -> tuple[int, ...]:
    perm = tuple(reversed(range(n))) if a["perm"] is None else tuple(_axis(v, n) for v in a["perm"])
    if sorted(perm) != list(range(n)):
        raise ValueError(f"perm {a['perm']} is not a permutation of {n} axes")
    return perm


_def("transpose", "shape", "permute axes (perm; None reverses them) - PyTorch's permute/transpose map here", ("x",),
     lambda a, s, d, p: (tuple(s[0][i] for i in _perm(a, len(s[0]))), d[0]),
     lambda a, x, p: _contiguous(x[0].transpose(_perm(a, x[0].ndim))), attrs={"perm": None})


def _squeeze_axes(a: Attrs, x: Shape) -> tuple[int, ...]:
    axes = tuple(i for i, n in enumerate(x) if n == 1) if a["axes"] is None else _axes(a["axes"], len(x))
    for i in axes:
        if x[i] != 1:
            raise ValueError(f"cannot squeeze axis {i} of size {x[i]} (shape {x})")
    return axes


_def("squeeze", "shape", "drop size-1 axes (None = all of them)", ("x",),
     lambda a, s, d, p: (tuple(n for i, n in enumerate(s[0]) if i not in _squeeze_axes(a, s[0])), d[0]),
     lambda a, x, p: x[0].reshape(tuple(n for i, n in enumerate(x[0].shape) if i not in _squeeze_axes(a, x[0].shape))),
     attrs={"axes": None})


def _unsqueeze(a: Attrs, x: Shape) -> Shape:
    n = len(x) + len(a["axes"])
    axes = sorted(_axis(v, n) for v in a["axes"])
    out, it = [], iter(x)
    for i in range(n):
        out.append(1 if i in axes else next(it))
    return tuple(out)


_def("unsqueeze", "shape", "insert size-1 axes at the output positions axes", ("x",), lambda a, s, d, p: (_unsqueeze(a, s[0]), d[0]),
     lambda a, x, p: x[0].reshape(_unsqueeze(a, x[0].shape)), attrs={"axes": REQUIRED})
_def("expand", "shape", "broadcast to shape (ONNX Expand: two-way broadcasting)", ("x",),
     lambda a, s, d, p: (_broadcast([s[0], tuple(a["shape"])]), d[0]),
     lambda a, x, p: _contiguous(np.broadcast_to(x[0], _broadcast([x[0].shape, tuple(a["shape"])]))), attrs={"shape": REQUIRED})


def _concat_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    ax = _axis(a["axis"], len(s[0]))
    for t in s[1:]:
        if len(t) != len(s[0]) or any(t[i] != s[0][i] for i in range(len(t)) if i != ax):
            raise ValueError(f"concat along axis {ax}: shapes {s} differ elsewhere")
    return s[0][:ax] + (sum(t[ax] for t in s),) + s[0][ax + 1 :], _promote(d)


_def("concat", "shape", "join along axis", ("x*",), _concat_rule, lambda a, x, p: np.concatenate(x, axis=a["axis"]), attrs={"axis": 0})


def _split_bounds(a: Attrs, x: Shape) -> tuple[int, int, int]:
    ax = _axis(a["axis"], len(x))
    sizes = list(a["sizes"])
    if sum(sizes) != x[ax]:
        raise ValueError(f"split sizes {sizes} do not add up to axis {ax} of shape {x}")
    start = sum(sizes[: a["index"]])
    return ax, start, start + sizes[a["index"]]


def _split_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    ax, lo, hi = _split_bounds(a, x[0].shape)
    return _contiguous(np.take(x[0], np.arange(lo, hi), axis=ax))


def _split_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    ax, lo, hi = _split_bounds(a, s[0])
    return s[0][:ax] + (hi - lo,) + s[0][ax + 1 :], d[0]


_def("split", "shape", "chunk index of x cut along axis into sizes (one node per output of ONNX Split)", ("x",),
     _split_rule, _split_ref, attrs={"axis": 0, "sizes": REQUIRED, "index": 0})


def _slices(a: Attrs, x: Shape) -> tuple[slice, ...]:
    out = [slice(None)] * len(x)
    axes = a["axes"] if a["axes"] is not None else tuple(range(len(a["starts"])))
    steps = a["steps"] if a["steps"] is not None else (1,) * len(axes)
    for ax, st, en, sp in zip(axes, a["starts"], a["ends"], steps):
        out[_axis(ax, len(x))] = _onnx_slice(int(st), int(en), int(sp), x[_axis(ax, len(x))])
    return tuple(out)


def _onnx_slice(start: int, end: int, step: int, n: int) -> slice:
    """ONNX Slice bounds on an axis of length ``n`` as a Python slice. Not Python's own clamping:
    with a negative step ONNX clamps ``end`` to -1 ("past the first element"), which a Python
    slice would read as "the last element", so that end becomes None."""
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), n), min(max(end, 0), n), step)
    start, end = min(max(start, -1), n - 1), min(max(end, -1), n - 1)
    if start < 0:
        return slice(0, 0, 1)
    return slice(start, None if end < 0 else end, step)


def _slice_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return tuple(len(range(*sl.indices(n))) for sl, n in zip(_slices(a, s[0]), s[0])), d[0]


_def("slice", "shape", "x[starts:ends:steps] on axes (ONNX Slice with static starts/ends)", ("x",), _slice_rule,
     lambda a, x, p: _contiguous(x[0][_slices(a, x[0].shape)]), attrs={"starts": REQUIRED, "ends": REQUIRED, "axes": None, "steps": None})


def _gather_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[1] not in ("int32", "int64"):
        raise ValueError(f"gather indices must be int32/int64, got {d[1]}")
    ax = _axis(a["axis"], len(s[0]))
    return s[0][:ax] + s[1] + s[0][ax + 1 :], d[0]


def _gather_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    ax = _axis(a["axis"], x[0].ndim)
    idx = np.where(x[1] < 0, x[1] + x[0].shape[ax], x[1])
    if idx.size and (idx.min() < 0 or idx.max() >= x[0].shape[ax]):
        raise ValueError(f"gather index out of range for axis {ax} of size {x[0].shape[ax]}")
    return np.take(x[0], idx, axis=ax)


_def("gather", "indexing", "take indices (int64) from data along axis (ONNX Gather)", ("data", "indices"), _gather_rule, _gather_ref,
     attrs={"axis": 0})


def _index_dtype(d: str, op: str) -> None:
    if d not in ("int32", "int64"):
        raise ValueError(f"{op} indices must be int32/int64, got {d}")


def _gather_elements_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _index_dtype(d[1], "gather_elements")
    ax = _axis(a["axis"], len(s[0]))
    if len(s[1]) != len(s[0]) or any(i > n for k, (i, n) in enumerate(zip(s[1], s[0])) if k != ax):
        raise ValueError(f"gather_elements indices {s[1]} do not fit data {s[0]} outside axis {ax}")
    return s[1], d[0]


def _gather_elements_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    ax = _axis(a["axis"], x[0].ndim)
    n = x[0].shape[ax]
    idx = np.where(x[1] < 0, x[1] + n, x[1])
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"gather_elements index out of range for axis {ax} of size {n}")
    data = x[0][tuple(slice(0, k) if i != ax else slice(None) for i, k in enumerate(idx.shape))]
    return np.take_along_axis(data, idx, axis=ax)


_def("gather_elements", "indexing", "data[..., indices[i, j, ...], ...] along axis, output shaped as indices (ONNX GatherElements, torch.gather)",
     ("data", "indices"), _gather_elements_rule, _gather_elements_ref, attrs={"axis": 0})


def _gather_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _index_dtype(d[1], "gather_nd")
    if a["batch_dims"] != 0:
        # Every backend lowers batch_dims 0 only; the ONNX importer prepends the batch coordinates instead.
        raise ValueError(f"gather_nd supports batch_dims=0, got {a['batch_dims']}")
    k = s[1][-1] if s[1] else 0
    if not s[1] or k > len(s[0]):
        raise ValueError(f"gather_nd indices {s[1]} need a last axis of at most {len(s[0])} coordinates")
    return s[1][:-1] + s[0][k:], d[0]


def _gather_nd_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    k = x[1].shape[-1]
    dims = np.asarray(x[0].shape[:k], np.int64)
    idx = np.where(x[1] < 0, x[1] + dims, x[1])
    if idx.size and (np.any(idx < 0) or np.any(idx >= dims)):
        raise ValueError(f"gather_nd index out of range for data of shape {x[0].shape}")
    return _contiguous(x[0][tuple(np.moveaxis(idx, -1, 0))])


_def("gather_nd", "indexing", "data at the coordinates in indices' last axis (ONNX GatherND, batch_dims 0)",
     ("data", "indices"), _gather_nd_rule, _gather_nd_ref, attrs={"batch_dims": 0})


def _embedding_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] not in ("int32", "int64"):
        raise ValueError(f"embedding takes integer indices, got {d[0]}")
    w = p["weight"]
    return s[0] + (int(w.shape[1]),), str(w.dtype) if str(w.dtype) in DTYPES else "float32"


_def("embedding", "indexing", "rows of weight (num, dim) at integer indices", ("indices",), _embedding_rule,
     lambda a, x, p: _gather_ref({"axis": 0}, [p["weight"], x[0]], {}), params=("weight",),
     decompose=lambda b, i, a, p: b.op("gather", [b.const(np.asarray(p["weight"])), i[0]], {"axis": 0}))


def _where_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] != "bool":
        raise ValueError(f"where takes a bool condition, got {d[0]}")
    return _broadcast(s), _promote(d[1:])


_def("where", "indexing", "a where cond else b, broadcasting", ("cond", "a", "b"), _where_rule, lambda a, x, p: np.where(x[0], x[1], x[2]))


def _pad_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    pads = a["pads"]
    if len(pads) != len(s[0]):
        raise ValueError(f"pads needs one (before, after) pair per axis ({len(s[0])}), got {len(pads)}")
    if any(int(lo) < 0 or int(hi) < 0 for lo, hi in pads):
        raise ValueError(f"pads {tuple(pads)} must be >= 0 (the ONNX importer crops a negative pad with a slice first)")
    out = tuple(n + int(lo) + int(hi) for n, (lo, hi) in zip(s[0], pads))
    if a["mode"] not in _PAD_MODES:
        raise ValueError(f"pad mode {a['mode']!r} is not one of {sorted(_PAD_MODES)}")
    if a["mode"] != "constant" and any(n == 0 and (lo > 0 or hi > 0) for n, (lo, hi) in zip(s[0], pads)):
        raise ValueError(f"pad mode {a['mode']!r} cannot extend an empty axis (shape {s[0]})")
    return out, d[0]


_PAD_MODES: Final = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    v, grow = x[0], [(int(lo), int(hi)) for lo, hi in a["pads"]]
    if a["mode"] == "constant":
        value = np.asarray(a["value"]).astype(v.dtype)  # the fill in the data's dtype (ints and bools too)
        return np.pad(v, grow, mode="constant", constant_values=value)
    return np.pad(v, grow, mode=_PAD_MODES[a["mode"]])  # type: ignore[call-overload]  # NumPy's stub wants a literal mode


_def("pad", "shape", "pad every axis by (before, after) >= 0; mode constant (value) | reflect | edge | wrap", ("x",),
     _pad_rule, _pad_ref, attrs={"pads": REQUIRED, "mode": "constant", "value": 0.0})


#: The float8 types whose conversion ``saturate`` governs (ONNX Cast): with it, out-of-range values
#: and infinities clip to the type's largest finite value; without it they become what the type
#: has for them (inf for e5m2, NaN for the others).
SATURATING_FLOAT8: Final = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_E8M0_ROUNDING: Final = ("up", "down", "nearest")


def _as_float32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32, copy=False)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float8 e8m0 (a biased power-of-two exponent) from the float32 value's exponent bits, as
    ONNX's reference computes it: NaN and inf give NaN (0xFF), the sign is dropped, 0 and
    subnormals have exponent 0; ``round_mode`` rounds the dropped mantissa up, down or to the
    nearest (ties up), and ``saturate`` keeps rounding from overflowing 0xFE into NaN."""
    import ml_dtypes

    bits = np.ascontiguousarray(_as_float32(np.asarray(x))).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "up":
        bump = (bits & 0x7FFFFF) > 0
    elif round_mode == "nearest":
        guard, rnd, sticky = (bits & 0x400000) > 0, (bits & 0x200000) > 0, (bits & 0x1FFFFF) > 0
        bump = guard & (rnd | sticky | (exponent > 0))
    else:
        bump = np.zeros(bits.shape, bool)
    bump &= ~special
    if saturate:
        bump &= exponent != 0xFE
    out = np.where(special, 0xFF, exponent + bump).astype(np.uint8)
    return out.view(ml_dtypes.float8_e8m0fnu)


def convert(x: np.ndarray, to: str, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` as dtype ``to`` with ONNX Cast's semantics (shared with QuantizeLinear): float8 with
    ``saturate`` clips to the type's finite range first (NaN stays NaN), e8m0 from the exponent
    bits (``_to_e8m0``), everything else NumPy's / ml_dtypes' conversion (round to nearest even
    for floats; float to an integer truncates, and to int4 / int2 wraps in two's complement as
    ONNX's reference does; float4 e2m1 has no inf or NaN and saturates on its own)."""
    target = _np_dtype(to)
    x = np.asarray(x)
    if to == "float8_e8m0fnu":
        return _to_e8m0(x, saturate, round_mode)
    if to in SATURATING_FLOAT8 and saturate:
        import ml_dtypes

        info = ml_dtypes.finfo(target)
        # Storage types clip in float32 (exact for all of them); other floats in their own dtype,
        # integers in float64: the bounds are exact in each, so only the final conversion rounds.
        v = _as_float32(x) if x.dtype.kind == "V" or x.dtype.itemsize == 1 and x.dtype.kind == "f" else x
        return np.clip(v, float(info.min), float(info.max)).astype(target)
    if x.dtype.kind == "f" and (np.dtype(target).kind in "iu" or to in SUB_BYTE_INTEGERS):
        return _float_to_integer(x, target)
    return x.astype(target)


#: The integer storage types narrower than a byte (ml_dtypes; their NumPy kind is "V").
SUB_BYTE_INTEGERS: Final = frozenset({"int4", "uint4", "int2", "uint2"})
#: Floats from 2**63 up do not fit int64 (nor does its largest value fit float64 exactly).
_INT64_SPAN: Final = 2.0**63


def _float_to_integer(x: np.ndarray, target: Any) -> np.ndarray:
    """Float to an integer type with one result on every CPU: truncate toward zero, convert to
    int64, then wrap in two's complement to ``target`` (ONNX's reference casts int4 through a
    wide integer). A float converted straight to a narrower integer type is undefined in C, so
    NumPy's result depended on the CPU's instructions (uint4 of -9: 7 on one machine, 0 on
    another). Where even int64 cannot hold it (NaN, infinities, |x| >= 2**63: undefined in ONNX
    and torch alike; models that produce one drop it with a where, as T5's relative-position
    buckets do with log(0)), NaN gives 0 and the rest saturate to the target's bounds."""
    wide = np.trunc(np.asarray(x, np.float64))
    beyond = ~(np.abs(wide) < _INT64_SPAN)  # NaN and infinities included
    ints = np.where(beyond, 0.0, wide).astype(np.int64)
    out = ints.view(np.uint64) if np.dtype(target) == np.uint64 else ints.astype(target)  # narrows modulo 2**bits
    if beyond.any():
        import ml_dtypes  # iinfo for int4 / int2 as well as NumPy's types

        info = ml_dtypes.iinfo(target)
        bound = np.where(wide > 0, np.array(info.max).astype(target), np.array(info.min).astype(target))
        out = np.where(beyond & ~np.isnan(wide), bound, out).astype(target)
    return out


def _cast_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    # Really converts, float to float included (float32 -> float16 rounds). The float64
    # reference interpreter widens a float result again, which keeps that rounding.
    return convert(x[0], a["to"], bool(a["saturate"]), a["round_mode"])


def _cast_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if a["to"] not in DTYPES:
        raise ValueError(f"cast to unknown dtype {a['to']!r}; dtypes: {', '.join(DTYPES)}")
    if a["round_mode"] not in _E8M0_ROUNDING:
        raise ValueError(f"round_mode is one of {', '.join(_E8M0_ROUNDING)}, got {a['round_mode']!r}")
    return s[0], a["to"]


_def("cast", "dtype", "convert to dtype `to` (ONNX Cast: floats to integers truncate; to float8, saturate=1 clips out-of-range "
     "values and infinities to the largest finite value; to float8_e8m0fnu, round_mode up | down | nearest)", ("x",),
     _cast_rule, _cast_ref, attrs={"to": REQUIRED, "saturate": 1, "round_mode": "up"})




_def("constant", "constant", "the array `value` on the node (weights, scalars, masks)", (),
     lambda a, s, d, p: (tuple(int(n) for n in np.shape(p["value"])), _const_dtype(np.asarray(p["value"]))),
     lambda a, x, p: p["value"], params=("value",))




# ----------------------------------------------------------------------------- ONNX tensor family: repetition, triangles, scatters
def _tile_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    reps = tuple(int(r) for r in a["repeats"])
    if len(reps) != len(s[0]) or any(r < 0 for r in reps):
        raise ValueError(f"tile needs one non-negative repeat per axis of {s[0]}, got {reps}")
    return tuple(n * r for n, r in zip(s[0], reps)), d[0]


_def("tile", "shape", "repeat x repeats[i] times along each axis i (ONNX Tile)", ("x",), _tile_rule,
     lambda a, x, p: np.tile(x[0], tuple(int(r) for r in a["repeats"])), attrs={"repeats": REQUIRED})


def _trilu_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if len(s[0]) < 2:
        raise ValueError(f"trilu takes a value of rank 2 or more, got shape {s[0]}")
    return s[0], d[0]


def _trilu_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    k = int(a["k"])
    return np.triu(x[0], k) if a["upper"] else np.tril(x[0], k)


_def("trilu", "shape", "upper (upper=True: j - i >= k) or lower (j - i <= k) triangle of the last two axes, zeros elsewhere (ONNX Trilu)",
     ("x",), _trilu_rule, _trilu_ref, attrs={"upper": True, "k": 0})


_SCATTER_REDUCE: Final = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(data: np.ndarray, where: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str) -> np.ndarray:
    """``data`` with ``updates`` written (or combined) at the index arrays ``where``; a repeated
    index combines every update in order (``ufunc.at``), plain writes keep the last one."""
    out = data.copy()
    if reduction == "none":
        out[where] = updates
    else:
        _SCATTER_REDUCE[reduction].at(out, where, updates)
    return out


def _reduction_ok(a: Attrs) -> None:
    if a["reduction"] != "none" and a["reduction"] not in _SCATTER_REDUCE:
        raise ValueError(f"scatter reduction {a['reduction']!r} is not one of none, {', '.join(_SCATTER_REDUCE)}")


def _scatter_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _index_dtype(d[1], "scatter_nd")
    _reduction_ok(a)
    data, idx, upd = s
    k = idx[-1] if idx else 0
    if not idx or k > len(data) or upd != idx[:-1] + data[k:]:
        raise ValueError(f"scatter_nd updates {upd} must be indices[:-1] + data[k:] = {idx[:-1] + data[k:]} (indices {idx}, data {data})")
    return data, d[0]


def _scatter_nd_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    data, idx = x[0], x[1].astype(np.int64)
    dims = np.asarray(data.shape[: idx.shape[-1]], np.int64)
    idx = np.where(idx < 0, idx + dims, idx)
    if idx.size and (np.any(idx < 0) or np.any(idx >= dims)):
        raise ValueError(f"scatter_nd index out of range for data of shape {data.shape}")
    return _scatter(data, tuple(np.moveaxis(idx, -1, 0)), x[2].astype(data.dtype, copy=False), a["reduction"])


_def("scatter_nd", "indexing", "data with updates written at the coordinates in indices' last axis; reduction none | add | mul | max | min (ONNX ScatterND)",
     ("data", "indices", "updates"), _scatter_nd_rule, _scatter_nd_ref, attrs={"reduction": "none"})


def _scatter_elements_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _index_dtype(d[1], "scatter_elements")
    _reduction_ok(a)
    data, idx, upd = s
    ax = _axis(a["axis"], len(data))
    if idx != upd or len(idx) != len(data) or any(i > n for k, (i, n) in enumerate(zip(idx, data)) if k != ax):
        raise ValueError(f"scatter_elements indices {idx} and updates {upd} must share a shape that fits data {data} outside axis {ax}")
    return data, d[0]


def _scatter_elements_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    data, idx = x[0], x[1].astype(np.int64)
    ax = _axis(a["axis"], data.ndim)
    n = data.shape[ax]
    idx = np.where(idx < 0, idx + n, idx)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"scatter_elements index out of range for axis {ax} of size {n}")
    grids: tuple[np.ndarray, ...] = tuple(np.indices(idx.shape, sparse=True))
    where = tuple(idx if i == ax else g for i, g in enumerate(grids))
    return _scatter(data, where, x[2].astype(data.dtype, copy=False), a["reduction"])


_def("scatter_elements", "indexing", "data with updates[i, j, ...] written at data[..., indices[i, j, ...], ...] along axis (ONNX ScatterElements, torch.scatter)",
     ("data", "indices", "updates"), _scatter_elements_rule, _scatter_elements_ref, attrs={"axis": 0, "reduction": "none"})


def _tensor_scatter_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    cache, upd = s[0], s[1]
    ax = _axis(a["axis"], len(cache))
    if ax == 0 or len(upd) != len(cache) or any(u != c for i, (u, c) in enumerate(zip(upd, cache)) if i != ax) or upd[ax] > cache[ax]:
        raise ValueError(f"tensor_scatter update {upd} must match cache {cache} except on sequence axis {ax} (not the batch axis), and fit it")
    if len(s) > 2 and s[2] != (cache[0],):
        raise ValueError(f"tensor_scatter write_indices must have one entry per batch ({cache[0]}), got shape {s[2]}")
    if a["mode"] not in ("linear", "circular"):
        raise ValueError(f"tensor_scatter mode {a['mode']!r} is not linear or circular")
    return cache, d[0]


def _tensor_scatter_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    ax = _axis(a["axis"], x[0].ndim)
    cache, upd = np.moveaxis(x[0].copy(), ax, 1), np.moveaxis(x[1], ax, 1)  # (batch, sequence, ...), views
    batch, length, seq = cache.shape[0], cache.shape[1], upd.shape[1]
    start = x[2].astype(np.int64) if len(x) > 2 and x[2] is not None else np.zeros(batch, np.int64)
    pos = start[:, None] + np.arange(seq)
    if a["mode"] == "circular":
        pos %= length
    elif pos.size and (pos.min() < 0 or pos.max() >= length):
        raise ValueError(f"tensor_scatter writes past the cache's {length} positions (write_indices {start.tolist()}, {seq} new)")
    cache[np.arange(batch)[:, None], pos] = upd
    return _contiguous(np.moveaxis(cache, 1, ax))


_def("tensor_scatter", "indexing", "KV-cache update: update's sequence written into cache from write_indices[b] per batch, linear or circular (ONNX TensorScatter)",
     ("cache", "update", "write_indices?"), _tensor_scatter_rule, _tensor_scatter_ref, attrs={"mode": "linear", "axis": -2})


# ----------------------------------------------------------------------------- ONNX tensor family: one-hot, top-k, value-dependent shapes
def _one_hot_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] == "bool" or _numel(s[1]) != 2:
        raise ValueError(f"one_hot takes numeric indices and 2 values (off, on), got {d[0]} and shape {s[1]}")
    ax = _axis(a["axis"], len(s[0]) + 1)
    return s[0][:ax] + (int(a["depth"]),) + s[0][ax:], d[1]


def _one_hot_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    depth = int(a["depth"])
    ax = _axis(a["axis"], x[0].ndim + 1)
    idx = x[0].astype(np.int64)  # float indices truncate, as ONNX's cast to int64
    idx = np.expand_dims(np.where(idx < 0, idx + depth, idx), ax)
    hot = idx == np.arange(depth).reshape((-1,) + (1,) * (x[0].ndim - ax))  # an index out of range stays all "off"
    off, on = x[1].reshape(-1)
    return np.where(hot, on, off).astype(x[1].dtype)


_def("one_hot", "indexing", "depth-long one-hot vectors of indices inserted at axis, values = (off, on) (ONNX OneHot; negative indices count from depth)",
     ("indices", "values"), _one_hot_rule, _one_hot_ref, attrs={"depth": REQUIRED, "axis": -1})


def _topk_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    ax = _axis(a["axis"], len(s[0]))
    k = int(a["k"])
    if not 0 <= k <= s[0][ax]:
        raise ValueError(f"topk k={k} is out of range for axis {ax} of size {s[0][ax]}")
    if a["output"] not in (0, 1):
        raise ValueError(f"topk has outputs 0 (values) and 1 (indices), got {a['output']}")
    return s[0][:ax] + (k,) + s[0][ax + 1 :], d[0] if a["output"] == 0 else "int64"


def _topk_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    v = x[0]
    ax = _axis(a["axis"], v.ndim)
    n = v.shape[ax]
    if a["largest"]:
        # Descending with ties in ascending index: a stable ascending sort of the reversed axis, reversed back.
        order = n - 1 - np.flip(np.argsort(np.flip(v, ax), axis=ax, kind="stable"), ax)
    else:
        order = np.argsort(v, axis=ax, kind="stable")
    order = np.take(order, np.arange(int(a["k"])), axis=ax)
    return np.take_along_axis(v, order, axis=ax) if a["output"] == 0 else order.astype(np.int64)


_def("topk", "indexing", "the k largest (or smallest) along axis, sorted, ties by lower index; output 0 values, 1 indices (ONNX TopK)",
     ("x",), _topk_rule, _topk_ref, attrs={"k": REQUIRED, "axis": -1, "largest": True, "sorted": True, "output": 0})


def _value_dependent(op: str) -> Callable[[Attrs, list[Shape], list[str], Params], tuple[Shape, str]]:
    def rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
        raise ValueError(f"{op}'s output shape depends on its input's values; only a constant input is supported")

    return rule


def _unique_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    v = x[0]
    ax = None if a["axis"] is None else _axis(a["axis"], v.ndim)
    flat = v.reshape(-1) if ax is None else v
    y, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True, axis=ax)
    if not a["sorted"]:
        # ONNX's unsorted order: the order of first occurrence in the input.
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
        y = np.take(flat, first, axis=0 if ax is None else ax)
    out = (y, first, inverse.reshape(-1), counts)[int(a["output"])]
    return _contiguous(out) if a["output"] == 0 else out.astype(np.int64)


_def("unique", "indexing", "unique values (flattened, or slices along axis), sorted or in first-occurrence order; output 0 values, "
     "1 first indices, 2 inverse indices, 3 counts (ONNX Unique; constant input only: the shape depends on the values)",
     ("x",), _value_dependent("unique"), _unique_ref, attrs={"axis": None, "sorted": True, "output": 0})
_def("nonzero", "indexing", "int64 coordinates (ndim, count) of the non-zero elements (ONNX NonZero; constant input only)",
     ("x",), _value_dependent("nonzero"), lambda a, x, p: np.asarray(np.nonzero(np.atleast_1d(x[0])), np.int64).reshape(max(x[0].ndim, 1), -1))


def _reverse_sequence_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    b, t = _axis(a["batch_axis"], len(s[0])), _axis(a["time_axis"], len(s[0]))
    if b == t or s[1] != (s[0][b],):
        raise ValueError(f"reverse_sequence needs distinct batch/time axes and one length per batch ({s[0][b] if b < len(s[0]) else '?'}), got {s[1]}")
    _index_dtype(d[1], "reverse_sequence")
    return s[0], d[0]


def _reverse_sequence_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    v, lens = x[0], x[1].astype(np.int64)
    b, t = _axis(a["batch_axis"], v.ndim), _axis(a["time_axis"], v.ndim)
    steps = np.arange(v.shape[t])
    src = np.where(steps[None, :] < lens[:, None], lens[:, None] - 1 - steps[None, :], steps[None, :])  # (batch, time)
    shape = [1] * v.ndim
    shape[b], shape[t] = v.shape[b], v.shape[t]
    src = src if b < t else src.T
    return np.take_along_axis(v, np.broadcast_to(src.reshape(shape), v.shape), axis=t)


_def("reverse_sequence", "indexing", "reverse the first lengths[b] steps along time_axis for each batch b (ONNX ReverseSequence)",
     ("x", "lengths"), _reverse_sequence_rule, _reverse_sequence_ref, attrs={"batch_axis": 1, "time_axis": 0})


# ----------------------------------------------------------------------------- ONNX generator family
def _eye_like_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if len(s[0]) != 2:
        raise ValueError(f"eye_like takes a 2-D value, got shape {s[0]}")
    dtype = a["dtype"] or d[0]
    if dtype not in DTYPES:
        raise ValueError(f"eye_like dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return s[0], dtype


_def("eye_like", "constant", "ones on diagonal k of a matrix shaped like x, zeros elsewhere, in dtype (None: x's) (ONNX EyeLike)", ("x",),
     _eye_like_rule, lambda a, x, p: np.eye(*x[0].shape, k=int(a["k"]),  # type: ignore[call-overload]  # (rows, cols): _eye_like_rule wants 2-D
      dtype=_np_dtype(a["dtype"]) if a["dtype"] else x[0].dtype),
     attrs={"k": 0, "dtype": None})


def _window(a: Attrs) -> np.ndarray:
    size = int(a["size"])
    n = np.arange(size, dtype=np.float64)
    period = size if a["periodic"] else size - 1
    with np.errstate(divide="ignore", invalid="ignore"):  # size 1 symmetric: 0 / 0, as ONNX's reference computes it
        phase = 2 * np.pi * n / period
    values = {
        "hann": lambda: np.sin(phase / 2) ** 2,
        "hamming": lambda: 25 / 46 - (21 / 46) * np.cos(phase),
        "blackman": lambda: 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase),
    }[a["kind"]]()
    return values.astype(_np_dtype(a["dtype"]))


def _window_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if a["kind"] not in ("hann", "hamming", "blackman") or int(a["size"]) < 0 or a["dtype"] not in DTYPES:
        raise ValueError(f"window: kind hann | hamming | blackman, size >= 0 and a dtype of {', '.join(DTYPES)}; got {dict(a)}")
    return (int(a["size"]),), a["dtype"]


_def("window", "constant", "a size-long hann | hamming | blackman window, periodic or symmetric, in dtype (ONNX HannWindow ...)", (),
     _window_rule, lambda a, x, p: _window(a), attrs={"kind": REQUIRED, "size": REQUIRED, "periodic": True, "dtype": "float32"})
