"""Precision modes of the TPU program: what dtype activations and MXU weights use, which
``jax.lax.Precision`` every dot and convolution asks for, and the accumulation dtype.

``bf16`` is the TPU default (bfloat16 weights and activations, float32 accumulation);
``fp32`` keeps float32 everywhere at ``Precision.HIGHEST`` (no silent bf16 passes on a real TPU);
``int8``/``int16`` come with the core's quantization plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
from jax import lax

from neurenix_core.contract import QuantizationPlan
from neurenix_core.errors import CompilationError

__all__ = ["MODES", "QUANT_MODES", "Mode", "resolve_mode"]


@dataclass(frozen=True, slots=True)
class Mode:
    """A precision mode: activation/weight dtype, the MXU precision flag and the accumulation dtype."""

    name: str
    compute: Any
    precision: Any
    acc: Any
    note: str


MODES: Mapping[str, Mode] = {
    "bf16": Mode("bf16", jnp.bfloat16, lax.Precision.DEFAULT, jnp.float32,
                 "bfloat16 weights and activations, float32 accumulation"),
    "fp32": Mode("fp32", jnp.float32, lax.Precision.HIGHEST, jnp.float32,
                 "float32 weights and activations, Precision.HIGHEST"),
}


# Quantized modes: weights live on the device as int8/int16 with per-channel float32 scales and
# are dequantized inside the fused program; every activation the plan names is
# quantize-dequantized (round half away from zero, clip) as the core's reference does. The
# arithmetic between boundaries is float32: this reproduces integer numerics, it does not drive
# the int8 MXU path.
_QUANT_NOTE = "{bits}-bit weights (per-channel scales) and quantize-dequantize at every activation from the core's plan, float32 arithmetic"
QUANT_MODES: Mapping[str, Mode] = {
    f"int{b}": Mode(f"int{b}", jnp.float32, lax.Precision.HIGHEST, jnp.float32, _QUANT_NOTE.format(bits=b)) for b in (8, 16)
}


def resolve_mode(precision: str | None, plan: QuantizationPlan | None = None) -> tuple[Mode, bool]:
    """The mode for ``precision`` and whether it was the default (None -> bf16, as on TPU)."""
    if plan is not None:
        return QUANT_MODES[f"int{plan.bits}"], False
    if precision in QUANT_MODES:
        raise CompilationError(
            f"tpu (plugin neurenix-tpu): precision {precision!r} needs a quantization plan: "
            f"nx.compile(model, device='tpu:0', quantize={precision!r}, calibration=[batches...])"
        )
    if precision is None:
        return MODES["bf16"], True
    mode = MODES.get(precision)
    if mode is None:
        raise CompilationError(
            f"tpu (plugin neurenix-tpu): precision {precision!r} is not supported; TPUs compute in "
            f"{' or '.join(repr(m) for m in MODES)} (pass precision='fp32' for float32 results), or int8/int16 with quantize="
        )
    return mode, False
