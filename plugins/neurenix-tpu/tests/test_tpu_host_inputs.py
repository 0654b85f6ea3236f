"""Host inputs on every compiled tpu path: nx.compile and TPUBackend.compile_graph. JAX arrays
in give JAX arrays out (as jax.jit); everything else follows the core's rule
(neurenix_core.graph.compile.inputs), including the refusal of a tensor on another tpu."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_tpu.api import TPUBackend

import neurenix_core as nx
from neurenix_core.testing.compiled import check_input_rule

TPU = nx.Device("tpu", 0)


def _mlp() -> Any:
    from neurenix_core import nn

    nn.manual_seed(4)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _x() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((2, 6)).astype(np.float32)


@pytest.mark.parametrize("outputs", ["device", "host"])
def test_nx_compile_takes_host_inputs(four_devices: Any, outputs: str) -> None:
    compiled = nx.compile(_mlp(), device="tpu:0", precision="fp32", outputs=outputs)
    check_input_rule(compiled, _x(), TPU, expect_device=outputs == "device")
    with pytest.raises(nx.DeviceMismatchError, match=r"tpu:1.*x\.to\('tpu:0'\)"):
        compiled(nx.asarray(_x(), device="tpu:1"))


def test_compile_graph_takes_host_inputs_and_jax_arrays(four_devices: Any) -> None:
    import jax

    model = TPUBackend().compile_graph(_mlp().to_graph((2, 6)), precision="fp32")
    check_input_rule(model, _x(), TPU)
    native = nx.asarray(_x(), device="tpu:0").native
    out = model(native)
    assert isinstance(out, jax.Array) and out.devices() == native.devices()
