"""The answer types of ``finfo`` and ``iinfo`` (``neurenix_core.tensor.dtypes``).

NamedTuples, not dataclasses (a dataclass costs the dataclasses import plus code generation, about
1.5 ms), and in their own module, loaded by the first ``finfo``/``iinfo`` call rather than at
``import neurenix_core``: creating the two classes costs ~0.3 ms, and most programs never ask.
``dtypes.FInfo`` / ``dtypes.IInfo`` still resolve (module ``__getattr__``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["FInfo", "IInfo"]


class FInfo(NamedTuple):
    """``finfo``'s answer: Python floats and ints (the standard's types), ``dtype`` a neurenix dtype."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype[Any]


class IInfo(NamedTuple):
    """``iinfo``'s answer: Python ints, ``dtype`` a neurenix dtype."""

    bits: int
    max: int
    min: int
    dtype: np.dtype[Any]
