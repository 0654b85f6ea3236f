"""The core's model graph: a typed list of op nodes that every backend lowers.

``nx.compile`` turns a model (an ``nn.Module``, or an import from PyTorch / ONNX) into a
:class:`Graph` once; backends receive it (or the part of it they declared they run) through the
``neurenix_compile`` hook and lower it to their native form. A :class:`Node` reads the values
named in ``inputs`` (graph inputs or earlier outputs) and writes the value ``output``; weights
are host NumPy arrays in ``params`` (NCHW / (out, in) layouts, as in ``nn``).

The ops, their attributes, params, shape/dtype rules, reference semantics and decompositions are
one table: :mod:`neurenix_core.graph.opset` (rendered in docs/models.md). The 17 ops of the first
release (``opset.LEGACY_OPS``: linear, conv2d, relu, gelu, sigmoid, tanh, softmax, max_pool2d,
avg_pool2d, adaptive_avg_pool2d, flatten, batch_norm2d, layer_norm, dropout,
multihead_attention, add, mul) keep their names, attributes and params.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, final

import numpy as np

from neurenix_core.graph.ir.symbolic import is_symbolic, resolve
from neurenix_core.graph.opset import LEGACY_OPS, OPSET

__all__ = ["OPS", "CompileOptions", "Graph", "Node", "QuantParams", "QuantizationPlan", "TensorSpec", "fresh_name"]

#: The ops every model-compiling plugin lowers (the first release's 17); the full opset is opset.OPSET.
OPS: Final = LEGACY_OPS


@final
@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A graph input: name, shape (NCHW for images) and dtype name (``opset.DTYPES``).

    ``dynamic`` lists the axes whose size may change from call to call (an imported model's
    batch axis, a token sequence axis); ``shape`` then holds the example's sizes there, and node
    attributes that depend on them are :class:`~neurenix_core.graph.ir.symbolic.SymDim` values that
    ``Graph.with_input_shapes`` resolves. ``display_shape`` shows dynamic axes as None.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    dynamic: tuple[int, ...] = ()

    @property
    def display_shape(self) -> tuple[int | None, ...]:
        return tuple(None if i in self.dynamic else d for i, d in enumerate(self.shape))

    def __repr__(self) -> str:
        return f"TensorSpec(name={self.name!r}, shape={self.display_shape}, dtype={self.dtype!r})"


@final
@dataclass(frozen=True, slots=True)
class Node:
    """One op. ``name`` is unique in the graph (a module path like ``"features.3"`` where it comes
    from one), used in errors and reports."""

    name: str
    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.op not in OPSET:
            raise ValueError(f"node {self.name!r}: unknown op {self.op!r}; the opset is listed in docs/models.md")


@final
@dataclass(frozen=True, slots=True)
class Graph:
    """A whole model: its inputs, nodes in execution order, and output value names."""

    inputs: tuple[TensorSpec, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    #: (input, axis, largest size) of dynamic axes with a cap (an ``arange`` over the batch
    #: imported as a slice of a constant of that length); checked by ``with_input_shapes``
    limits: tuple[tuple[int, int, int], ...] = ()

    @property
    def dynamic(self) -> bool:
        """Whether some input axis is dynamic (node attributes may hold SymDims)."""
        return any(s.dynamic for s in self.inputs)

    @property
    def param_bytes(self) -> int:
        """The bytes of the arrays the nodes hold: constants, and layers' weights and biases."""
        return sum(int(np.asarray(a).nbytes) for n in self.nodes for a in n.params.values())

    def with_input_shapes(self, *shapes: tuple[int, ...]) -> Graph:
        """The same graph for concrete input shapes (backends compile static shapes): every
        SymDim attribute is replaced by its value for these shapes, so the result is static
        (``nx.compile`` then folds the constants those sizes built: graph.specialize)."""
        if len(shapes) != len(self.inputs):
            raise ValueError(f"graph has {len(self.inputs)} input(s), got {len(shapes)} shape(s)")
        concrete = [tuple(int(d) for d in shp) for shp in shapes]
        inputs = tuple(replace(s, shape=shp, dynamic=()) for s, shp in zip(self.inputs, concrete))
        if not self.dynamic:
            return replace(self, inputs=inputs)
        dims = {(i, a): d for i, shp in enumerate(concrete) for a, d in enumerate(shp)}
        for i, a, most in self.limits:
            if dims.get((i, a), 0) > most:
                from neurenix_core.errors import ShapeError

                raise ShapeError(f"input {self.inputs[i].name!r} axis {a} is {dims[(i, a)]}; this imported model runs up to {most} there "
                                 "(a size-dependent range was imported with that cap); import it with an example that large or larger")
        nodes = tuple(replace(n, attrs=resolve(dict(n.attrs), dims)) if is_symbolic(n.attrs) else n for n in self.nodes)
        return replace(self, inputs=inputs, nodes=nodes, limits=())

    def fingerprint(self) -> str:
        """A stable hash of structure, attributes and weights: the key of compiled-model caches."""
        return self._hash(values=True)

    def structure_fingerprint(self) -> str:
        """A stable hash of structure, attributes and the weights' shapes and dtypes, not their
        values: the key of choices that depend on what a graph computes with, not on which
        numbers (the cpu:0 runtime measured fastest: a model with freshly drawn weights is the same
        work). Never a key for compiled models or results."""
        return self._hash(values=False)

    def _hash(self, *, values: bool) -> str:
        h = hashlib.sha256()
        for spec in self.inputs:
            h.update(repr((spec.name, spec.display_shape, spec.dtype)).encode())  # a dynamic axis: any example size
        for node in self.nodes:
            h.update(repr((node.name, node.op, node.inputs, node.output, sorted(node.attrs.items()))).encode())
            for key in sorted(node.params):
                arr = np.ascontiguousarray(node.params[key])
                h.update(key.encode() + str(arr.dtype).encode() + repr(arr.shape).encode())
                if values:
                    # The array's own bytes, not a tobytes() copy of them (the same hash; a 17 MB
                    # model's weights are hashed at every compile the compile cache keys).
                    h.update(arr.reshape(-1).view(np.uint8).data)
        h.update(repr(self.outputs).encode())
        if self.limits:
            h.update(repr(self.limits).encode())
        return h.hexdigest()[:24]

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


