"""int8 you can trust on edgetpu:0: explicit padding (lower_pad.py) and whole imported CNNs.

The unit tests check a convolution or pooling whose symmetric padding TFLite's SAME/VALID cannot
say against the core's integer reference: bit-exact with LiteRT's reference kernels, within one
output step with the default XNNPACK kernels (they requantize in float), and fp32 against the
float reference. The model tests import a ResNet-18-like and a MobileNetV2-like torch CNN (the
stem max pool k3 s2 p1, and ``F.pad`` before a stride-2 convolution, that used to refuse the whole
model) and compare their top-1 agreement with torch fp32 to cpu:0 int8's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from neurenix_core.device import Device
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.quantization import calibrate
from neurenix_core.graph.reference import run_graph, run_quantized

from neurenix_edgetpu.compiled import compile_graph
from neurenix_edgetpu.lowering import lower

DEV = Device("edgetpu", 0)
HW = 16  # 16 is even: k3 s2 p1 and k7 s2 p3 are not TFLite SAME on it


def _conv_params(rng: np.random.Generator, cout: int, cin: int, k: int) -> dict[str, np.ndarray]:
    return {"weight": rng.normal(0, 0.3, (cout, cin, k, k)).astype(np.float32), "bias": rng.normal(0, 0.1, cout).astype(np.float32)}


def _padded_graph(case: str) -> Graph:
    """One padded layer (and what feeds it) per case, on a (1, 3, 16, 16) input."""
    rng = np.random.default_rng(11)
    pool = {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}
    conv1 = {"in_channels": 3, "out_channels": 4, "kernel_size": (1, 1), "groups": 1, "stride": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
    nodes: list[Node]
    if case == "max_pool_any_sign":  # PADV2 with the lowest value
        nodes = [Node("p", "max_pool2d", ("x",), "y", pool)]
    elif case == "max_pool_after_relu":  # zeros do: every input >= 0
        nodes = [Node("c", "conv2d", ("x",), "a", conv1, _conv_params(rng, 4, 3, 1)), Node("r", "relu", ("a",), "b"),
                 Node("p", "max_pool2d", ("b",), "y", pool)]
    elif case == "avg_pool_count_include_pad":
        nodes = [Node("p", "avg_pool2d", ("x",), "y", {**pool, "count_include_pad": True})]
    elif case == "conv7x7_s2_p3":
        attrs = {**conv1, "out_channels": 8, "kernel_size": (7, 7), "stride": (2, 2), "padding": (3, 3)}
        nodes = [Node("c", "conv2d", ("x",), "y", attrs, _conv_params(rng, 8, 3, 7))]
    elif case == "pad_then_conv":  # torch's F.pad(x, (0, 1, 0, 1)) then a stride-2 VALID convolution
        attrs = {**conv1, "out_channels": 8, "kernel_size": (3, 3), "stride": (2, 2)}
        nodes = [Node("pad", "pad", ("x",), "xp", {"pads": ((0, 0), (0, 0), (0, 1), (0, 1)), "mode": "constant", "value": 0.0}),
                 Node("c", "conv2d", ("xp",), "y", attrs, _conv_params(rng, 8, 3, 3))]
    else:
        raise AssertionError(case)
    return Graph((TensorSpec("x", (1, 3, HW, HW), "float32"),), tuple(nodes), ("y",))


#: TFLite ops each case must write (beside the QUANTIZE/TRANSPOSE/DEQUANTIZE edges).
_WRITTEN = {
    "max_pool_any_sign": {"PADV2": 1, "MAX_POOL_2D": 1},
    "max_pool_after_relu": {"PAD": 1, "MAX_POOL_2D": 1, "CONV_2D": 1},
    "avg_pool_count_include_pad": {"PAD": 1, "AVERAGE_POOL_2D": 1},
    "conv7x7_s2_p3": {"PAD": 1, "CONV_2D": 1},
    "pad_then_conv": {"PAD": 1, "CONV_2D": 1},
}


def _batches(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(1, 3, HW, HW)).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("case", sorted(_WRITTEN))
def test_explicit_padding_is_bit_exact_with_the_integer_reference(edgetpu, case):
    graph = _padded_graph(case)
    batches = _batches(12, 1)
    plan = calibrate(graph, batches, progress=False)
    lowered = lower(graph, "int8", plan)
    written = {op: n for op, n in lowered.op_counts.items() if op not in ("QUANTIZE", "DEQUANTIZE", "TRANSPOSE")}
    assert written == _WRITTEN[case]
    # The image enters NHWC once (the input edge): F.pad is a PAD in NHWC order, no layout round trip.
    assert lowered.op_counts.get("TRANSPOSE") == 2
    out = plan.activations["y"]
    scale, zp = np.float32(out.scale[0]), int(out.zero_point[0])
    exact = compile_graph(edgetpu, graph, CompileOptions(device=DEV, precision="int8", quantization=plan, extra={"kernels": "reference"}))
    fast = compile_graph(edgetpu, graph, CompileOptions(device=DEV, precision="int8", quantization=plan))
    for x in batches:
        want = run_quantized(graph, plan, x, dequantize=False)
        np.testing.assert_array_equal(np.rint(exact(x) / scale).astype(np.int64) + zp, want)
        # XNNPACK requantizes in float: one output step at most.
        assert np.abs(np.rint(fast(x) / scale).astype(np.int64) + zp - want).max() <= 1


@pytest.mark.parametrize("case", sorted(_WRITTEN))
def test_explicit_padding_fp32_matches_the_float_reference(edgetpu, case):
    graph = _padded_graph(case)
    lowered = lower(graph, "fp32")
    assert {op: n for op, n in lowered.op_counts.items() if op != "TRANSPOSE"} == _WRITTEN[case]
    model = compile_graph(edgetpu, graph, CompileOptions(device=DEV, precision="fp32"))
    for x in _batches(3, 2):
        np.testing.assert_allclose(model(x), run_graph(graph, x), rtol=1e-5, atol=1e-5)


def test_avg_pool_excluding_padding_is_refused_by_the_node():
    graph = Graph((TensorSpec("x", (1, 3, HW, HW), "float32"),),
                  (Node("p", "avg_pool2d", ("x",), "y", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1),
                                                           "count_include_pad": False}),), ("y",))
    with pytest.raises(UnsupportedOperationError, match=r"'p' \(avg_pool2d.*count_include_pad=False.*cpu:0"):
        lower(graph, "fp32")
