"""Host inputs on the compiled ort paths: nx.compile and ORTRuntime.optimize_model, checked by
the core's rule checker (neurenix_core.testing.compiled)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_onnxruntime.api import ORTRuntime

import neurenix_core as nx
from neurenix_core.testing.compiled import check_input_rule, other_accelerator

ORT = nx.Device("ort", 0)


def _mlp() -> Any:
    from neurenix_core import nn

    nn.manual_seed(5)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _x() -> np.ndarray:
    return np.random.default_rng(8).standard_normal((2, 6)).astype(np.float32)


@pytest.mark.parametrize("outputs", ["device", "host"])
def test_compiled_ort_models_take_host_inputs(outputs: str) -> None:
    if other_accelerator(ORT) is None:
        pytest.skip("no second accelerator to refuse (CI emulates neurenix-tpu)")
    for model in (nx.compile(_mlp(), device="ort:0", outputs=outputs), ORTRuntime().optimize_model(_mlp(), _x(), outputs=outputs)):
        check_input_rule(model, _x(), ORT, expect_device=outputs == "device")
