"""The space-to-depth stem: a narrow full-resolution int8 convolution and its stride-2 successor
rewritten on a 2x2-blocked image, with the same integers out.

Why: on a CPU whose int8 kernels run on Intel AMX tiles (XNNPACK, LiteRT's CPU kernels, on Xeon
Sapphire Rapids and later), a convolution costs a nearly fixed time per output pixel whatever its
channel count. A 3-channel 3x3 stem at full resolution is then the slowest layer of a small CNN
(docs/edgetpu.md, Benchmark). Written on ``SPACE_TO_DEPTH(x, 2)`` the same stem has a quarter of
the output pixels and four times the channels, and the stride-2 layer after it becomes a 2x2
stride-1 convolution on the blocked image: the two run in about 40% of the time on AMX. Without
AMX (AVX512-VNNI, AVX2) the blocked form is slower, so ``"auto"`` applies it only where XNNPACK's
int8 kernels use AMX in this process (``choose_stem``).

The pattern, in int8 only: conv2d A (3x3, stride 1, padding 1, dilation 1, groups 1, at most
``MAX_STEM_CHANNELS`` input channels, even height and width), a ReLU optionally fused into it,
whose output is read only by conv2d B (3x3, stride 2, padding 1, dilation 1, groups 1). Written:

    SPACE_TO_DEPTH(block 2)   [N,H,W,C]      -> [N,H/2,W/2,4C]     channel (a*2+b)*C + c
    CONV_2D A' 3x3 SAME       4C -> 4*Cout                          channel (a*2+b)*Cout + co
    PAD top 1, left 1         [N,H/2,W/2,4Cout] -> [N,H/2+1,W/2+1,4Cout]
    CONV_2D B' 2x2 VALID      4*Cout -> Cout_B

Every int32 accumulator is the one of the plain lowering: the kernels only move the original
int8 weights (zeros where a blocked tap has no original one), biases and per-channel scales are
the original ones (tiled four times for A'), and the padding is the zero point either way (the
plain convolutions pad with the input's zero point; TFLite's int8 PAD pads with its output's
zero point, which PAD keeps equal to its input's). So the outputs are bit-exact with the plain
lowering on every kernel set. All three ops are in the Edge TPU compiler's op set, at the
versions the TFLite converter writes for int8 (SPACE_TO_DEPTH 2, PAD 2, CONV_2D 3).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import tflite

from neurenix_core.contract import Graph, Node
from neurenix_core.errors import ConfigurationError, UnsupportedOperationError
from neurenix_edgetpu import quantize as qz
from neurenix_edgetpu import tflite_writer as w
from neurenix_edgetpu.lower_values import Value as _Value
from neurenix_edgetpu.tflite_writer import TensorQuant

if TYPE_CHECKING:
    from neurenix_core.contract import QuantizationPlan
    from neurenix_edgetpu.tflite_writer import ModelBuilder

__all__ = ["MAX_STEM_CHANNELS", "STEMS", "SpaceToDepthOps", "choose_stem", "find_pairs", "next_kernel", "stem_kernel", "stem_of_ops"]

OP: Final = tflite.BuiltinOperator
#: Values of the ``stem=`` compile option.
STEMS: Final = ("auto", "space_to_depth", "plain")
#: Widest stem input rewritten: beyond a few channels the plain stem is no longer pixel-bound.
MAX_STEM_CHANNELS: Final = 4


def choose_stem(option: Any, *, precision: str, kernels: str, emulated: bool, amx: Callable[[], str]) -> str:
    """"space_to_depth" or "plain" for the ``stem=`` option.

    ``"auto"`` rewrites only int8 models run by XNNPACK on the host CPU where ``amx()`` (called
    only then: it may create an interpreter) says this process's XNNPACK runs int8 on AMX tiles.
    ``"space_to_depth"`` forces the rewrite (int8 only), ``"plain"`` never applies it.
    """
    if option not in STEMS:
        raise ConfigurationError(f"edgetpu: stem must be one of {', '.join(STEMS)}, got {option!r} (compile option stem=...)")
    if option == "space_to_depth" and precision != "int8":
        raise ConfigurationError(
            f"edgetpu: stem='space_to_depth' rewrites int8 models only, this one is {precision}; "
            "compile with precision='int8' (and calibration=...) or leave stem='auto'"
        )
    if option != "auto":
        return option
    if precision != "int8" or kernels != "xnnpack" or not emulated:
        return "plain"  # TFLite's own kernels and the Edge TPU do not run int8 on AMX tiles
    return "space_to_depth" if amx() == "granted" else "plain"


def stem_of_ops(op_names: Any) -> str:
    """What a written model's op list says about its stem: "space_to_depth" or "plain" (read back
    from an interpreter by benchmarks, so both sides of a comparison state it the same way)."""
    return "space_to_depth" if "SPACE_TO_DEPTH" in set(op_names) else "plain"


# ---------------------------------------------------------------------- kernels
def stem_kernel(weight: np.ndarray) -> np.ndarray:
    """A's (Cout, Cin, 3, 3) kernel as A' in TFLite layout (4*Cout, 3, 3, 4*Cin).

    A' output channel (a, b, co) is output pixel (2i+a, 2j+b) of A; its input channel (a', b', ci)
    at blocked tap (kh', kw') is input pixel (2(i+kh'-1)+a', ...), i.e. A's tap
    kh = 2(kh'-1) + a' - a + 1 (likewise kw); taps outside 0..2 are zeros.
    """
    cout, cin, k, _ = weight.shape
    out = np.zeros((2, 2, cout, 3, 3, 2, 2, cin), weight.dtype)
    for a in range(2):
        for b in range(2):
            for kh2 in range(3):
                for a2 in range(2):
                    kh = 2 * (kh2 - 1) + a2 - a + 1
                    if not 0 <= kh < k:
                        continue
                    for kw2 in range(3):
                        for b2 in range(2):
                            kw = 2 * (kw2 - 1) + b2 - b + 1
                            if 0 <= kw < k:
                                out[a, b, :, kh2, kw2, a2, b2, :] = weight[:, :, kh, kw]
    return out.reshape(4 * cout, 3, 3, 4 * cin)


def next_kernel(weight: np.ndarray) -> np.ndarray:
    """B's (Cout, C, 3, 3) stride-2 kernel as B' in TFLite layout (Cout, 2, 2, 4*C) on the blocked
    image padded by one block at the top and left: B' tap kh' of blocked row offset a is B's tap
    kh = 2*kh' + a - 1 (likewise kw); the one tap outside 0..2 (kh' = 0, a = 0) is zero."""
    cout, c, k, _ = weight.shape
    out = np.zeros((cout, 2, 2, 2, 2, c), weight.dtype)
    for kh2 in range(2):
        for a in range(2):
            kh = 2 * kh2 + a - 1
            if not 0 <= kh < k:
                continue
            for kw2 in range(2):
                for b in range(2):
                    kw = 2 * kw2 + b - 1
                    if 0 <= kw < k:
                        out[:, kh2, kw2, a, b, :] = weight[:, :, kh, kw]
    return out.reshape(cout, 2, 2, 4 * c)


# ---------------------------------------------------------------------- pattern
def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _conv3x3(node: Node, stride: int) -> bool:
    a = node.attrs
    weight = node.params.get("weight")
    return (
        node.op == "conv2d" and weight is not None and np.shape(weight)[2:] == (3, 3) and int(a.get("groups", 1)) == 1
        and _pair(a.get("stride", 1)) == (stride, stride) and _pair(a.get("padding", 0)) == (1, 1)
        and _pair(a.get("dilation", 1)) == (1, 1)
    )


def find_pairs(graph: Graph, fused: dict[str, Node], shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """{A's name: B's name} for every (stem, stride-2 successor) pair the rewrite applies to.

    ``fused`` maps a producer to the ReLU fused into it (the writer's fusion plan); ``shapes``
    gives each value's core (NCHW) shape.
    """
    uses = Counter(i for n in graph.nodes for i in n.inputs) + Counter(graph.outputs)
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    pairs: dict[str, str] = {}
    for a in graph.nodes:
        if not _conv3x3(a, 1) or np.shape(a.params["weight"])[1] > MAX_STEM_CHANNELS:
            continue
        shape = shapes.get(a.inputs[0], ())
        if len(shape) != 4 or shape[2] % 2 or shape[3] % 2:
            continue
        out = fused[a.name].output if a.name in fused else a.output
        consumers = readers.get(out, [])
        if uses[out] != 1 or len(consumers) != 1:
            continue
        b = consumers[0]
        if _conv3x3(b, 2) and b.inputs[0] == out and len(b.inputs) == 1:
            pairs[a.name] = b.name
    return pairs


# ---------------------------------------------------------------------- writer handlers
class SpaceToDepthOps:
    """Handlers mixed into the writer's ``_Lowerer`` (which supplies the attributes below)."""

    __slots__ = ()

    if TYPE_CHECKING:
        m: ModelBuilder
        graph: Graph
        plan: QuantizationPlan | None
        fused: dict[str, Node]
        values: dict[str, _Value]
        s2d_stems: dict[str, str]
        s2d_next: set[str]
        s2d_values: dict[str, int]

        def _act(self, name: str) -> TensorQuant: ...
        def _get(self, node: Node, i: int = 0) -> _Value: ...
        def _new(self, value: str, shape: tuple[int, ...], *, quant: TensorQuant | None = None, like: int | None = None) -> int: ...
        def _emit(self, opcode: int, ins: list[int], outs: list[int], **kw: Any) -> None: ...
        def _out_name(self, node: Node) -> str: ...
        def _fused_act(self, node: Node) -> int: ...
        def _weight_scales(self, node: Node) -> np.ndarray: ...

    def _plan_s2d(self, shapes: dict[str, tuple[int, ...]]) -> None:
        self.s2d_stems.update(find_pairs(self.graph, self.fused, shapes))
        self.s2d_next.update(self.s2d_stems.values())

    def _s2d_weights(self, node: Node, in_index: int, blocked: Callable[[np.ndarray], np.ndarray], tiles: int) -> tuple[int, int]:
        """B' or A' weights: the plain lowering's int8 weights and int32 bias, moved by ``blocked``
        (and tiled ``tiles`` times along the output channels, with their scales)."""
        scale = self._weight_scales(node)
        weight = np.asarray(node.params["weight"], np.float32)
        q = blocked(qz.weights_int8(weight, scale, 0))  # quantized first: the plain kernel's integers, moved
        scales = np.tile(scale, tiles)
        wi = self.m.constant(f"{node.name}/weight", q, quant=TensorQuant(scales, np.zeros(scales.shape, np.int64), 0))
        bias = node.params.get("bias")
        bias = np.zeros(scale.shape, np.float32) if bias is None else np.asarray(bias, np.float32)
        in_scale = float(self.m.quant_of(in_index).scale[0])  # type: ignore[union-attr]
        bq, bquant = qz.bias_int32(np.tile(bias, tiles), in_scale, scales)  # elementwise: the plain bias, tiled
        bi = self.m.constant(f"{node.name}/bias", bq, quant=bquant)
        return wi, bi

    def _s2d_stem(self, node: Node) -> None:
        """A: SPACE_TO_DEPTH then A' (3x3 SAME, 4*Cout channels); its blocked output is kept
        aside for B, the one reader."""
        v = self._get(node)
        if not v.nhwc:
            raise UnsupportedOperationError(f"layer {node.name!r} (conv2d) needs a 4-D NCHW input")
        n, h, wd, cin = self.m.shape_of(v.index)
        blocked = self._new(f"{node.name}/space_to_depth", (n, h // 2, wd // 2, 4 * cin), like=v.index)
        self._emit(OP.SPACE_TO_DEPTH, [v.index], [blocked], options_type=w.OPTIONS.SpaceToDepthOptions, options=w.space_to_depth_options(2))
        wi, bi = self._s2d_weights(node, blocked, stem_kernel, 4)
        out_name = self._out_name(node)
        cout = np.shape(node.params["weight"])[0]
        out = self._new(f"{out_name}/blocked", (n, h // 2, wd // 2, 4 * cout), quant=self._act(out_name))
        self._emit(OP.CONV_2D, [blocked, wi, bi], [out], options_type=w.OPTIONS.Conv2DOptions,
                   options=w.conv_options((1, 1), (1, 1), tflite.Padding.SAME, self._fused_act(node)))
        self.s2d_values[out_name] = out

    def _s2d_successor(self, node: Node) -> None:
        """B: PAD one block at the top and left, then B' (2x2 VALID, stride 1)."""
        src = self.s2d_values.pop(node.inputs[0])
        n, h2, w2, c4 = self.m.shape_of(src)
        padded = self._new(f"{node.name}/pad", (n, h2 + 1, w2 + 1, c4), like=src)  # PAD keeps the quantization: pads the zero point
        pads = self.m.constant(f"{node.name}/paddings", np.array([[0, 0], [1, 0], [1, 0], [0, 0]], np.int32))
        self._emit(OP.PAD, [src, pads], [padded])
        wi, bi = self._s2d_weights(node, padded, next_kernel, 1)
        out_name = self._out_name(node)
        out = self._new(out_name, (n, h2, w2, np.shape(node.params["weight"])[0]))
        self._emit(OP.CONV_2D, [padded, wi, bi], [out], options_type=w.OPTIONS.Conv2DOptions,
                   options=w.conv_options((1, 1), (1, 1), tflite.Padding.VALID, self._fused_act(node)))
        self.values[out_name] = _Value(out, True)

