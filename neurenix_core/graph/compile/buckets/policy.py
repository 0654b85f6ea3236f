"""Shape buckets, the policy: which input axes are bucketed and to which sizes (``nx.compile``'s
``buckets=`` and ``pad_values=``), and the padding of one input up to its bucket shape."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, final

import numpy as np

from neurenix_core.errors import CompilationError, ShapeError

__all__ = ["BucketPolicy", "PaddingRefusedError", "Src", "pad_array", "parse_buckets", "pow2_bucket"]

Src = tuple[int, int]  # (input index, axis)


class PaddingRefusedError(CompilationError):
    """Buckets were asked for, but padding an axis could change the model's result."""


def pow2_bucket(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


@final
@dataclass(frozen=True, slots=True)
class BucketPolicy:
    """Which axes are bucketed and to which sizes.

    ``axes`` maps (input index, axis) to a sorted tuple of sizes, or to ``"pow2"``; ``caps``
    bounds a pow2 axis where the model does (Graph.limits); ``pad_values`` is the value each
    input is padded with (0 unless given)."""

    axes: Mapping[Src, tuple[int, ...] | str]
    names: tuple[str, ...]
    pad_values: tuple[Any, ...]
    caps: Mapping[Src, int] = field(default_factory=dict)

    def bucket(self, src: Src, n: int) -> int:
        spec = self.axes[src]
        if isinstance(spec, str):  # "pow2", the one named spec (_axis_spec)
            cap = self.caps.get(src)
            size = pow2_bucket(n)
            return size if cap is None or size <= cap or n > cap else cap
        for size in spec:
            if size >= n:
                return size
        i, a = src
        raise ShapeError(f"input {self.names[i]!r} axis {a} has size {n}, above its largest bucket: buckets {list(spec)}; "
                         f"add a larger bucket (buckets={{{self.names[i]!r}: {{{a}: [..., {pow2_bucket(n)}]}}}}) or use 'pow2'")

    def shapes_for(self, shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
        """The bucket shapes of one call's input shapes."""
        out = []
        for i, shape in enumerate(shapes):
            out.append(tuple(self.bucket((i, a), d) if (i, a) in self.axes and d >= 1 else d for a, d in enumerate(shape)))
        return tuple(out)

    def describe(self) -> str:
        parts = []
        for (i, a), spec in sorted(self.axes.items()):
            parts.append(f"{self.names[i]}[{a}]: {'powers of two' if spec == 'pow2' else list(spec)}")
        return ", ".join(parts)


def _sizes(spec: Any, where: str) -> tuple[int, ...] | str:
    if spec is True or spec == "pow2":
        return "pow2"
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence) or not spec:
        raise CompilationError(f"buckets: {where} must be 'pow2' or a list of sizes, got {spec!r}")
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1 for s in spec):
        raise CompilationError(f"buckets: {where} sizes must be positive ints, got {list(spec)!r}")
    return tuple(sorted({int(s) for s in spec}))


def _default_axes(graph: Any) -> list[Src]:
    """The dynamic axes of every input; a graph without any (an ``nn`` model) is dynamic in the
    batch: axis 0 of every input that has one."""
    if graph.dynamic:
        return [(i, a) for i, s in enumerate(graph.inputs) for a in s.dynamic]
    return [(i, 0) for i in range(len(graph.inputs))]  # an nn model's inputs have no shape before the first call


def _input_index(key: Any, names: tuple[str, ...], what: str) -> int:
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool) and 0 <= int(key) < len(names):
        return int(key)
    if isinstance(key, str) and key in names:
        return names.index(key)
    raise CompilationError(f"{what}: {key!r} names no input of the model; its inputs are {list(names)} (by name or index)")


def parse_buckets(buckets: Any, graph: Any, pad_values: Mapping[Any, Any] | None = None) -> BucketPolicy | None:
    """``nx.compile``'s ``buckets=`` as a policy (None: no buckets).

    - ``True`` / ``"pow2"``: every dynamic axis (``nn`` models: the batch axis) to powers of two;
    - a list of sizes: the batch axis (axis 0) of every input to those sizes;
    - a dict, input (name or index) -> {axis: "pow2" or [sizes]}: only those axes.
    """
    if buckets is None or buckets is False:
        if pad_values:
            raise CompilationError("pad_values= is for bucketed models; pass buckets= too")
        return None
    names = tuple(s.name for s in graph.inputs)
    axes: dict[Src, tuple[int, ...] | str] = {}
    if buckets is True or buckets == "pow2":
        axes = {src: "pow2" for src in _default_axes(graph)}
    elif isinstance(buckets, Mapping):
        for key, per_axis in buckets.items():
            i = _input_index(key, names, "buckets")
            if not isinstance(per_axis, Mapping):
                raise CompilationError(f"buckets[{key!r}] must map axes to 'pow2' or sizes, e.g. {{0: [1, 4, 8]}}; got {per_axis!r}")
            for axis, spec in per_axis.items():
                rank = len(graph.inputs[i].shape)  # 0 for an nn model (shapes come with the first call)
                ok = isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and (-rank <= int(axis) < rank or not rank and int(axis) >= 0)
                if not ok:
                    raise CompilationError(f"buckets[{key!r}]: axis {axis!r} is not an axis of the {rank}-D input {names[i]!r}")
                axes[(i, int(axis) % rank if rank else int(axis))] = _sizes(spec, f"buckets[{key!r}][{axis}]")
    elif isinstance(buckets, Sequence) and not isinstance(buckets, (str, bytes)):
        sizes = _sizes(buckets, "buckets")
        axes = {(i, 0): sizes for i in range(len(graph.inputs))}
    else:
        raise CompilationError(f"buckets={buckets!r}: use True / 'pow2', a list of batch sizes, or {{input: {{axis: sizes}}}}")
    if not axes:
        raise CompilationError(f"buckets={buckets!r}: the model has no axis to bucket (its inputs are {list(names)} with static shapes)")
    from neurenix_core.graph.opset.schema import VALUE_KINDS

    kinds = [names[i] for i, _ in axes if graph.inputs[i].dtype in VALUE_KINDS]
    if kinds:
        raise CompilationError(f"buckets: inputs {kinds} are sequences or optionals, which cannot be padded")
    pads: list[Any] = [0] * len(names)
    for key, value in (pad_values or {}).items():
        i = _input_index(key, names, "pad_values")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not math.isfinite(float(value)):
            raise CompilationError(f"pad_values[{key!r}] must be a finite number, got {value!r}")
        kind = str(graph.inputs[i].dtype)
        if (kind.startswith(("int", "uint")) or kind == "bool") and not float(value).is_integer():
            raise CompilationError(f"pad_values[{key!r}] = {value!r} is not a value of the {kind} input {names[i]!r}")
        pads[i] = value
    caps = {(i, a): most for i, a, most in getattr(graph, "limits", ()) if axes.get((i, a)) == "pow2"}
    return BucketPolicy(axes, names, tuple(pads), caps)


def pad_array(x: np.ndarray, shape: tuple[int, ...], value: Any) -> np.ndarray:
    """``x`` padded at the end of each axis up to ``shape`` with ``value``."""
    widths = [(0, int(b) - int(d)) for d, b in zip(x.shape, shape)]
    if not any(w for _, w in widths):
        return x
    return np.pad(x, widths, mode="constant", constant_values=np.asarray(value).astype(x.dtype))
