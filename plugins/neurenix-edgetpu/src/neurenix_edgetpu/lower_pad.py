"""Padding TFLite's SAME/VALID cannot say: an explicit PAD / PADV2 before a VALID convolution or
pooling, and images that reach a convolution or pooling through a graph ``pad`` node.

TFLite's CONV_2D, DEPTHWISE_CONV_2D, MAX_POOL_2D and AVERAGE_POOL_2D know two paddings: VALID
(none) and SAME (``ceil(size / stride)`` outputs, an odd extra row or column at the bottom or
right). PyTorch pads symmetrically, which is SAME only for some input sizes (``same_matches``):
the ResNet stem's ``max_pool2d(3, 2, padding=1)`` on an even image is not. Where it is not:

| core node | written |
|---|---|
| conv2d, padding p | PAD (zeros; int8: the input zero point, real 0.0) -> CONV_2D / DEPTHWISE_CONV_2D VALID |
| avg_pool2d, padding p, count_include_pad | PAD (zeros) -> AVERAGE_POOL_2D VALID (divisor kh*kw: the padding counts, as in torch) |
| max_pool2d, padding p, input >= 0 (after ReLU/ReLU6) | PAD (zeros) -> MAX_POOL_2D VALID |
| max_pool2d, padding p, any other input | PADV2 (fp32: -inf; int8: -128) -> MAX_POOL_2D VALID |
| avg_pool2d, padding p, count_include_pad=False | SAME where equivalent, else refused (``UnsupportedOperationError``) |

Why each is exact. int8 results are bit-exact with ``neurenix_core.graph.reference.run.run_quantized``
(and fp32 ones equal ``run_graph`` up to float32 rounding): PAD and PADV2 keep their input's
quantization (TFLite requires it), so nothing is requantized; the reference pads a convolution's
``x - zp`` with 0 (= PAD with zp), an average pool's raw integers with zp before the same
round-half-away-from-zero division by kh*kw, and a max pool's integers with the dtype's minimum
(-128, = PADV2's constant). Zero padding of a max pool is used only where every input is already
>= 0 (>= the zero point in int8, as ReLU/ReLU6 clamp there), so the maximum over a window, which
always holds one real element, is unchanged; it keeps the model on PAD, the padding op every
TFLite runtime and the Edge TPU compiler map. torch (and the opset's shape rule through it)
keeps ``padding <= kernel / 2``, so no window is padding only.

A 4-D value that is not stored NHWC (a graph input read first by ``pad``, say) is transposed to
NHWC once where a convolution or pooling reads it (``_image_input``), and ``spatial_values``
stores such inputs NHWC in the first place, so a MobileNet's ``F.pad(x)`` -> conv writes a PAD in
NHWC order and no TRANSPOSE at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import tflite

from neurenix_core.contract import Graph, Node
from neurenix_core.errors import UnsupportedOperationError
from neurenix_edgetpu.lower_values import TO_NHWC as _TO_NHWC
from neurenix_edgetpu.lower_values import Value as _Value

if TYPE_CHECKING:
    from neurenix_edgetpu.tflite_writer import ModelBuilder

__all__ = ["NON_NEGATIVE_OPS", "PaddingOps", "same_matches", "spatial_values"]

OP: Final = tflite.BuiltinOperator
PAD_SAME: Final = tflite.Padding.SAME
PAD_VALID: Final = tflite.Padding.VALID
#: Ops whose output is never negative (a max pool over them may pad with zeros).
NON_NEGATIVE_OPS: Final = frozenset({"relu", "relu6", "sigmoid", "softmax"})
#: Core ops reading an NCHW image that the writer keeps NHWC.
_IMAGE_OPS: Final = frozenset({"conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm2d"})

Fill = Literal["zero", "lowest"]


def spatial_values(graph: Graph) -> set[str]:
    """Values best stored NHWC: the inputs of image ops, and through constant-mode 4-D ``pad``
    nodes (whose NHWC form is a PAD in NHWC order) the values those pads read."""
    want = {n.inputs[0] for n in graph.nodes if n.op in _IMAGE_OPS and n.inputs}
    for n in reversed(graph.nodes):  # consumers come after producers: one backward pass
        if n.op == "pad" and n.output in want and n.attrs.get("mode", "constant") == "constant" and len(n.attrs["pads"]) == 4:
            want.add(n.inputs[0])
    return want


def same_matches(size: int, k: int, s: int, d: int, pad: int) -> bool:
    """Whether symmetric padding ``pad`` is TFLite's SAME for this axis: SAME has
    ``ceil(size / s)`` outputs and puts ``total // 2`` before; both must agree."""
    eff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return out == (size + 2 * pad - eff) // s + 1 and total // 2 == pad


