"""Quantization math, once for every backend: calibration, parameters, TFLite integer arithmetic.

* Calibration runs the float reference interpreter over a data iterable and records each
  value's range (``minmax``; ``percentile`` to clip outliers; ``histogram``: the range of least
  quantization error), with a progress bar.
* Weights: symmetric per-channel int8 in [-127, 127] along axis 0 (output channels).
* Activations: affine per-tensor int8 in [-128, 127] (zero point may be non-zero), or symmetric
  int16 (zero point 0) as TFLite's 16x8 mode, whose weights stay int8.
* Bias: int32 (int64 in 16x8 mode) with scale ``input_scale * weight_scale[c]``.
* Requantization: TFLite's ``QuantizeMultiplier`` and ``MultiplyByQuantizedMultiplier``
  (SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT), so a backend that emits TFLite
  int8 kernels is bit-exact against :func:`neurenix_core.graph.reference.run.run_quantized`.
* Scales are float32, as a TFLite flatbuffer stores them; multipliers are computed in float64
  from those float32 values, as TFLite's kernels do.

The arithmetic lives in :mod:`neurenix_core.graph.ir.qmath`, calibration in
:mod:`neurenix_core.graph.quantization.calibration`; this module is the one name users and plugins import.
Backends lower a :class:`~neurenix_core.graph.ir.QuantizationPlan`; they never recompute it.
"""

from __future__ import annotations

from neurenix_core.graph.ir import QuantizationPlan, QuantParams  # the values these functions take and make
from neurenix_core.graph.ir.qmath import *
from neurenix_core.graph.ir.qmath import __all__ as _qmath_all
from neurenix_core.graph.quantization.calibration import *
from neurenix_core.graph.quantization.calibration import __all__ as _calibration_all

__all__ = [*_calibration_all, *_qmath_all, "QuantizationPlan", "QuantParams"]  # noqa: PLE0604 - re-exports those modules' names
