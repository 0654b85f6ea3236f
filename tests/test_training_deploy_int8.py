"""A model trained with neurenix, saved, loaded and compiled to npu and edgetpu in int8 keeps
top-1 agreement >= 99% with its fp32 self on held-out data."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import neurenix as nx
from neurenix.nn import functional as F
from neurenix.optim import Adam

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from train_cnn import make_model, stripes


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nx.nn.manual_seed(0)
    images, labels = stripes(1600, seed=5)
    model = make_model().train()
    opt = Adam(model.parameters(), lr=0.01)
    step = nx.compile_step(lambda m, x, y: F.cross_entropy(m(x), y), model, opt)
    for i in range(0, 1600, 64):
        step(nx.asarray(images[i:i + 64]), nx.asarray(labels[i:i + 64]))
    path = tmp_path_factory.mktemp("trained") / "cnn.safetensors"
    model.eval().save(path)
    return path


@pytest.mark.parametrize("device", ["npu:0", "edgetpu:0"])
def test_trained_model_compiled_int8_agrees_with_fp32(trained: Path, device: str) -> None:
    if device not in [str(d) for d in nx.devices()]:
        pytest.skip(f"{device} not available (NEURENIX_EMULATE)")
    model = make_model().load(trained).eval()
    held_out, _ = stripes(400, seed=6)
    calibration = [stripes(32, seed=7 + i)[0] for i in range(8)]
    fp32 = np.argmax(model(nx.asarray(held_out)).numpy(), axis=1)
    int8 = nx.compile(model, device=device, quantize="int8", calibration=calibration, progress=False)
    got = np.concatenate([np.argmax(int8(held_out[i:i + 50]).numpy(), axis=1) for i in range(0, 400, 50)])
    agreement = float(np.mean(got == fp32))
    assert agreement >= 0.99, f"{device}: int8 top-1 agreement {agreement:.3f}"
