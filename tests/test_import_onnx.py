"""from_onnx: torch.onnx.export of real architectures, and hand-built ONNX graphs, on cpu:0."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")  # torch.onnx.export's exporter

import model_zoo as zoo
from onnx import TensorProto, helper, numpy_helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixWarning, UnsupportedOperationError

RNG = np.random.default_rng(1)


def _export(model: object, x: object, path: Path) -> Path:
    torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False)
    return path


@pytest.mark.parametrize("name", ["resnet_block", "mobilenetv3_block", "efficientnet_block", "vit"])
def test_exported_architecture_matches_torch_on_cpu(name: str, tmp_path: Path) -> None:
    model = zoo.build(name)
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy()
    imported = nn.from_onnx(_export(model, torch.from_numpy(x), tmp_path / f"{name}.onnx"))
    got = nx.compile(imported, device="cpu:0")(x).numpy()
    assert got.shape == want.shape and zoo.max_rel_err(got, want) <= 1e-5


def test_exported_hugging_face_bert_matches_torch_on_cpu(tmp_path: Path) -> None:
    """A tiny BertModel with an attention mask (token ids and mask are int64 inputs), exported
    with torch.onnx.export; both outputs (last_hidden_state, pooler_output) in ONNX's order."""
    pytest.importorskip("transformers")
    model = zoo.tiny_bert()
    ids = RNG.integers(0, 100, (2, 9))
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0  # padding: the mask really changes the result
    kwargs = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    want = model(**kwargs)
    path = tmp_path / "bert.onnx"
    torch.onnx.export(model, (), str(path), kwargs=kwargs, input_names=["input_ids", "attention_mask"], dynamo=True, verbose=False)
    imported = nn.from_onnx(path)
    assert [(s.name, s.dtype) for s in imported.to_graph().inputs] == [("input_ids", "int64"), ("attention_mask", "int64")]
    hidden, pooled = nx.compile(imported, device="cpu:0")(ids, mask)
    assert zoo.max_rel_err(hidden.numpy(), want.last_hidden_state.detach().numpy()) <= 1e-5
    assert zoo.max_rel_err(pooled.numpy(), want.pooler_output.detach().numpy()) <= 1e-5
    unmasked = nx.compile(imported, device="cpu:0")(ids, np.ones_like(mask))[0].numpy()
    assert np.abs(unmasked[1] - hidden.numpy()[1]).max() > 1e-3  # the mask is an input, not folded away


def _model(nodes: list, inputs: list, outputs: list, inits: list, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "handmade", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_handmade_graph_with_shape_ops_split_pad_and_int64_gather() -> None:
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([0, -1], np.int64), "shape"),
             numpy_helper.from_array(np.array([2, 2], np.int64), "sizes"), numpy_helper.from_array(np.array([0, 1, 0, 0, 1, 0], np.int64), "pads")]  # (begin, end) per axis
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),            # (2, 3, 4)
        helper.make_node("Reshape", ["emb", "shape"], ["flat"]),                   # (2, 12)
        helper.make_node("Split", ["emb", "sizes"], ["lo", "hi"], axis=2),         # 2 x (2, 3, 2)
        helper.make_node("Mul", ["lo", "hi"], ["prod"]),
        helper.make_node("Pad", ["prod", "pads"], ["padded"], mode="reflect"),     # (2, 5, 2)
        helper.make_node("Shape", ["flat"], ["shp"]),
        helper.make_node("Cast", ["shp"], ["shp_f"], to=TensorProto.FLOAT),
    ]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("flat", "padded", "shp_f")]
    model = nn.from_onnx(_model(nodes, inputs, outputs, inits).SerializeToString())
    ids = RNG.integers(0, 10, (2, 3))
    flat, padded, shp = nx.compile(model, device="cpu:0")(ids)
    emb = table[ids]
    np.testing.assert_allclose(flat.numpy(), emb.reshape(2, 12), rtol=1e-6)
    np.testing.assert_allclose(padded.numpy(), np.pad(emb[..., :2] * emb[..., 2:], ((0, 0), (1, 1), (0, 0)), mode="reflect"), rtol=1e-6)
    np.testing.assert_array_equal(shp.numpy(), [2, 12])


def test_unsupported_onnx_op_names_node_and_op() -> None:
    # MaxRoiPool: an ONNX op neurenix has no mapping for (RoiAlign is its successor).
    nodes = [helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], name="the_pool", pooled_shape=[2, 2])]
    inits = [helper.make_tensor("rois", TensorProto.FLOAT, [1, 5], [0, 0, 0, 3, 3])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    with pytest.raises(UnsupportedOperationError, match=r"node 'the_pool' \(op MaxRoiPool\).*docs/models.md"):
        nn.from_onnx(model)


def test_old_opset_is_converted_with_a_warning_and_symbolic_dimensions_stay_dynamic() -> None:
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    with pytest.warns(NeurenixWarning, match="opset 11; it was converted to opset 13 with onnx.version_converter"):
        old = nn.from_onnx(_model(relu, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], out, [], opset=11))
    np.testing.assert_array_equal(old(np.array([-1.0, 2.0], np.float32)).numpy(), [0.0, 2.0])
    dynamic = _model(relu, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])], out, [])
    imported = nn.from_onnx(dynamic)
    assert imported.symbolic_graph().inputs[0].display_shape == (None, 2)
    x = np.array([[-1.0, 2.0]] * 3, np.float32)
    np.testing.assert_array_equal(imported(x).numpy(), np.maximum(x, 0))
    with pytest.raises(UnsupportedOperationError, match="symbolic dimension 'batch'.*input_shapes"):
        nn.from_onnx(dynamic, static=True)
    fixed = nn.from_onnx(dynamic, static=True, input_shapes=[(4, 2)])
    assert fixed.to_graph().inputs[0].display_shape == (4, 2)


def test_conv_transpose_exported_and_handmade_with_asymmetric_pads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)).eval()
    x = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy()
    imported = nn.from_onnx(_export(model, torch.from_numpy(x), tmp_path / "up.onnx"))
    assert "conv_transpose2d" in {n.op for n in imported.to_graph().nodes}
    got = nx.compile(imported, device="cpu:0")(x).numpy()
    assert got.shape == want.shape and zoo.max_rel_err(got, want) <= 1e-5
    # ONNX pads (begin h, begin w, end h, end w) = (0, 1, 1, 0): the full output cropped unevenly
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[0, 1, 1, 0])
    proto = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 5])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
    xs = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    full = torch.nn.functional.conv_transpose2d(torch.from_numpy(xs), torch.from_numpy(w), stride=2).numpy()
    got = nx.compile(nn.from_onnx(proto), device="cpu:0")(xs).numpy()
    np.testing.assert_allclose(got, full[:, :, 0:full.shape[2] - 1, 1:], rtol=1e-5, atol=1e-6)
