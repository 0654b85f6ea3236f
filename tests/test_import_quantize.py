"""int8 on cpu:0 for imported CNNs: calibration on the new IR, integer reference over the opset."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import model_zoo as zoo

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.opset import LEGACY_OPS

BATCH = 200

# Top-1 agreement with torch fp32 over 1,000 inputs. The ResNet block's global average pool is
# TFLite's MEAN with its own calibrated output parameters (qmath.integer_mean); keeping its
# input's parameters instead, as pooling must, costs about 1% of its top-1 decisions.
AGREEMENT = {"mobilenetv3_block": 0.99, "efficientnet_block": 0.99, "resnet_block": 0.99}


@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_int8_top1_agreement_with_torch(name: str) -> None:
    rng = np.random.default_rng(3)
    model = zoo.build(name)
    imported = nn.from_torch(model, torch.zeros(BATCH, 3, 16, 16))
    calibration = [rng.standard_normal((BATCH, 3, 16, 16)).astype(np.float32) for _ in range(6)]
    compiled = nx.compile(imported, device="cpu:0", quantize="int8", calibration=calibration, progress=False)
    # The integer reference, or a host runtime's int8 kernels with the core's plan (host_select).
    assert "integer kernels" in compiled.summary or "int8 with the core's plan" in compiled.summary or compiled.compiled_shapes == []
    ops = {n.op for n in compiled.graph.nodes}
    assert "batch_norm2d" not in ops  # folded into the convolutions
    if name != "resnet_block":  # hardswish, hardsigmoid, silu, mul, reduce_mean run between quantized ops
        assert ops - LEGACY_OPS
    agree, err = [], 0.0
    for _ in range(1000 // BATCH):
        x = rng.standard_normal((BATCH, 3, 16, 16)).astype(np.float32)
        want = model(torch.from_numpy(x)).detach().numpy()
        got = compiled(x).numpy()
        agree.append(np.mean(got.argmax(1) == want.argmax(1)))
        err = max(err, zoo.max_rel_err(got, want))
    assert np.mean(agree) >= AGREEMENT[name]
    assert 1e-4 < err < 0.1  # really quantized, and close
    assert set(compiled.plan.weights) == {n.name for n in compiled.graph.nodes if n.op in ("conv2d", "linear")}
