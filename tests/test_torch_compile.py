"""``torch.compile(model, backend="neurenix")`` on every emulated device (issue 42).

Models written in plain ``torch.nn`` and Hugging Face models from tiny configs run through
dynamo and the backend; their outputs are compared with PyTorch eager within each precision's
tolerance: fp32 on every device (``precision="fp32"``: the TPU's default is bf16 matmuls).
Also: the entry point (PyTorch finds the backend without importing neurenix, and neither
import pulls the other), options checked before compiling, graph breaks (one piece per graph),
a growing batch compiled once by dynamo, weights changed between calls, a graph with an op the
importer does not map (PyTorch runs it, said; refused under fallback="error"), greedy
generation with the same tokens as eager, and training: the loss and the gradients of a small
CNN equal eager's where the device trains (cpu, cuda, tpu), a NotDifferentiableError at the
first backward where it does not (npu, edgetpu).
"""

from __future__ import annotations

import copy
import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx
from neurenix_core.errors import FallbackError, InvalidOptionError, NotDifferentiableError
from neurenix_core.tensor.fallback import FallbackWarning

DEVICES = ["cpu:0", "cuda:0", "tpu:0", "npu:0", "edgetpu:0"]
TRAINS = ["cpu:0", "cuda:0", "tpu:0"]
FP32 = 1e-4  # a device's fp32 kernels against torch eager, relative to the largest output


class SmallCNN(torch.nn.Module):
    """Conv, batch norm, grouped conv, pooling, linear: what a torchvision-style CNN is made of."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: Any) -> Any:
        y = torch.nn.functional.max_pool2d(self.bn(self.conv1(x)).relu(), 2)
        return self.head(self.conv2(y).relu().mean((2, 3)))


class Broken(torch.nn.Module):
    """A graph break in forward: dynamo hands the backend two graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

    def forward(self, x: Any) -> Any:
        y = self.a(x).tanh()
        torch._dynamo.graph_break()
        return self.b(y)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Any:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _backend(device: str, **options: Any) -> Any:
    return nx.torch_backend(device=device, precision="fp32", **options)


def _close(got: Any, want: Any, tol: float = FP32) -> None:
    got, want = got.detach().numpy(), want.detach().numpy()
    assert got.shape == want.shape
    scale = max(float(np.abs(want).max()), 1.0)
    assert float(np.abs(got - want).max()) <= tol * scale


def test_pytorch_finds_the_backend_by_name_without_importing_neurenix() -> None:
    code = ("import sys, torch; assert not [m for m in sys.modules if m.startswith('neurenix')]; "
            "assert 'neurenix' in torch._dynamo.list_backends(); "
            "from torch._dynamo.backends.registry import lookup_backend; fn = lookup_backend('neurenix'); "
            "import neurenix_core.torch_compile as tc; assert fn is tc.backend; "
            "print(sorted(m for m in ('jax', 'openvino', 'ai_edge_litert', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"  # looking the backend up starts no other framework


def test_importing_the_backend_module_does_not_import_torch() -> None:
    code = "import sys, neurenix_core.torch_compile; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("device", DEVICES)
def test_cnn_matches_eager_and_a_new_batch_size_compiles_once(device: str) -> None:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    backend = _backend(device)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (2, 5, 3):  # the second size makes dynamo's batch axis dynamic: one more graph, no third
            x = torch.randn(batch, 3, 16, 16)
            _close(compiled(x), model(x))
    assert len(backend.pieces) == 2
    assert all(p.in_torch is None and str(p.device) == device and p.recompilations == 0 for p in backend.pieces)
    # the dynamic graph pads a batch to its power-of-two bucket (padding a CNN's batch is proven safe)
    assert sorted(s[0][0] for s in backend.pieces[1].compiled.compiled_shapes) == [4, 8]
    assert device in backend.summary


@pytest.mark.parametrize("device", DEVICES)
def test_bert_and_vit_match_eager(device: str) -> None:
    import hf_zoo as hz

    for name in ("bert", "vit"):
        model, inputs = hz.build(name)
        backend = _backend(device)
        compiled = torch.compile(model, backend=backend)
        feed = inputs(2, 7)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)  # a node or two on cpu:0 (edgetpu): the placement report says so
            got, want = compiled(**feed), model(**feed)
        for g, w in zip(hz.outputs(got), hz.outputs(want)):
            _close(torch.from_numpy(g), torch.from_numpy(w))
        assert all(p.in_torch is None for p in backend.pieces), backend.summary
        torch._dynamo.reset()


def _generate(device: str, **generate: Any) -> Any:
    """A tiny Llama's greedy tokens with ``forward`` compiled for ``device``, checked equal to
    eager's; the backend, whose pieces the tests count."""
    import hf_zoo as hz

    model, _ = hz.build("llama")
    ids = torch.randint(3, 128, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=8, do_sample=False)
    backend = _backend(device)
    model.forward = torch.compile(model.forward, backend=backend)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        got = model.generate(ids, max_new_tokens=8, do_sample=False, **generate)
    assert torch.equal(got, want)
    assert all(p.in_torch is None for p in backend.pieces), backend.summary
    return backend


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_generation_gives_eager_tokens(device: str) -> None:
    backend = _generate(device)
    # the prompt, the first decode step, then one graph for every later length (dynamo's dynamic cache axis)
    assert len(backend.pieces) == 3, backend.summary
    # whose cache grows by a concat: padding it would land between the joined values, so no buckets
    assert "concat" in backend.pieces[2].buckets_refused


