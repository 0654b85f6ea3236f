"""The types the namespace's signatures are written in, for annotations in user code and here.

``Operand`` is what a binary function or operator takes (a Tensor or a Python scalar, as the
array API 2024.12 allows), ``DTypeLike`` what a ``dtype=`` argument accepts (``nx.float32``, a
name such as ``"bfloat16"``, a Python type), ``Axes`` an axis or several. The ``unique_*`` result
types describe the named tuples those functions return (fields as the standard names them).

Nothing here runs: the aliases are plain values, and the result types exist for type checkers
only (a backend returns its own named tuple, which has the same fields).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np

from neurenix_core.tensor.tensor import Operand as _Operand

if TYPE_CHECKING:
    from neurenix_core.tensor.tensor import Tensor

# UniqueAllResult, UniqueCountsResult and UniqueInverseResult are for type checkers (see above).
__all__ = ["Axes", "DTypeLike", "Operand", "Scalar"]

#: A Python scalar an elementwise function or operator accepts beside a Tensor.
Scalar: TypeAlias = bool | int | float | complex
#: An operand of a binary function (``nx.add``) or operator (``x + 1``): ``Tensor`` or a Scalar.
#: Defined beside Tensor (tensor/tensor.py annotates its operators with it), re-exported here.
Operand: TypeAlias = _Operand
#: What ``dtype=`` accepts: a neurenix dtype (``nx.float32``), its name, or a Python/NumPy type.
DTypeLike: TypeAlias = np.dtype[Any] | str | type
#: One axis or several.
Axes: TypeAlias = int | tuple[int, ...]

if TYPE_CHECKING:
    # Declared for type checkers only: the runtime result is the backend's named tuple with these fields.
    class UniqueAllResult(NamedTuple):
        values: Tensor
        indices: Tensor
        inverse_indices: Tensor
        counts: Tensor

    class UniqueCountsResult(NamedTuple):
        values: Tensor
        counts: Tensor

    class UniqueInverseResult(NamedTuple):
        values: Tensor
        inverse_indices: Tensor
