"""from_torch through torch.export: real architectures, compiled on cpu:0, match torch eager."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import model_zoo as zoo

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.reference.run import run_graph

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("name", ["resnet_block", "mobilenetv3_block", "efficientnet_block", "vit"])
def test_architecture_imports_and_matches_torch_on_cpu(name: str) -> None:
    model = zoo.build(name)
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy()
    imported = nn.from_torch(model, torch.from_numpy(x))
    compiled = nx.compile(imported, device="cpu:0")
    got = compiled(x).numpy()
    assert got.shape == want.shape and got.dtype == np.float32
    assert zoo.max_rel_err(got, want) <= 1e-5
    assert zoo.max_rel_err(run_graph(imported.to_graph(), x), want) <= 1e-5  # the float64 reference too


def test_bert_with_int64_ids_and_attention_mask() -> None:
    pytest.importorskip("transformers")
    model = zoo.tiny_bert()
    ids = torch.from_numpy(RNG.integers(0, 100, (2, 9)))
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 6:] = 0
    want = model(ids, attention_mask=mask)
    imported = nn.from_torch(model, {"input_ids": ids, "attention_mask": mask})
    assert imported.input_names == ("input_ids", "attention_mask")
    graph = imported.to_graph()
    assert [s.dtype for s in graph.inputs] == ["int64", "int64"] and len(graph.outputs) == 2
    hidden, pooled = nx.compile(imported, device="cpu:0")(ids.numpy(), mask.numpy())
    assert zoo.max_rel_err(hidden.numpy(), want.last_hidden_state.detach().numpy()) <= 1e-5
    assert zoo.max_rel_err(pooled.numpy(), want.pooler_output.detach().numpy()) <= 1e-5
    # The mask matters: padding other tokens changes the unmasked positions only through the mask.
    other = mask.clone()
    other[1, 4:] = 0
    changed = nx.compile(imported, device="cpu:0")(ids.numpy(), other.numpy())[0].numpy()
    assert np.abs(changed[1, :4] - hidden.numpy()[1, :4]).max() > 1e-4


class _Functional(torch.nn.Module):
    """Parameters used directly, functional calls, torch.cat, several inputs and a dict output."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 4))
        self.scale = torch.nn.Parameter(torch.randn(6))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.nn.functional.linear(a, self.w) * self.scale
        both = torch.cat([h, b], dim=-1)
        return {"sum": both.sum(-1), "soft": torch.softmax(both, -1), "max": both.max(-1).values}


def test_functional_forward_with_several_inputs_and_dict_outputs() -> None:
    torch.manual_seed(1)
    model = _Functional().eval()
    a, b = torch.randn(3, 4), torch.randn(3, 2)
    want = model(a, b)
    imported = nn.from_torch(model, (a, b))
    outs = nx.compile(imported, device="cpu:0")(a.numpy(), b.numpy())
    for got, key in zip(outs, ["sum", "soft", "max"]):  # dict entries in insertion order
        assert zoo.max_rel_err(got.numpy(), want[key].detach().numpy()) <= 1e-5


def test_state_dict_save_and_load_round_trip(tmp_path: object) -> None:
    model = zoo.build("resnet_block")
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    imported = nn.from_torch(model, torch.from_numpy(x))
    path = f"{tmp_path}/w.npz"
    imported.save(path)
    other = nn.from_torch(zoo.build("resnet_block", seed=5), torch.from_numpy(x))
    assert not np.allclose(other(x).numpy(), imported(x).numpy())
    other.load(path)
    np.testing.assert_allclose(other(x).numpy(), imported(x).numpy(), rtol=1e-6)


class _Unsupported(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.poisson(x.abs())  # random: a compiled graph holds no seed for it


def test_unsupported_op_names_node_op_and_remedy() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"node '.*' \(op poisson.*\).*docs/models.md"):
        nn.from_torch(_Unsupported(), torch.randn(2, 8))


def test_sequential_without_example_inputs_keeps_the_layer_path() -> None:
    seq = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    assert isinstance(nn.from_torch(seq), nn.Sequential)
    assert isinstance(nn.from_torch(seq, torch.randn(2, 4)), nn.GraphModule)


def test_import_does_not_load_frameworks() -> None:
    import subprocess
    import sys

    code = "import neurenix_core, neurenix_core.nn, sys; print([m for m in ('torch', 'onnx', 'transformers') if m in sys.modules])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


class _UpBlock(torch.nn.Module):
    """A decoder step: a strided conv down, then transposed convolutions back up (stride,
    output_padding, groups, dilation, asymmetric padding of the ONNX form)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.refine = torch.nn.ConvTranspose2d(6, 4, (3, 2), stride=(1, 2), padding=(2, 0), dilation=(2, 1), bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.refine(torch.relu(self.up(torch.relu(self.down(x)))))


def test_conv_transpose_imports_and_matches_torch_on_cpu() -> None:
    torch.manual_seed(0)
    model = _UpBlock().eval()
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy()
    imported = nn.from_torch(model, torch.from_numpy(x))
    assert [n.op for n in imported.to_graph().nodes].count("conv_transpose2d") == 2
    got = nx.compile(imported, device="cpu:0")(x).numpy()
    assert got.shape == want.shape == (2, 4, 16, 32)
    assert zoo.max_rel_err(got, want) <= 1e-5


def test_torch_gather_is_gather_elements() -> None:
    class TopK(torch.nn.Module):
        def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            return torch.gather(x, 1, idx) * 2

    x = torch.from_numpy(RNG.standard_normal((3, 5)).astype(np.float32))
    idx = torch.from_numpy(RNG.integers(0, 5, (3, 2)))
    imported = nn.from_torch(TopK(), (x, idx))
    assert "gather_elements" in {n.op for n in imported.to_graph().nodes}
    got = nx.compile(imported, device="cpu:0")(x.numpy(), idx.numpy()).numpy()
    np.testing.assert_allclose(got, (torch.gather(x, 1, idx) * 2).numpy(), rtol=1e-6)
