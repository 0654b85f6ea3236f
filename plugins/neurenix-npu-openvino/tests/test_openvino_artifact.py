"""npu compiled artifacts (OpenVINO IR + compiled blob): the blob is imported when the runtime
matches, the IR compiled otherwise, with the same results; int8 models round trip exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import neurenix_core as nx
from neurenix_core import nn


def _cnn() -> nn.Module:
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 5))


def test_blob_or_ir_gives_the_same_results(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    compiled = nx.compile(_cnn(), device="npu:0", outputs="host")
    expected = compiled(x)
    compiled.save(tmp_path / "a")
    loaded = nx.load_compiled(tmp_path / "a")
    assert "imported from the compiled blob" in loaded.summary
    np.testing.assert_array_equal(loaded(x), expected)
    # A target with another OpenVINO: the blob is skipped and the IR compiled.
    file = tmp_path / "a" / "artifact.json"
    manifest = json.loads(file.read_text())
    manifest["parts"][0]["meta"]["runtime"] = "openvino 2020.1"
    file.write_text(json.dumps(manifest))
    from_ir = nx.load_compiled(tmp_path / "a")
    assert "compiled from the IR (saved with openvino 2020.1" in from_ir.summary
    np.testing.assert_allclose(from_ir(x), expected, rtol=1e-6, atol=1e-6)


def test_int8_model_round_trips_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    calibration = [rng.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(3)]
    compiled = nx.compile(_cnn(), device="npu:0", precision="int8", calibration=calibration, outputs="host", progress=False)
    x = calibration[0]
    expected = compiled(x)
    compiled.save(tmp_path / "q")
    manifest = json.loads((tmp_path / "q" / "artifact.json").read_text())
    assert manifest["precision"] == "int8" and manifest["parts"][0]["meta"]["precision"] == "int8"
    np.testing.assert_array_equal(nx.load_compiled(tmp_path / "q")(x), expected)
