"""Self-contained model files (``nx.nn.save`` / ``nx.nn.load`` with ``.nxm``, docs/model-files.md).

The must-show: a Hugging Face BertModel and a ResNet block imported from torch are saved, then a
fresh interpreter in which torch, transformers and onnx cannot be imported loads the files and
runs them on cpu:0 and the emulated npu:0, tpu:0 (fp32, within 1e-6 of before saving) and
edgetpu:0 (int8 with the saved plan, bit-identical). Then: the loaded graph equals the saved one
node by node, and bad files are ModelFormatError.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import ModelFormatError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.symbolic import SymDim
from neurenix_core.graph.models.graph_module import GraphModule
from neurenix_core.io import array_file

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "tests" / "support" / "no_torch_runner.py"
DEVICES = ("cpu:0", "npu:0", "tpu:0")  # fp32; edgetpu:0 runs the int8 plan


def _outputs(out: Any) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(o) for o in (out if isinstance(out, tuple) else (out,)))


@pytest.fixture(scope="module")
def imported() -> dict[str, tuple[GraphModule, list[np.ndarray]]]:
    """The two torch models as GraphModules, with the inputs they are run on."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from model_zoo import build, tiny_bert

    rng = np.random.default_rng(0)
    cnn = nx.nn.from_torch(build("resnet_block"), torch.randn(2, 3, 16, 16))
    ids = {"input_ids": torch.randint(0, 100, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.int64)}
    bert = nx.nn.from_torch(tiny_bert(), ids)
    mask = np.ones((2, 8), np.int64)
    mask[1, 5:] = 0  # a padded sequence: the mask path is exercised
    return {
        "cnn": (cnn, [rng.standard_normal((3, 3, 16, 16)).astype(np.float32)]),  # batch 3: the dynamic axis, not the example's 2
        "bert": (bert, [rng.integers(0, 100, (2, 8)).astype(np.int64), mask]),
    }


def _before_saving(name: str, model: GraphModule, inputs: list[np.ndarray], folder: Path) -> dict[str, tuple[np.ndarray, ...]]:
    """Saves ``model`` with an int8 plan and returns its outputs per device, computed before saving."""
    plan = nx.quantization.calibrate(model, [inputs[0] if len(inputs) == 1 else tuple(inputs)], progress=False)
    nx.nn.save(model, folder / f"{name}.nxm", quantization_plan=plan)
    np.savez(folder / f"{name}.inputs.npz", *inputs)
    (folder / f"{name}.devices.txt").write_text("\n".join([*(f"{d} fp32" for d in DEVICES), "edgetpu:0 default"]))
    want = {d: _outputs(nx.compile(model, device=d, precision="fp32", outputs="host", progress=False)(*inputs)) for d in DEVICES}
    int8 = nx.compile(model, device="edgetpu:0", quantize=plan, outputs="host", progress=False)
    assert int8.precision == "int8"
    want["edgetpu:0"] = _outputs(int8(*inputs))
    return want


@pytest.mark.filterwarnings("ignore::UserWarning")  # the fallback lines of the partly-placed edgetpu:0 int8 models
def test_saved_models_run_without_torch_on_every_device(imported: Any, tmp_path: Path) -> None:
    want = {name: _before_saving(name, model, inputs, tmp_path) for name, (model, inputs) in imported.items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(NEURENIX_EMULATE="tpu,npu,edgetpu", JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(RUNNER), str(tmp_path)], capture_output=True, text=True, env=env, timeout=400,
                          check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name, per_device in want.items():
        assert f"{name} edgetpu:0: int8" in proc.stdout, proc.stdout
        for device, before in per_device.items():
            with np.load(tmp_path / f"{name}.{device.replace(':', '')}.out.npz") as data:
                after = [data[f"arr_{i}"] for i in range(len(data.files))]
            assert len(after) == len(before), (name, device)
            for a, b in zip(after, before):
                assert a.shape == b.shape and a.dtype == b.dtype, (name, device, a.shape, b.shape)
                if device == "edgetpu:0":
                    np.testing.assert_array_equal(a, b, err_msg=f"{name} on {device}: int8 results changed")
                else:
                    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6, err_msg=f"{name} on {device}")


def _assert_same_graph(a: Graph, b: Graph) -> None:
    assert a.inputs == b.inputs and a.outputs == b.outputs and a.limits == b.limits
    assert len(a.nodes) == len(b.nodes)
    for x, y in zip(a.nodes, b.nodes):
        assert (x.name, x.op, x.inputs, x.output) == (y.name, y.op, y.inputs, y.output)
        # repr keeps types: a tuple is not a list, np.float32(0.5) is not 0.5, SymDim stays SymDim
        assert repr(dict(x.attrs)) == repr(dict(y.attrs)), x.name
        assert sorted(x.params) == sorted(y.params), x.name
        for k in x.params:
            p, q = np.asarray(x.params[k]), np.asarray(y.params[k])
            assert p.dtype == q.dtype and p.shape == q.shape and p.tobytes() == q.tobytes(), (x.name, k)