class PaddingOps:
    """Explicit padding for the writer's ``_Lowerer`` (which supplies the attributes below)."""

    __slots__ = ()

    if TYPE_CHECKING:
        m: ModelBuilder
        int8: bool
        graph: Graph
        fused: dict[str, Node]
        nhwc_cache: dict[str, int]

        def _get(self, node: Node, i: int = 0) -> Any: ...
        def _new(self, value: str, shape: tuple[int, ...], *, quant: Any = None, like: int | None = None) -> int: ...
        def _emit(self, opcode: int, ins: list[int], outs: list[int], **kw: Any) -> None: ...

    def _image_input(self, node: Node) -> _Value:
        """The node's first input as an NHWC image: a 4-D value held in the core's NCHW layout
        (read first by an op that keeps it so) is transposed once here."""
        v = self._get(node)
        if v.nhwc:
            return v
        name = node.inputs[0]
        cached = self.nhwc_cache.get(name)
        if cached is not None:
            return _Value(cached, True)
        shape = self.m.shape_of(v.index)
        if len(shape) != 4:
            raise UnsupportedOperationError(f"layer {node.name!r} ({node.op}) needs a 4-D NCHW input, got shape {shape}")
        nhwc = self._new(f"{name}/to_nhwc", (shape[0], shape[2], shape[3], shape[1]), like=v.index)
        self._emit(OP.TRANSPOSE, [v.index, self.m.constant(f"{name}/nhwc_perm", np.array(_TO_NHWC, np.int32))], [nhwc])
        self.nhwc_cache[name] = nhwc
        return _Value(nhwc, True)

    def _explicit_pad(self, label: str, index: int, pad: tuple[int, int], fill: Fill) -> int:
        """``index`` (NHWC) padded by ``pad`` rows/columns on each side of H and W: PAD with zeros
        (int8: the zero point, real 0.0), or PADV2 with the lowest value (fp32 -inf, int8 -128).
        The output keeps the input's quantization, as TFLite's int8 PAD/PADV2 require."""
        n, h, wd, c = self.m.shape_of(index)
        out = self._new(f"{label}/pad", (n, h + 2 * pad[0], wd + 2 * pad[1], c), like=index)
        pads = self.m.constant(f"{label}/paddings", np.array([[0, 0], [pad[0]] * 2, [pad[1]] * 2, [0, 0]], np.int32))
        if fill == "zero":
            self._emit(OP.PAD, [index, pads], [out])
            return out
        t = self.m.tensors[index]
        low = np.array([-128], np.int8) if t.quant is not None else np.array([-np.inf], np.float32)
        value = self.m.constant(f"{label}/pad_value", low, quant=t.quant)
        self._emit(OP.PADV2, [index, pads, value], [out])
        return out

    def _pad(self, node: Node, index: int, kernel: tuple[int, ...], stride: tuple[int, int], dil: tuple[int, int],
             pad: tuple[int, int]) -> tuple[int, int]:
        """(input tensor, TFLite padding) of a convolution: SAME/VALID where they are the layer's
        padding, else an explicit zero PAD and VALID."""
        if pad == (0, 0):
            return index, PAD_VALID
        _, h, wd, _ = self.m.shape_of(index)
        if same_matches(h, kernel[0], stride[0], dil[0], pad[0]) and same_matches(wd, kernel[1], stride[1], dil[1], pad[1]):
            return index, PAD_SAME
        return self._explicit_pad(node.name, index, pad, "zero"), PAD_VALID

    def _pool_input(self, node: Node, index: int, kernel: tuple[int, int], stride: tuple[int, int],
                    pad: tuple[int, int]) -> tuple[int, int]:
        """(input tensor, TFLite padding) of max_pool2d / avg_pool2d (table in the module doc)."""
        if pad == (0, 0):
            return index, PAD_VALID
        _, h, wd, _ = self.m.shape_of(index)
        same = same_matches(h, kernel[0], stride[0], 1, pad[0]) and same_matches(wd, kernel[1], stride[1], 1, pad[1])
        if node.op == "max_pool2d":
            # TFLite's SAME max pool ignores the padding: the opset's -inf padding.
            if same:
                return index, PAD_SAME
            fill: Fill = "zero" if self._non_negative(node.inputs[0]) else "lowest"
            return self._explicit_pad(node.name, index, pad, fill), PAD_VALID
        if node.attrs.get("count_include_pad", True):
            # SAME average pooling divides by the real elements only: never the same here.
            return self._explicit_pad(node.name, index, pad, "zero"), PAD_VALID
        if same:
            return index, PAD_SAME
        raise UnsupportedOperationError(
            f"layer {node.name!r} (avg_pool2d, padding={pad}, count_include_pad=False): its border windows divide by "
            "their real elements only, which TFLite's AVERAGE_POOL_2D (plugin edgetpu) expresses for SAME padding alone; "
            "use count_include_pad=True or a SAME-equivalent padding, or compile with precision='fp32'"
        )

    def _non_negative(self, value: str) -> bool:
        """Whether ``value`` can never be negative: its producer is a ReLU-like op (or a layer a
        ReLU was fused into, whose output value is the ReLU's)."""
        producer = next((n for n in self.graph.nodes if n.output == value), None)
        if producer is None:
            return False
        if producer.op in NON_NEGATIVE_OPS:
            return True
        if producer.op == "clip":
            lo = producer.attrs.get("min")
            return lo is not None and float(lo) >= 0.0
        return any(relu.output == value for relu in self.fused.values())

