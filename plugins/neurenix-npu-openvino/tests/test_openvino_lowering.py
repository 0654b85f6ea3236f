"""Core Graph -> OpenVINO model, compiled and run by the real OpenVINO runtime (emulated npu)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.compiled import compile_graph
from neurenix_npu_openvino.lowering import LOWERED_OPS, lower_graph

from neurenix_core.errors import CompilationError, QuantizationError, ShapeError, UnsupportedDTypeError
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec


def _compile(npu: Any, graph: Graph, precision: str | None = "fp32", **extra: Any) -> Any:
    return compile_graph(npu, graph, CompileOptions(device="npu:0", precision=precision, extra=extra))


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-12))


def test_every_core_graph_op_has_a_lowering() -> None:
    from neurenix_core.graph.ir import OPS

    assert set(OPS) <= LOWERED_OPS


def test_mlp_fp32_matches_the_float64_reference(npu: Any, kit: Any) -> None:
    graph = kit.mlp(batch=8)
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    model = _compile(npu, graph)
    got = model(x)
    assert got.dtype == np.float32 and got.shape == (8, 10)
    assert _rel_err(got, kit.reference(graph, x)) <= 1e-5


def test_cnn_fp32_matches_the_float64_reference(npu: Any, kit: Any) -> None:
    graph = kit.cnn(batch=4)
    x = np.random.default_rng(4).standard_normal((4, 3, 32, 32)).astype(np.float32)
    model = _compile(npu, graph)
    assert _rel_err(model(x), kit.reference(graph, x)) <= 1e-5


def test_fp32_really_runs_in_f32_not_the_cpu_bf16_default(npu: Any, kit: Any) -> None:
    model = _compile(npu, kit.cnn(batch=2))
    layers = model.compute_layers()
    assert layers, "no convolution / fully connected layer in the runtime graph"
    assert {p.lower() for p in layers.values()} == {"f32"}, layers
    assert "INFERENCE_PRECISION_HINT=f32" in model.summary
    assert "emulating npu" in model.summary


# fp16 compiles where OpenVINO reports FP16 (Intel Xeon with AMX-FP16/AVX512-FP16) and is refused,
# naming the capabilities, where it does not (AMD EPYC). "no FP16" takes FP16 out of our record of
# OPTIMIZATION_CAPABILITIES (never OpenVINO's), so the refusal is tested on every machine.
@pytest.mark.parametrize("fp16", ["reported", "no FP16"])
def test_fp16_follows_the_reported_capability(npu: Any, kit: Any, monkeypatch: pytest.MonkeyPatch, fp16: str) -> None:
    from neurenix_core.testing.reference import TOLERANCES

    if fp16 == "no FP16":
        monkeypatch.setattr(npu, "capabilities", tuple(c for c in npu.capabilities if c != "FP16"))
    graph = kit.cnn(batch=2, seed=5 if fp16 == "reported" else 6)
    if "FP16" not in npu.capabilities:
        assert "fp16" not in npu.precisions()
        with pytest.raises(CompilationError, match=r"npu:0 cannot run fp16: OpenVINO reports .*\(no FP16\)") as refused:
            _compile(npu, graph, "fp16")
        remedy = str(refused.value).split("Use precision=", 1)[1]
        assert "'fp16'" not in remedy and "'fp32'" in remedy  # only what the device reports is suggested
        return
    assert "fp16" in npu.precisions()
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    model = _compile(npu, graph, "fp16")
    assert "INFERENCE_PRECISION_HINT=f16" in model.summary
    rtol, _ = TOLERANCES["float16"]
    assert _rel_err(model(x), kit.reference(graph, x)) < 2 * rtol  # relative to max |output|, over a 3-conv CNN


def test_compiled_models_are_cached_by_graph_shape_and_precision(npu: Any, kit: Any) -> None:
    graph = kit.mlp(batch=3, seed=11)
    first = _compile(npu, graph)
    again = _compile(npu, graph)
    other_shape = _compile(npu, graph.with_input_shapes((5, 32)))
    assert again.compiled is first.compiled
    assert other_shape.compiled is not first.compiled
    if "fp16" in npu.precisions():
        assert _compile(npu, graph, "fp16").compiled is not first.compiled


def test_wrong_input_shape_names_the_expected_shape(npu: Any, kit: Any) -> None:
    model = _compile(npu, kit.mlp(batch=4))
    with pytest.raises(ShapeError, match=r"must have shape \(4, 32\), got \(4, 31\)"):
        model(np.zeros((4, 31), np.float32))
    with pytest.raises(UnsupportedDTypeError, match="must be float32"):
        model(np.zeros((4, 32), np.float64))


def test_graph_whose_shapes_do_not_fit_a_layer_names_the_layer(npu: Any, kit: Any) -> None:
    graph = kit.cnn(batch=1).with_input_shapes((1, 4, 32, 32))  # 4 channels into conv1 (3)
    with pytest.raises(ShapeError, match=r"layer 'conv1' \(conv2d\) expects NCHW input with 3 channels"):
        lower_graph(graph)


def test_int16_where_the_device_cannot_is_a_clear_error(npu: Any, kit: Any) -> None:
    graph = kit.mlp(batch=2)
    plan = kit.minmax_plan(graph, [np.ones((2, 32), np.float32)], bits=16)
    if "int16" in npu.precisions():  # asked of OpenVINO, never assumed: no CPU seen here reports INT16
        pytest.skip(f"OpenVINO reports INT16 on this CPU ({', '.join(npu.capabilities)}): int16 compiles here")
    with pytest.raises(QuantizationError, match=r"npu:0 cannot run int16.*no INT16.*precision=.*'int8' on this device"):
        compile_graph(npu, graph, CompileOptions(device="npu:0", precision="int16", quantization=plan))


def test_unknown_precision_and_goal_are_rejected(npu: Any, kit: Any) -> None:
    with pytest.raises(CompilationError, match="precision 'fp8'"):
        _compile(npu, kit.mlp(), "fp8")
    with pytest.raises(CompilationError, match="optimize_for='fastest'"):
        _compile(npu, kit.mlp(), "fp32", optimize_for="fastest")


def _single(op: str, x_shape: tuple[int, ...], attrs: dict[str, Any] | None = None, params: dict[str, Any] | None = None, inputs: int = 1) -> Graph:
    names = tuple(f"x{i}" for i in range(inputs))
    specs = tuple(TensorSpec(n, x_shape) for n in names)
    return Graph(specs, (Node("layer", op, names, "y", attrs or {}, params or {}),), ("y",))


@pytest.mark.parametrize(
    ("op", "attrs", "torch_fn"),
    [
        ("gelu", {"approximate": "none"}, lambda F, x: F.gelu(x)),
        ("gelu", {"approximate": "tanh"}, lambda F, x: F.gelu(x, approximate="tanh")),
        ("sigmoid", {}, lambda F, x: F.sigmoid(x)),
        ("tanh", {}, lambda F, x: F.tanh(x)),
        ("softmax", {"axis": 1}, lambda F, x: F.softmax(x, dim=1)),
        ("avg_pool2d", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1), "count_include_pad": False},
         lambda F, x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
        ("max_pool2d", {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1)}, lambda F, x: F.max_pool2d(x, 3, 2, 1)),
        ("adaptive_avg_pool2d", {"output_size": (3, 2)}, lambda F, x: F.adaptive_avg_pool2d(x, (3, 2))),
        ("flatten", {"start_dim": 1, "end_dim": 2}, lambda F, x: x.flatten(1, 2)),
    ],
)
def test_single_layers_match_pytorch_float64(npu: Any, op: str, attrs: dict[str, Any], torch_fn: Any) -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(6).standard_normal((2, 4, 7, 9)).astype(np.float32)
    want = torch_fn(torch.nn.functional, torch.from_numpy(x).double()).numpy()
    got = _compile(npu, _single(op, x.shape, attrs))(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_layer_norm_grouped_conv_and_residual_add_match_pytorch(npu: Any) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((8, 2, 3, 3)).astype(np.float32)
    conv = {"in_channels": 4, "out_channels": 8, "kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1), "dilation": (2, 2), "groups": 2}
    gamma, beta = rng.standard_normal((6, 6)).astype(np.float32), rng.standard_normal((6, 6)).astype(np.float32)
    nodes = (
        Node("ln", "layer_norm", ("x",), "ln", {"normalized_shape": (6, 6), "eps": 1e-5}, {"weight": gamma, "bias": beta}),
        Node("conv", "conv2d", ("ln",), "conv", {**conv, "padding": (2, 2)}, {"weight": w}),
        Node("sum", "add", ("conv", "conv"), "sum"),
        Node("prod", "mul", ("sum", "conv"), "prod"),
        Node("drop", "dropout", ("prod",), "drop", {"p": 0.5}),
    )
    got = _compile(npu, Graph((TensorSpec("x", x.shape),), nodes, ("drop",)))(x)
    t = torch.from_numpy(x).double()
    ln = torch.nn.functional.layer_norm(t, (6, 6), torch.from_numpy(gamma).double(), torch.from_numpy(beta).double(), 1e-5)
    c = torch.nn.functional.conv2d(ln, torch.from_numpy(w).double(), None, 1, 2, 2, 2)
    np.testing.assert_allclose(got, ((c + c) * c).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_pytorch(npu: Any, batch_first: bool) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=batch_first).double().eval()
    shape = (2, 5, 16) if batch_first else (5, 2, 16)
    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    params = {k: v.detach().float().numpy() for k, v in
              {"in_proj_weight": mha.in_proj_weight, "in_proj_bias": mha.in_proj_bias,
               "out_proj_weight": mha.out_proj.weight, "out_proj_bias": mha.out_proj.bias}.items()}
    graph = _single("multihead_attention", shape, {"embed_dim": 16, "num_heads": 4, "batch_first": batch_first}, params)
    t = torch.from_numpy(x).double()
    want = mha(t, t, t, need_weights=False)[0].detach().numpy()
    np.testing.assert_allclose(_compile(npu, graph)(x), want, rtol=1e-4, atol=1e-5)


def test_large_weights_are_shared_with_the_graph_not_copied(npu: Any, kit: Any) -> None:
    """A weight of 64 KiB or more becomes a Constant over the graph's own array (read-only, as
    the weights of an imported model are), so the ov.Model holds no copy; small ones are copied."""
    rng = np.random.default_rng(0)
    big, small = rng.standard_normal((256, 128)).astype(np.float32), rng.standard_normal((4, 256)).astype(np.float32)
    big.flags.writeable = False
    graph = Graph((TensorSpec("x", (2, 128)),), (
        Node("fc1", "linear", ("x",), "h", {}, {"weight": big}),
        Node("fc2", "linear", ("h",), "y", {}, {"weight": small}),
    ), ("y",))
    model = lower_graph(graph, None, device="npu:0")
    consts = [op for op in model.get_ordered_ops() if op.get_type_name() == "Constant" and op.get_output_size() == 1]
    shared = [c for c in consts if np.shares_memory(c.data, big)]
    assert len(shared) == 1 and not any(np.shares_memory(c.data, small) for c in consts)
    x = rng.standard_normal((2, 128)).astype(np.float32)
    got = _compile(npu, graph)(x)
    got = got[0] if isinstance(got, (tuple, list)) else got
    np.testing.assert_allclose(np.asarray(got.numpy() if hasattr(got, "numpy") else got), x @ big.T @ small.T, rtol=1e-4, atol=1e-4)
