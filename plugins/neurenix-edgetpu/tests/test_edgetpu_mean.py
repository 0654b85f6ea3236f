"""int8 global average pool: LiteRT's MEAN with the plan's own output parameters for the mean,
bit-exact against the core's integer reference (``qmath.integer_mean``)."""

from __future__ import annotations

import numpy as np
import pytest
from neurenix_edgetpu.compiled import compile_graph

from neurenix_core.device import Device
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec


def _pool_graph(hw: int) -> Graph:
    rng = np.random.default_rng(hw)
    conv = {"in_channels": 3, "out_channels": 8, "kernel_size": (3, 3), "groups": 1, "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    nodes = (
        Node("c1", "conv2d", ("x",), "a", conv, {"weight": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
                                                  "bias": rng.normal(0, 0.1, 8).astype(np.float32)}),
        Node("r1", "relu", ("a",), "b"),
        Node("gp", "adaptive_avg_pool2d", ("b",), "c", {"output_size": (1, 1)}),
        Node("fl", "flatten", ("c",), "d", {"start_dim": 1, "end_dim": -1}),
        Node("fc", "linear", ("d",), "e", {"in_features": 8, "out_features": 10},
             {"weight": rng.normal(0, 0.3, (10, 8)).astype(np.float32), "bias": rng.normal(0, 0.1, 10).astype(np.float32)}),
    )
    return Graph((TensorSpec("x", (1, 3, hw, hw), "float32"),), nodes, ("e",))


@pytest.mark.parametrize("hw", [8, 12])  # 64 and 144 elements: a power of two and not
def test_int8_mean_requantizes_bit_exact_with_core_reference(edgetpu, hw):
    from neurenix_core.graph.quantization import calibrate
    from neurenix_core.graph.reference.run import run_quantized

    graph = _pool_graph(hw)
    rng = np.random.default_rng(7)
    batches = [rng.normal(size=(1, 3, hw, hw)).astype(np.float32) for _ in range(16)]
    plan = calibrate(graph, batches, progress=False)
    # the mean has its own, finer parameters: it is not a pass-through pool
    assert float(plan.activations["c"].scale[0]) < float(plan.activations["b"].scale[0]) / 2
    options = CompileOptions(device=Device("edgetpu", 0), precision="int8", quantization=plan, extra={"kernels": "reference"})
    model = compile_graph(edgetpu, graph, options)
    assert "MEAN" in model.config["cpu_kernel_ops"]
    out = plan.activations["e"]
    scale, zp = np.float32(out.scale[0]), int(out.zero_point[0])
    for x in batches:
        want = run_quantized(graph, plan, x, dequantize=False)
        np.testing.assert_array_equal(np.rint(model(x) / scale).astype(np.int64) + zp, want)


def test_int8_global_avg_pool_runs_on_the_device_in_one_segment(edgetpu):
    """ONNX's GlobalAveragePool (core op ``global_avg_pool``, which the plugin does not declare)
    ends almost every exported classifier. In an int8 model it is decomposed into the one
    ``reduce_mean`` it stands for (no new value the plan lacks), so the model stays one edgetpu
    segment instead of two around a cpu:0 hop."""
    import neurenix_core as nx
    from neurenix_core.graph.reference.run import run_quantized

    plain = _pool_graph(8)
    nodes = tuple(Node("gp", "global_avg_pool", ("b",), "c") if n.name == "gp" else n for n in plain.nodes)
    graph = Graph(plain.inputs, nodes, plain.outputs)
    rng = np.random.default_rng(3)
    batches = [rng.normal(size=(1, 3, 8, 8)).astype(np.float32) for _ in range(16)]
    compiled = nx.compile(graph, device="edgetpu:0", quantize="int8", calibration=batches, progress=False)
    placement = compiled.placement
    assert placement.off_device == ()
    assert [s.on_device for s in placement.segments] == [True]
    assert "reduce_mean" in [n.op for s in placement.segments for n in s.nodes]
    plan = compiled.plan
    for x in batches[:4]:
        want = run_quantized(graph, plan, x)
        np.testing.assert_allclose(compiled(x).numpy(), want, atol=float(plan.activations["e"].scale[0]) * 1.01)
