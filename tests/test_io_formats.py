"""The core's one array file and graph codec (neurenix_core.io), as model files and compiled
artifacts use them: files written before the two were merged still load (fixtures written by that
code), complex dtypes, 64-byte alignment, memory-mapped read-only / copy-on-write views, and bad
files as the typed error naming the file and the remedy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import ArtifactFormatError, ModelFormatError
from neurenix_core.graph.compile.artifact_arrays import read_arrays, write_arrays
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.symbolic import SymDim
from neurenix_core.graph.models.graph_module import GraphModule
from neurenix_core.graph.models.model_file import load_model
from neurenix_core.io import array_file

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "serialization"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- files written before the merge
def test_a_model_file_written_before_the_merge_loads() -> None:
    model = nx.nn.load(FIXTURES / "v1_model.nxm")
    with np.load(FIXTURES / "v1_model.expected.npz") as data:
        np.testing.assert_array_equal(model(data["x"]).numpy(), data["y"])  # batch 5: the dynamic axis came back
    attrs = {n.name: n.attrs for n in model.symbolic_graph().nodes}
    assert repr(attrs["act"]["alpha"]) == repr(np.float32(0.125)) and attrs["clip"]["min"] == float("-inf")
    assert attrs["shape"]["shape"] == (SymDim("d0_0"), 3, 2)
    assert model.quantization_plan is not None and sorted(model.quantization_plan.weights) == ["fc"]


def test_a_compiled_artifact_written_before_the_merge_loads(tmp_path: Path) -> None:
    from neurenix_core._version import __version__

    folder = tmp_path / "v1"
    shutil.copytree(FIXTURES / "v1_artifact_cpu", folder)
    manifest = json.loads((folder / "artifact.json").read_text())
    assert manifest["format_version"] == 1
    manifest["plugin"]["version"] = __version__  # the cpu "plugin" is the core: loading requires the same version
    (folder / "artifact.json").write_text(json.dumps(manifest))
    loaded = nx.load_compiled(folder)
    with np.load(FIXTURES / "v1_artifact_cpu.expected.npz") as data:
        np.testing.assert_array_equal(loaded(data["x"]), data["y"])
    again = loaded.save(tmp_path / "v2")  # saved again: format 2, the model file's tags
    assert json.loads((again / "artifact.json").read_text())["format_version"] == 2
    assert "$tuple" in (again / "graph.json").read_text()
    with np.load(FIXTURES / "v1_artifact_cpu.expected.npz") as data:
        np.testing.assert_array_equal(nx.load_compiled(again)(data["x"]), data["y"])


def test_an_artifact_array_file_written_before_the_merge_reads() -> None:
    import ml_dtypes

    arrays = read_arrays(FIXTURES / "v1_legacy.arrays")
    np.testing.assert_array_equal(arrays["c128"], (np.arange(6) + 1j * np.arange(6)).reshape(2, 3))
    assert arrays["c128"].dtype == np.complex128 and arrays["c64"].dtype == np.complex64
    np.testing.assert_array_equal(arrays["c64"], np.array([1 + 2j, -3.5j], np.complex64))
    assert arrays["bf16"].dtype == ml_dtypes.bfloat16 and arrays["bf16"].astype(np.float32).tolist() == [1.5, -2.0, 3.0]
    assert arrays["scalar"].shape == () and float(arrays["scalar"]) == 2.5
    assert all(a.flags.writeable for a in arrays.values())  # as format 1 returned them


# ----------------------------------------------------------------------------- merged behaviours
def _complex_model() -> GraphModule:
    x = TensorSpec("x", (3,), "complex64")
    nodes = (Node("k", "constant", (), "c", {"note": np.complex64(1 - 2j)},
                  {"value": np.array([1 + 1j, 2 - 0.5j, -3j], np.complex64)}),
             Node("add", "add", ("x", "c"), "y", {"table": np.arange(4, dtype=np.complex128).reshape(2, 2) * 1j}))
    return GraphModule(Graph((x,), nodes, ("y",)), "complex")


def test_complex_dtypes_in_a_model_file(tmp_path: Path) -> None:
    model = _complex_model()
    nx.nn.save(model, tmp_path / "c.nxm")
    loaded = nx.nn.load(tmp_path / "c.nxm")
    k, add = loaded.symbolic_graph().nodes
    value = k.params["value"]
    assert value.dtype == np.complex64 and value.tolist() == [1 + 1j, 2 - 0.5j, -3j]
    assert repr(k.attrs["note"]) == repr(np.complex64(1 - 2j))
    assert add.attrs["table"].dtype == np.complex128 and add.attrs["table"][1, 1] == 3j
    assert loaded.symbolic_graph().fingerprint() == model.symbolic_graph().fingerprint()
    blob = (tmp_path / "c.nxm").read_bytes()
    header = json.loads(blob[8:8 + int.from_bytes(blob[:8], "little")])
    # complex64 under safetensors' own code; complex128, which safetensors lacks, under its NumPy name
    assert header["k.value"]["dtype"] == "C64" and header["add:table"]["dtype"] == "complex128"


def test_arrays_start_on_64_byte_boundaries(tmp_path: Path) -> None:
    arrays: dict[str, np.ndarray] = {"i8": np.arange(3, dtype=np.int8), "f64": np.linspace(0, 1, 5), "b": np.array([True]), "c": np.ones((2, 2), np.complex128),
              "empty": np.zeros((0, 4), np.float32), "s": np.asarray(np.int16(-7))}
    path = array_file.write(tmp_path / "a.arrays", array_file.encode(arrays, {"k": "v"}))
    back, metadata, start = array_file.read(path)
    assert metadata == {"k": "v"} and start % array_file.ALIGN == 0 and list(back) == list(arrays)
    for name, arr in back.items():
        assert arr.ctypes.data % array_file.ALIGN == 0 or arr.size == 0, name
        assert arr.dtype == arrays[name].dtype and arr.shape == arrays[name].shape and np.array_equal(arr, arrays[name]), name


def test_model_file_views_are_read_only_unless_asked(tmp_path: Path) -> None:
    x = TensorSpec("x", (2, 4), "float32")
    nodes = (Node("fc", "linear", ("x",), "h", {}, {"weight": np.ones((3, 4), np.float32), "bias": np.zeros(3, np.float32)}),
             Node("k", "constant", (), "c", {}, {"value": np.arange(3, dtype=np.int64)}),
             Node("add", "add", ("h", "c"), "y"))
    path = tmp_path / "m.nxm"
    nx.nn.save(GraphModule(Graph((x,), nodes, ("y",)), "ro"), path)
    digest = _sha(path)
    mapped = load_model(path)
    const = next(n for n in mapped._graph.nodes if n.name == "k").params["value"]
    assert not const.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        const[0] = 5
    assert all(p.numpy().flags.writeable for p in mapped.parameters())  # parameters are the module's own copies
    writable = load_model(path, writable=True)
    const = next(n for n in writable._graph.nodes if n.name == "k").params["value"]
    const[0] = 5  # copy-on-write: this process sees it, the file does not change
    assert const[0] == 5 and _sha(path) == digest
    np.testing.assert_array_equal(load_model(path)(np.ones((2, 4), np.float32)).numpy(), np.full((2, 3), 4.0) + np.arange(3))


def test_artifact_arrays_are_writable_and_the_file_never_changes(tmp_path: Path) -> None:
    path = tmp_path / "w.arrays"
    write_arrays(path, {"w": np.arange(4, dtype=np.float32), "c": np.array([1j], np.complex64)})
    digest = _sha(path)
    arrays = read_arrays(path)
    arrays["w"][:] = -1
    assert arrays["w"].tolist() == [-1.0] * 4 and _sha(path) == digest
    assert read_arrays(path)["w"].tolist() == [0.0, 1.0, 2.0, 3.0] and read_arrays(path)["c"][0] == 1j


def test_a_reserved_array_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ArtifactFormatError, match="reserved"):
        write_arrays(tmp_path / "r.arrays", {"__pad__0": np.zeros(2)})
    assert not (tmp_path / "r.arrays").exists()


# ----------------------------------------------------------------------------- bad files
@pytest.mark.parametrize("cut", [1, 9, 200])
def test_a_truncated_model_file_names_the_file_and_the_remedy(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "c.nxm"
    nx.nn.save(_complex_model(), path)
    path.write_bytes(path.read_bytes()[:-cut])
    with pytest.raises(ModelFormatError, match=r"c\.nxm: .*truncated.*save the model again \(nx\.nn\.save\)"):
        nx.nn.load(path)


def test_a_corrupted_model_header_names_the_file_and_the_remedy(tmp_path: Path) -> None:
    path = tmp_path / "c.nxm"
    nx.nn.save(_complex_model(), path)
    blob = bytearray(path.read_bytes())
    blob[20:28] = b"\xff" * 8
    path.write_bytes(bytes(blob))
    with pytest.raises(ModelFormatError, match=r"c\.nxm: the header is not JSON.*nx\.nn\.save") as info:
        nx.nn.load(path)
    assert info.value.__cause__ is not None


@pytest.mark.parametrize("source", ["new", "v1"])
def test_a_truncated_artifact_array_file_is_an_artifact_format_error(tmp_path: Path, source: str) -> None:
    path = tmp_path / "t.arrays"
    if source == "new":
        write_arrays(path, {"a": np.arange(100, dtype=np.float64)})
    else:
        shutil.copy(FIXTURES / "v1_legacy.arrays", path)
    path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(ArtifactFormatError, match=r"t\.arrays: .*truncated.*write the artifact again"):
        read_arrays(path)


@pytest.mark.parametrize("fixture", ["v1_legacy.arrays", "v1_model.nxm"])
def test_mutated_headers_give_only_the_typed_error(tmp_path: Path, fixture: str) -> None:
    """Each entry field set to a value of another type or range: a clean read or ArtifactFormatError, nothing else."""
    import random
    import struct

    blob = (FIXTURES / fixture).read_bytes()
    n = struct.unpack("<Q", blob[:8])[0]
    rng = random.Random(fixture)
    odd: list[object] = [None, -1, 2**70, "O", "F32", "complex128", "<U3", [1, 2], [-1], {"a": 1}, 1.5, True, [], [0, 10**12]]
    path = tmp_path / "m.bin"
    refused = 0
    for _ in range(300):
        header = json.loads(blob[8:8 + n])
        key = rng.choice(list(header))
        if isinstance(header[key], dict) and key != "__metadata__":
            header[key][rng.choice([*header[key], "extra"])] = rng.choice(odd)
        else:
            header[key] = rng.choice(odd)
        text = json.dumps(header).encode()
        path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n:])
        try:
            read_arrays(path)
        except ArtifactFormatError as exc:
            assert "m.bin" in str(exc) and "write the artifact again" in str(exc)
            refused += 1
    assert refused > 100
