"""Core Graph -> torch.nn.Module lowering, checked against the core's float64 reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_cuda_tc.compiled import compile_graph
from neurenix_cuda_tc.lowering import lower_graph

import neurenix_core as nx
from neurenix_core.errors import CompilationError
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

RNG = np.random.default_rng(7)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def cnn_graph() -> Graph:
    return Graph(
        inputs=(TensorSpec("x", (2, 3, 8, 8)),),
        nodes=(
            Node("conv", "conv2d", ("x",), "c", {"in_channels": 3, "out_channels": 6, "kernel_size": (3, 3), "stride": (1, 1),
                                                  "padding": (1, 1), "dilation": (1, 1), "groups": 1}, {"weight": _w(6, 3, 3, 3), "bias": _w(6)}),
            Node("bn", "batch_norm2d", ("c",), "b", {"num_features": 6, "eps": 1e-5},
                 {"weight": _w(6) + 1, "bias": _w(6), "running_mean": _w(6), "running_var": np.abs(_w(6)) + 0.5}),
            Node("act", "relu", ("b",), "r"),
            Node("skip", "add", ("r", "b"), "s"),
            Node("pool", "max_pool2d", ("s",), "p", {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0)}),
            Node("gap", "adaptive_avg_pool2d", ("p",), "g", {"output_size": (2, 2)}),
            Node("flat", "flatten", ("g",), "f", {"start_dim": 1, "end_dim": -1}),
            Node("fc", "linear", ("f",), "l", {"in_features": 24, "out_features": 5}, {"weight": _w(5, 24), "bias": _w(5)}),
            Node("gelu", "gelu", ("l",), "y1", {"approximate": "tanh"}),
            Node("sm", "softmax", ("y1",), "y", {"axis": -1}),
        ),
        outputs=("y",),
    )


def attention_graph() -> Graph:
    e = 16
    return Graph(
        inputs=(TensorSpec("x", (2, 5, e)),),
        nodes=(
            Node("ln", "layer_norm", ("x",), "n", {"normalized_shape": (e,), "eps": 1e-5}, {"weight": _w(e) + 1, "bias": _w(e)}),
            Node("attn", "multihead_attention", ("n", "n", "n"), "a", {"embed_dim": e, "num_heads": 2, "batch_first": True},
                 {"in_proj_weight": _w(3 * e, e), "in_proj_bias": _w(3 * e), "out_proj_weight": _w(e, e), "out_proj_bias": _w(e)}),
            Node("mul", "mul", ("a", "x"), "m"),
            Node("th", "tanh", ("m",), "t"),
            Node("sg", "sigmoid", ("t",), "y"),
        ),
        outputs=("y",),
    )


@pytest.mark.parametrize("make", [cnn_graph, attention_graph])
def test_lowered_module_matches_the_float64_reference(make: Any) -> None:
    import torch

    graph = make()
    x = RNG.standard_normal(graph.inputs[0].shape).astype(np.float32)
    with torch.no_grad():
        out = lower_graph(graph)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, run_graph(graph, x), rtol=1e-4, atol=1e-5)


def test_compile_hook_runs_on_the_emulated_device_and_says_so(cuda: Any) -> None:
    import torch

    graph = cnn_graph()
    x = RNG.standard_normal(graph.inputs[0].shape).astype(np.float32)
    model = compile_graph(cuda, graph, CompileOptions(device=nx.Device("cuda", 0)))
    assert "emulated" in model.summary and "fp32" in model.summary
    out = model(torch.from_numpy(x))
    assert out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), run_graph(graph, x), rtol=1e-4, atol=1e-5)
    bf16 = compile_graph(cuda, graph, CompileOptions(device=nx.Device("cuda", 0), precision="bf16"))
    assert "bfloat16" in bf16.summary
    np.testing.assert_allclose(bf16(torch.from_numpy(x)).numpy(), run_graph(graph, x), atol=3e-2)


def test_nn_model_lowers_and_matches_eager(cuda: Any) -> None:
    import torch
    from neurenix_cuda_tc.models import nx_cnn

    model = nx_cnn()
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    eager = model(nx.asarray(x)).numpy()
    graph = model.to_graph((2, 3, 8, 8))
    with torch.no_grad():
        out = lower_graph(graph)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, eager, rtol=1e-4, atol=1e-5)


def test_quantization_plan_is_lowered_as_fake_quant(cuda: Any) -> None:
    import torch

    from neurenix_core.graph import quantization as Q

    graph = Graph(
        inputs=(TensorSpec("x", (4, 8)),),
        nodes=(Node("fc", "linear", ("x",), "h", {"in_features": 8, "out_features": 6}, {"weight": _w(6, 8), "bias": _w(6)}),
               Node("act", "relu", ("h",), "y")),
        outputs=("y",),
    )
    data = [RNG.standard_normal((4, 8)).astype(np.float32) for _ in range(4)]
    plan = Q.calibrate(graph, data, progress=False)
    compiled = compile_graph(cuda, graph, CompileOptions(device=nx.Device("cuda", 0), precision="int8", quantization=plan))
    assert "int8" in compiled.summary
    out = compiled(torch.from_numpy(data[0])).numpy()
    np.testing.assert_allclose(out, run_graph(graph, data[0], plan=plan), atol=1e-5)
    # Quantized outputs land on the activation grid: few distinct values, unlike fp32.
    fp32 = run_graph(graph, data[0])
    assert not np.allclose(out, fp32, atol=1e-6)


def test_bad_graphs_raise_naming_the_node(cuda: Any) -> None:
    broken = Graph(
        inputs=(TensorSpec("x", (1, 4)),),
        nodes=(Node("fc1", "linear", ("x",), "y", {"in_features": 4, "out_features": 2}, {"weight": _w(3, 4)}),),
        outputs=("y",),
    )
    with pytest.raises(CompilationError, match="fc1.*shape"):
        lower_graph(broken)
    import torch

    # in_features/out_features are optional in the opset: the weight's shape decides.
    x = _w(1, 4)
    no_attr = Graph(inputs=(TensorSpec("x", (1, 4)),), nodes=(Node("fc2", "linear", ("x",), "y", {}, {"weight": _w(2, 4)}),), outputs=("y",))
    np.testing.assert_allclose(lower_graph(no_attr)(torch.from_numpy(x)).detach().numpy(), run_graph(no_attr, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(CompilationError, match="QuantizationPlan"):
        compile_graph(cuda, cnn_graph(), CompileOptions(device=nx.Device("cuda", 0), precision="int8"))