@final
@dataclass(frozen=True, slots=True)
class QuantParams:
    """Affine quantization: ``real = scale * (q - zero_point)``, ``q`` clipped to [qmin, qmax].

    ``axis`` is None for per-tensor parameters, else the channel axis of per-channel ones
    (``scale`` and ``zero_point`` then have one entry per channel). Symmetric parameters have
    ``zero_point == 0``.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    bits: int
    axis: int | None = None
    qmin: int = -128
    qmax: int = 127

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(np.int8 if self.bits <= 8 else np.int16)  # int4 codes are stored in int8


@final
@dataclass(frozen=True, slots=True)
class QuantizationPlan:
    """Everything a backend needs to lower a quantized model, computed once by the core.

    ``activations`` maps a value name (graph inputs and node outputs) to per-tensor affine
    parameters; ``weights`` maps a node name to symmetric per-channel parameters of its
    ``weight`` (axis 0 = output channels). ``dynamic`` means only Linear weights are quantized and
    activations are quantized at run time.
    """

    bits: int
    activations: Mapping[str, QuantParams]
    weights: Mapping[str, QuantParams]
    method: str = "minmax"
    dynamic: bool = False

    def fingerprint(self) -> str:
        """A stable hash of every parameter (bits, method, each scale and zero point): with
        ``Graph.fingerprint()``, the key of compiled-model caches."""
        h = hashlib.sha256(repr((self.bits, self.method, self.dynamic)).encode())
        for group in (self.activations, self.weights):
            for name in sorted(group):
                q = group[name]
                h.update(name.encode() + repr((q.bits, q.axis, q.qmin, q.qmax)).encode())
                h.update(np.ascontiguousarray(q.scale, np.float64).tobytes() + np.ascontiguousarray(q.zero_point, np.float64).tobytes())
        return h.hexdigest()[:24]


@final
@dataclass(frozen=True, slots=True, kw_only=True)
class CompileOptions:
    """What the user asked of ``nx.compile`` (device already resolved).

    ``precision`` is one of "fp32", "fp16", "bf16", "tf32", "int8", "int16" or None (the
    backend's default, which it must state in ``CompiledModel.summary``). ``quantization`` is
    set for int8/int16. ``extra`` carries the compile options (``optimize_for``, bucket sizes):
    since plugin API 1.4 only those the plugin declares in ``Capabilities.compile_options`` and the
    core's own (``runtime``, ``threads``; ``shape_buckets``, set by the core), each checked by
    ``nx.compile`` against its declared type and values (``graph.compile_options``).
    """

    device: Any
    precision: str | None = None
    quantization: QuantizationPlan | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_2``, ``base_3`` ... the first not in ``taken``; added to ``taken``.

    Value and node names for graphs being built or rewritten (importers, exporters, rewrites)."""
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
