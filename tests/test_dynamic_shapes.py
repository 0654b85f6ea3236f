"""Imported models run at shapes other than the example's: symbolic dimensions (issue 13).

A ViT (class token expanded to the batch) and a Hugging Face BERT (position ids and reshapes
sized by the sequence) are imported once, at one shape, and run at others on cpu:0 (fp32 within
1e-5 of torch eager) and on a compiling plugin (npu:0 through OpenVINO, fp32 within 1e-4), which
shows each input shape reaches the plugin as a static graph. ``static=True`` keeps the example's
shapes only; save/load keeps the symbolic attributes working; ONNX exports with a dynamic batch
axis run at other batches.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import model_zoo as zoo

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import FallbackError, NeurenixWarning, ShapeError
from neurenix_core.graph.ir.symbolic import SymDim, is_symbolic

FP32_CPU = 1e-5  # the NumPy opset interpreter in float32 vs torch eager
FP32_PLUGIN = 1e-4  # a plugin runtime's fp32 kernels (OpenVINO) vs torch eager


def _vit() -> tuple[Any, Any]:
    model = zoo.build("vit")
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)  # the dynamic import must not fall back to static
        imported = nn.from_torch(model, torch.zeros(2, 3, 16, 16))
    return model, imported


def _bert() -> tuple[Any, Any]:
    transformers = pytest.importorskip("transformers")
    assert transformers
    model = zoo.tiny_bert()
    ids = torch.zeros(2, 9, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        imported = nn.from_torch(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    return model, imported


def _bert_inputs(rng: np.random.Generator, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    ids = rng.integers(0, 100, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq // 2 :] = 0  # padding in the first sequence: the mask path really matters
    return ids, mask


def _np(out: Any) -> list[np.ndarray]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [np.asarray(o.numpy()) for o in outs]


def _check_vit(model: Any, compiled: Any, batches: tuple[int, ...], tol: float) -> None:
    rng = np.random.default_rng(0)
    for batch in batches:
        x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
        got = _np(compiled(x))[0]
        want = model(torch.from_numpy(x)).detach().numpy()
        assert got.shape == want.shape == (batch, 10)
        assert zoo.max_rel_err(got, want) <= tol, (batch, zoo.max_rel_err(got, want))


def _check_bert(model: Any, compiled: Any, shapes: tuple[tuple[int, int], ...], tol: float) -> None:
    rng = np.random.default_rng(1)
    for batch, seq in shapes:
        ids, mask = _bert_inputs(rng, batch, seq)
        got = _np(compiled(ids, mask))
        want = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
        for g, w in zip(got, (want.last_hidden_state.detach().numpy(), want.pooler_output.detach().numpy())):
            assert g.shape == w.shape
            assert zoo.max_rel_err(g, w) <= tol, ((batch, seq), zoo.max_rel_err(g, w))


def test_vit_imported_at_batch_2_runs_at_other_batches_on_cpu() -> None:
    model, imported = _vit()
    spec = imported.symbolic_graph().inputs[0]
    assert spec.dynamic == (0,) and spec.display_shape == (None, 3, 16, 16)
    assert "None, 3, 16, 16" in repr(spec)
    # The class-token expand is sized by the batch: a SymDim, not the example's 2.
    expands = [n for n in imported.symbolic_graph().nodes if n.op == "expand"]
    assert expands and all(isinstance(n.attrs["shape"][0], SymDim) for n in expands)
    _check_vit(model, nx.compile(imported, device="cpu:0"), (5, 1, 3), FP32_CPU)


def test_bert_imported_at_2x9_runs_at_other_batches_and_lengths_on_cpu() -> None:
    model, imported = _bert()
    assert [s.display_shape for s in imported.symbolic_graph().inputs] == [(None, None), (None, None)]
    _check_bert(model, nx.compile(imported, device="cpu:0"), ((3, 12), (1, 5), (4, 64)), FP32_CPU)


def test_specialization_is_static_for_backends() -> None:
    _, imported = _bert()
    # to_graph() is static (the example's shapes), as plugins' own conversion APIs expect
    example = imported.to_graph()
    assert [s.shape for s in example.inputs] == [(2, 9), (2, 9)] and not example.dynamic
    assert not any(is_symbolic(dict(n.attrs)) for n in example.nodes)
    graph = imported.symbolic_graph()
    assert graph.dynamic and any(is_symbolic(dict(n.attrs)) for n in graph.nodes)
    shaped = graph.with_input_shapes((3, 12), (3, 12))
    assert not shaped.dynamic and not any(is_symbolic(dict(n.attrs)) for n in shaped.nodes)
    assert [s.shape for s in shaped.inputs] == [(3, 12), (3, 12)]


def test_sequence_past_max_positions_is_a_shape_error() -> None:
    _, imported = _bert()
    ids = np.zeros((1, 65), np.int64)  # max_position_embeddings is 64
    with pytest.raises(ShapeError):
        nx.compile(imported, device="cpu:0")(ids, np.ones_like(ids))


@pytest.mark.parametrize("device", ["npu:0", "tpu:0"])
def test_dynamic_models_reach_a_compiling_plugin(device: str) -> None:
    pytest.importorskip({"npu:0": "openvino", "tpu:0": "jax"}[device])
    vit, vit_imp = _vit()
    _check_vit(vit, nx.compile(vit_imp, device=device, precision="fp32"), (1, 4), FP32_PLUGIN)
    bert, bert_imp = _bert()
    compiled = nx.compile(bert_imp, device=device, precision="fp32")
    _check_bert(bert, compiled, ((3, 12), (1, 7)), FP32_PLUGIN)
    placement = compiled.placement  # of the last shape compiled: what the plugin received
    assert [s.shape for s in placement.graph.inputs] == [(1, 7), (1, 7)]
    assert not placement.graph.dynamic and not any(is_symbolic(dict(n.attrs)) for n in placement.graph.nodes)
    assert not placement.partitioned, placement.off_device


def test_save_load_round_trip_keeps_dynamic_shapes(tmp_path: Path) -> None:
    model, imported = _vit()
    path = tmp_path / "vit.npz"
    imported.save(path)
    other = zoo.build("vit", seed=1)  # different weights: the loaded ones must win
    restored = nn.from_torch(other, torch.zeros(3, 3, 16, 16))
    restored.load(path)
    assert restored.symbolic_graph().fingerprint() == imported.symbolic_graph().fingerprint()
    _check_vit(model, nx.compile(restored, device="cpu:0"), (6, 2), FP32_CPU)


def test_static_true_keeps_the_example_shapes() -> None:
    model = zoo.build("vit")
    imported = nn.from_torch(model, torch.zeros(2, 3, 16, 16), static=True)
    assert imported.symbolic_graph().inputs[0].dynamic == ()
    compiled = nx.compile(imported, device="cpu:0")
    compiled(np.zeros((2, 3, 16, 16), np.float32))
    with pytest.raises(ShapeError, match="concat"):
        compiled(np.zeros((5, 3, 16, 16), np.float32))


def test_explicit_dynamic_shapes_choose_the_axes() -> None:
    pytest.importorskip("transformers")
    model = zoo.tiny_bert()
    ids = torch.zeros(2, 9, dtype=torch.long)
    batch_only = {"input_ids": {0: torch.export.Dim("batch")}}
    imported = nn.from_torch(model, {"input_ids": ids}, dynamic_shapes=batch_only)
    assert imported.symbolic_graph().inputs[0].display_shape == (None, 9)
    out = nx.compile(imported, device="cpu:0")(np.ones((3, 9), np.int64))
    assert _np(out)[0].shape == (3, 9, 32)
    with pytest.raises(ShapeError):
        nx.compile(imported, device="cpu:0")(np.ones((3, 10), np.int64))


class _DataDependentArange(torch.nn.Module):
    """What the importer cannot keep symbolic: fixed rows of the dynamic batch axis."""

    def forward(self, x: Any) -> Any:
        return x.sum(1)[torch.tensor([0, 2])] * 2


def test_unsymbolic_size_falls_back_to_static_with_a_warning() -> None:
    x = torch.randn(3, 4)
    with pytest.warns(NeurenixWarning, match="static shapes"):
        imported = nn.from_torch(_DataDependentArange(), x)
    assert imported.symbolic_graph().inputs[0].dynamic == ()
    got = _np(nx.compile(imported, device="cpu:0")(x.numpy()))[0]
    np.testing.assert_allclose(got, _DataDependentArange()(x).numpy(), rtol=1e-5, atol=1e-6)
    with nx.fallback_policy("error"), pytest.raises(FallbackError, match="static shapes"):
        nn.from_torch(_DataDependentArange(), x)


def test_onnx_vit_with_dynamic_batch_runs_at_other_batches(tmp_path: Path) -> None:
    pytest.importorskip("onnxscript")
    model = zoo.build("vit")
    path = tmp_path / "vit.onnx"
    torch.onnx.export(model, (torch.zeros(2, 3, 16, 16),), str(path), dynamo=True, verbose=False,
                      dynamic_shapes=({0: torch.export.Dim("batch")},))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        imported = nn.from_onnx(path)
    assert imported.symbolic_graph().inputs[0].display_shape == (None, 3, 16, 16)
    _check_vit(model, nx.compile(imported, device="cpu:0"), (2, 5, 1), FP32_CPU)


def test_onnx_bert_with_dynamic_batch_runs_at_other_batches(tmp_path: Path) -> None:
    pytest.importorskip("onnxscript")
    model, _ = _bert()
    ids = torch.zeros(2, 9, dtype=torch.long)
    path = tmp_path / "bert.onnx"
    batch = torch.export.Dim("batch")
    torch.onnx.export(model, (), str(path), kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                      input_names=["input_ids", "attention_mask"], dynamo=True, verbose=False,
                      dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        imported = nn.from_onnx(path)
    assert [s.display_shape for s in imported.symbolic_graph().inputs] == [(None, 9), (None, 9)]
    _check_bert(model, nx.compile(imported, device="cpu:0"), ((3, 9), (1, 9)), FP32_CPU)


def test_range_over_the_batch_is_capped_and_says_so() -> None:
    from neurenix_core.graph.ir.symbolic import ARANGE_CAP

    _, imported = _bert()  # its attention mask indexes arange(batch): a constant range, capped
    graph = imported.symbolic_graph()
    assert (0, 0, ARANGE_CAP) in graph.limits  # the batch axis (input_ids axis 0) sizes that range
    graph.with_input_shapes((ARANGE_CAP, 9), (ARANGE_CAP, 9))
    with pytest.raises(ShapeError, match=f"'input_ids' axis 0 is {ARANGE_CAP + 1}.*up to {ARANGE_CAP}"):
        graph.with_input_shapes((ARANGE_CAP + 1, 9), (ARANGE_CAP + 1, 9))


def test_symdim_expressions_are_evaluated_without_eval() -> None:
    d = SymDim("(4 * d0_0) + (d1_1 // 2)")
    assert d.evaluate({(0, 0): 3, (1, 1): 9}) == 16
    assert (d * 2 + 1).evaluate({(0, 0): 1, (1, 1): 2}) == 11
    assert (2 - SymDim("17*d0_0 + 1")).evaluate({(0, 0): 1}) == -16  # precedence kept
    assert (-SymDim("d0_0 - 3")).evaluate({(0, 0): 1}) == 2
    assert d.variables == frozenset({(0, 0), (1, 1)})
    from neurenix_core.graph.ir.symbolic import NotSymbolicError

    for bad in ("__import__('os')", "d0_0.real", "1.5 * d0_0", "x + 1"):
        with pytest.raises(NotSymbolicError):
            SymDim(bad)
