"""Whether OpenVINO's CPU device quantizes activations at run time on this CPU, checked, not assumed.

The ``"-int8-activations"`` weight schemes compile compressed weights with
``DYNAMIC_QUANTIZATION_GROUP_SIZE=32``. The CPU device applies that setting only where its kernels
support it (a CPU feature, a weight layout); elsewhere it computes with float activations, and
nothing in the compiled model says which it did (the runtime graph names the same FullyConnected
primitive either way). So one small layer is compiled and run once per process and weight width
(about 30 ms, once): its output must equal the core's grouped int8 activations
(``contract.quantize_groups``) times the same weights, and differ from the float product. A CPU
where it does not is refused by name before a model that would be mislabelled is compiled.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import numpy as np

from neurenix_core.errors import CompilationError

__all__ = ["check_activation_quantization"]

_IN, _OUT, _ROWS = 128, 32, 3
# float32 rounding of a 128-term dot product, far below the error of rounding activations to int8.
_AGREE: Final = 1e-4
_lock = threading.Lock()
_results: dict[int, str | None] = {}


def check_activation_quantization(core: Any, scheme: str | None, where: str) -> None:
    """Raise where ``scheme`` (a weight scheme, or None) quantizes activations and ``core``'s CPU
    device does not quantize them as the schemes define it; nothing to check for other schemes."""
    from neurenix_core.contract import ACTIVATION_SCHEMES, WEIGHT_SCHEMES

    if scheme not in ACTIVATION_SCHEMES:
        return
    bits = WEIGHT_SCHEMES[scheme]
    with _lock:
        if bits not in _results:
            _results[bits] = _probe(core, bits)
    why = _results[bits]
    if why is not None:
        raise CompilationError(f"{where}: OpenVINO's CPU device does not quantize activations at run time on this CPU ({why}), "
                               f"so {scheme} would compute something else; use quantize='int{bits}-weights'")


def _probe(core: Any, bits: int, group: int | None = None) -> str | None:
    """None where the device's result is the grouped int8 activations' product, else what it was
    (``group``: the DYNAMIC_QUANTIZATION_GROUP_SIZE asked for; the core's activation group)."""
    import openvino as ov
    import openvino.opset16 as op

    from neurenix_core.contract import ACTIVATION_GROUP, quantize_groups

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((_ROWS, _IN)) * rng.uniform(0.1, 10.0, (1, _IN))).astype(np.float32)
    w = rng.standard_normal((_OUT, _IN)).astype(np.float32)
    top, width = (127, _IN) if bits == 8 else (7, ACTIVATION_GROUP)
    grouped = w.reshape(_OUT, -1, width)
    scale = (np.abs(grouped).max(axis=2, keepdims=True) / top).astype(np.float32)
    codes = np.clip(np.rint(grouped / scale), -top, top).astype(np.int8)
    kind = ov.Type.i8 if bits == 8 else ov.Type.i4
    weight = op.reshape(op.multiply(op.convert(op.constant(codes, dtype=kind), ov.Type.f32), op.constant(scale)),
                        op.constant(np.array([_OUT, _IN], np.int64)), False)
    x_in = op.parameter([-1, _IN], ov.Type.f32)
    model = ov.Model([op.matmul(x_in, weight, False, True)], [x_in], "neurenix_activation_probe")
    asked = ACTIVATION_GROUP if group is None else group
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": asked})
    got = np.asarray(compiled(x)[0], np.float64)
    dense = (codes * scale).reshape(_OUT, _IN).astype(np.float64)
    want, floats = quantize_groups(x) @ dense.T, x.astype(np.float64) @ dense.T
    size = float(np.abs(want).max())
    off, from_float = float(np.abs(got - want).max()) / size, float(np.abs(got - floats).max()) / size
    if off <= _AGREE < from_float:
        return None
    return f"a probe layer was {off:.1e} from the grouped int8 activations and {from_float:.1e} from float activations"
