"""edgetpu compiled artifacts: the saved model.tflite is a standalone TFLite file (the plugin's
own load_model and LiteRT read it, as edgetpu_compiler would), and a damaged one is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import ArtifactFormatError


def _mlp() -> nn.Module:
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))


def test_saved_tflite_is_a_standalone_model(tmp_path: Path) -> None:
    from neurenix_edgetpu.compiled import load_model

    x = np.random.default_rng(0).standard_normal((1, 6)).astype(np.float32)
    compiled = nx.compile(_mlp(), device="edgetpu:0", outputs="host")
    expected = compiled(x)
    compiled.save(tmp_path / "a")
    tflite = tmp_path / "a" / "parts" / "0" / "model.tflite"
    assert tflite.read_bytes()[4:8] == b"TFL3"  # the flatbuffer identifier
    standalone = load_model(tflite, nx.backend("edgetpu:0"), result="host")
    np.testing.assert_array_equal(standalone(x), expected)


def test_damaged_tflite_behind_a_matching_checksum(tmp_path: Path) -> None:
    from neurenix_core.io.digest import file_sha256

    compiled = nx.compile(_mlp(), device="edgetpu:0", outputs="host")
    compiled(np.ones((1, 6), np.float32))
    compiled.save(tmp_path / "a")
    tflite = tmp_path / "a" / "parts" / "0" / "model.tflite"
    tflite.write_bytes(b"\x00" * 64)
    file = tmp_path / "a" / "artifact.json"
    manifest = json.loads(file.read_text())
    manifest["checksums"]["parts/0/model.tflite"] = file_sha256(tflite)
    file.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactFormatError, match=r"plugin edgetpu.*model.tflite is not a usable TFLite model.*export the model again"):
        nx.load_compiled(tmp_path / "a")
