"""``torch.compile(backend="neurenix")``: tensors cross by DLPack where the device declares it (issue 42).

On the emulated cuda device (PyTorch on the host CPU: the plugin's arrays are CPU torch tensors)
the compiled model reads the torch input's own memory and the torch result is the device
result's memory: observed with a TorchDispatchMode, which sees every ATen op the device's
PyTorch runtime runs (which memory each reads and writes) and any copy made on the way. On the
emulated tpu the input is copied in (JAX cannot share a torch buffer) and the result is shared.
cpu:0 and a device without DLPack (npu) keep the host path. Results that eager would not alias
(a dropped ``clone``, a constant output) are copies, so a caller's write cannot leak.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import neurenix_core as nx
from neurenix_core.tensor.fallback import FallbackWarning
from neurenix_core.torch_compile.exchange import HOST

FP32 = 1e-5
COPIES = {"clone", "_to_copy", "copy_", "copy"}


class Net(torch.nn.Module):
    """A computed result, a view eager makes too, a dropped clone and a constant output."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: Any) -> Any:
        return self.lin(x).relu(), x.flatten(), x.clone(), self.w * 2.0


class Ops(TorchDispatchMode):
    """The ATen ops run inside the block, in order: name, data pointers read, data pointers written."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, set[int], set[int]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.ops.append((func.overloadpacket.__name__, {t.data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)},
                         {t.data_ptr() for t in tree_leaves(out) if isinstance(t, torch.Tensor)}))
        return out

    def names(self) -> list[str]:
        return [name for name, _, _ in self.ops]

    def read(self, name: str) -> set[int]:
        return set().union(*(r for n, r, _ in self.ops if n == name))

    def wrote(self, name: str) -> set[int]:
        return set().union(*(w for n, _, w in self.ops if n == name))


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled(device: str, model: Any, *args: Any) -> tuple[Any, Any, Any]:
    """(the compiled model's results, eager's, the backend) for ``model(*args)`` on ``device``."""
    backend = nx.torch_backend(device=device, precision="fp32")
    fast = torch.compile(model, backend=backend)
    with torch.no_grad():
        return fast(*args), model(*args), backend


def _equal(got: tuple[Any, ...], want: tuple[Any, ...]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype and g.device == w.device
        assert float((g - w).abs().max()) <= FP32


def test_cuda_reads_the_torch_input_and_returns_the_device_result_without_a_copy() -> None:
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 4)
    got, want, backend = _compiled("cuda:0", model, x)
    _equal(got, want)
    piece = backend.pieces[0]
    assert piece.exchange.dlpack_in == (True,) and piece.exchange.torch_reads and not piece.exchange.move
    assert piece.compiled.outputs == "device" and "by DLPack" in backend.summary
    # eager's flatten is a view of x, and so is the compiled one: x's memory went in and came back
    assert got[1].data_ptr() == x.data_ptr()
    # the call itself, with the ATen ops the device's PyTorch runs: its linear reads x's memory
    # (not a copy of x), and the torch result is the memory its relu wrote (not a host copy of it)
    args = [None] * (max(piece.parts.live) + 1)
    args[piece.parts.live[0]] = x
    with torch.no_grad(), Ops() as ops:
        out = piece.run(tuple(args))
    assert x.data_ptr() in ops.read("linear"), ops.names()
    assert out[0].data_ptr() in ops.wrote("relu"), ops.names()
    assert not COPIES & set(ops.names()[: ops.names().index("linear")]), ops.names()


def test_results_eager_does_not_alias_are_copies() -> None:
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 4)
    got, _, backend = _compiled("cuda:0", model, x)
    assert got[2].data_ptr() != x.data_ptr()  # x.clone() is a copy, as in eager
    got[2].add_(1.0)
    assert float((x + 1.0 - got[2]).abs().max()) == 0.0
    # the constant output may be the runtime's own buffer: a caller's write must not reach the next call
    got[3].fill_(-7.0)
    with torch.no_grad():
        again = torch.compile(model, backend=backend)(x)
    assert torch.equal(again[3], model.w.detach() * 2.0)
    assert backend.pieces[0].exchange.keep_alias == (False, True, False, False)


def test_tpu_copies_the_input_in_and_shares_its_result() -> None:
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 4)
    got, want, backend = _compiled("tpu:0", model, x)
    _equal(got, want)
    piece = backend.pieces[0]
    exchange = piece.exchange
    assert exchange.torch_reads and piece.compiled.outputs == "device"
    # the torch result is the JAX array's buffer (host memory under emulation), not a copy of it
    results = piece.compiled(*exchange.inputs([x]))
    out = exchange.result(0, results[0], x.device)
    assert out.data_ptr() == results[0]._data.unsafe_buffer_pointer()
    # JAX's buffer is its own: x's memory was copied in, and x is no view of any result
    assert got[1].data_ptr() != x.data_ptr() and torch.equal(got[1], x.flatten())


def test_cpu_keeps_the_host_path() -> None:
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 4)
    got, want, backend = _compiled("cpu:0", model, x)
    _equal(got, want)
    piece = backend.pieces[0]
    assert piece.exchange is HOST and piece.compiled.outputs == "host"
    assert "through host memory" in backend.summary


def test_a_device_without_dlpack_keeps_the_host_path_by_declaration() -> None:
    from neurenix_core.device import as_device
    from neurenix_core.plugins.state import registry

    manifest = registry().plugin_for(as_device("npu:0")).manifest
    assert manifest is not None and not manifest.capabilities.dlpack
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 4)
    got, want, backend = _compiled("npu:0", model, x)
    _equal(got, want)
    assert backend.pieces[0].exchange is HOST and backend.pieces[0].compiled.outputs == "host"


def test_an_input_of_a_dtype_the_device_lacks_crosses_as_numpy() -> None:
    def f(x: Any, ids: Any) -> Any:
        return x * 2.0, ids.to(torch.int32) + 1

    x, ids = torch.randn(3), torch.tensor([0, 1, 2], dtype=torch.uint16)  # cuda declares no uint16
    backend = nx.torch_backend(device="cuda:0", precision="fp32")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # the uint16 cast runs on cpu:0
        got = torch.compile(f, backend=backend)(x, ids)
    assert backend.pieces[0].exchange.dlpack_in == (True, False)
    _equal(got, f(x, ids))


@pytest.mark.parametrize("device", ["cuda:0", "tpu:0"])
def test_a_static_cache_written_in_place_matches_eager(device: str) -> None:
    import hf_zoo as hz

    model, _ = hz.build("llama")
    ids = torch.randint(3, 128, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=6, do_sample=False)
    backend = nx.torch_backend(device=device, precision="fp32")
    model.forward = torch.compile(model.forward, backend=backend)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = model.generate(ids, max_new_tokens=6, do_sample=False, cache_implementation="static")
    assert torch.equal(got, want)
    # the key/value caches cross by DLPack, and their new values are copied into them after each call
    assert all(p.written and p.exchange.device is not None for p in backend.pieces), backend.summary
