"""nn layers against PyTorch (fp32, 1e-5) and against the float64 reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import CompilationError, ModelFormatError, ShapeError, UnsupportedOperationError
from neurenix_core.graph.reference.run import run_graph

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def _pair(torch_layer, x: np.ndarray, *extra: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    torch_layer.eval()
    with torch.no_grad():
        expected = torch_layer(*(torch.from_numpy(a) for a in (x, *extra)))
    if isinstance(expected, tuple):
        expected = expected[0]
    ours = nn.from_torch(torch.nn.Sequential(torch_layer)) if not isinstance(torch_layer, torch.nn.MultiheadAttention) else None
    return expected.numpy(), ours


@pytest.mark.parametrize(
    "layer, shape",
    [
        (lambda: torch.nn.Conv2d(4, 6, 3, stride=2, padding=1), (2, 4, 9, 9)),
        (lambda: torch.nn.Conv2d(4, 8, (3, 2), stride=(1, 2), padding=(2, 1), dilation=(2, 1), groups=2), (2, 4, 10, 11)),
        (lambda: torch.nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False), (1, 6, 7, 7)),
        (lambda: torch.nn.Linear(7, 5), (3, 7)),
        (lambda: torch.nn.MaxPool2d(3, stride=2, padding=1), (2, 3, 9, 8)),
        (lambda: torch.nn.AvgPool2d(3, stride=2, padding=1), (2, 3, 9, 8)),
        (lambda: torch.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), (2, 3, 9, 8)),
        (lambda: torch.nn.AdaptiveAvgPool2d((3, 2)), (2, 3, 10, 7)),
        (lambda: torch.nn.AdaptiveAvgPool2d(2), (2, 3, 8, 8)),
        (lambda: torch.nn.GELU(), (4, 9)),
        (lambda: torch.nn.GELU("tanh"), (4, 9)),
        (lambda: torch.nn.Sigmoid(), (4, 9)),
        (lambda: torch.nn.Tanh(), (4, 9)),
        (lambda: torch.nn.Softmax(dim=1), (4, 9)),
        (lambda: torch.nn.LayerNorm(9), (4, 9)),
        (lambda: torch.nn.Flatten(), (2, 3, 4, 5)),
        (lambda: torch.nn.Dropout(0.3), (4, 9)),
    ],
)
def test_layer_matches_torch_and_reference(layer, shape) -> None:
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    expected, model = _pair(layer(), x)
    eager = model(nx.asarray(x, device="cpu")).numpy()
    np.testing.assert_allclose(eager, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_graph(model.to_graph(shape), x), expected, rtol=1e-5, atol=1e-5)


def test_batchnorm_uses_running_statistics() -> None:
    bn = torch.nn.BatchNorm2d(5).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
    x = RNG.standard_normal((2, 5, 4, 4)).astype(np.float32)
    expected, model = _pair(bn, x)
    np.testing.assert_allclose(model(nx.asarray(x)).numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_torch(batch_first: bool) -> None:
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
    with torch.no_grad():
        mha.in_proj_bias.uniform_(-0.5, 0.5)
        mha.out_proj.bias.uniform_(-0.5, 0.5)
    q = RNG.standard_normal((3, 5, 8)).astype(np.float32)
    k = RNG.standard_normal((3, 5, 8)).astype(np.float32)
    with torch.no_grad():
        expected = mha(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(k), need_weights=False)[0].numpy()
    ours = nn.from_torch(mha)
    np.testing.assert_allclose(ours(nx.asarray(q), nx.asarray(k)).numpy(), expected, rtol=1e-5, atol=1e-5)
    graph = ours.to_graph(q.shape, k.shape)
    assert graph.nodes[0].inputs == ("input_0", "input_1", "input_1")
    np.testing.assert_allclose(run_graph(graph, q, k), expected, rtol=1e-5, atol=1e-5)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 4), nn.Softmax(-1))


def _cnn() -> nn.Module:
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.Sigmoid(), nn.AvgPool2d(2), nn.Flatten(), nn.Dropout(0.1), nn.Linear(16 * 2 * 2, 5),
    )


@pytest.mark.parametrize("build, shape", [(_mlp, (6, 20)), (_cnn, (3, 3, 16, 16))])
def test_eager_matches_float64_reference(build, shape) -> None:
    nn.manual_seed(1)
    model = build()
    x = RNG.standard_normal(shape).astype(np.float32)
    ref = run_graph(model.to_graph(shape), x)
    assert ref.dtype == np.float64
    np.testing.assert_allclose(model(nx.asarray(x)).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_nested_sequentials_flatten_to_dotted_names() -> None:
    graph = _cnn().to_graph((1, 3, 16, 16))
    names = [n.name for n in graph.nodes]
    assert names[:4] == ["0.0", "0.1", "0.2", "0.3"] and names[4] == "1"
    assert graph.nodes[0].inputs == ("input",) and graph.outputs == (names[-1],)
    for prev, node in zip(graph.nodes, graph.nodes[1:]):
        assert node.inputs == (prev.output,)


def test_sequential_list_and_varargs_forms_are_equal() -> None:
    a, b = nn.Linear(3, 3), nn.ReLU()
    assert list(nn.Sequential([a, b])) == list(nn.Sequential(a, b)) == [a, b]


def test_residual_module_is_traced_as_a_dag() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(6, 6)
            self.act = nn.ReLU()

        def forward(self, x):
            return self.act(self.fc(x)) + x

    model = Block()
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    graph = model.to_graph(x.shape)
    assert [n.op for n in graph.nodes] == ["linear", "relu", "add"]
    assert graph.nodes[-1].inputs == ("act", "input")
    np.testing.assert_allclose(run_graph(graph, x), model(nx.asarray(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_untraceable_module_names_itself() -> None:
    class Shapey(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x):
            return self.inner(x) if x.shape[0] > 1 else x

    outer = nn.Sequential(nn.ReLU(), Shapey())
    with pytest.raises(CompilationError, match=r"'1'.*\.shape"):
        outer.to_graph((2, 4))


def test_state_dict_round_trip_and_atomic_load() -> None:
    nn.manual_seed(2)
    a, b = _cnn(), _cnn()
    state = a.state_dict()
    assert "0.1.running_mean" in state and all(isinstance(v, np.ndarray) for v in state.values())
    before = b.state_dict()
    bad = dict(state)
    bad["6.weight"] = np.zeros((5, 3))  # wrong shape, last key: nothing may be assigned before the check
    with pytest.raises(ShapeError, match="6.weight"):
        b.load_state_dict(bad)
    for k, v in b.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    b.load_state_dict(state)
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(a(nx.asarray(x)).numpy(), b(nx.asarray(x)).numpy())
    with pytest.raises(ModelFormatError, match="missing keys"):
        b.load_state_dict({k: v for k, v in state.items() if k != "6.bias"})


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_save_load_and_corrupted_file(tmp_path, suffix: str) -> None:
    nn.manual_seed(3)
    model = _mlp()
    path = tmp_path / f"w{suffix}"
    model.save(path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind
    clone = _mlp().load(path)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(clone.state_dict()[k], v)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    fresh = _mlp()
    before = fresh.state_dict()
    with pytest.raises(ModelFormatError, match=path.name):
        fresh.load(path)
    for k, v in fresh.state_dict().items():
        np.testing.assert_array_equal(v, before[k])


def test_pickle_is_never_loaded(tmp_path) -> None:
    path = tmp_path / "evil.npz"
    np.savez(path, obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ModelFormatError, match="evil.npz"):
        nn.load(path)
    with pytest.raises(ModelFormatError, match="unknown weights format"):
        nn.load(tmp_path / "model.pt")


def test_from_torch_round_trip_identical_outputs() -> None:
    torch.manual_seed(0)
    src = torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.BatchNorm2d(6), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(6 * 4 * 4, 10), torch.nn.GELU(), torch.nn.Linear(10, 3),
    ).eval()
    x = RNG.standard_normal((4, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        expected = src(torch.from_numpy(x)).numpy()
    model = nn.from_torch(src)
    np.testing.assert_allclose(model(nx.asarray(x)).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert set(model.state_dict()) == {k for k in src.state_dict() if not k.endswith("num_batches_tracked")}


def test_from_torch_names_unsupported_layer() -> None:
    src = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.LSTM(4, 4)))
    with pytest.raises(UnsupportedOperationError, match=r"'1\.1'.*LSTM"):
        nn.from_torch(src)
    with pytest.raises(UnsupportedOperationError, match="ceil_mode"):
        nn.from_torch(torch.nn.MaxPool2d(2, ceil_mode=True))


def test_module_to_moves_parameters_that_keep_requiring_grad() -> None:
    model = _mlp().to("cpu:0")
    assert all(p.device == nx.Device("cpu", 0) and p.requires_grad and p.is_leaf for p in model.parameters())
    assert not model.training
    assert model.train() is model and all(m.training for m in model.modules())
    assert not model.eval().training


def test_import_pulls_no_framework(run_neurenix) -> None:
    out = run_neurenix(
        "import sys, json, neurenix, neurenix_core.nn, neurenix_core.graph.compile.compiler, neurenix_core.graph.quantization, neurenix_core.graph.reference.run\n"
        "print(json.dumps([m for m in ('torch','jax','openvino','ai_edge_litert','tflite_runtime','onnxruntime') if m in sys.modules]))"
    )
    assert out == []
