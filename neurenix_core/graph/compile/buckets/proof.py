"""Shape buckets, the proof that padding to a bucket shape changes no result.

Padding is only done where :func:`prove_padding` shows, on the graph itself, that it cannot
change a result. The analysis walks the graph's nodes once (at the bucket's shapes, reading the
symbolic attributes of a dynamic import to see which sizes follow which input axis) and keeps,
for every value:

- ``tags``: per axis, the padded *class* it carries (a set of input axes the model combines
  position by position, which must therefore have one size in a call) or None. The invariant:
  at every position whose index on each tagged axis is below that class's real size, the value
  equals the value the model computes on the unpadded inputs; untagged axes have the size the
  unpadded model gives them.
- ``fill``: axis -> the exact value of the padded region along that axis (positions at or past
  the real size there, valid on the other tagged axes): the attention-mask input padded with 0
  gives ``False``/0 there, and what is computed from it follows (cast, logical and, where, index
  grids, arithmetic on known values).
- ``nonfinite``: the classes whose padded positions may hold inf/NaN (an op with a pole, such
  as division, log or rsqrt, applied to padding; a non-finite constant; attention rows that the
  mask removes entirely); a masked contraction needs the other operand finite there (0 * inf is
  NaN).
- ``const``: the value itself when it is computed from constants only (index grids, position
  ids), evaluated at the bucket's shapes; ``iota`` when it is a position ramp along a padded
  axis (a causal mask compares two of them);
- ``sign``: > 0 or >= 0 everywhere, so that poles that cannot be reached (RMSNorm's
  ``rsqrt(mean(x * x) + eps)``) are not counted.

A reshape that merges padded axes into one row axis (GPT-2's ``(batch * length, features)``
around its matrix products) tags it with a :class:`_Merged` of its parts; row-wise ops keep it
and a later reshape must split it back into the same parts.

Each op keeps positions along a tagged axis independent (elementwise and broadcast ops, matmul
and linear over other axes, reductions and norms over other axes, reshapes and transposes that
keep the axis whole, gathers with non-negative indices), or mixes along it only where it is proven
masked: attention whose padded keys are masked by a ``False`` / ``-inf`` / very negative (<=
-1e4) mask or by causality (``is_causal``, a ``trilu`` mask, compared position ramps), sums over zero-filled axes, max
over ``-inf`` ones, forward cumulative sums. Anything else on a padded axis is refused with
:class:`PaddingRefusedError`, naming the node, its op, the axis and the reason.

Assumptions, stated in docs/shape-buckets.md: inputs hold finite numbers; pole-free arithmetic
does not overflow; an additive mask of -1e4 or below drives ``exp`` to exactly 0 (attention
scores differ by less than about 9900); a query row whose every real key is masked is the one
case a very negative (not -inf) mask cannot keep equal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final

import numpy as np

from neurenix_core.graph.compile.buckets.policy import BucketPolicy, PaddingRefusedError, Src

__all__ = ["MASK_NEGATIVE", "PaddingProof", "prove_padding"]

#: An additive attention mask at or below this is taken to remove the key exactly (exp underflows to 0).
MASK_NEGATIVE: Final = -1.0e4

#: Constant values larger than this (elements) are not evaluated by the analysis.
_CONST_LIMIT: Final = 1 << 20

#: A slice end at least this large means "to the end" (torch.export writes 2**62).
_TO_END: Final = 1 << 30

#: In ``_V.nonfinite``: the padded positions of every class may be non-finite.
_ANY: Final[Src] = (-1, -1)


@final
@dataclass(frozen=True, slots=True)
class PaddingProof:
    """What :func:`prove_padding` established for one bucket shape: which padded input axes are
    one class (the model combines them position by position, so a call must give them one
    size), and along which axes of each output a class runs (sliced back after the run)."""

    classes: tuple[tuple[Src, ...], ...]
    outputs: tuple[tuple[int | None, ...], ...]  # per output, per axis: index into classes or None
    #: per class, the smallest real size the model's constant indices along it need (1 + the largest)
    least: tuple[int, ...] = ()

    def consistent(self, shapes: tuple[tuple[int, ...], ...]) -> bool:
        """Whether every class has one real size in this call, at least as large as the model's
        constant indices along it need (a shorter input would fail unpadded; padded it must too)."""
        for k, members in enumerate(self.classes):
            sizes = {shapes[i][a] for i, a in members}
            if len(sizes) != 1 or (self.least and next(iter(sizes)) < self.least[k]):
                return False
        return True

    def sizes(self, shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        return tuple(shapes[members[0][0]][members[0][1]] for members in self.classes)


@dataclass(slots=True)
class _V:
    tags: tuple[Src | None, ...]
    fill: dict[int, Any] = field(default_factory=dict)
    nonfinite: frozenset[Src] = frozenset()  # _ANY: every class
    sign: str | None = None  # "pos" (> 0 everywhere) or "nonneg" (>= 0): poles it cannot reach
    iota: tuple[int, int] | None = None  # (axis, c): the value is its position along a padded axis plus c
    const: np.ndarray | None = None


@final
@dataclass(frozen=True, slots=True)
class _Merged:
    """An axis that is several axes merged in row-major order (GPT-2's (batch * length, features)
    rows before a matrix product): each part is a padded class or a fixed size. Row-wise ops keep
    it; a reshape that splits it back into the same parts restores them; nothing else may use it."""

    parts: tuple[Any, ...]  # Src or int


class _Refused(Exception):
    def __init__(self, reason: str, axis: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.axis = reason, axis


_ELEMENTWISE: Final = frozenset({
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "clip", "cos", "cosh", "erf", "exp", "floor", "identity", "log",
    "mish", "neg", "reciprocal", "relu", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "softplus", "softsign", "sqrt", "tan",
    "tanh", "dropout", "add", "div", "maximum", "minimum", "mod", "mul", "pow", "sub", "equal", "greater", "greater_equal", "isinf",
    "isnan", "less", "less_equal", "logical_and", "logical_not", "logical_or", "logical_xor", "not_equal", "bit_shift", "bitwise_and",
    "bitwise_not", "bitwise_or", "bitwise_xor", "cast", "where", "celu", "elu", "gelu", "hardsigmoid", "hardswish", "leaky_relu",
    "prelu", "selu", "shrink", "silu", "thresholded_relu", "swiglu",
})
#: Comparisons a causal mask is built from.
_ORDER: Final = frozenset({"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"})
#: Elementwise ops that can make inf/NaN from finite numbers (a pole or a domain edge).
_POLES: Final = frozenset({"acos", "acosh", "asin", "atanh", "div", "log", "mod", "pow", "reciprocal", "rsqrt", "sqrt", "tan"})
_REDUCE: Final = frozenset({
    "reduce_l1", "reduce_l2", "reduce_log_sum", "reduce_log_sum_exp", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod",
    "reduce_sum", "reduce_sum_square",
})
_AXIS_MIXING: Final = frozenset({"softmax", "log_softmax", "hardmax", "argmax", "argmin", "lp_normalization", "topk"})
_BATCH_ONLY: Final = frozenset({  # image and convolution ops: every position along axis 0 is its own sample
    "conv", "conv1d", "conv2d", "conv_transpose", "conv_transpose2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
    "adaptive_max_pool2d", "global_avg_pool", "global_max_pool", "global_lp_pool", "avg_pool", "max_pool", "lp_pool",
    "batch_norm2d", "instance_norm", "group_norm", "lrn", "resize",
})


class _Analysis:
    def __init__(self, graph: Any, shaped: Any, padded: Sequence[Src], pad_values: Sequence[Any]) -> None:
        from neurenix_core.graph.ir.shapes import infer_values

        self.graph, self.shaped = graph, shaped
        self.specs = infer_values(shaped)
        self.parent: dict[Src, Src] = {s: s for s in padded}
        self.size = {s: int(shaped.inputs[s[0]].shape[s[1]]) for s in padded}
        self.values: dict[str, _V] = {}
        self.least: dict[Src, int] = {}
        for i, spec in enumerate(shaped.inputs):
            tags = tuple((i, a) if (i, a) in self.parent else None for a in range(len(spec.shape)))
            fill = {a: pad_values[i] for a, t in enumerate(tags) if t is not None}
            self.values[spec.name] = _V(tags, fill)

    # ---------------------------------------------------------------- classes
    def find(self, s: Src) -> Src:
        while self.parent[s] != s:
            self.parent[s] = self.parent[self.parent[s]]
            s = self.parent[s]
        return s

    def union(self, a: Any, b: Any) -> Any:
        if isinstance(a, _Merged) or isinstance(b, _Merged):
            ok = isinstance(a, _Merged) and isinstance(b, _Merged) and len(a.parts) == len(b.parts)
            ok = ok and all(isinstance(p, int) == isinstance(q, int) and (not isinstance(p, int) or p == q) for p, q in zip(a.parts, b.parts))
            if not ok:
                raise _Refused(f"it combines merged axes {a} and {b} that do not hold the same parts")
            return _Merged(tuple(p if isinstance(p, int) else self.union(p, q) for p, q in zip(a.parts, b.parts)))
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if self.size[ra] != self.size[rb]:
                raise _Refused(f"it combines input axes {ra} and {rb} position by position, but their buckets differ "
                               f"({self.size[ra]} and {self.size[rb]}); give them the same buckets")
            self.parent[rb] = ra
        return ra

    def finite_in(self, v: _V, t: Src | None) -> bool:
        """Whether ``v`` is finite at the positions padded in class ``t`` (valid in the others)."""
        if _ANY in v.nonfinite:
            return False
        return t is None or self.find(t) not in {self.find(c) for c in v.nonfinite}

    def tag(self, t: Any) -> Any:
        if isinstance(t, _Merged):
            return _Merged(tuple(p if isinstance(p, int) else self.find(p) for p in t.parts))
        return None if t is None else self.find(t)

    def classes_in(self, tags: Sequence[Any]) -> frozenset[Src]:
        out: set[Src] = set()
        for t in tags:
            if isinstance(t, _Merged):
                out.update(self.find(p) for p in t.parts if not isinstance(p, int))
            elif t is not None:
                out.add(self.find(t))
        return frozenset(out)

    def extent(self, t: Any) -> int:
        if isinstance(t, _Merged):
            return int(np.prod([p if isinstance(p, int) else self.size[self.find(p)] for p in t.parts]))
        return self.size[self.find(t)]

    def follows_product(self, want: Any, merged: _Merged) -> bool:
        """Whether a size attribute is the merged axis's size at every size of its classes."""
        from neurenix_core.graph.ir.symbolic import SymDim

        if isinstance(want, (int, np.integer)):
            return int(want) == -1
        if not isinstance(want, SymDim):
            return False
        classes = [self.find(p) for p in merged.parts if not isinstance(p, int)]
        members = {v: self.find(v) for v in want.variables if v in self.parent}
        if set(members.values()) != set(classes) or len(set(classes)) != len(classes):
            return False
        # input sizes that are not padded are the call's own: bound as at this bucket shape
        fixed_vars = {(i, a): int(self.shaped.inputs[i].shape[a]) for i, a in want.variables if (i, a) not in members}
        fixed = int(np.prod([p for p in merged.parts if isinstance(p, int)] or [1]))
        for trial in ((3, 5, 7, 11), (2, 9, 4, 13)):
            value = dict(zip(classes, trial))
            want_size = fixed * int(np.prod([value[c] for c in classes]))
            if want.evaluate({**fixed_vars, **{v: value[c] for v, c in members.items()}}) != want_size:
                return False
        return True

    def var_class(self, value: Any) -> Src | None:
        """The class a size attribute follows exactly (a SymDim equal to one padded input axis), else None."""
        from neurenix_core.graph.ir.symbolic import SymDim

        if not isinstance(value, SymDim):
            return None
        vars_ = value.variables
        if len(vars_) != 1:
            return None
        (v,) = vars_
        if v not in self.parent:
            return None
        if all(value.evaluate({v: k}) == k for k in (3, 7, 40)):
            return self.find(v)
        return None

    def depends_on_padding(self, value: Any) -> bool:
        from neurenix_core.graph.ir.symbolic import SymDim

        if isinstance(value, SymDim):
            return any(v in self.parent for v in value.variables)
        if isinstance(value, (tuple, list)):
            return any(self.depends_on_padding(v) for v in value)
        if isinstance(value, Mapping):
            return any(self.depends_on_padding(v) for v in value.values())
        return False

    # ---------------------------------------------------------------- driving
    def run(self) -> None:
        for node, shaped in zip(self.graph.nodes, self.shaped.nodes):
            ins = [self.values[i] for i in node.inputs]
            try:
                out = self.rule(node, shaped, ins)
            except _Refused as exc:
                axis = "" if exc.axis is None else f" along axis {exc.axis} of its input"
                raise PaddingRefusedError(
                    f"padding {self.described(ins)} is not proven safe: node {node.name!r} (op {node.op}){axis}: {exc.reason}"
                ) from None
            self.check(node, out)
            out.sign = _sign(node.op, shaped.attrs, ins, node.inputs)
            out.const = out.const if out.const is not None else self.evaluate(shaped, ins)
            if out.const is not None and out.const.size and out.const.dtype.kind in "fc" and not np.isfinite(out.const).all():
                out.nonfinite = frozenset({_ANY})
            out.iota = self.ramp(out)
            if out.const is not None and out.const.size:
                flat = out.const.reshape(-1)
                if (flat == flat[0]).all():  # a uniform value: known in every region
                    out.fill = {a: flat[0].item() for a, t in enumerate(out.tags) if t is not None}
            self.values[node.output] = out

    def ramp(self, v: _V) -> tuple[int, int] | None:
        """(axis, c) when a constant integer value is its position along one padded axis plus c."""
        c = v.const
        if c is None or not c.size or c.dtype.kind not in "iu":
            return None
        for axis, t in enumerate(v.tags):
            if t is not None and _is_iota(c - c.reshape(-1)[0], axis):
                return axis, int(c.reshape(-1)[0])
        return None

    def check(self, node: Any, out: _V) -> None:
        """A rule's result must describe its value: one tag per axis, each on an axis of its class's size."""
        shape = self.shape(node.output)
        bad = len(out.tags) != len(shape) or any(t is not None and shape[k] != self.extent(t) for k, t in enumerate(out.tags))
        if bad:
            raise PaddingRefusedError(f"padding is not proven safe: node {node.name!r} (op {node.op}) gives shape {shape}, which "
                                      f"the padding analysis cannot follow (axis classes {out.tags})")

    def described(self, ins: list[_V]) -> str:
        srcs = sorted(set().union(*(self.classes_in(v.tags) for v in ins)) or set(self.parent))
        return ", ".join(f"input {self.shaped.inputs[i].name!r} axis {a}" for i, a in srcs)

    def evaluate(self, node: Any, ins: list[_V]) -> np.ndarray | None:
        from neurenix_core.graph import opset

        if node.op == "constant":
            value = np.asarray(node.params["value"])
            return value if value.size <= _CONST_LIMIT else None
        if not ins or any(v.const is None for v in ins) or node.params:
            return None
        if int(np.prod(self.specs[node.output].shape, dtype=np.int64)) > _CONST_LIMIT:
            return None
        try:
            return np.asarray(opset.evaluate(node.op, node.attrs, [v.const for v in ins], {}))  # type: ignore[misc]
        except (ValueError, IndexError, TypeError):
            return None  # left unknown: the analysis then does not rely on the value

    def shape(self, name: str) -> tuple[int, ...]:
        return self.specs[name].shape

    # ---------------------------------------------------------------- rules
    def rule(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        op = node.op
        tagged = any(t is not None for v in ins for t in v.tags)
        rank = len(self.shape(node.output))
        if op == "constant":
            return _V((None,) * rank)
        handler = _RULES.get(op)
        if handler is None and op in _ELEMENTWISE:
            handler = _Analysis.elementwise
        if handler is None:
            if not tagged and not self.depends_on_padding(dict(node.attrs)):
                return _V((None,) * rank, nonfinite=_nf(ins))
            if op in _BATCH_ONLY:
                return self.batch_only(node, ins)
            if op in _REDUCE or op in _AXIS_MIXING or op in ("cumsum", "cumprod"):
                return self.reduction(node, shaped, ins)
            raise _Refused(f"no padding rule for op {op!r} on a padded axis (it may mix positions along it)")
        return handler(self, node, shaped, ins)

    def aligned(self, ins: list[_V], shapes: list[tuple[int, ...]], out_rank: int, what: str) -> list[Src | None]:
        """Broadcast alignment: per output axis, the class the inputs carry there (unioned)."""
        tags: list[Src | None] = [None] * out_rank
        sizes: list[set[int]] = [set() for _ in range(out_rank)]
        for v, shp in zip(ins, shapes):
            off = out_rank - len(shp)
            for a, d in enumerate(shp):
                t = self.tag(v.tags[a])
                if t is not None:
                    tags[off + a] = t if tags[off + a] is None else self.union(tags[off + a], t)
                elif d != 1:
                    sizes[off + a].add(d)
        for k, t in enumerate(tags):
            if t is not None and sizes[k]:
                raise _Refused(f"{what} combines a padded axis with a fixed-size axis of {sorted(sizes[k])} (output axis {k}); "
                               "at the real size the shapes would not match", k)
        return tags

    def elementwise(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        from neurenix_core.graph import opset

        shapes = [self.shape(i) for i in node.inputs]
        out_rank = len(self.shape(node.output))
        tags = self.aligned(ins, shapes, out_rank, f"op {node.op}")
        pole = node.op in _POLES and not _pole_free(node.op, ins)
        nonfinite = _nf(ins) | (self.classes_in(tags) if pole else frozenset())
        fill: dict[int, Any] = {}
        for k, t in enumerate(tags):
            if t is None:
                continue
            known = [self.fill_at(v, shp, k, out_rank) for v, shp in zip(ins, shapes)]
            value = _absorbed(node.op, known, all(self.finite_in(v, t) for v in ins))
            if value is None and all(x is not None for x in known):
                try:
                    arrays = [np.asarray(x, dtype=opset._np_dtype(self.specs[i].dtype)) for x, i in zip(known, node.inputs)]
                    value = np.asarray(opset.evaluate(node.op, shaped.attrs, arrays, {})).item()
                except (ValueError, TypeError, IndexError, OverflowError):
                    value = None
            if value is None and node.op in _ORDER and len(ins) == 2:
                value = self.causal(node.op, ins, shapes, k, out_rank, tags)
            if value is not None:
                fill[k] = value
        return _V(tuple(tags), fill, nonfinite)

    def causal(self, op: str, ins: list[_V], shapes: list[tuple[int, ...]], k: int, out_rank: int, tags: list[Any]) -> Any:
        """A comparison of two position ramps of one class (a causal mask ``j <= i``): at a padded
        column ``j >= n`` of a real row ``i < n``, ``j > i``, so the result is known there."""
        ramps = []
        for v, shp in zip(ins, shapes):
            if v.iota is None:
                return None
            ramps.append((v.iota[0] + out_rank - len(shp), v.iota[1]))
        (a0, c0), (a1, c1) = ramps
        if a0 == a1 or k not in (a0, a1) or tags[a0] is None or tags[a1] is None or self.tag(tags[a0]) != self.tag(tags[a1]):
            return None
        # j: the ramp along the padded column k; i: the real row. j - i >= 1 + (cj - ci) there.
        cj, ci = (c0, c1) if a0 == k else (c1, c0)
        gap = 1 + cj - ci  # the least value of (j + cj) - (i + ci)
        j_first = a0 == k
        if gap <= 0:
            return None
        # with d = (j + cj) - (i + ci) >= gap >= 1: j > i, j >= i, not j < i, not j <= i
        first_larger = {"less": False, "less_equal": False, "greater": True, "greater_equal": True, "equal": False, "not_equal": True}
        result = first_larger[op]
        if not j_first and op not in ("equal", "not_equal"):
            result = not result
        return result

    def fill_at(self, v: _V, shp: tuple[int, ...], k: int, out_rank: int) -> Any:
        """The input's value in the output's padded region along output axis k, where known."""
        a = k - (out_rank - len(shp))
        if a >= 0 and v.tags[a] is not None:
            return v.fill.get(a)
        if v.const is not None and v.const.size:
            flat = v.const.reshape(-1)
            if (flat == flat[0]).all():
                return flat[0].item()
        return None

    def keep(self, ins: list[_V], free: Sequence[int], what: str) -> None:
        for a in free:
            if ins[0].tags[a] is not None:
                raise _Refused(f"{what} runs over this padded axis", a)

    def batch_only(self, node: Any, ins: list[_V]) -> _V:
        x = ins[0]
        self.keep(ins, range(1, len(x.tags)), f"op {node.op} (convolution, pooling or a per-sample normalisation)")
        for extra in ins[1:]:
            if any(t is not None for t in extra.tags):
                raise _Refused(f"a padded value is an operand other than the data of op {node.op}")
        rank = len(self.shape(node.output))
        return _V((x.tags[0],) + (None,) * (rank - 1), nonfinite=x.nonfinite)

    def reduction(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        from neurenix_core.graph.opset.schema import _axes, _axis

        x, op, a = ins[0], node.op, shaped.attrs
        rank = len(x.tags)
        if op in _REDUCE:
            axes = _axes(a.get("axes"), rank)
        elif op in ("cumsum", "cumprod"):
            axes = (_axis(int(a["axis"]), rank),)
        else:
            axes = (_axis(int(a.get("axis", -1)), rank),)
        for ax in axes:
            t = x.tags[ax]
            if t is None:
                continue
            filled = x.fill.get(ax)
            if op in ("cumsum", "cumprod") and not a.get("reverse"):
                continue  # position i reads positions <= i only: the tail does not reach the real positions
            if op in ("reduce_sum", "reduce_l1", "reduce_sum_square", "reduce_l2") and filled == 0 and self.finite_in(x, t):
                continue
            if op == "reduce_max" and filled == -math.inf or op == "reduce_min" and filled == math.inf:
                continue
            raise _Refused(f"op {op} reduces or mixes positions along this padded axis (its padded positions hold "
                           f"{'unknown values' if filled is None else filled!r}; only a sum over 0, a max over -inf, a min over +inf "
                           "or a forward cumulative op leaves the real positions unchanged)", ax)
        if op in ("cumsum", "cumprod") or op in ("softmax", "log_softmax", "hardmax", "lp_normalization"):
            return _V(tuple(self.tag(t) for t in x.tags), {}, x.nonfinite)
        keepdims = bool(a.get("keepdims", True))
        tags = [None if k in axes else self.tag(t) for k, t in enumerate(x.tags)]
        if not keepdims:
            tags = [t for k, t in enumerate(tags) if k not in axes]
        poles = self.classes_in(tags) if op == "reduce_log_sum" else frozenset()
        return _V(tuple(tags), {}, x.nonfinite | poles)

    def linear(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        self.keep(ins, (len(x.tags) - 1,), f"op {node.op} (the contracted feature axis)")
        return _V(tuple(self.tag(t) for t in x.tags[:-1]) + (None,), {}, x.nonfinite)

    def matmul(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        a, b = ins[0], ins[1]
        sa, sb = self.shape(node.inputs[0]), self.shape(node.inputs[1])
        if len(sa) < 2 or len(sb) < 2:
            if any(t is not None for v in ins for t in v.tags):
                raise _Refused("a 1-D matmul operand on a padded axis")
            return _V((None,) * len(self.shape(node.output)), nonfinite=a.nonfinite | b.nonfinite)
        self.contract(a, len(sa) - 1, b, len(sb) - 2)
        batch = self.aligned([_V(a.tags[:-2]), _V(b.tags[:-2])], [sa[:-2], sb[:-2]], len(self.shape(node.output)) - 2, "matmul")
        return _V(tuple(batch) + (self.tag(a.tags[-2]), self.tag(b.tags[-1])), {}, a.nonfinite | b.nonfinite)

    def contract(self, a: _V, ax: int, b: _V, bx: int) -> None:
        """A sum over a[ax] * b[bx]: safe where a padded axis is zero-filled on one side and finite on the other."""
        ta, tb = self.tag(a.tags[ax]), self.tag(b.tags[bx])
        if ta is None and tb is None:
            return
        if isinstance(ta, _Merged) or isinstance(tb, _Merged):
            raise _Refused("a matrix product sums over an axis that merges padded axes", ax)
        if ta is None or tb is None:
            raise _Refused("a contraction pairs a padded axis with a fixed-size one", ax)
        self.union(ta, tb)
        if (a.fill.get(ax) == 0 and self.finite_in(b, tb)) or (b.fill.get(bx) == 0 and self.finite_in(a, ta)):
            return
        raise _Refused("a matrix product sums over this padded axis and neither operand is proven zero there", ax)

    def gemm(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        a, b = ins[0], ins[1]
        ta, tb = bool(shaped.attrs.get("trans_a")), bool(shaped.attrs.get("trans_b"))
        m_ax, ka = (1, 0) if ta else (0, 1)
        kb, n_ax = (1, 0) if tb else (0, 1)
        self.contract(a, ka, b, kb)
        tags = [self.tag(a.tags[m_ax]), self.tag(b.tags[n_ax])]
        if len(ins) > 2:
            tags = self.aligned([_V(tuple(tags)), ins[2]], [self.shape(node.output), self.shape(node.inputs[2])], 2, "gemm")
        return _V(tuple(tags), {}, _nf(ins))

    def einsum(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        eq = str(shaped.attrs["equation"]).replace(" ", "")
        if "..." in eq or "->" not in eq:
            if any(t is not None for v in ins for t in v.tags):
                raise _Refused("an einsum with an ellipsis or an implicit output on a padded axis")
            return _V((None,) * len(self.shape(node.output)), nonfinite=_nf(ins))
        lhs, out = eq.split("->")
        letters: dict[str, Src | None] = {}
        for term, v in zip(lhs.split(","), ins):
            for ax, ch in enumerate(term):
                t = self.tag(v.tags[ax])
                prev = letters.get(ch)
                if t is not None and ch not in out:
                    raise _Refused(f"einsum {eq} sums over index {ch!r}, a padded axis", ax)
                letters[ch] = t if prev is None else (prev if t is None else self.union(prev, t))
        return _V(tuple(letters.get(ch) for ch in out), {}, _nf(ins))

    def norm_last(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x, a = ins[0], shaped.attrs
        rank = len(x.tags)
        if node.op == "layer_norm":
            first = rank - len(tuple(a["normalized_shape"]))
        else:
            first = int(a.get("axis", -1)) % rank
        self.keep(ins, range(first, rank), f"op {node.op} normalises over axes {first}.. and")
        for extra in ins[1:]:
            if any(t is not None for t in extra.tags):
                raise _Refused(f"a padded value is the scale or bias of op {node.op}")
        return _V(tuple(self.tag(t) for t in x.tags), {}, x.nonfinite)

    def batch_norm(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        if shaped.attrs.get("training_mode"):
            raise _Refused("batch normalisation in training mode computes statistics over the batch")
        return self.batch_only(node, ins[:1])

    # ---------------------------------------------------------------- shape ops
    def transpose(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        perm = shaped.attrs.get("perm") or tuple(reversed(range(len(x.tags))))
        perm = [int(p) % len(x.tags) for p in perm]
        fill = {k: x.fill[p] for k, p in enumerate(perm) if p in x.fill}
        return _V(tuple(self.tag(x.tags[p]) for p in perm), fill, x.nonfinite)

    def unsqueeze(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        out_rank = len(self.shape(node.output))
        new = {int(a) % out_rank for a in shaped.attrs["axes"]}
        return self.remap(x, [k for k in range(out_rank) if k not in new], out_rank)

    def squeeze(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        shp = self.shape(node.inputs[0])
        axes = shaped.attrs.get("axes")
        gone = {int(a) % len(shp) for a in axes} if axes is not None else {a for a, d in enumerate(shp) if d == 1}
        self.keep(ins, sorted(gone), "squeeze")
        kept = [a for a in range(len(shp)) if a not in gone]
        return _V(tuple(self.tag(x.tags[a]) for a in kept), {k: x.fill[a] for k, a in enumerate(kept) if a in x.fill}, x.nonfinite)

    def remap(self, x: _V, positions: list[int], out_rank: int) -> _V:
        """Input axis j becomes output axis positions[j]; the others are new (untagged)."""
        tags: list[Src | None] = [None] * out_rank
        fill: dict[int, Any] = {}
        for j, k in enumerate(positions):
            tags[k] = self.tag(x.tags[j])
            if j in x.fill:
                fill[k] = x.fill[j]
        return _V(tuple(tags), fill, x.nonfinite)

    def flatten(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        shp = self.shape(node.inputs[0])
        rank = len(shp)
        start, end = int(shaped.attrs["start_dim"]) % max(rank, 1), int(shaped.attrs["end_dim"]) % max(rank, 1)
        merged = [a for a in range(start, end + 1) if shp[a] != 1 or x.tags[a] is not None]
        if any(x.tags[a] is not None for a in merged) and len(merged) > 1:
            a = next(a for a in merged if x.tags[a] is not None)
            raise _Refused(f"flatten merges this padded axis with axes {[m for m in merged if m != a]}: padding would land inside the merged axis", a)
        tags = list(x.tags[:start]) + [next((x.tags[a] for a in merged), None)] + list(x.tags[end + 1:])
        return _V(tuple(self.tag(t) for t in tags), {}, x.nonfinite)

    def reshape(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        src, dst = self.shape(node.inputs[0]), self.shape(node.output)
        target = tuple(node.attrs.get("shape", ()))
        out: list[Any] = [None] * len(dst)  # tags: a Src, a _Merged or None
        fill: dict[int, Any] = {}
        for g_in, g_out in _groups(src, dst):
            tagged = [a for a in g_in if x.tags[a] is not None]
            if not tagged:
                for o in g_out:
                    if o < len(target) and self.depends_on_padding(target[o]):
                        raise _Refused(f"reshape target dim {o} ({target[o]!r}) depends on a padded size on an axis that does not carry it", None)
                continue
            big_in, big_out = [a for a in g_in if src[a] != 1], [o for o in g_out if dst[o] != 1]
            if len(big_in) == 1 and len(big_out) == 1:
                a, o = big_in[0], big_out[0]
                out[o] = self.reshape_keep(x, a, o, target)
                if a in x.fill:
                    fill[o] = x.fill[a]
            elif len(big_out) == 1:  # axes merged into one (rows for a matrix product)
                parts: list[Any] = []
                for a in big_in:
                    t = self.tag(x.tags[a])
                    parts.extend(t.parts if isinstance(t, _Merged) else [src[a] if t is None else t])
                merged = _Merged(tuple(parts))
                o = big_out[0]
                if not self.follows_product(target[o] if o < len(target) else -1, merged):
                    raise _Refused(f"reshape target dim {o} ({target[o] if o < len(target) else None!r}) is not the size of the "
                                   "padded axes it merges at every size", tagged[0])
                out[o] = merged
            elif len(big_in) == 1 and isinstance(x.tags[big_in[0]], _Merged):  # a merged axis split back
                merged = self.tag(x.tags[big_in[0]])
                if len(merged.parts) != len(big_out):
                    raise _Refused(f"reshape {src} -> {dst} splits a merged axis into other parts", big_in[0])
                for part, o in zip(merged.parts, big_out):
                    want = target[o] if o < len(target) else None
                    if isinstance(part, int):
                        if dst[o] != part or self.depends_on_padding(want):
                            raise _Refused(f"reshape {src} -> {dst} splits a merged axis into other parts", big_in[0])
                        continue
                    cls = self.var_class(want)
                    if cls is None and not (isinstance(want, (int, np.integer)) and int(want) == -1):
                        raise _Refused(f"reshape target dim {o} is {want!r}, not the padded size it splits out", big_in[0])
                    out[o] = part if cls is None else self.union(part, cls)
            else:
                raise _Refused(f"reshape {src} -> {dst} merges or splits this padded axis", tagged[0])
        for o, want in enumerate(target):
            if out[o] is None and self.depends_on_padding(want):
                raise _Refused(f"reshape target dim {o} ({want!r}) depends on a padded size on an axis that does not carry it")
        return _V(tuple(out), fill, x.nonfinite)

    def reshape_keep(self, x: _V, a: int, o: int, target: tuple[Any, ...]) -> Any:
        """Input axis a stays whole as output axis o: its target must follow its size."""
        t = self.tag(x.tags[a])
        want = target[o] if o < len(target) else None
        if isinstance(t, _Merged):
            if not (self.follows_product(want, t) or (isinstance(want, (int, np.integer)) and int(want) == 0 and o == a)):
                raise _Refused(f"reshape target dim {o} is {want!r} where a merged padded axis runs", a)
            return t
        cls = self.var_class(want)
        if cls is not None:
            return self.union(t, cls)
        if self.follows_product(want, _Merged((t,))):  # (batch * length) with a batch of 1 that is not padded
            return t
        if not (isinstance(want, (int, np.integer)) and (int(want) == -1 or (int(want) == 0 and o == a))):
            raise _Refused(f"reshape target dim {o} is {want!r}, a fixed size where the padded axis runs: "
                           "the model would not run at the real size", a)
        return t

    def expand(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        src, dst = self.shape(node.inputs[0]), self.shape(node.output)
        target = tuple(node.attrs["shape"])
        off = len(dst) - len(src)
        toff = len(dst) - len(target)
        tags: list[Src | None] = [None] * len(dst)
        fill: dict[int, Any] = {}
        for k in range(len(dst)):
            a = k - off
            mine = self.tag(x.tags[a]) if a >= 0 else None
            want = target[k - toff] if k - toff >= 0 else None
            cls = self.var_class(want)
            if mine is not None:
                if cls is not None:
                    mine = self.union(mine, cls)
                elif want is not None and not (isinstance(want, (int, np.integer)) and int(want) in (1, -1)):
                    raise _Refused(f"expand target dim {k} is {want!r} where the padded axis runs", a)
                tags[k] = mine
                if a in x.fill:
                    fill[k] = x.fill[a]
            elif cls is not None:
                tags[k] = cls  # a broadcast to the padded size: every position holds the same values
            elif want is not None and self.depends_on_padding(want):
                raise _Refused(f"expand target dim {k} ({want!r}) depends on a padded size in a way that is not the size itself")
        return _V(tuple(tags), fill, x.nonfinite)

    def slice(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        rank = len(x.tags)
        a = node.attrs
        axes = a.get("axes")
        axes = tuple(range(len(a["starts"]))) if axes is None else tuple(int(v) % rank for v in axes)
        steps = a.get("steps") or (1,) * len(axes)
        tags = [self.tag(t) for t in x.tags]
        fill = dict(x.fill)
        for ax, start, end, step in zip(axes, a["starts"], a["ends"], steps):
            t = tags[ax]
            end_cls = self.var_class(end)
            if t is None:
                if end_cls is not None and start == 0 and step == 1:
                    tags[ax] = end_cls  # a prefix of fixed data up to the padded size: position i is the same at any size
                    continue
                if self.depends_on_padding((start, end, step)):
                    raise _Refused(f"slice bounds ({start!r}, {end!r}) depend on a padded size", ax)
                continue
            if end_cls is not None and start == 0 and step == 1:
                tags[ax] = self.union(t, end_cls)
                continue
            whole = start == 0 and step == 1 and isinstance(end, (int, np.integer)) and int(end) >= _TO_END
            if not whole:
                raise _Refused(f"slice [{start!r}:{end!r}:{step!r}] cuts this padded axis (only whole-axis slices keep positions)", ax)
        return _V(tuple(tags), fill, x.nonfinite)

    def concat(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        rank = len(self.shape(node.output))
        axis = int(shaped.attrs["axis"]) % rank
        for v in ins:
            if v.tags[axis] is not None:
                raise _Refused("concat joins values along this padded axis: the padding would land between them", axis)
        tags: list[Src | None] = [None] * rank
        for k in range(rank):
            if k == axis:
                continue
            col = [self.tag(v.tags[k]) for v in ins]
            shapes = {self.shape(i)[k] for i, v in zip(node.inputs, ins) if v.tags[k] is None}
            present = [t for t in col if t is not None]
            if present and shapes:
                raise _Refused(f"concat pairs a padded axis {k} with a fixed-size one", k)
            for t in present:
                tags[k] = t if tags[k] is None else self.union(tags[k], t)
        return _V(tuple(tags), {}, _nf(ins))

    def split(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        axis = int(shaped.attrs["axis"]) % len(ins[0].tags)
        self.keep(ins, (axis,), "split")
        return _V(tuple(self.tag(t) for t in ins[0].tags), dict(ins[0].fill), ins[0].nonfinite)

    def pad(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        pads = tuple(int(p) for p in shaped.attrs["pads"])
        rank = len(x.tags)
        for ax in range(rank):
            if x.tags[ax] is not None and (pads[ax] or pads[ax + rank]):
                raise _Refused("pad adds positions along this padded axis", ax)
        return _V(tuple(self.tag(t) for t in x.tags), {}, x.nonfinite)

    def tile(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        x = ins[0]
        reps = tuple(int(r) for r in shaped.attrs["repeats"])
        self.keep(ins, [a for a, r in enumerate(reps) if r != 1], "tile repeats")
        return _V(tuple(self.tag(t) for t in x.tags), {}, x.nonfinite)

    def trilu(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        """A triangle of the last two axes by absolute position (a causal mask): positions keep
        their meaning; with both axes one class, a real row i < n sees the padded columns j >= n
        > i, which lie above the diagonal."""
        x = ins[0]
        tags = tuple(self.tag(t) for t in x.tags)
        fill: dict[int, Any] = {}
        rows, cols = tags[-2], tags[-1]
        k, upper = int(shaped.attrs.get("k", 0)), bool(shaped.attrs.get("upper", True))
        if rows is not None and rows == cols:
            rank = len(tags)
            if upper and k <= 1 and (rank - 1) in x.fill:
                fill[rank - 1] = x.fill[rank - 1]
            elif upper and k <= 1 and x.const is not None and x.const.size and (x.const == x.const.reshape(-1)[0]).all():
                fill[rank - 1] = x.const.reshape(-1)[0].item()
            elif not upper and k <= 0:
                fill[rank - 1] = 0
        return _V(tags, fill, x.nonfinite)

    def embedding(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        rows = int(np.asarray(node.params["weight"]).shape[0])
        return _V(tuple(self.tag(t) for t in ins[0].tags) + (None,), {}, self.out_of_range(ins[0], rows))

    def out_of_range(self, idx: _V, size: int) -> frozenset[Src]:
        """The classes whose padded indices may fall outside a table of ``size`` rows: a pad
        token id beyond the vocabulary reads garbage there (NaN on XLA, an error on cpu:0)."""
        if idx.const is not None and idx.const.size:  # known indices (position ids): checked whole
            inside = bool(np.all((idx.const >= -size) & (idx.const < size)))
            return idx.nonfinite if inside else frozenset(self.classes_in(idx.tags)) | idx.nonfinite
        bad: set[Src] = set()
        for a, t in enumerate(idx.tags):
            fill = idx.fill.get(a)
            if t is not None and not (isinstance(fill, (int, float, np.number)) and -size <= fill < size and float(fill).is_integer()):
                bad |= self.classes_in([t])
        return frozenset(bad) | idx.nonfinite

    def gather(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        data, idx = ins
        rank = len(data.tags)
        axis = int(shaped.attrs.get("axis", 0)) % rank
        if data.tags[axis] is not None:
            self.nonnegative(idx, axis, data)
        tags = [self.tag(t) for t in data.tags[:axis]] + [self.tag(t) for t in idx.tags] + [self.tag(t) for t in data.tags[axis + 1:]]
        size = self.shape(node.inputs[0])[axis]
        return _V(tuple(tags), {}, data.nonfinite | self.out_of_range(idx, size))

    def nonnegative(self, idx: _V, axis: int, data: _V | None = None, component: np.ndarray | None = None) -> None:
        if idx.const is None or (idx.const.size and int(idx.const.min()) < 0):
            why = "are computed at run time" if idx.const is None else "include negative ones (counted from the padded end)"
            raise _Refused(f"the gather indices into this padded axis {why}: they could read padded positions", axis)
        values = idx.const if component is None else component
        t = None if data is None else data.tags[axis]
        if t is not None and values.size and not any(x is not None for x in idx.tags):
            # fixed indices (a CLS token at 0): a real size below them fails unpadded, so the call runs exactly
            root = self.find(t) if not isinstance(t, _Merged) else None
            if root is not None:
                self.least[root] = max(self.least.get(root, 1), int(values.max()) + 1)

    def gather_elements(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        data, idx = ins
        rank = len(data.tags)
        axis = int(shaped.attrs.get("axis", 0)) % rank
        if data.tags[axis] is not None:
            self.nonnegative(idx, axis, data)
        tags: list[Src | None] = []
        for k in range(rank):
            dt, it = self.tag(data.tags[k]), self.tag(idx.tags[k])
            if k != axis and dt is not None and it is None:
                raise _Refused("gather_elements reads a padded data axis through a fixed-size index axis", k)
            if k != axis and dt is not None and it is not None:
                self.union(dt, it)
            tags.append(it)
        return _V(tuple(tags), {}, data.nonfinite)

    def gather_nd(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        data, idx = ins
        if int(shaped.attrs.get("batch_dims", 0)) != 0:
            if any(t is not None for v in ins for t in v.tags):
                raise _Refused("gather_nd with batch_dims on a padded value")
            return _V((None,) * len(self.shape(node.output)), nonfinite=data.nonfinite)
        ishape = self.shape(node.inputs[1])
        depth = ishape[-1]
        if idx.tags and idx.tags[-1] is not None:
            raise _Refused("gather_nd index tuples along a padded axis", len(ishape) - 1)
        for d in range(depth):
            if data.tags[d] is not None:
                self.nonnegative(idx, d, data, idx.const[..., d] if idx.const is not None else None)
        lead = [self.tag(t) for t in idx.tags[:-1]]
        tags = lead + [self.tag(t) for t in data.tags[depth:]]
        fill: dict[int, Any] = {}
        if idx.const is not None:
            # Index grids (torch.export's advanced indexing): where component d is the position
            # along output axis o, a padded position there reads data's padded region.
            for d in range(depth):
                t = self.tag(data.tags[d])
                if t is None or d not in data.fill:
                    continue
                for o, lt in enumerate(lead):
                    if lt is not None and _is_iota(idx.const[..., d], o) and self.other_components_follow(idx.const, data, depth, d, lead):
                        # output position j reads data position j: one size for both (checked per call)
                        tags[o] = self.union(lt, t)
                        fill[o] = data.fill[d]
        return _V(tuple(tags), fill, data.nonfinite)

    def other_components_follow(self, grid: np.ndarray, data: _V, depth: int, d: int, lead: list[Src | None]) -> bool:
        """Every other indexed padded data axis is read at the position of an output axis of its class."""
        for c in range(depth):
            t = self.tag(data.tags[c])
            if c == d or t is None:
                continue
            if not any(lt is not None and _is_iota(grid[..., c], o) for o, lt in enumerate(lead)):
                return False
        return True

    def attention(self, node: Any, shaped: Any, ins: list[_V]) -> _V:
        a = shaped.attrs
        if node.op == "attention":
            if a.get("has_past") or a.get("has_nonpad") or int(a.get("output", 0)) != 0 or len(self.shape(node.inputs[0])) != 4 \
                    or int(a.get("left_window_size", -1)) >= 0 or int(a.get("right_window_size", -1)) >= 0:
                if any(t is not None for v in ins for t in v.tags):
                    raise _Refused("ONNX Attention with a past cache, sequence lengths, windows or a side output on a padded value")
                return _V((None,) * len(self.shape(node.output)))
            mask = ins[3] if a.get("has_mask") else None
            mask_shape = self.shape(node.inputs[3]) if mask is not None else None
        else:
            mask = ins[3] if len(ins) > 3 else None
            mask_shape = self.shape(node.inputs[3]) if mask is not None else None
        q, k, v = ins[:3]
        sq, sk, sv = (self.shape(i) for i in node.inputs[:3])
        if node.op == "multihead_attention":
            return self.mha(node, shaped, q, k, v, mask, mask_shape)
        return self.sdpa(node, q, k, v, sq, sk, sv, mask, mask_shape, bool(a.get("is_causal")))

    def sdpa(self, node: Any, q: _V, k: _V, v: _V, sq: tuple[int, ...], sk: tuple[int, ...], sv: tuple[int, ...],
             mask: _V | None, mask_shape: tuple[int, ...] | None, causal: bool) -> _V:
        for name, val in (("query", q), ("key", k), ("value", v)):
            if val.tags[-1] is not None:
                raise _Refused(f"the {name} feature axis is padded (attention contracts over it)", len(val.tags) - 1)
        if k.tags[-2] != v.tags[-2] and (k.tags[-2] is None or v.tags[-2] is None):
            raise _Refused("keys and values disagree on padding their length axis", len(k.tags) - 2)
        lead = self.aligned([_V(q.tags[:-2]), _V(k.tags[:-2]), _V(v.tags[:-2])], [sq[:-2], sk[:-2], sv[:-2]],
                            max(len(sq), len(sk), len(sv)) - 2, "attention")
        if any(isinstance(t, _Merged) for val in (q, k, v) for t in val.tags):
            raise _Refused("attention over an axis that merges padded axes")
        rows, keys = self.tag(q.tags[-2]), self.tag(k.tags[-2])
        if keys is not None and v.tags[-2] is not None:
            keys = self.union(keys, v.tags[-2])
        if mask is not None:
            assert mask_shape is not None
            full = tuple(lead) + (rows, keys)  # the scores (..., queries, keys) the mask broadcasts to
            scores = tuple(int(d) for d in np.broadcast_shapes(sq[:-2], sk[:-2])) + (sq[-2], sk[-2])
            mtags = self.aligned([_V(full), mask], [scores, mask_shape], max(len(full), len(mask_shape)), "attention mask")
            rows, keys = mtags[-2], mtags[-1]
        if keys is not None:
            proofs = []
            if mask is not None and mask.tags and mask.tags[-1] is not None and self.masks_out(mask.fill.get(len(mask.tags) - 1)):
                proofs.append("mask")
            if causal and rows is not None and self.find(rows) == self.find(keys):
                proofs.append("causal")
            if not proofs:
                raise _Refused("attention sums over the padded keys and no mask (a 0 / False / -inf attention mask on the "
                               "padded keys, or is_causal over one padded length) removes them", len(k.tags) - 2)
            if not self.finite_in(v, keys):
                raise _Refused("the values may hold inf/NaN at padded keys (0 * inf is NaN)", len(v.tags) - 2)
        # Rows the mask removes entirely (a padded batch row: its mask is all 0) are NaN after the
        # softmax: record the classes of such mask axes (the key axis aside).
        masked_rows: frozenset[Any] = frozenset()
        if mask is not None:
            last = len(mask.tags) - 1
            masked_rows = frozenset(self.tag(t) for a_, t in enumerate(mask.tags)
                                    if t is not None and a_ != last and self.masks_out(mask.fill.get(a_)))
        return _V(tuple(lead) + (rows, None), {}, q.nonfinite | k.nonfinite | v.nonfinite | masked_rows)

    @staticmethod
    def masks_out(value: Any) -> bool:
        if value is None:
            return False
        if isinstance(value, (bool, np.bool_)):
            return not bool(value)
        return float(value) <= MASK_NEGATIVE

    def mha(self, node: Any, shaped: Any, q: _V, k: _V, v: _V, mask: _V | None, mask_shape: tuple[int, ...] | None) -> _V:
        first = bool(shaped.attrs.get("batch_first"))
        b, l = (0, 1) if first else (1, 0)
        def four(x: _V) -> _V:  # (batch, heads, length, head size)
            return _V((x.tags[b], None, x.tags[l], x.tags[2]), {}, x.nonfinite)

        def shape4(name: str) -> tuple[int, ...]:
            s3 = self.shape(name)
            return (s3[b], 1, s3[l], s3[2])

        sq, sk, sv = (shape4(i) for i in node.inputs[:3])
        out = self.sdpa(node, four(q), four(k), four(v), sq, sk, sv, mask, mask_shape, False)
        tags: list[Src | None] = [None, None, None]
        tags[b], tags[l] = out.tags[0], out.tags[2]
        return _V(tuple(tags), {}, out.nonfinite)


def _pole_free(op: str, ins: Sequence[_V]) -> bool:
    """A pole op that cannot reach its pole here: x ** k for constant non-negative integers k
    (GELU's x ** 3) or a non-negative base, division by constant non-zero numbers or a positive
    divisor, rsqrt / reciprocal / log of a positive value (RMSNorm's rsqrt(mean(x * x) + eps)),
    sqrt of a non-negative one."""
    first = ins[0].sign
    if op in ("rsqrt", "reciprocal", "log") and first == "pos" or op == "sqrt" and first in ("pos", "nonneg"):
        return True
    if op == "div" and len(ins) > 1 and ins[1].sign == "pos":
        return True
    other = ins[1].const if len(ins) > 1 else None
    if other is None or not other.size or other.dtype.kind not in "fiu":
        return False
    if op == "pow":
        return bool(np.all(other >= 0) and (first in ("pos", "nonneg") or np.all(np.mod(other, 1) == 0)))
    if op in ("div", "mod"):
        return bool(np.all(other != 0) and np.all(np.isfinite(other)))
    return False


def _const_sign(v: _V) -> str | None:
    if v.sign is not None:
        return v.sign
    c = v.const
    if c is None or not c.size or c.dtype.kind not in "fiub":
        return None
    return "pos" if bool(np.all(c > 0)) else "nonneg" if bool(np.all(c >= 0)) else None


def _sign(op: str, attrs: Any, ins: Sequence[_V], names: Sequence[str]) -> str | None:
    """Whether a value is > 0 ("pos") or >= 0 ("nonneg") at every position, padded ones included
    (pad values of any sign are ordinary inputs here), from its op and its inputs' signs."""
    signs = [_const_sign(v) for v in ins]
    if op in ("relu", "abs", "sigmoid", "softmax", "exp", "reduce_sum_square", "reduce_l1", "reduce_l2", "sqrt", "softplus"):
        return "nonneg" if op not in ("sqrt",) or signs[0] else None
    if op == "pow" and ins[1].const is not None and ins[1].const.size and bool(np.all(np.mod(ins[1].const, 2) == 0)):
        return "nonneg"
    if op == "mul" and len(names) == 2 and names[0] == names[1]:
        return "nonneg"
    if op in ("mul", "add", "maximum") and all(x in ("pos", "nonneg") for x in signs):
        return "pos" if op != "mul" and "pos" in signs else "nonneg"  # a product of tiny positives may underflow to 0
    if op == "maximum" and "pos" in signs:
        return "pos"
    if op == "div" and signs[1] == "pos" and signs[0] in ("pos", "nonneg"):
        return "nonneg"
    if op == "cast" and signs[0] in ("pos", "nonneg"):
        return "nonneg"  # 0.5 cast to an integer is 0
    if op in ("reduce_mean", "reduce_sum", "reduce_max", "identity", "expand", "reshape", "transpose", "unsqueeze", "squeeze",
              "flatten", "slice", "gather", "rsqrt", "reciprocal"):
        return signs[0] if signs[0] in ("pos", "nonneg") and (op not in ("rsqrt", "reciprocal") or signs[0] == "pos") else None
    return None


def _nf(ins: Sequence[_V]) -> frozenset[Src]:
    out: frozenset[Src] = frozenset()
    for v in ins:
        out |= v.nonfinite
    return out


def _absorbed(op: str, known: list[Any], finite: bool) -> Any:
    """An operand value that fixes the result whatever the others are."""
    if op == "logical_and" and any(x is not None and not bool(x) for x in known):
        return False
    if op == "logical_or" and any(x is not None and bool(x) for x in known):
        return True
    if op == "mul" and any(x is not None and x == 0 for x in known) and finite:
        return 0
    if op == "where" and known[0] is not None:
        return known[1] if bool(known[0]) else known[2]
    return None


def _is_iota(component: np.ndarray, axis: int) -> bool:
    """Whether ``component[p] == p[axis]`` at every position."""
    if axis >= component.ndim:
        return False
    n = component.shape[axis]
    ramp = np.arange(n).reshape([n if k == axis else 1 for k in range(component.ndim)])
    return bool(np.array_equal(component, np.broadcast_to(ramp, component.shape)))


def _groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Row-major reshape groups: runs of input and output axes with equal products (a size-1
    axis joins the group after it)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gi, gj = ([i] if i < len(src) else []), ([j] if j < len(dst) else [])
        pi, pj = (src[i] if gi else 1), (dst[j] if gj else 1)
        i, j = i + len(gi), j + len(gj)
        while pi != pj:
            if pi < pj and i < len(src):
                pi *= src[i]
                gi.append(i)
                i += 1
            elif pj < pi and j < len(dst):
                pj *= dst[j]
                gj.append(j)
                j += 1
            else:
                break
        groups.append((gi, gj))
    return groups


_RULES: Final[dict[str, Any]] = {
    "linear": _Analysis.linear, "matmul": _Analysis.matmul, "gemm": _Analysis.gemm, "einsum": _Analysis.einsum,
    "layer_norm": _Analysis.norm_last, "layer_normalization": _Analysis.norm_last, "rms_normalization": _Analysis.norm_last,
    "batch_normalization": _Analysis.batch_norm, "transpose": _Analysis.transpose, "unsqueeze": _Analysis.unsqueeze,
    "squeeze": _Analysis.squeeze, "flatten": _Analysis.flatten, "reshape": _Analysis.reshape, "expand": _Analysis.expand,
    "slice": _Analysis.slice, "concat": _Analysis.concat, "split": _Analysis.split, "pad": _Analysis.pad, "tile": _Analysis.tile,
    "trilu": _Analysis.trilu, "embedding": _Analysis.embedding, "gather": _Analysis.gather,
    "gather_elements": _Analysis.gather_elements, "gather_nd": _Analysis.gather_nd,
    "scaled_dot_product_attention": _Analysis.attention, "multihead_attention": _Analysis.attention,
    "attention": _Analysis.attention,
}


def prove_padding(graph: Any, bucket_shapes: tuple[tuple[int, ...], ...], policy: BucketPolicy) -> PaddingProof:
    """Check, node by node, that padding ``graph``'s bucketed input axes up to ``bucket_shapes``
    leaves every output's real positions unchanged; raises PaddingRefusedError otherwise.

    ``graph`` is the compiled model's graph as imported (SymDim attributes show which sizes
    follow which input axis); the walk uses its shapes at ``bucket_shapes``."""
    shaped = graph.with_input_shapes(*bucket_shapes)
    padded = [src for src in policy.axes if bucket_shapes[src[0]][src[1]] > 1]
    analysis = _Analysis(graph, shaped, padded, policy.pad_values)
    analysis.run()
    roots = sorted({analysis.find(s) for s in padded})
    classes = tuple(tuple(sorted(s for s in padded if analysis.find(s) == r)) for r in roots)
    index = {r: k for k, r in enumerate(roots)}
    outs = []
    for name in graph.outputs:
        v = analysis.values[name]
        if any(isinstance(t, _Merged) for t in v.tags):
            raise PaddingRefusedError(f"padding is not proven safe: output {name!r} has an axis that merges padded axes "
                                      "(padded positions inside it cannot be cut away)")
        outs.append(tuple(None if t is None else index[analysis.find(t)] for t in v.tags))
    least = tuple(max([analysis.least.get(s, 1) for s in padded if analysis.find(s) == r] or [1]) for r in roots)
    return PaddingProof(classes, tuple(outs), least)