def test_loaded_graph_equals_saved_graph_and_keeps_dynamic_axes(imported: Any, tmp_path: Path) -> None:
    model, _ = imported["bert"]
    nx.nn.save(model, tmp_path / "bert.nxm")
    loaded = nx.nn.load(tmp_path / "bert.nxm")
    assert isinstance(loaded, GraphModule) and loaded.quantization_plan is None
    _assert_same_graph(model.symbolic_graph(), loaded.symbolic_graph())
    assert loaded.symbolic_graph().fingerprint() == model.symbolic_graph().fingerprint()
    assert [s.display_shape for s in loaded.symbolic_graph().inputs] == [(None, None), (None, None)]
    ids = np.random.default_rng(3).integers(0, 100, (3, 5)).astype(np.int64)  # not the example's (2, 8)
    for a, b in zip(_outputs(model(ids, np.ones_like(ids))), _outputs(loaded(ids, np.ones_like(ids)))):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- small graphs, no torch
def _tiny(seed: int = 0) -> GraphModule:
    rng = np.random.default_rng(seed)
    x = TensorSpec("x", (2, 4), "float32", dynamic=(0,))
    nodes = (
        Node("fc", "linear", ("x",), "h", {}, {"weight": rng.standard_normal((6, 4)).astype(np.float32),
                                               "bias": rng.standard_normal(6).astype(np.float32)}),
        Node("act", "leaky_relu", ("h",), "a", {"alpha": np.float32(0.125)}),
        Node("clip", "clip", ("a",), "c", {"min": float("-inf"), "max": 3.0}),
        Node("shape", "reshape", ("c",), "r", {"shape": (SymDim("d0_0"), 3, 2)}),
        Node("scale", "constant", (), "k", {}, {"value": np.asarray(2.0, np.float32)}),
        Node("mul", "mul", ("r", "k"), "y"),
    )
    return GraphModule(Graph((x,), nodes, ("y",)), "tiny")


def test_tagged_values_plan_and_module_state_survive(tmp_path: Path) -> None:
    model = _tiny()
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    plan = nx.quantization.calibrate(model, [x[:2]], progress=False)  # calibration runs the example shapes
    model.train(True)
    dict(model.named_parameters())["fc.bias"].requires_grad_(False)
    nx.nn.save(model, tmp_path / "t.nxm", quantization_plan=plan)
    loaded = nx.nn.load(tmp_path / "t.nxm")
    _assert_same_graph(model.symbolic_graph(), loaded.symbolic_graph())
    assert loaded.training is True
    assert {k: p.requires_grad for k, p in loaded.named_parameters()} == {"fc.weight": True, "fc.bias": False}
    got = loaded.quantization_plan
    assert (got.bits, got.method, got.dynamic) == (plan.bits, plan.method, plan.dynamic)
    for table in ("activations", "weights"):
        a, b = getattr(plan, table), getattr(got, table)
        assert sorted(a) == sorted(b)
        for k in a:
            assert (a[k].bits, a[k].axis, a[k].qmin, a[k].qmax) == (b[k].bits, b[k].axis, b[k].qmin, b[k].qmax)
            np.testing.assert_array_equal(a[k].scale, b[k].scale)
            assert np.asarray(a[k].scale).dtype == np.asarray(b[k].scale).dtype
            np.testing.assert_array_equal(a[k].zero_point, b[k].zero_point)
    model.eval(), loaded.eval()
    np.testing.assert_array_equal(model(x).numpy(), loaded(x).numpy())  # batch 5: the dynamic axis


def test_every_value_tag_round_trips(tmp_path: Path) -> None:
    """Attribute values of every kind come back with their types (the graph is saved, not run)."""
    attrs = {"t": (1, (2, SymDim("d0_0 * 2")), [3.5, float("nan")]), "d": {(0, 1): "a", "k": None}, "s": np.int64(-3),
             "h": np.float16(0.1), "dt": np.dtype("int32"), "inf": float("-inf"), "arr": np.arange(6, dtype=np.uint8).reshape(2, 3),
             "flag": True}
    graph = Graph((TensorSpec("x", (2,), dynamic=(0,)),), (Node("n", "relu", ("x",), "y", attrs),), ("y",), limits=((0, 0, 64),))
    nx.nn.save(GraphModule(graph), tmp_path / "tags.nxm")
    back = nx.nn.load(tmp_path / "tags.nxm").symbolic_graph()
    got = back.nodes[0].attrs
    assert repr({k: v for k, v in attrs.items() if k not in ("t", "arr")}) == repr({k: v for k, v in got.items() if k not in ("t", "arr")})
    assert got["t"][:2] == (1, (2, SymDim("d0_0 * 2"))) and got["t"][2][0] == 3.5 and np.isnan(got["t"][2][1])
    assert got["arr"].dtype == np.uint8 and np.array_equal(got["arr"], attrs["arr"])
    assert back.limits == ((0, 0, 64),)


def test_a_pre_quantized_model_keeps_its_own_plan(tmp_path: Path) -> None:
    plain = _tiny()
    plan = nx.quantization.calibrate(plain, [np.ones((2, 4), np.float32)], progress=False)
    nx.nn.save(GraphModule(plain.symbolic_graph(), "qdq", quantization_plan=plan), tmp_path / "q.nxm")
    got = nx.nn.load(tmp_path / "q.nxm").quantization_plan
    assert got is not None and sorted(got.activations) == sorted(plan.activations) and sorted(got.weights) == ["fc"]


