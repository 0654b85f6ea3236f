"""tpu compiled artifacts (jax.export module + weights): padded batch buckets survive the round
trip, a module exported for another platform is refused, a data-parallel program cannot be saved."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import ArtifactMismatchError, ArtifactUnsupportedError


def _mlp() -> nn.Module:
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 32), nn.GELU(), nn.Linear(32, 4))


def test_batch_bucket_program_round_trips(tmp_path: Path) -> None:
    compiled = nx.compile(_mlp(), device="tpu:0", precision="fp32", outputs="host", batch_buckets=(8,))
    x = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    expected = compiled(x)  # batch 3 runs padded to 8 inside the program
    compiled.save(tmp_path / "a")
    meta = json.loads((tmp_path / "a" / "artifact.json").read_text())["parts"][0]["meta"]
    assert (meta["batch"], meta["padded"], meta["platforms"]) == (3, 8, ["cpu"])
    loaded = nx.load_compiled(tmp_path / "a")
    np.testing.assert_array_equal(loaded(x), expected)
    assert "jax.export module, platforms cpu" in loaded.summary


def test_other_platform_is_refused(tmp_path: Path) -> None:
    compiled = nx.compile(_mlp(), device="tpu:0", outputs="host")
    compiled(np.ones((2, 10), np.float32))
    compiled.save(tmp_path / "a")
    file = tmp_path / "a" / "artifact.json"
    manifest = json.loads(file.read_text())
    manifest["parts"][0]["meta"]["platforms"] = ["tpu"]
    file.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactMismatchError, match=r"exported for \['tpu'\].*runs on 'cpu'.*export the model again"):
        nx.load_compiled(tmp_path / "a")


def test_data_parallel_program_cannot_be_saved(tmp_path: Path) -> None:
    if nx.backend("tpu:0").device_count() < 2:
        pytest.skip("needs several emulated tpu devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    compiled = nx.compile(_mlp(), device="tpu:0", outputs="host", data_parallel=True)
    compiled(np.ones((8, 10), np.float32))
    with pytest.raises(ArtifactUnsupportedError, match="data-parallel program.*compile without data_parallel"):
        compiled.save(tmp_path / "dp")
    assert not (tmp_path / "dp").exists()


def test_loads_onto_another_device_index(tmp_path: Path) -> None:
    if nx.backend("tpu:0").device_count() < 2:
        pytest.skip("needs several emulated tpu devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    compiled = nx.compile(_mlp(), device="tpu:0")
    x = np.random.default_rng(1).standard_normal((2, 10)).astype(np.float32)
    expected = compiled(x).numpy()
    compiled.save(tmp_path / "a")
    loaded = nx.load_compiled(tmp_path / "a", device="tpu:1")
    out = loaded(x)
    assert str(out.device) == "tpu:1" and str(loaded.device) == "tpu:1"
    np.testing.assert_array_equal(out.numpy(), expected)
