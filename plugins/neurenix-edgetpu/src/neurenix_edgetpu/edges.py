"""How a compiled model's inputs and outputs meet the user: :class:`Edge`.

Its own module because two sides need it: compiled.py builds edges from the writer's output or a
loaded .tflite file, and compile_cache.py rebuilds them from a persistent-cache entry that
compiled.py asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from neurenix_edgetpu import quantize as qz

__all__ = ["Edge"]


@dataclass(frozen=True, slots=True)
class Edge:
    """How one model input/output meets the user: its shape, layout change and quantization."""

    name: str
    shape: tuple[int, ...]  # as the user passes/receives it
    nhwc: bool  # the model stores it NHWC; the user sees NCHW
    dtype: np.dtype[Any]  # the model's dtype (int8 means quantize/dequantize here)
    quant: tuple[float, int] | None

    @property
    def quantizer(self) -> qz.EdgeQuantizer | None:
        q = _QUANTIZERS.get((self.quant, self.dtype.str)) if self.quant is not None else None
        if q is None and self.quant is not None:
            q = _QUANTIZERS[(self.quant, self.dtype.str)] = qz.EdgeQuantizer(self.quant[0], self.quant[1], self.dtype)
        return q


_QUANTIZERS: dict[tuple[Any, str], qz.EdgeQuantizer] = {}
