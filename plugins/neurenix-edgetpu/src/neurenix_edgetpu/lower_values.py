"""What the TFLite writer knows about each graph value it has written, and layout constants.

Images are NCHW in the core and NHWC inside the model; a :class:`Value` says which tensor holds
a value and in which layout, so each handler (``lowering.py``, ``lower_elementwise.py``,
``lower_tensor.py``) can keep NHWC where the op allows it and go back to NCHW where it does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from neurenix_core.contract import QuantParams
from neurenix_edgetpu.tflite_writer import TensorQuant

__all__ = ["NHWC_AXIS", "STORED_ORDER", "TO_NCHW", "TO_NHWC", "Value", "per_tensor", "symmetric"]

#: TRANSPOSE permutations between the core's NCHW and the model's NHWC.
TO_NHWC: Final = (0, 2, 3, 1)
TO_NCHW: Final = (0, 3, 1, 2)
#: Where each core (NCHW) axis of an image lives in the stored NHWC tensor.
NHWC_AXIS: Final = (0, 3, 1, 2)
#: The core axes in the order an NHWC tensor stores them.
STORED_ORDER: Final = TO_NHWC


@dataclass(slots=True)
class Value:
    """The written tensor of one graph value."""

    index: int
    nhwc: bool  # a 4-D image stored NHWC (its core shape is NCHW)
    chw_order: tuple[int, int, int] | None = None  # flattened NHWC data whose core order is (C,H,W)


def per_tensor(params: QuantParams) -> TensorQuant:
    """The plan's per-tensor parameters as the writer's TensorQuant."""
    return TensorQuant.per_tensor(float(np.asarray(params.scale).ravel()[0]), int(np.asarray(params.zero_point).ravel()[0]))


def symmetric(arr: np.ndarray) -> TensorQuant:
    """Symmetric int8 parameters for a constant the plan has none for (its largest value at 127)."""
    return TensorQuant.per_tensor(max(float(np.abs(arr).max()), 1e-8) / 127.0, 0)
