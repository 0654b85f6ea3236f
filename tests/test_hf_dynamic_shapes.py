"""Hugging Face encoders imported with a batch-1 example run at other shapes (issue 26).

Each encoder of ``hf_zoo.ENCODERS`` (tiny configs, random weights) is imported once with a
batch-1, length-16 example; no axis may be pinned (no NeurenixWarning), and the model runs at
batch 3 / length 8 and at batch 2 / length 11 on cpu:0 within 1e-5 of torch (max error relative
to the largest output value), and at batch 3 / length 8 on every emulated device (cuda, tpu, npu,
edgetpu) within 1e-4, compiled with ``precision="fp32"`` (the default precision of some devices
is lower). The device sweep covers bert, vit and whisper_encoder (text, image and audio front
ends) to stay cheap.

A model whose code really fixes an axis is named in one warning (a FallbackError under policy
'error'); torch.export's own ``Dim("batch")`` and ``Dim.DYNAMIC`` work with a size-1 example; an
ONNX export of BERT with a batch-1 example and dynamic axes runs at batch 3 / length 8.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_zoo as hz

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import FallbackError, NeurenixWarning

CPU_TOL = 1e-5  # the NumPy opset interpreter in float32 vs torch eager
DEVICE_TOL = 1e-4  # a plugin runtime's fp32 kernels vs torch eager
SHAPES = ((3, 8), (2, 11))  # (batch, length); images and Whisper frames ignore the length
DEVICES = ("cuda:0", "tpu:0", "npu:0", "edgetpu:0")
DEVICE_MODELS = ("bert", "vit", "whisper_encoder")


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _import_batch_1(name: str) -> tuple[Any, Callable[[int, int], dict[str, Any]], Any]:
    model, inputs = hz.build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)  # no axis may come out pinned
        imported = nn.from_torch(model, inputs(1, 16))
    return model, inputs, imported


@pytest.fixture(scope="module")
def encoders() -> Callable[[str], tuple[Any, Any, Any]]:
    """Each encoder imported once for the whole module."""
    cache: dict[str, tuple[Any, Any, Any]] = {}

    def get(name: str) -> tuple[Any, Any, Any]:
        if name not in cache:
            cache[name] = _import_batch_1(name)
        return cache[name]

    return get


def _check(model: Any, inputs: Any, compiled: Any, tol: float, shapes: tuple[tuple[int, int], ...] = SHAPES) -> None:
    for batch, seq in shapes:
        x = inputs(batch, seq)
        with torch.no_grad():
            want = hz.outputs(model(**x))
        got = compiled(*[v.numpy() for v in x.values()])
        got = got if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            err = _rel_err(g.numpy(), w)
            assert err <= tol, ((batch, seq), err)


@pytest.mark.parametrize("name", list(hz.ENCODERS))
def test_encoder_imported_at_batch_1_runs_at_other_shapes_on_cpu(name: str, encoders: Any) -> None:
    model, inputs, imported = encoders(name)
    specs = imported.symbolic_graph().inputs
    example = inputs(1, 16)
    assert [s.shape for s in specs] == [tuple(v.shape) for v in example.values()]  # the user's example, not the trace's
    for spec, value in zip(specs, example.values()):
        assert 0 in spec.dynamic, spec  # the batch
        if value.dim() == 2 and not value.dtype.is_floating_point:
            assert spec.display_shape == (None, None), spec  # token ids and mask: batch and length
    _check(model, inputs, nx.compile(imported, device="cpu:0"), CPU_TOL)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", DEVICE_MODELS)
def test_encoder_imported_at_batch_1_runs_at_other_shapes_on_every_device(name: str, device: str, encoders: Any) -> None:
    model, inputs, imported = encoders(name)
    # one shape per device (each new shape is a compilation on tpu/npu/edgetpu); cpu:0 runs both
    _check(model, inputs, nx.compile(imported, device=device, precision="fp32"), DEVICE_TOL, SHAPES[:1])


class _FixesTheBatch(torch.nn.Module):
    """``reshape(2, 32)``: the batch must be 4 (4 * 16 elements); torch.export fixes it."""

    def forward(self, x: Any) -> Any:
        return x.reshape(2, 32) * 2


class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, x: Any) -> Any:
        return self.fc(x).relu()


def test_an_axis_the_model_fixes_is_named_in_one_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = nn.from_torch(_FixesTheBatch(), torch.randn(4, 16))
    ours = [w for w in caught if issubclass(w.category, NeurenixWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    text = str(ours[0].message)
    assert "input 'x' axis 0 (example size 4)" in text and "16*x.shape[0] == 64" in text, text
    assert imported.symbolic_graph().inputs[0].dynamic == ()
    x = torch.randn(4, 16)
    got = nx.compile(imported, device="cpu:0")(x.numpy()).numpy()
    assert _rel_err(got, _FixesTheBatch()(x).numpy()) <= CPU_TOL


def test_a_size_1_axis_the_model_fixes_says_why() -> None:
    class ViewFourByFour(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x.view(4, 4) + 1  # only a batch of 1 has 16 elements

    with pytest.warns(NeurenixWarning, match=r"input 'x' axis 0 \(example size 1\).*traced at size 2 instead, the export failed"):
        nn.from_torch(ViewFourByFour(), torch.randn(1, 16))


def test_code_that_branches_on_size_1_keeps_the_example_size() -> None:
    """A size-2 trace cannot see ``if batch == 1`` (torch assumes sizes >= 2 and records no
    guard); the import checks the graph at the example's size and keeps batch 1 instead."""

    class BranchOnOne(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x * 2 if x.shape[0] == 1 else x * 3

    with pytest.warns(NeurenixWarning, match=r"input 'x' axis 0 \(example size 1\).*computes differently when that size is 1"):
        imported = nn.from_torch(BranchOnOne(), torch.randn(1, 4))
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(nx.compile(imported, device="cpu:0")(x).numpy(), x * 2)


def test_a_fixed_axis_is_a_fallback_error_under_policy_error() -> None:
    with nx.fallback_policy("error"), pytest.raises(FallbackError, match=r"input 'x' axis 0 \(example size 4\)"):
        nn.from_torch(_FixesTheBatch(), torch.randn(4, 16))


@pytest.mark.parametrize("dim", ["Dim('batch')", "Dim.DYNAMIC", "Dim.AUTO"])
def test_torch_dims_work_with_a_size_1_example(dim: str) -> None:
    from torch.export import Dim

    spec = {"Dim('batch')": Dim("batch"), "Dim.DYNAMIC": Dim.DYNAMIC, "Dim.AUTO": Dim.AUTO}[dim]
    model = _Linear().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        imported = nn.from_torch(model, torch.randn(1, 16), dynamic_shapes=({0: spec},))
    assert imported.symbolic_graph().inputs[0].display_shape == (None, 16)
    compiled = nx.compile(imported, device="cpu:0")
    for batch in (1, 3):
        x = torch.randn(batch, 16)
        assert _rel_err(compiled(x.numpy()).numpy(), model(x).detach().numpy()) <= CPU_TOL


def test_onnx_bert_exported_at_batch_1_runs_at_batch_3_length_8(tmp_path: Path) -> None:
    pytest.importorskip("onnxscript")
    from torch.export import Dim

    model, inputs = hz.build("bert")
    example = inputs(1, 16)
    path = tmp_path / "bert.onnx"
    axes = {0: Dim("batch"), 1: Dim("length")}
    torch.onnx.export(model, (), str(path), kwargs=example, input_names=list(example), dynamo=True, verbose=False,
                      dynamic_shapes={"input_ids": axes, "attention_mask": axes})
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        imported = nn.from_onnx(path)
    assert [s.display_shape for s in imported.symbolic_graph().inputs] == [(None, None), (None, None)]
    _check(model, inputs, nx.compile(imported, device="cpu:0"), CPU_TOL)


def _onnx_size_times_x() -> Any:
    """Y = X * float(X.shape[0]): a size mixed with run-time values has no symbolic form."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Shape", ["X"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["b"]),
             helper.make_node("Cast", ["b"], ["f"], to=TensorProto.FLOAT), helper.make_node("Mul", ["X", "f"], ["Y"])]
    graph = helper.make_graph(nodes, "size_times_x", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor("zero", TensorProto.INT64, [], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_onnx_dim_param_the_import_fixes_is_named_in_one_warning() -> None:
    model = _onnx_size_times_x()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = nn.from_onnx(model, input_shapes=[(3, 4)])
    ours = [w for w in caught if issubclass(w.category, NeurenixWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "input 'X' axis 0 (dim_param 'batch', example size 3)" in str(ours[0].message), str(ours[0].message)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(nx.compile(imported, device="cpu:0")(x).numpy(), x * np.float32(3), rtol=0, atol=0)
    with nx.fallback_policy("error"), pytest.raises(FallbackError, match="dim_param 'batch'"):
        nn.from_onnx(model, input_shapes=[(3, 4)])
