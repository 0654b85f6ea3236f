"""Fixes found by the OpInfo sweep on edgetpu:0 (benchmarks/opinfo_sweep.py --device edgetpu:0,
issue #41), each a one-op PyTorch module imported with ``nx.nn.from_torch``, compiled for
edgetpu:0 (float) and compared with eager PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx

torch = pytest.importorskip("torch")
from torch_eager import OpModule


@pytest.mark.parametrize("scan", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
def test_a_0d_integer_constant_output_keeps_its_shape_on_edgetpu(edgetpu: Any, scan: Any) -> None:
    """cummax of a 0-d tensor imports as the input and a 0-d int64 constant (the index 0); the
    TFLite constant was written 1-d, so the index came back with shape (1,) where torch's is ()."""
    module = OpModule(lambda x: tuple(scan(x, 0)))
    x = torch.tensor(-1.25)
    model = nx.nn.from_torch(module.eval(), (x,), static=True)
    compiled = nx.compile(model, device="edgetpu:0", progress=False, outputs="host")
    got = [np.asarray(o) for o in compiled(x.numpy())]
    with torch.no_grad():
        want = [t.numpy() for t in module(x)]
    assert [g.shape for g in got] == [w.shape for w in want] == [(), ()]
    assert not compiled.placement.off_device, compiled.placement.line()
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("fn", [torch.mul, torch.add, torch.maximum, torch.minimum], ids=["mul", "add", "maximum", "minimum"])
def test_boolean_arithmetic_runs_on_edgetpu(edgetpu: Any, fn: Any) -> None:
    """mul/add/maximum/minimum of two masks (isfinite imports as a product of two masks): TFLite's
    MUL refused bool at invoke (an untyped RuntimeError); on bools they are logical and/or."""
    module = OpModule(lambda x, y: fn(x > 0, y > 0))
    x, y = torch.tensor([-1.0, 0.5, 2.0, -3.0]), torch.tensor([1.0, -0.5, 2.0, -3.0])
    model = nx.nn.from_torch(module.eval(), (x, y), static=True)
    compiled = nx.compile(model, device="edgetpu:0", progress=False, outputs="host")
    got = np.asarray(compiled(x.numpy(), y.numpy()))
    with torch.no_grad():
        want = module(x, y).numpy()
    assert got.dtype == want.dtype == np.bool_
    np.testing.assert_array_equal(got, want)
    off = [o.op for o in compiled.placement.off_device]
    assert not {"mul", "add", "maximum", "minimum"} & set(off), compiled.placement.line()


def test_permute_of_a_scalar_is_the_scalar_on_edgetpu(edgetpu: Any) -> None:
    """x.permute() of a 0-d tensor: LiteRT's TRANSPOSE with an empty perm returned garbage (2.4e6
    for -8.48, silently); a 0-d transpose is now the value itself."""
    module = OpModule(lambda x: x.permute(()))
    x = torch.tensor(-8.478374)
    model = nx.nn.from_torch(module.eval(), (x,), static=True)
    compiled = nx.compile(model, device="edgetpu:0", progress=False, outputs="host")
    got = np.asarray(compiled(x.numpy()))
    assert not compiled.placement.off_device, compiled.placement.line()
    assert got.shape == ()
    np.testing.assert_array_equal(got, x.numpy())


@pytest.mark.parametrize("fn", [torch.std, torch.var], ids=["std", "var"])
def test_a_segment_without_outputs_compiles_on_edgetpu(edgetpu: Any, fn: Any) -> None:
    """torch.std imports with a dead squeeze of its mean; the partitioner gives it a segment with
    no outputs, whose LiteRT runner read output 0 (IndexError, untyped). Such a runner now has none."""
    module = OpModule(fn)
    x = torch.randn(5, 5, 5)
    model = nx.nn.from_torch(module.eval(), (x,), static=True)
    compiled = nx.compile(model, device="edgetpu:0", progress=False, outputs="host")
    got = np.asarray(compiled(x.numpy()))
    with torch.no_grad():
        want = module(x).numpy()
    assert got.shape == want.shape == ()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
