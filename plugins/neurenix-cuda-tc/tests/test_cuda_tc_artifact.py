"""The cuda plugin's compiled artifacts (torch.export programs): fp16 and fp32 programs round trip with the
saved precision, and a damaged program file is refused."""

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


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_program_round_trips_with_its_precision(tmp_path: Path, precision: str) -> None:
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    compiled = nx.compile(_mlp(), device="cuda:0", precision=precision, outputs="host")
    expected = compiled(x)
    compiled.save(tmp_path / "a")
    loaded = nx.load_compiled(tmp_path / "a")
    assert f"{precision} (torch.float{'16' if precision == 'fp16' else '32'})" in loaded.summary and "torch.export program" in loaded.summary
    out = loaded(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)


def test_damaged_program_is_refused(tmp_path: Path) -> None:
    from neurenix_core.io.digest import file_sha256

    compiled = nx.compile(_mlp(), device="cuda:0", outputs="host")
    compiled(np.ones((2, 6), np.float32))
    compiled.save(tmp_path / "a")
    program = tmp_path / "a" / "parts" / "0" / "model.pt2"
    program.write_bytes(b"PK broken")
    file = tmp_path / "a" / "artifact.json"
    manifest = json.loads(file.read_text())
    manifest["checksums"]["parts/0/model.pt2"] = file_sha256(program)
    file.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactFormatError, match=r"plugin cuda\).*not a loadable torch.export program.*export the model again"):
        nx.load_compiled(tmp_path / "a")
