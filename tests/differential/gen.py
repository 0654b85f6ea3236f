"""Hypothesis building blocks for the differential cases: shapes, dtypes and values.

Values come from a NumPy generator seeded by a drawn integer (fast for any shape; the seed and
the shape still shrink), rounded to the dtype under test so the float64 reference computes with
exactly the values the device sees.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.testing.reference import rounded

from .harness import Arr

__all__ = ["BOOL", "COMPLEX", "FLOAT", "GRAD_FLOAT", "INT", "UINT", "arr", "axis_of", "new_example", "shape", "values"]

FLOAT = ("float32", "float64", "float16", "bfloat16")
#: Gradients are compared with finite differences in float64: float32 and float64 only (a float16
#: gradient is rounded past what a finite difference can say anything about).
GRAD_FLOAT = ("float32", "float64")
INT = ("int32", "int64", "int8", "int16")
UINT = ("uint8",)
BOOL = ("bool",)
COMPLEX = ("complex64", "complex128")


def shape(data: st.DataObject, min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 4) -> tuple[int, ...]:
    return tuple(data.draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side), label="shape"))


_arrays_drawn = 0


def new_example() -> None:
    """Called before each example: the arrays of one example are numbered from 0 again."""
    global _arrays_drawn
    _arrays_drawn = 0


def _next_array() -> int:
    # Hypothesis draws seed 0 for every array of its first examples: salted with the array's number,
    # two operands still differ (identical operands sit on every kink of maximum, remainder ...).
    global _arrays_drawn
    _arrays_drawn += 1
    return _arrays_drawn


def values(data: st.DataObject, shp: Sequence[int], dtype: str, low: float = -4.0, high: float = 4.0, *, specials: bool = False) -> np.ndarray:
    """Values of ``dtype`` in [low, high) (integers: [low, high]); ``specials`` mixes in nan, inf
    and signed zeros (the classification functions' whole point)."""
    rng = np.random.default_rng([data.draw(st.integers(0, 2**32 - 1), label="values seed"), _next_array()])
    dt = as_dtype(dtype)
    shp = tuple(shp)
    if dt.kind == "b":
        return rng.random(shp) < 0.5
    if dt.kind in "iu":
        lo = max(int(low), 0) if dt.kind == "u" else int(low)
        return rng.integers(lo, int(high) + 1, shp).astype(dt)
    if dt.kind == "c":
        return rounded(rng.uniform(low, high, shp) + 1j * rng.uniform(low, high, shp), dtype)
    out = rng.uniform(low, high, shp)
    if specials and out.size:
        pick = rng.random(shp)
        out = np.where(pick < 0.15, np.nan, np.where(pick < 0.25, np.inf, np.where(pick < 0.3, -np.inf, np.where(pick < 0.35, -0.0, out))))
    return rounded(out, dtype)


def arr(data: st.DataObject, shp: Sequence[int], dtype: str, low: float = -4.0, high: float = 4.0, *, specials: bool = False) -> Arr:
    return Arr(values(data, shp, dtype, low, high, specials=specials), dtype)


def axis_of(data: st.DataObject, ndim: int, *, none: bool = True, tuples: bool = False) -> int | tuple[int, ...] | None:
    """An axis argument for an array of ``ndim`` dimensions: None, an int (negative too), or a tuple."""
    options: list[st.SearchStrategy[int | tuple[int, ...] | None]] = []
    if none:
        options.append(st.none())
    if ndim:
        options.append(st.integers(-ndim, ndim - 1))
        if tuples:
            options.append(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple))
    return data.draw(st.one_of(options), label="axis") if options else None
