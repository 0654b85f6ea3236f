"""``GraphModule.to_onnx`` / ``nx.nn.export_onnx``: the core's ONNX exporter writes a standard file
that onnx.checker accepts, ONNX Runtime runs, and ``nx.nn.from_onnx`` imports back, all with the
original model's results (docs/model-files.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

#: float32 everywhere; the file computes the same ops in another order (Gelu, fused MatMul+Add).
RTOL, ATOL = 1e-5, 1e-6


def _arrays(out: Any) -> list[np.ndarray]:
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[Any, list[np.ndarray]]]:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from model_zoo import build, tiny_bert

    rng = np.random.default_rng(1)
    mask = np.ones((2, 8), np.int64)
    mask[0, 6:] = 0
    return {
        "resnet_block": (nx.nn.from_torch(build("resnet_block"), torch.randn(2, 3, 16, 16)),
                         [rng.standard_normal((2, 3, 16, 16)).astype(np.float32)]),
        "bert": (nx.nn.from_torch(tiny_bert(), {"input_ids": torch.randint(0, 100, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.int64)}),
                 [rng.integers(0, 100, (2, 8)).astype(np.int64), mask]),
    }


@pytest.mark.parametrize("name", ["resnet_block", "bert"])
def test_exported_file_runs_in_onnxruntime_and_imports_back(models: Any, tmp_path: Path, name: str) -> None:
    model, inputs = models[name]
    want = _arrays(model(*inputs))
    path = model.to_onnx(tmp_path / f"{name}.onnx")
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    assert [i.name for i in proto.graph.input] == list(model.input_names)

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{name}: onnxruntime")

    back = nx.nn.from_onnx(str(path))
    assert back.input_names == model.input_names
    for g, w in zip(_arrays(back(*inputs)), want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f"{name}: from_onnx")


def test_shapes_fix_the_dynamic_axes(models: Any, tmp_path: Path) -> None:
    model, _ = models["resnet_block"]
    x = np.random.default_rng(2).standard_normal((5, 3, 16, 16)).astype(np.float32)
    path = nx.nn.export_onnx(model, tmp_path / "b5.onnx", (5, 3, 16, 16))
    dims = [d.dim_value for d in onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [5, 3, 16, 16]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], _arrays(model(x))[0], rtol=RTOL, atol=ATOL)


def test_a_neurenix_module_exports_with_its_shapes(tmp_path: Path) -> None:
    nx.nn.manual_seed(0)
    model = nx.nn.Sequential(nx.nn.Linear(4, 8), nx.nn.GELU(), nx.nn.Linear(8, 3))
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    path = nx.nn.export_onnx(model, tmp_path / "mlp.onnx", (2, 4))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0], np.asarray(model(nx.asarray(x)).numpy()),
                               rtol=RTOL, atol=ATOL)
    with pytest.raises(UnsupportedOperationError, match="input shapes"):
        nx.nn.export_onnx(model, tmp_path / "no_shapes.onnx")


def test_an_opset_before_17_is_refused_and_nothing_written(models: Any, tmp_path: Path) -> None:
    model, _ = models["resnet_block"]
    with pytest.raises(UnsupportedOperationError, match="opset 17"):
        model.to_onnx(tmp_path / "old.onnx", opset_version=13)
    assert list(tmp_path.iterdir()) == []
