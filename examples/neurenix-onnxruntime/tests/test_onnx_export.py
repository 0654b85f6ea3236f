"""The exporter (``onnx_export``): every opset op as ONNX, run by ONNX Runtime, and the round trip
graph -> ONNX -> nx.nn.from_onnx -> reference that checks the core's ONNX mapping both ways."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import opset_cases
import pytest
from neurenix_onnxruntime.onnx_export import GRAPH_OPS, MIN_OPSET, export
from neurenix_onnxruntime.plugin import GRAPH_DTYPES, neurenix_manifest
from neurenix_onnxruntime.plugin import GRAPH_OPS as DECLARED

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.opset.coverage import markdown
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.plugins.opnames import OPSET_NAMES

#: float32 ONNX Runtime vs the float64 reference: a few float32 roundings per op.
FP32_RTOL, FP32_ATOL = 1e-5, 1e-5
#: The round trip runs the reference on both sides; ONNX stores float attributes (clip bounds,
#: alpha, eps) and scalar constants in float32, so they come back rounded to float32.
ROUND_TRIP_RTOL, ROUND_TRIP_ATOL = 1e-6, 1e-7
CASES = list(opset_cases.every_op_case())
README = Path(__file__).resolve().parents[1] / "README.md"


def test_manifest_declares_every_op_the_exporter_takes() -> None:
    caps = neurenix_manifest().capabilities
    # The portable opset: ops added to the core's table later run on cpu:0 through the partitioner.
    assert set(caps.graph_ops) == set(DECLARED) == set(GRAPH_OPS) == set(OPSET_NAMES)
    assert caps.graph_dtypes == GRAPH_DTYPES == ("float32", "int64", "bool")
    assert opset_cases.COVERED >= set(OPSET_NAMES)


def _session(model: onnx.ModelProto) -> Any:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _feed(model: onnx.ModelProto, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {i.name: (x.astype(np.float32) if x.dtype.kind == "f" else x) for i, x in zip(model.graph.input, inputs)}


def _close(got: np.ndarray, want: np.ndarray, what: str, rtol: float, atol: float) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize(("case", "graph", "inputs"), CASES, ids=[c[0] for c in CASES])
def test_every_op_runs_in_onnxruntime_like_the_reference(case: str, graph: Any, inputs: list[np.ndarray]) -> None:
    model = export(graph)
    onnx.checker.check_model(model, full_check=True)
    want = run_graph(graph, *inputs)
    got = _session(model).run(None, _feed(model, inputs))[0]
    _close(got, want, case, FP32_RTOL, FP32_ATOL)


@pytest.mark.parametrize(("case", "graph", "inputs"), CASES, ids=[c[0] for c in CASES])
def test_every_op_round_trips_through_from_onnx(case: str, graph: Any, inputs: list[np.ndarray]) -> None:
    back = nn.from_onnx(export(graph)).to_graph()
    _close(np.asarray(run_graph(back, *inputs)), np.asarray(run_graph(graph, *inputs)), case, ROUND_TRIP_RTOL, ROUND_TRIP_ATOL)


def _zoo_case(name: str) -> tuple[Any, tuple[np.ndarray, ...]]:
    torch = pytest.importorskip("torch")
    import model_zoo as zoo

    rng = np.random.default_rng(4)
    if name == "bert":
        pytest.importorskip("transformers")
        ids, mask = rng.integers(0, 100, (2, 9)), np.ones((2, 9), np.int64)
        mask[1, 6:] = 0
        model = nn.from_torch(zoo.tiny_bert(), {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)})
        return model.to_graph(), (ids, mask)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
    return nn.from_torch(zoo.build(name), torch.from_numpy(x)).to_graph(), (x,)


@pytest.mark.parametrize("name", ["resnet_block", "mobilenetv3_block", "efficientnet_block", "vit", "bert"])
def test_zoo_models_round_trip_and_run_in_onnxruntime(name: str) -> None:
    graph, inputs = _zoo_case(name)
    model = export(graph, name=name)
    onnx.checker.check_model(model, full_check=True)
    want = run_graph(graph, *inputs)
    want = want if isinstance(want, tuple) else (want,)
    back = run_graph(nn.from_onnx(model).to_graph(), *inputs)
    back = back if isinstance(back, tuple) else (back,)
    ran = _session(model).run(None, _feed(model, list(inputs)))
    assert len(back) == len(ran) == len(want)
    for b, r, w in zip(back, ran, want):
        _close(np.asarray(b), w, f"{name} round trip", ROUND_TRIP_RTOL, ROUND_TRIP_ATOL)
        _close(r, w, f"{name} in ONNX Runtime", 1e-4, 1e-5)


def test_oldest_opset_is_written_and_checked() -> None:
    graph, inputs = _zoo_case("vit")
    model = export(graph, opset_version=MIN_OPSET)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == MIN_OPSET and not any(n.op_type == "Gelu" for n in model.graph.node)
    np.testing.assert_allclose(_session(model).run(None, _feed(model, list(inputs)))[0], run_graph(graph, *inputs), rtol=1e-4, atol=1e-5)
    with pytest.raises(nx.UnsupportedOperationError, match="opset 17"):
        export(graph, opset_version=16)


def test_readme_lists_the_generated_op_coverage() -> None:
    caps = neurenix_manifest().capabilities
    text = README.read_text()
    begin, end = "<!-- ops:begin ort -->", "<!-- ops:end -->"
    assert begin in text and end in text, "README.md lacks the generated ops section"
    section = text.split(begin, 1)[1].split(end, 1)[0]
    assert section.strip() == markdown("ort", caps.graph_ops, caps.graph_dtypes).strip(), (
        "README.md's ops section is stale: regenerate it with neurenix_core.graph.opset.coverage.markdown (see the README)"
    )
