"""Models and checks shared by the host-runtime tests of every plugin (issue #31): a small torch
CNN and MLP in plain ``torch.nn`` (torchvision does not load beside the CPU torch wheel), seeded
inputs, the relative error, and the runtime itself from the core's discovery."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def torch_cnn(second_pool: str = "max") -> Any:
    """conv/BN/ReLU/max pool, conv/BN/ReLU/``second_pool`` pool, flatten, linear (input 3x32x32);
    BN statistics and affine parameters set away from their defaults, so folding them is checked."""
    import torch

    torch.manual_seed(0)
    nn = torch.nn
    pool = nn.MaxPool2d(2) if second_pool == "max" else nn.AvgPool2d(2)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        pool,
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    ).eval()
    with torch.no_grad():
        for bn in (model[1], model[5]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    return model


def torch_mlp() -> Any:
    """64 -> 128 -> 128 -> 10 with ReLU and Tanh (input (batch, 64))."""
    import torch

    torch.manual_seed(1)
    nn = torch.nn
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 10)).eval()


def inputs(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def relative_error(got: Any, want: Any) -> float:
    """max |got - want| over max |want|, in float64."""
    want = np.asarray(want, np.float64)
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


def host_runtime(name: str) -> Any:
    """The started host runtime ``name`` from the core's discovery; the test fails with the reason
    the plugin's runtime did not start."""
    from neurenix_core.graph.compile import host_select
    from neurenix_core.graph.ir.host import HostRuntime

    runtime = host_select.host_runtimes().get(name)
    if not isinstance(runtime, HostRuntime):
        pytest.fail(f"host runtime {name!r} is not available: {runtime}")
    return runtime


def mlp_graph() -> Any:
    """A linear + tanh graph at static shape (4, 64), built directly (no torch)."""
    from neurenix_core.graph.ir import Graph, Node, TensorSpec

    rng = np.random.default_rng(2)
    weight = {"weight": rng.standard_normal((32, 64)).astype(np.float32), "bias": np.zeros(32, np.float32)}
    return Graph((TensorSpec("x", (4, 64)),), (
        Node("fc", "linear", ("x",), "h", {}, weight),
        Node("act", "tanh", ("h",), "y"),
    ), ("y",))


def check_unlowered_op_is_refused(runtime: Any) -> None:
    """``runtime=<name>`` for a graph with an op the runtime does not lower (cumprod) is an
    UnsupportedOperationError naming the runtime and the op, never a silent substitute."""
    import neurenix_core as nx
    from neurenix_core.graph.ir import Graph, Node, TensorSpec

    assert "cumprod" not in runtime.graph_ops  # if the lowering gains it, pick another op here
    graph = Graph((TensorSpec("x", (4, 8)),), (Node("c", "cumprod", ("x",), "y", {"axis": 1}),), ("y",))
    compiled = nx.compile(graph, device="cpu", runtime=runtime.name)
    pattern = rf"runtime='{runtime.name}' was asked, but {runtime.name} does not lower op\(s\) cumprod"
    with pytest.raises(nx.UnsupportedOperationError, match=pattern):
        compiled(inputs(4, 8))


def check_matches_torch_and_reference(runtime: str, make: Any, shape: tuple[int, ...]) -> Any:
    """``make()`` (a torch model) imported and compiled for cpu:0 with ``runtime=``: float32, within
    1e-5 of PyTorch fp32 and of the core's float reference, and the report names the runtime as
    asked. Returns the compiled model for the caller's runtime-specific checks."""
    import torch

    import neurenix_core as nx
    from neurenix_core.graph.reference.run import run_graph

    module = make()
    x = inputs(*shape)
    model = nx.nn.from_torch(module, (torch.from_numpy(x),))
    compiled = nx.compile(model, device="cpu", runtime=runtime)
    got = compiled(x).numpy()
    with torch.no_grad():
        want_torch = module(torch.from_numpy(x)).double().numpy()
    want_ref = np.asarray(run_graph(model.to_graph(shape), x), np.float64)
    assert got.dtype == np.float32 and got.shape == want_ref.shape
    assert relative_error(got, want_torch) <= 1e-5
    assert relative_error(got, want_ref) <= 1e-5
    assert f"runtime {runtime} (runtime={runtime!r} asked)" in compiled.summary
    assert f"model on cpu:0: runtime {runtime}" in str(compiled.placement)
    return compiled
