"""Core ``Graph`` -> ONNX ``ModelProto`` for a session: the core's exporter
(``neurenix_core.graph.exporters.onnx_export``) at a precision.

Precisions: ``fp32`` (default), ``fp16`` (float16 weights and activations, float32 at the model
boundary), ``int8`` (a QDQ model: QuantizeLinear/DequantizeLinear pairs on every activation the
core's QuantizationPlan names, int8 per-channel weights, int32 biases; ONNX Runtime fuses the
patterns into QLinearConv/QLinearMatMul). Scales and zero points come from the plan unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from neurenix_core.contract import Graph, Node, QuantizationPlan, QuantParams, dequantize, onnx_export, weight_codes
from neurenix_core.errors import CompilationError
from neurenix_onnxruntime.eager import OPSET

__all__ = ["PRECISIONS", "Lowered", "lower"]

PRECISIONS = ("fp32", "fp16", "int8")


@dataclass
class Lowered:
    """The ONNX model plus what the compiled model needs to describe itself."""

    model: onnx.ModelProto
    precision: str
    input_names: list[str]
    output_names: list[str]
    layers: int
    #: Initializers left out of ``model`` (``external_min_bytes``), by name: give them to the
    #: session with ``SessionOptions.add_external_initializers``.
    external: dict[str, np.ndarray] = field(default_factory=dict)


# ----------------------------------------------------------------------------- int8: the QDQ model
class _QDQExporter(onnx_export.Exporter):
    """The exporter with the plan's quantization: QuantizeLinear/DequantizeLinear after every
    activation the plan names, int8 per-channel weights and int32 biases of linear/conv2d."""

    def __init__(self, graph: Graph, plan: QuantizationPlan) -> None:
        super().__init__(graph, opset_version=OPSET)
        self.plan = plan

    def _q_consts(self, prefix: str, qp: QuantParams) -> tuple[str, str]:
        scale = np.asarray(qp.scale, dtype=np.float32)
        zp = np.asarray(qp.zero_point).astype(qp.dtype)
        if qp.axis is None:
            scale, zp = scale.reshape(()), zp.reshape(())
        return self.const(f"{prefix}.scale", scale, np.float32), self.const(f"{prefix}.zero_point", zp, qp.dtype)

    def after(self, value: str) -> None:
        """Q -> DQ after ``value`` when the plan quantizes it; consumers then read the DQ output."""
        qp = self.plan.activations.get(value)
        if qp is None:
            return
        s, z = self._q_consts(f"{value}.act", qp)
        q = self.add("QuantizeLinear", [self.read(value), s, z], f"{value}/quantize")
        self.names[value] = self.add("DequantizeLinear", [q, s, z], f"{value}/dequantize")

    def weight(self, node: Node, key: str, array: np.ndarray, transpose: bool = False) -> str:
        """int8 per-channel weight initializer + DequantizeLinear (axis follows the layout)."""
        qp = self.plan.weights.get(node.name)
        if key != "weight" or qp is None:
            return super().weight(node, key, array, transpose)
        w = np.asarray(array, np.float32)
        scale = np.asarray(qp.scale, dtype=np.float32).reshape(-1)
        q = np.clip(np.round(w / scale.reshape((-1,) + (1,) * (w.ndim - 1))), qp.qmin, qp.qmax).astype(qp.dtype)
        axis = 0
        if transpose:
            q, axis = q.T, 1
        args = [self.const(f"{node.name}.weight.q", q, qp.dtype), self.const(f"{node.name}.weight.scale", scale, np.float32),
                self.const(f"{node.name}.weight.zero_point", np.zeros_like(scale, dtype=qp.dtype), qp.dtype)]
        return self.add("DequantizeLinear", args, f"{node.name}/weight_dequantize", axis=axis)

    def bias(self, node: Node) -> str | None:
        bias, inp = node.params.get("bias"), node.inputs[0]
        if bias is None or node.name not in self.plan.weights or inp not in self.plan.activations or node.output not in self.plan.activations:
            # (an output a mixed plan keeps in float: DQ(x) * DQ(w) + the float bias, no Q/DQ
            # after it, as the core's integer reference computes it: qmath.FLOAT_OUTPUT_OPS)
            return super().bias(node)
        # int32 bias at scale s_in * s_w (zero point 0), the layout QLinearConv/QLinearMatMul fuse.
        s_in = float(np.asarray(self.plan.activations[inp].scale).reshape(-1)[0])
        s_w = np.asarray(self.plan.weights[node.name].scale, dtype=np.float32).reshape(-1)
        scale = (s_in * s_w).astype(np.float32)
        q = np.clip(np.round(np.asarray(bias, np.float64) / scale), -(2**31), 2**31 - 1).astype(np.int32)
        args = [self.const(f"{node.name}.bias.q", q, np.int32), self.const(f"{node.name}.bias.scale", scale, np.float32),
                self.const(f"{node.name}.bias.zero_point", np.zeros_like(q), np.int32)]
        return self.add("DequantizeLinear", args, f"{node.name}/bias_dequantize", axis=0)


# ----------------------------------------------------------------------------- weight-only int4
#: ONNX Runtime's contrib domain, where MatMulNBits lives.
_MS_DOMAIN = "com.microsoft"


class _WeightExporter(onnx_export.Exporter):
    """The fp32 exporter with a weight-only plan: each int4 group-wise linear layer becomes
    ``MatMulNBits`` (ONNX Runtime's integer-weight matmul: 4-bit codes, a float scale per group,
    computed in float32), the plan's codes and scales as they are. Other planned layers (the int8
    output head an int4 plan keeps) get their dequantized float weights: ONNX Runtime's 8-bit
    MatMulNBits has no fast CPU kernel (measured 12x slower than the float matmul)."""

    def __init__(self, graph: Graph, plan: QuantizationPlan, external_min_bytes: int | None) -> None:
        super().__init__(graph, opset_version=OPSET, external_min_bytes=external_min_bytes)
        self.plan = plan

    def emitter(self, node: Node) -> onnx_export.Emit | None:
        q = self.plan.weights.get(node.name)
        if node.op == "linear" and q is not None and q.bits == 4 and np.asarray(q.scale).ndim == 2:
            return _matmul_nbits
        return super().emitter(node)

    def weight(self, node: Node, key: str, array: np.ndarray, transpose: bool = False) -> str:
        q = self.plan.weights.get(node.name)
        if key == "weight" and q is not None:
            array = dequantize(weight_codes(array, q), q).astype(np.float32)
        return super().weight(node, key, array, transpose)


def _matmul_nbits(e: onnx_export.Exporter, n: Node, a: dict[str, object]) -> str:
    assert isinstance(e, _WeightExporter)
    q = e.plan.weights[n.name]
    w = np.asarray(n.params["weight"])
    out_f, in_f = (int(d) for d in w.shape)
    scale = np.asarray(q.scale, np.float32)
    block = in_f // scale.shape[1]
    if block < 16 or block & (block - 1):
        raise CompilationError(f"ort: layer {n.name!r}: MatMulNBits takes groups of a power of two >= 16, not {block}")
    # Codes -8..7 stored unsigned with MatMulNBits' default zero point 8 (symmetric), two per
    # byte, the first of each pair in the low nibble: (out, groups, block / 2) bytes.
    codes = (weight_codes(w, q).reshape(out_f, -1, block).astype(np.uint8) + 8) & 0xF
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    args = [e.read(n.inputs[0]), e.const(f"{n.name}.weight.int4", packed, np.uint8), e.const(f"{n.name}.weight.scales", scale.reshape(-1), np.float32)]
    y = e.add("MatMulNBits", args, f"{n.name}/matmul_nbits", domain=_MS_DOMAIN, K=in_f, N=out_f, bits=4, block_size=block)
    b = e.bias(n)
    return y if b is None else e.add("Add", [y, b], n.name)


# ----------------------------------------------------------------------------- driver
def _check(precision: str, plan: QuantizationPlan | None) -> None:
    if precision not in PRECISIONS:
        raise CompilationError(
            f"ort (plugin onnxruntime) cannot compile precision {precision!r}: ONNX Runtime's providers here run "
            f"{', '.join(PRECISIONS)}. Pick one of them, or compile for another device."
        )
    if precision == "int8" and (plan is None or plan.bits != 8 or plan.dynamic):
        raise CompilationError(
            "ort (plugin onnxruntime): precision 'int8' needs a static 8-bit QuantizationPlan from the core's calibration "
            "(nx.compile(..., quantize='int8', calibration=...)); dynamic plans are not lowered."
        )


def lower(graph: Graph, precision: str = "fp32", plan: QuantizationPlan | None = None, *,
          external_min_bytes: int | None = None, weights: QuantizationPlan | None = None) -> Lowered:
    """Lower ``graph`` (static input shapes) to an ONNX model of opset ``OPSET`` (the core's
    ``onnx_export``); float constants of ``external_min_bytes`` or more stay out of the model
    (``Lowered.external``). ``weights``: an fp32 model's weight-only int4 plan (MatMulNBits)."""
    _check(precision, plan)
    if precision == "int8":
        assert plan is not None
        exporter: onnx_export.Exporter = _QDQExporter(graph, plan)
    elif weights is not None:
        if precision != "fp32":
            raise CompilationError(f"ort (plugin onnxruntime): weight-only quantization is lowered at fp32, not {precision!r}")
        exporter = _WeightExporter(graph, weights, external_min_bytes)
    else:
        exporter = onnx_export.Exporter(graph, float_type=np.float16 if precision == "fp16" else np.float32, opset_version=OPSET,
                                        external_min_bytes=external_min_bytes)
    model = exporter.export()
    if any(node.domain == _MS_DOMAIN for node in model.graph.node):
        model.opset_import.append(onnx.helper.make_opsetid(_MS_DOMAIN, 1))
    return Lowered(model, precision, [s.name for s in graph.inputs], [o.name for o in model.graph.output], len(graph.nodes),
                   exporter.external)
