"""Shape manipulation, indexing, padding, casts and constants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from neurenix_core.graph.opset.schema import (
    Arrays, Attrs, DTYPES, Params, REQUIRED, Shape, _axes, _axis, _broadcast, _const_dtype, _def, _is_float, _np_dtype, _numel, _promote,
)

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
     lambda a, x, p: np.ascontiguousarray(x[0].transpose(_perm(a, x[0].ndim))), attrs={"perm": None})


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
     lambda a, x, p: np.ascontiguousarray(np.broadcast_to(x[0], _broadcast([x[0].shape, tuple(a["shape"])]))), attrs={"shape": REQUIRED})


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
    return np.ascontiguousarray(np.take(x[0], np.arange(lo, hi), axis=ax))


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
     lambda a, x, p: np.ascontiguousarray(x[0][_slices(a, x[0].shape)]), attrs={"starts": REQUIRED, "ends": REQUIRED, "axes": None, "steps": None})


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
    return np.ascontiguousarray(x[0][tuple(np.moveaxis(idx, -1, 0))])


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
    return tuple(n + int(lo) + int(hi) for n, (lo, hi) in zip(s[0], pads)), d[0]


_PAD_MODES: Final = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    pads = [(int(lo), int(hi)) for lo, hi in a["pads"]]
    if a["mode"] == "constant":
        return np.pad(x[0], pads, mode="constant", constant_values=a["value"])
    return np.pad(x[0], pads, mode=_PAD_MODES[a["mode"]])


_def("pad", "shape", "pad every axis by (before, after); mode constant (value) | reflect | edge | wrap", ("x",), _pad_rule, _pad_ref,
     attrs={"pads": REQUIRED, "mode": "constant", "value": 0.0})


def _cast_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    to = a["to"]
    if _is_float(to) and x[0].dtype.kind == "f":
        return x[0]  # float -> float keeps the interpreter's working precision (float64 reference)
    if _is_float(to):
        return x[0].astype(np.float64)
    return x[0].astype(_np_dtype(to))


def _cast_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if a["to"] not in DTYPES:
        raise ValueError(f"cast to unknown dtype {a['to']!r}; dtypes: {', '.join(DTYPES)}")
    return s[0], a["to"]


_def("cast", "dtype", "convert to dtype `to` (floats stay in the interpreter's float precision)", ("x",), _cast_rule, _cast_ref,
     attrs={"to": REQUIRED})




_def("constant", "constant", "the array `value` on the node (weights, scalars, masks)", (),
     lambda a, s, d, p: (tuple(int(n) for n in np.shape(p["value"])), _const_dtype(np.asarray(p["value"]))),
     lambda a, x, p: p["value"], params=("value",))


