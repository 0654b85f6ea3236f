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
from neurenix_edgetpu.compiled import compile_graph
from neurenix_edgetpu.lowering import lower

from neurenix_core.device import Device
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.quantization import calibrate
from neurenix_core.graph.reference.run import run_graph, run_quantized

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
    with pytest.raises(UnsupportedOperationError, match=r"'p' \(avg_pool2d.*count_include_pad=False.*count_include_pad=True"):
        lower(graph, "fp32")


def test_an_int8_model_with_a_node_the_writer_refuses_runs_the_rest_on_the_device():
    """The refused node (an avg pool excluding its padding) goes to cpu:0 on the integer
    reference, the conv before it and the linear after it stay on edgetpu:0, the report names
    the node and the plugin's reason, and the result is the all-CPU integer model's."""
    import warnings

    import neurenix_core as nx

    rng = np.random.default_rng(5)
    conv = {"in_channels": 3, "out_channels": 4, "kernel_size": (3, 3), "groups": 1, "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    graph = Graph((TensorSpec("x", (4, 3, HW, HW), "float32"),), (
        Node("conv", "conv2d", ("x",), "c", conv, _conv_params(rng, 4, 3, 3)),
        Node("act", "relu", ("c",), "r"),
        Node("p", "avg_pool2d", ("r",), "p", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "count_include_pad": False}),
        Node("flat", "flatten", ("p",), "f", {"start_dim": 1}),
        Node("head", "linear", ("f",), "y", {}, {"weight": rng.normal(0, 0.1, (5, 4 * 8 * 8)).astype(np.float32),
                                                 "bias": rng.normal(0, 0.1, 5).astype(np.float32)}),
    ), ("y",))
    calibration = [rng.standard_normal((4, 3, HW, HW)).astype(np.float32) for _ in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = nx.compile(graph, device="edgetpu:0", quantize="int8", calibration=calibration, progress=False)
    placement = compiled.placement
    assert [(o.node, o.op) for o in placement.off_device] == [("p", "avg_pool2d")]
    assert "plugin edgetpu cannot lower it" in placement.off_device[0].reason and "count_include_pad" in placement.off_device[0].reason
    assert next([n.op for n in s.nodes] for s in placement.segments if s.on_device)[0] == "conv2d"
    assert any("1 node on cpu:0: avg_pool2d" in str(w.message) for w in caught)
    step = float(compiled.plan.activations["y"].scale[0])
    want = run_quantized(compiled.graph, compiled.plan, calibration[2])
    assert np.abs(compiled(calibration[2]).numpy() - want).max() <= 1.0 * step + 1e-6
    with nx.fallback_policy("error"), pytest.raises(nx.CompilationError, match=r"node 'p' \(op avg_pool2d\): plugin edgetpu cannot lower it"):
        nx.compile(graph, device="edgetpu:0", quantize="int8", calibration=calibration, progress=False)


# ---------------------------------------------------------------------- imported torch CNNs
torch = pytest.importorskip("torch")
tnn = torch.nn
F = torch.nn.functional

IMAGE = 64
BATCH = 100


class _BasicBlock(tnn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 conv + BN, a 1x1 conv + BN shortcut where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False), tnn.BatchNorm2d(cout)
        self.conv2, self.bn2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False), tnn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class _ResNet18ish(tnn.Module):
    """ResNet-18's stem (7x7 s2 p3, BN, ReLU, max pool k3 s2 p1), three basic blocks, global pool, fc."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.bn1 = tnn.Conv2d(3, width, 7, 2, 3, bias=False), tnn.BatchNorm2d(width)
        self.maxpool = tnn.MaxPool2d(3, 2, 1)
        self.layers = tnn.Sequential(_BasicBlock(width, width, 1), _BasicBlock(width, 2 * width, 2), _BasicBlock(2 * width, 4 * width, 2))
        self.avgpool, self.fc = tnn.AdaptiveAvgPool2d(1), tnn.Linear(4 * width, classes)

    def forward(self, x: Any) -> Any:
        x = self.layers(self.maxpool(F.relu(self.bn1(self.conv1(x)))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class _InvertedResidual(tnn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise (stride 1 or 2), 1x1 project, ReLU6, residual."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = tnn.Sequential(
            tnn.Conv2d(cin, hidden, 1, bias=False), tnn.BatchNorm2d(hidden), tnn.ReLU6(),
            tnn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), tnn.BatchNorm2d(hidden), tnn.ReLU6(),
            tnn.Conv2d(hidden, cout, 1, bias=False), tnn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        y = self.body(x)
        return x + y if self.residual else y


class _MobileNetV2ish(tnn.Module):
    """A MobileNetV2 written as TF-ported ones are: ``F.pad`` (bottom/right) then a stride-2 VALID stem."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem, self.bn = tnn.Conv2d(3, 8, 3, 2, 0, bias=False), tnn.BatchNorm2d(8)
        self.blocks = tnn.Sequential(_InvertedResidual(8, 8, 1, 1), _InvertedResidual(8, 12, 2, 4),
                                     _InvertedResidual(12, 12, 1, 4), _InvertedResidual(12, 16, 2, 4))
        self.head, self.head_bn = tnn.Conv2d(16, 32, 1, bias=False), tnn.BatchNorm2d(32)
        self.fc = tnn.Linear(32, classes)

    def forward(self, x: Any) -> Any:
        x = F.relu6(self.bn(self.stem(F.pad(x, (0, 1, 0, 1)))))
        x = F.relu6(self.head_bn(self.head(self.blocks(x))))
        return self.fc(x.mean((2, 3)))