@pytest.mark.parametrize("device", ["cpu:0", "npu:0"])
def test_a_static_cache_compiles_prefill_and_decode_once_each(device: str) -> None:
    backend = _generate(device, cache_implementation="static")
    # transformers' StaticCache: fixed shapes, the cache written in place (index_copy_), which the
    # piece copies back into the cache's tensors after each call
    assert len(backend.pieces) == 2 and all(p.written for p in backend.pieces), backend.summary


def test_a_graph_break_gives_two_compiled_pieces() -> None:
    torch.manual_seed(0)
    model = Broken().eval()
    backend = _backend("npu:0")
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(4, 6)
    with torch.no_grad():
        _close(compiled(x), model(x))
    assert len(backend.pieces) == 2 and all(p.in_torch is None for p in backend.pieces)


def test_weights_changed_between_calls_are_used() -> None:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    backend = _backend("cpu:0")
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled(x)
        model.head.weight.mul_(2.0)  # in place: the tensor's version counter moves
        _close(compiled(x), model(x))
        model.head.bias = torch.nn.Parameter(torch.ones(4))  # replaced: another tensor
        _close(compiled(x), model(x))
    assert backend.pieces[-1].recompilations >= 2


class Unmapped(torch.nn.Module):
    def forward(self, x: Any) -> Any:
        return torch.hash_tensor(x, dim=1).float() * 2.0  # hashes bits: no opset op computes it


def test_an_unmapped_op_runs_in_pytorch_with_a_warning_or_is_refused() -> None:
    x = torch.randn(3, 5)
    backend = _backend("npu:0")
    compiled = torch.compile(Unmapped(), backend=backend)
    with pytest.warns(FallbackWarning, match="runs in PyTorch, not on npu:0"):
        _close(compiled(x), Unmapped()(x))
    assert "hash_tensor" in backend.pieces[0].in_torch
    torch._dynamo.reset()
    strict = torch.compile(Unmapped(), backend=_backend("npu:0", fallback="error"))
    with pytest.raises(FallbackError, match="cannot run on npu:0"):
        strict(x)


def test_options_are_checked_before_compiling() -> None:
    with pytest.raises(TypeError, match="did you mean 'device'"):
        nx.torch_backend(devcie="npu:0")
    with pytest.raises(TypeError, match="did you mean 'threads'"):
        nx.torch_backend(device="cpu:0", threds=2)
    with pytest.raises(InvalidOptionError, match="fallback"):
        nx.torch_backend(fallback="never")
    compiled = torch.compile(torch.nn.Linear(3, 2), backend="neurenix", options={"devcie": "npu:0"})
    with pytest.raises(Exception, match="did you mean 'device'"):  # dynamo wraps it in BackendCompilerFailed
        compiled(torch.randn(2, 3))


def test_the_string_backend_takes_options_and_records_its_pieces() -> None:
    from neurenix_core.torch_compile import pieces

    before = len(pieces())
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="neurenix", options={"device": "npu:0", "precision": "fp32"})
    x = torch.randn(2, 4)
    with torch.no_grad():
        _close(compiled(x), model(x))
    assert len(pieces()) == before + 1 and str(pieces()[-1].device) == "npu:0"


def _train(model: Any, step: Any, batches: list[tuple[Any, Any]]) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(step(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("device", TRAINS)
def test_a_training_loop_matches_eager(device: str) -> None:
    torch.manual_seed(0)
    eager = SmallCNN()
    model = copy.deepcopy(eager)
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(3)]
    backend = _backend(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # nodes a device's plugin leaves to cpu:0, reported in the summary
        got = _train(model, torch.compile(model, backend=backend), batches)
    want = _train(eager, eager, batches)
    assert np.allclose(got, want, rtol=1e-4, atol=1e-5), (got, want)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        _close(p, q, 1e-3)
    _close(model.bn.running_mean, eager.bn.running_mean)  # batch statistics reach the buffers too
    kinds = sorted(p.kind for p in backend.pieces)
    assert kinds == ["backward", "forward"] and all(p.in_torch is None for p in backend.pieces), backend.summary


@pytest.mark.parametrize("device", ["npu:0", "edgetpu:0"])
def test_a_backward_on_an_inference_device_is_refused_at_the_first_backward(device: str) -> None:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    compiled = torch.compile(model, backend=_backend(device))
    x = torch.randn(2, 3, 16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        out = compiled(x)
    assert out.requires_grad  # as eager's
    _close(out, model(x))
    with pytest.raises(NotDifferentiableError, match=f"{device} .* runs inference only"):
        out.sum().backward()
