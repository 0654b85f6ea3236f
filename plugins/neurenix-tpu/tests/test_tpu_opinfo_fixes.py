"""Fixes found by the OpInfo sweep on tpu:0 (benchmarks/opinfo_sweep.py --device tpu:0 --precision
fp32, issue #41), each a one-op PyTorch module imported with ``nx.nn.from_torch``, compiled for
tpu:0 in fp32 and compared with eager PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx

torch = pytest.importorskip("torch")
from torch_eager import OpModule


def _compare(module: Any, *inputs: Any) -> Any:
    """``module`` on tpu:0 (fp32) against eager PyTorch; returns the placement."""
    model = nx.nn.from_torch(module.eval(), tuple(inputs), static=True)
    compiled = nx.compile(model, device="tpu:0", precision="fp32", progress=False, outputs="host")
    out = compiled(*[t.numpy() for t in inputs])
    got = [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
    with torch.no_grad():
        ref = module(*inputs)
    want = [t.numpy() for t in (ref if isinstance(ref, (list, tuple)) else [ref])]
    assert [g.shape for g in got] == [w.shape for w in want]
    for have, expected in zip(got, want):
        assert have.dtype.kind == expected.dtype.kind or {have.dtype.kind, expected.dtype.kind} <= {"i", "u"}
        np.testing.assert_allclose(have, expected, rtol=1e-4, atol=1e-5)
    return compiled.placement


@pytest.mark.parametrize("reduce", [torch.max, torch.min], ids=["max", "min"])
def test_max_with_dim_of_a_scalar_runs_on_tpu(tpu: Any, reduce: Any) -> None:
    """torch.max(x, 0) of a 0-d tensor: argmax's axis 0 modulo rank 0 raised ZeroDivisionError
    while tracing; the index of a 0-d value is 0."""
    placement = _compare(OpModule(lambda x: tuple(reduce(x, 0))), torch.tensor(-2.5))
    assert not placement.off_device, placement.line()
