"""Typed user code: neurenix's namespace, Tensor arithmetic and errors, checked by mypy --strict.

Runs as a script (prints one JSON line) and type-checks clean under ``mypy --strict``:
tests/test_typing.py does both. The annotations below are what a type checker infers anyway;
they are written out to show the types the namespace gives.

    python examples/typed_usage.py
    mypy --strict examples/typed_usage.py
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core.tensor.types import Operand


def standardize(x: nx.Tensor, *, axis: int = 0) -> nx.Tensor:
    """Zero mean, unit variance along ``axis``: every step is a Tensor to the type checker."""
    mean = nx.mean(x, axis=axis, keepdims=True)
    std = nx.std(x, axis=axis, keepdims=True)
    return (x - mean) / (std + 1e-6)


def scaled(x: nx.Tensor, factor: Operand) -> nx.Tensor:
    return x * factor


def main() -> dict[str, object]:
    x: nx.Tensor = nx.asarray([[1.0, 2.0], [3.0, 5.0]], dtype=nx.float32)
    dtype: np.dtype[Any] = x.dtype
    z = standardize(x)
    total: float = float(nx.sum(nx.abs(z)))
    first, second = nx.unstack(x, axis=0)
    unique = nx.unique_counts(nx.asarray([1, 1, 2]))
    q, r = nx.linalg.qr(x)
    mask: nx.Tensor = (x > 2.0) & (x < 5.0)
    try:
        nx.asarray([1.0], device="no-such-device:0")
    except nx.NeurenixError as exc:
        refused = type(exc).__name__
    return {
        "dtype": str(dtype),
        "device": str(x.device),
        "sum_abs": round(total, 4),
        "rows": [first.tolist(), second.tolist()],
        "counts": unique.counts.tolist(),
        "qr_shapes": [list(q.shape), list(r.shape)],
        "scaled": scaled(x, 2).tolist(),
        "mask": mask.tolist(),
        "refused": refused,
    }


if __name__ == "__main__":
    print(json.dumps(main()))