def _images(rng: np.random.Generator, n: int) -> np.ndarray:
    """Image-like inputs: smooth (8x8 noise, upsampled) with a colour cast per image. White noise
    would make every global-pooled feature nearly constant, and the model one-class."""
    x = rng.standard_normal((n, 3, 8, 8)).repeat(IMAGE // 8, 2).repeat(IMAGE // 8, 3)
    return (x + rng.standard_normal((n, 3, 1, 1))).astype(np.float32)


def _trained_statistics(model: Any, seed: int) -> Any:
    """Re-estimate BatchNorm statistics (a cumulative average over a few batches in train mode)
    and centre the classifier on the mean feature, as a trained model's would be: a random one
    otherwise predicts one class, and agreement would mean nothing."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    for m in model.modules():
        if isinstance(m, tnn.BatchNorm2d):
            m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.from_numpy(_images(rng, 64)))
    model.eval()
    feats: list[Any] = []
    hook = model.fc.register_forward_hook(lambda mod, inp, out: feats.append(inp[0]))
    with torch.no_grad():
        model(torch.from_numpy(_images(rng, 256)))
        model.fc.bias.copy_(-(model.fc.weight @ feats[0].mean(0)))
    hook.remove()
    return model


_MODELS = {"resnet18": _ResNet18ish, "mobilenetv2": _MobileNetV2ish}


@pytest.mark.parametrize("name", sorted(_MODELS))
def test_imported_cnn_int8_runs_whole_on_edgetpu_and_agrees_like_cpu(name):
    import neurenix_core as nx

    torch.manual_seed(0)
    model = _trained_statistics(_MODELS[name](), seed=1)
    graph = nx.nn.from_torch(model, (torch.zeros(BATCH, 3, IMAGE, IMAGE),))
    rng = np.random.default_rng(2)
    calibration = [_images(rng, BATCH) for _ in range(2)]  # 200 inputs
    edge = nx.compile(graph, device="edgetpu", quantize="int8", calibration=calibration, progress=False)
    # The core's integer reference (TFLite arithmetic, what the edgetpu writer follows): cpu:0's
    # fastest runtime may round fewer values (its OpenVINO int8 leaves out roundings inside fused
    # activation chains, issue #44) and agree more with float than either.
    cpu = nx.compile(graph, device="cpu:0", quantize="int8", calibration=calibration, runtime="numpy", progress=False)

    # Every node on the device: the padded stem pool and F.pad + conv included, none on cpu:0.
    placement = edge.placement
    assert placement.off_device == () and placement.nodes == {"edgetpu:0": len([n for n in edge.graph.nodes if n.op != "constant"])}
    emulated = " (emulated: LiteRT on the host CPU)" if Device("edgetpu:0").emulated else ""
    assert f"edgetpu:0{emulated} runs" in str(placement) and "partitioned" not in edge.summary
    ops = Counter(edge.native((BATCH, 3, IMAGE, IMAGE)).info.ops)
    convs = [n for n in edge.graph.nodes if n.op == "conv2d"]
    depthwise = sum(1 for n in convs if int(n.attrs.get("groups", 1)) > 1)
    assert ops["CONV_2D"] == len(convs) - depthwise and ops["DEPTHWISE_CONV_2D"] == depthwise
    if name == "resnet18":
        # stem 7x7 s2 p3 and max pool k3 s2 p1 are not SAME on 64x64: explicit PADs (zeros: the
        # pool reads a ReLU), then VALID; the 3x3 p1 convolutions are SAME.
        assert ops["MAX_POOL_2D"] == 1 and ops["PAD"] >= 2 and "PADV2" not in ops
    else:
        assert depthwise == 4 and ops["PAD"] >= 1  # F.pad is a PAD in NHWC order ...
        assert ops["TRANSPOSE"] == 1  # ... so the only TRANSPOSE is the input edge

    agree_edge = agree_cpu = 0
    predicted: set[int] = set()
    for _ in range(500 // BATCH):
        x = _images(rng, BATCH)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy().argmax(1)
        predicted |= set(want.tolist())
        agree_edge += int((edge(x).numpy().argmax(1) == want).sum())
        agree_cpu += int((cpu(x).numpy().argmax(1) == want).sum())
    assert len(predicted) > 1
    # Measured (seeds above, 10 classes each): resnet18 edgetpu 0.946 / cpu 0.948, mobilenetv2
    # 0.880 / 0.876. Any difference is int8 rounding, not padding (the padded layers are
    # bit-exact, tests above): XNNPACK requantizes in float. (A residual ADD -> ReLU takes the
    # ReLU's parameters in calibration, calibration.RELU_FUSABLE, so the reference rounds once
    # as the writer's fused ADD does: on LiteRT's reference kernels the ResNet's logits equal
    # run_quantized for 99.9% of elements, max 1 step; it was 3 steps before.)
    assert agree_edge / 500 >= agree_cpu / 500 - 0.02, (agree_edge / 500, agree_cpu / 500)


def test_a_scalar_constant_quantizes(edgetpu):
    # A 0-d constant (x * 2.0 from torch) reached quantize() as a NumPy scalar, which the in-place
    # rounding rejected with a TypeError: the whole int8 compile failed.
    rng = np.random.default_rng(5)
    nodes = (
        Node("fc", "linear", ("x",), "h", {}, {"weight": rng.standard_normal((6, 4)).astype(np.float32),
                                               "bias": rng.standard_normal(6).astype(np.float32)}),
        Node("r", "reshape", ("h",), "r", {"shape": (2, 3, 2)}),  # keeps the mul from folding into the linear
        Node("k", "constant", (), "k", {}, {"value": np.asarray(2.0, np.float32)}),
        Node("mul", "mul", ("r", "k"), "y"),
    )
    graph = Graph((TensorSpec("x", (2, 4), "float32"),), nodes, ("y",))
    batches = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(8)]
    plan = calibrate(graph, batches, progress=False)
    out = plan.activations["y"]
    scale, zp = np.float32(out.scale[0]), int(out.zero_point[0])
    exact = compile_graph(edgetpu, graph, CompileOptions(device=DEV, precision="int8", quantization=plan, extra={"kernels": "reference"}))
    for x in batches:
        want = run_quantized(graph, plan, x, dequantize=False)
        np.testing.assert_array_equal(np.rint(exact(x) / scale).astype(np.int64) + zp, want)
