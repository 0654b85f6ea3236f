"""The opset: every op a :class:`~neurenix_core.graph.ir.Node` may carry, in one table.

``schema`` defines what an op is (:class:`OpDef`: inputs, attributes with defaults, shape and
dtype rule, NumPy reference, optional decomposition) and the entry points (:func:`infer`,
:func:`evaluate`, :func:`markdown_table`). The ops are defined by family, one module each, as
ONNX lays out its schemas: ``math`` (elementwise, activations, matmul), ``logical``, ``nn``
(convolution, pooling, normalisation), ``image``, ``attention``, ``losses``, ``reduction``, ``tensor``
(shape, indexing, casts), ``controlflow``, ``sequence``, ``quantization``, ``rnn``. Importing
this package registers every family, so :data:`OPSET` is the whole table here.
"""

from __future__ import annotations

from typing import Final

from neurenix_core.graph.opset import (  # noqa: F401 - each module registers its family's ops
    attention,
    controlflow,
    detection,
    image,
    linalg,
    logical,
    losses,
    math,
    misc,
    nn,
    ordering,
    quantization,
    reduction,
    rnn,
    sequence,
    signal,
    special,
    tensor,
)
from neurenix_core.graph.opset.schema import (
    DTYPES,
    LEGACY_OPS,
    OPSET,
    REQUIRED,
    Arrays,
    Attrs,
    Builder,
    Decompose,
    Infer,
    OpDef,
    Params,
    Ref,
    Shape,
    _axes,
    _axis,
    _broadcast,
    _const_dtype,
    _f,
    _float_only,
    _is_float,
    _np_dtype,
    _numel,
    _promote,
    _same,
    attrs_of,
    evaluate,
    infer,
    markdown_table,
)

__all__ = [
    "COMPOSITES",
    "DTYPES",
    "LEGACY_OPS",
    "OPSET",
    "REQUIRED",
    "Arrays",
    "Attrs",
    "Builder",
    "Decompose",
    "Infer",
    "OpDef",
    "Params",
    "Ref",
    "Shape",
    "_axes",
    "_axis",
    "_broadcast",
    "_const_dtype",
    "_f",
    "_float_only",
    "_is_float",
    "_np_dtype",
    "_numel",
    "_promote",
    "_same",
    "attrs_of",
    "evaluate",
    "infer",
    "markdown_table",
]

#: The ops with a decomposition into other ops.
COMPOSITES: Final = frozenset(name for name, d in OPSET.items() if d.composite)