def test_file_is_the_safetensors_layout(tmp_path: Path) -> None:
    """The weights read back with the safetensors package under their state_dict names."""
    st = pytest.importorskip("safetensors.numpy")
    model = _tiny()
    nx.nn.save(model, tmp_path / "t.nxm")
    tensors = st.load_file(str(tmp_path / "t.nxm"))
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(tensors[key], value)


def test_weights_formats_are_unchanged(tmp_path: Path) -> None:
    model = _tiny()
    model.save(tmp_path / "w.npz")
    nx.nn.save(model, tmp_path / "w2.npz")
    for path in ("w.npz", "w2.npz"):
        state = nx.nn.load(tmp_path / path)
        assert isinstance(state, dict) and sorted(state) == ["fc.bias", "fc.weight"]
    with pytest.raises(TypeError, match="quantization_plan"):
        nx.nn.save(model, tmp_path / "w3.npz", quantization_plan=nx.quantization.calibrate(model, [np.ones((2, 4), np.float32)],
                                                                                             progress=False))


def test_what_cannot_be_saved_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedOperationError, match="GraphModule"):
        nx.nn.save(nx.nn.Sequential(nx.nn.Linear(2, 2)), tmp_path / "s.nxm")
    graph = Graph((TensorSpec("x", (2,)),), (Node("f", "relu", ("x",), "y", {}),), ("y",))
    odd = GraphModule(Graph(graph.inputs, (Node("f", "relu", ("x",), "y", {"hook": object()}),), ("y",)))
    with pytest.raises(UnsupportedOperationError, match="node 'f'.*'hook'"):
        nx.nn.save(odd, tmp_path / "odd.nxm")
    assert not (tmp_path / "odd.nxm").exists()


# ----------------------------------------------------------------------------- bad files
def _saved(tmp_path: Path) -> bytes:
    nx.nn.save(_tiny(), tmp_path / "good.nxm")
    return (tmp_path / "good.nxm").read_bytes()


def _rewrite(blob: bytes, edit: Any) -> bytes:
    """The file with its metadata changed by ``edit`` (the data kept as it is)."""
    tensors, metadata = array_file.decode(blob, Path("x"))
    edit(metadata)
    return b"".join(array_file.encode(tensors, metadata))


def _model_doc(metadata: dict[str, str], change: Any) -> None:
    doc = json.loads(metadata["model"])
    change(doc)
    metadata["model"] = json.dumps(doc)


def _bad_files(blob: bytes) -> dict[str, tuple[bytes, str]]:
    header_len = struct.unpack("<Q", blob[:8])[0]
    flipped = bytearray(blob)
    flipped[8 + header_len + 5] ^= 0x40  # a byte of the first weight
    return {
        "empty": (b"", "too short"),
        "truncated": (blob[:-7], "truncated"),
        "header cut": (blob[: 8 + header_len // 2], "truncated"),
        "not json": (blob[:8] + b"\xff" * header_len + blob[8 + header_len:], "not JSON"),
        "weight byte flipped": (bytes(flipped), "SHA-256"),
        "newer version": (_rewrite(blob, lambda m: m.update(format_version="2")), "version 2.*pip install -U neurenix-core"),
        "not a model file": (_rewrite(blob, lambda m: m.pop("format")), "not a neurenix model file"),
        "unknown op": (_rewrite(blob, lambda m: _model_doc(m, lambda d: d["graph"]["nodes"][1].update(op="frobnicate"))), "malformed"),
        "unknown tag": (_rewrite(blob, lambda m: _model_doc(m, lambda d: d["graph"]["nodes"][1]["attrs"].update(alpha={"$new": 1}))),
                        "unknown value tag"),
        "missing tensor": (_rewrite(blob, lambda m: _model_doc(m, lambda d: d["graph"]["nodes"][0]["params"].update(weight="gone"))),
                           "tensor 'gone'"),
    }


@pytest.mark.parametrize("case", ["empty", "truncated", "header cut", "not json", "weight byte flipped", "newer version",
                                  "not a model file", "unknown op", "unknown tag", "missing tensor"])
def test_bad_files_are_model_format_errors(tmp_path: Path, case: str) -> None:
    data, message = _bad_files(_saved(tmp_path))[case]
    path = tmp_path / "bad.nxm"
    path.write_bytes(data)
    with pytest.raises(ModelFormatError, match=message) as info:
        nx.nn.load(path)
    assert "bad.nxm" in str(info.value)


def test_a_weights_file_named_nxm_is_refused(tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    st.save_file({"w": np.ones(3, np.float32)}, str(tmp_path / "w.nxm"))
    with pytest.raises(ModelFormatError, match="not a neurenix model file"):
        nx.nn.load(tmp_path / "w.nxm")
    with pytest.raises(ModelFormatError, match="no such model file"):
        nx.nn.load(tmp_path / "missing.nxm")
