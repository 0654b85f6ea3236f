"""`neurenix export MODEL --device D --out DIR` (issue #30): an ONNX file and a neurenix model
file (.nxm) exported, loaded in a fresh interpreter without torch, same results; bad input is a
one-line error with exit status 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from artifact_models import as_host, load_fresh, write_input

import neurenix_core as nx
from neurenix_core.cli.export import parse_shape
from neurenix_core.cli.main import main
from neurenix_core.errors import ConfigurationError


def _onnx_mlp(path: Path) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]), helper.make_node("Relu", ["hb"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_export_onnx_and_nxm_then_load_without_torch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model_path = _onnx_mlp(tmp_path / "mlp.onnx")
    assert main(["export", str(model_path), "--device", "npu", "--out", str(tmp_path / "npu"), "--shape", "2x8", "--shape", "x=4x8",
                 "--outputs", "host"]) == 0
    assert "exported" in capsys.readouterr().out
    nx.nn.save(nx.nn.from_onnx(str(model_path)), tmp_path / "mlp.nxm")
    assert main(["export", str(tmp_path / "mlp.nxm"), "--device", "edgetpu", "--out", str(tmp_path / "edgetpu"), "--shape", "4x8",
                 "--outputs", "host"]) == 0
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    reference = as_host(nx.compile(nx.nn.from_onnx(str(model_path)), device="cpu", outputs="host")(x))
    jobs = [{"artifact": str(tmp_path / d), "input": write_input(tmp_path, "x", x), "output": str(tmp_path / f"{d}.npy")} for d in ("npu", "edgetpu")]
    result = load_fresh(jobs, block_torch=True)
    assert result["torch"] is False
    for job in jobs:
        np.testing.assert_allclose(np.load(job["output"]), reference, rtol=1e-5, atol=1e-5)
    assert nx.load_compiled(tmp_path / "npu").compiled_shapes == [((2, 8),), ((4, 8),)]


def test_export_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "model.pt").write_bytes(b"x")
    assert main(["export", str(tmp_path / "model.pt"), "--device", "cpu", "--out", str(tmp_path / "out")]) == 2
    assert "neither an ONNX file (.onnx) nor a neurenix model file (.nxm)" in capsys.readouterr().err
    model_path = _onnx_mlp(tmp_path / "mlp.onnx")
    assert main(["export", str(model_path), "--device", "cpu", "--out", str(tmp_path / "out")]) == 2
    assert "pass --shape to neurenix export" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_parse_shape() -> None:
    assert parse_shape("1x3x8x8", ["x"]) == ((1, 3, 8, 8),)
    assert parse_shape("mask=1x16,ids=1x16", ["ids", "mask"]) == ((1, 16), (1, 16))
    with pytest.raises(ConfigurationError, match="the model has inputs"):
        parse_shape("1x16", ["ids", "mask"])
    with pytest.raises(ConfigurationError, match="not sizes joined by 'x'"):
        parse_shape("1xa", ["x"])
