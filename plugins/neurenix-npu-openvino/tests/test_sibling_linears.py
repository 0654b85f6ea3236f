"""Weight-planned linear layers that read one value lower as one FullyConnected and a split
(sibling_linears.py): the stacked layer computes what the separate layers compute."""

from __future__ import annotations

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

from neurenix_npu_openvino.lowering import lower_graph
from neurenix_npu_openvino.sibling_linears import sibling_groups

from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.quantization.weights import dequantized, weight_plan
from neurenix_core.graph.reference.run import run_graph

FP32_REL = 1e-5  # float32 rounding of the products, relative to the largest output


def _attention_like() -> Graph:
    """q, k, v (one with a bias) read ``x``; gate and up read ``h``; out reads their product."""
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    nodes = (Node("q", "linear", ("x",), "q:o", {}, {"weight": w(128, 128)}),
             Node("k", "linear", ("x",), "k:o", {}, {"weight": w(64, 128), "bias": w(64)}),
             Node("v", "linear", ("x",), "v:o", {}, {"weight": w(64, 128)}),
             Node("kv", "concat", ("k:o", "v:o"), "kv:o", {"axis": -1}),
             Node("h", "add", ("q:o", "kv:o"), "h:o"),
             Node("gate", "linear", ("h:o",), "g:o", {}, {"weight": w(192, 128)}),
             Node("up", "linear", ("h:o",), "u:o", {}, {"weight": w(192, 128)}),
             Node("m", "mul", ("g:o", "u:o"), "m:o"),
             Node("out", "linear", ("m:o",), "y", {}, {"weight": w(32, 192)}))
    return Graph((TensorSpec("x", (3, 128)),), nodes, ("y", "k:o"))


def _matmuls(model: object) -> int:
    return sum(op.get_type_name() == "MatMul" for op in model.get_ops())  # type: ignore[attr-defined]


@pytest.mark.parametrize("scheme", ["int8-weights", "int4-weights", "int4-weights-int8-activations"])
def test_siblings_lower_as_one_matmul_with_the_separate_layers_values(scheme: str) -> None:
    graph = _attention_like()
    plan = weight_plan(graph, scheme)
    groups = {name: tuple(n.name for n in group) for name, group in sibling_groups(graph, plan).items()}
    # q/k/v and gate/up each share an input, width and layout (int4 keeps the last layer int8)
    assert groups["q"] == ("q", "k", "v") and groups["gate"] == ("gate", "up") and "out" not in groups
    model = lower_graph(graph, plan, device="cpu:0")
    assert _matmuls(model) == 3  # 5 + 1 linear layers before
    group = 32 if scheme.endswith("activations") else 0
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": group})
    x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
    got = compiled(x)
    want = run_graph(dequantized(graph, plan), x)
    for k, name in enumerate(graph.outputs):  # the output head and one member of the group (k, with its bias)
        ref = np.asarray(want[k])
        assert float(np.abs(got[k] - ref).max()) <= FP32_REL * float(np.abs(ref).max()), name


def test_float_layers_and_unlike_layouts_stay_apart() -> None:
    """No plan: the float weights stay OpenVINO constants over the graph's arrays (no stacked
    copy); a layer of another layout (int4 keeps the last layer int8) is not stacked with int4 ones."""
    graph = _attention_like()
    assert sibling_groups(graph, None) == {}
    head = Node("head", "linear", ("m:o",), "z", {}, {"weight": np.ones((16, 192), np.float32)})
    two_heads = Graph(graph.inputs, (*graph.nodes, head), ("y", "z"))
    groups = sibling_groups(two_heads, weight_plan(two_heads, "int4-weights"))
    assert "head" not in groups and "out" not in groups  # out is int4 (group 64 of 192), head int8 per channel
