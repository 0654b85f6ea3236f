"""Parameter initialisation: seeded NumPy draws placed on the default device."""

from __future__ import annotations

import numpy as np

from neurenix_core.kwargs import strict_kwargs
from neurenix_core.tensor.tensor import Tensor

__all__ = ["constant", "generator", "manual_seed", "uniform"]

_rng = np.random.default_rng()


@strict_kwargs("nx.nn.manual_seed")
def manual_seed(seed: int) -> None:
    """Make layer initialisation reproducible."""
    global _rng
    _rng = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    """The seeded generator behind initialisation and dropout masks (``manual_seed`` resets it)."""
    return _rng


def uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    from neurenix_core.tensor.creation import asarray

    return asarray(_rng.uniform(-bound, bound, size=shape).astype(np.float32))


def constant(shape: tuple[int, ...], value: float) -> Tensor:
    from neurenix_core.tensor.creation import asarray

    return asarray(np.full(shape, value, dtype=np.float32))
