"""OpenVINO compile properties from neurenix precisions and optimization goals.

Precision is always set explicitly: OpenVINO's CPU device (what emulation runs on) defaults to
bf16 on CPUs with AMX, so leaving the hint out would silently change numerics. The NPU itself
computes in fp16 and int8.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from neurenix_core.errors import CompilationError, QuantizationError

__all__ = [
    "OPTIMIZE_FOR",
    "PRECISIONS",
    "QUANTIZED_CPU_PROPERTIES",
    "activation_group",
    "check_precision",
    "cpu_host_properties",
    "performance_properties",
    "precision_hint",
    "user_properties",
    "weights_summary",
]

#: neurenix precision -> (INFERENCE_PRECISION_HINT, OPTIMIZATION_CAPABILITIES entry it needs).
#: int8/int16 keep the float parts of the graph in f32; the quantized layers run in integers.
PRECISIONS: Final[Mapping[str, tuple[str, str]]] = {
    "fp32": ("f32", "FP32"),
    "fp16": ("f16", "FP16"),
    "bf16": ("bf16", "BF16"),
    "int8": ("f32", "INT8"),
    "int16": ("f32", "INT16"),
}

#: optimize_for -> OpenVINO hints. "accuracy" keeps every layer in the requested precision
#: (EXECUTION_MODE_HINT=ACCURACY stops the plugin from lowering precision on its own).
OPTIMIZE_FOR: Final[Mapping[str, Mapping[str, str]]] = {
    "performance": {"PERFORMANCE_HINT": "LATENCY", "EXECUTION_MODE_HINT": "PERFORMANCE"},
    "latency": {"PERFORMANCE_HINT": "LATENCY"},
    "throughput": {"PERFORMANCE_HINT": "THROUGHPUT"},
    "accuracy": {"PERFORMANCE_HINT": "LATENCY", "EXECUTION_MODE_HINT": "ACCURACY"},
}

#: Extra properties for a FakeQuantize (int8/int16) model on OpenVINO's CPU device. Its Snippets
#: JIT tokenizes a quantized MatMul -> activation -> MatMul chain into one fused Subgraph
#: (TokenizeMLPSeqSnippets) whose results are wrong by orders of magnitude when a layer's bias is
#: zero or small (measured with OpenVINO 2026.4: Linear-Tanh-Linear, zero biases, 5e4 off the
#: integer reference; Hugging Face initialises every bias to zero). With Snippets off, the
#: low-precision pass gives int8 FullyConnected/Convolution kernels that match the core's integer
#: reference to float rounding. The property is not listed in SUPPORTED_PROPERTIES but is
#: accepted by compile_model; the NPU device does not use Snippets and never gets it.
QUANTIZED_CPU_PROPERTIES: Final[Mapping[str, str]] = {"SNIPPETS_MODE": "DISABLE"}


def check_precision(precision: str, device: str, capabilities: tuple[str, ...]) -> None:
    """Raise a clear error when ``device`` cannot run ``precision`` (read from OpenVINO)."""
    if precision not in PRECISIONS:
        raise CompilationError(
            f"{device}: precision {precision!r} is not supported by the OpenVINO backend; use one of {', '.join(PRECISIONS)}"
        )
    needed = PRECISIONS[precision][1]
    # The NPU reports no FP32 but accepts f32 graphs by converting them; only the quantized and
    # reduced-precision modes need the device to report the capability.
    if precision == "fp32" or needed in capabilities:
        return
    error = QuantizationError if precision.startswith("int") else CompilationError
    # The remedy names what this device reports, not a fixed list: fp16 was once suggested on a
    # CPU refusing fp16 for want of FP16.
    names = [repr(p) for p, (_, cap) in PRECISIONS.items() if p == "fp32" or cap in capabilities]
    usable = " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))
    raise error(
        f"{device} cannot run {precision}: OpenVINO reports its capabilities as {', '.join(capabilities) or 'none'} "
        f"(no {needed}). Use precision={usable} on this device, or compile for device='cpu'."
    )


def precision_hint(precision: str) -> str:
    return PRECISIONS[precision][0]


def performance_properties(optimize_for: str | None, precision: str, threads: int | None) -> dict[str, Any]:
    """All compile properties for one compiled model."""
    if optimize_for is not None and optimize_for not in OPTIMIZE_FOR:
        raise CompilationError(f"optimize_for={optimize_for!r} is not one of {', '.join(OPTIMIZE_FOR)}")
    props: dict[str, Any] = dict(OPTIMIZE_FOR[optimize_for or "performance"])
    props["INFERENCE_PRECISION_HINT"] = precision_hint(precision)
    if threads is not None:
        props["INFERENCE_NUM_THREADS"] = int(threads)
    return props


def user_properties(value: Any, device: str) -> dict[str, Any]:
    """``nx.compile(..., ov_properties={...})``: OpenVINO compile properties passed as they are
    (they override neurenix's, e.g. ``{"SNIPPETS_MODE": "ENABLE"}``), except the precision hint,
    which ``precision=`` owns (a hint that contradicts it would relabel the model's numerics)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise CompilationError(f"{device}: ov_properties must be a dict of OpenVINO property names to values, got {type(value).__name__}")
    if "INFERENCE_PRECISION_HINT" in value:
        raise CompilationError(f"{device}: set the precision with nx.compile(..., precision=...), not ov_properties['INFERENCE_PRECISION_HINT']")
    return dict(value)


def cpu_host_properties(threads: int | None, *, scheme: str | None = None) -> dict[str, Any]:
    """cpu:0's OpenVINO properties (host.py, stateful.py): f32 for every float part (never the CPU
    device's bf16 default), latency, the thread count where given; with quantized weights
    (``scheme``, a weight-quantization scheme), the activations as the scheme says."""
    props: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    if scheme is not None:
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = activation_group(scheme)
    if threads is not None:
        props["INFERENCE_NUM_THREADS"] = int(threads)
    return props


def activation_group(scheme: str) -> int:
    """``DYNAMIC_QUANTIZATION_GROUP_SIZE`` for compressed weights of ``scheme``: 0 (float
    activations) for weight-only schemes, where the CPU device would otherwise quantize them at run
    time; the core's activation group (32) for the schemes that ask for exactly that."""
    from neurenix_core.contract import ACTIVATION_GROUP, ACTIVATION_SCHEMES

    return ACTIVATION_GROUP if scheme in ACTIVATION_SCHEMES else 0


def weights_summary(scheme: str) -> str:
    """What a summary says of quantized weights on OpenVINO's CPU device."""
    from neurenix_core.contract import WEIGHT_SCHEMES

    bits = WEIGHT_SCHEMES[scheme]
    group = activation_group(scheme)
    acts = f"int8 activations quantized at run time in groups of {group}" if group else "float activations"
    return f"int{bits} weights as compressed-weight FullyConnected layers ({acts})"
