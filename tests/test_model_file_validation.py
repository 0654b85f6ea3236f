"""Every bad model file gets a typed error, before any allocation (issue #28, part B).

Each bad file is built here with ``onnx.helper`` (nothing is downloaded) and given to
``nx.nn.from_onnx`` as bytes or as a file in a temporary folder; the error must be the
documented ``NeurenixError`` subclass and name the tensor, node or location at fault. A
hypothesis test mutates a small valid model's bytes and structure: only ``NeurenixError``
escapes, no example hangs, and no file outside the model's folder is opened.
"""

from __future__ import annotations

import math
import os
import random
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from neurenix_core import nn
from neurenix_core.errors import ModelFormatError, NeurenixError, NeurenixWarning, ShapeError, UnsupportedDTypeError
from neurenix_core.graph.importers.builder import MAX_FOLDED_BYTES
from neurenix_core.graph.importers.onnx_validate import MAX_DIM

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] = (), opset: int = 17) -> Any:  # type: ignore[assignment]
    graph = helper.make_graph(nodes, "bad", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, elem: int = F, shape: Any = (2, 3)) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _raw(name: str, dims: list[int], data: bytes) -> Any:
    """A float TensorProto with these dims and raw bytes (helper.make_tensor checks sizes)."""
    t = TensorProto(name=name, data_type=F, dims=dims)
    t.raw_data = data
    return t


def _small() -> Any:
    """x (2, 3) @ W (3, 4) + b -> Relu: the valid model the mutations start from."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "W")
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), helper.make_node("Add", ["h", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    return _model(nodes, [_vi("x")], [_vi("y", F, (2, 4))], [w, b])


def _external(folder: Path, location: str = "w.bin", **fields: str) -> Path:
    """The small model with W's data in ``folder/w.bin`` and W's external reference pointing
    at ``location`` (with extra ``offset``/``length`` fields); returns the model's path."""
    proto = _small()
    w = proto.graph.initializer[0]
    (folder / "w.bin").write_bytes(w.raw_data)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, **fields}.items():
        w.external_data.add(key=key, value=value)
    path = folder / "model.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


def test_the_small_model_imports_and_runs() -> None:
    """The control: the model every case below breaks imports and computes."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = nn.from_onnx(_small().SerializeToString())(x)
    np.testing.assert_allclose(np.asarray(y.numpy()), np.maximum(x @ np.arange(12, dtype=np.float32).reshape(3, 4) + 1, 0))


# ----------------------------------------------------------------------------- undecodable files
def test_random_bytes_are_a_model_format_error() -> None:
    data = random.Random(333).randbytes(333)
    with pytest.raises(ModelFormatError, match="not a readable ONNX model|decodes to no ONNX model") as info:
        nn.from_onnx(data)
    assert "re-export or download the model again" in str(info.value)


def test_truncated_file_is_a_model_format_error_with_the_decoder_error_kept(tmp_path: Path) -> None:
    data = _small().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFormatError, match="cut.onnx") as info:
        nn.from_onnx(path)
    assert "truncated" in str(info.value)


def test_protobuf_decode_error_is_the_cause() -> None:
    data = _small().SerializeToString()
    with pytest.raises(ModelFormatError) as info:
        nn.from_onnx(data[:-7])  # cut inside a field: protobuf's DecodeError
    assert type(info.value.__cause__).__name__ == "DecodeError"


def test_zero_byte_file_is_empty_not_opset_0(tmp_path: Path) -> None:
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(ModelFormatError, match="empty") as info:
        nn.from_onnx(path)
    assert "opset" not in str(info.value)
    with pytest.raises(ModelFormatError, match="empty"):
        nn.from_onnx(b"")


# ----------------------------------------------------------------------------- graph well-formedness
def test_dangling_node_input_names_the_node_and_the_name() -> None:
    m = _model([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [_vi("x")], [_vi("y")])
    with pytest.raises(ModelFormatError, match=r"'r' \(Relu\) reads 'ghost'.*dangling input"):
        nn.from_onnx(m)


def test_dangling_graph_output_is_named() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x")], [_vi("y"), _vi("nowhere")])
    with pytest.raises(ModelFormatError, match="graph output 'nowhere'.*dangling output"):
        nn.from_onnx(m)


def test_cycle_names_its_nodes() -> None:
    nodes = [helper.make_node("Add", ["x", "b_out"], ["a_out"], name="A"), helper.make_node("Relu", ["a_out"], ["b_out"], name="B")]
    m = _model(nodes, [_vi("x")], [_vi("b_out")])
    with pytest.raises(ModelFormatError, match=r"cycle: node 'A' \(Add\) -> node 'B' \(Relu\) -> node 'A'"):
        nn.from_onnx(m)


def test_nodes_out_of_topological_order_are_refused() -> None:
    nodes = [helper.make_node("Relu", ["h"], ["y"], name="second"), helper.make_node("Neg", ["x"], ["h"], name="first")]
    with pytest.raises(ModelFormatError, match="topological order"):
        nn.from_onnx(_model(nodes, [_vi("x")], [_vi("y")]))


def test_gemm_with_one_input_is_refused_by_its_schema_arity() -> None:
    m = _model([helper.make_node("Gemm", ["x"], ["y"], name="g")], [_vi("x")], [_vi("y")])
    with pytest.raises(ModelFormatError, match=r"'g' \(Gemm\) has 1 inputs; Gemm takes 2 to 3"):
        nn.from_onnx(m)


def test_missing_required_attribute_is_refused() -> None:
    m = _model([helper.make_node("Concat", ["x", "x"], ["y"], name="cat")], [_vi("x")], [_vi("y", F, (4, 3))])
    with pytest.raises(ModelFormatError, match=r"'cat' \(Concat\) lacks the required attribute\(s\) \['axis'\]"):
        nn.from_onnx(m)


def test_a_name_assigned_twice_is_refused() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r1"), helper.make_node("Neg", ["x"], ["y"], name="r2")]
    with pytest.raises(ModelFormatError, match="'r2' \\(Neg\\) assigns 'y'"):
        nn.from_onnx(_model(nodes, [_vi("x")], [_vi("y")]))


# ----------------------------------------------------------------------------- declared sizes vs bytes
def test_initializer_claiming_2gb_with_48_bytes() -> None:
    w = _raw("W", [2**29], b"\0" * 48)
    m = _model([helper.make_node("Add", ["x", "W"], ["y"], name="a")], [_vi("x", F, (2**29,))], [_vi("y", F, (2**29,))], [w])
    with pytest.raises(ModelFormatError, match=r"initializer 'W' declares shape \[536870912\] \(2147483648 bytes\) but stores 48"):
        nn.from_onnx(m)


def test_short_raw_data_and_short_typed_data() -> None:
    short = _raw("W", [3, 4], b"\0" * 40)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [_vi("x")], [_vi("y", F, (2, 4))], [short])
    with pytest.raises(ModelFormatError, match="'W' declares shape \\[3, 4\\] \\(48 bytes\\) but stores 40 bytes"):
        nn.from_onnx(m)
    typed = TensorProto(name="W", data_type=F, dims=[3, 4], float_data=[1.0] * 5)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["y"])], [_vi("x")], [_vi("y", F, (2, 4))], [typed])
    with pytest.raises(ModelFormatError, match="12 elements\\) but stores 5"):
        nn.from_onnx(m)


def test_constant_node_tensor_with_short_data() -> None:
    bad = _raw("c", [1000], b"\0" * 8)
    m = _model([helper.make_node("Constant", [], ["c"], value=bad, name="k")], [], [_vi("c", F, (1000,))])
    with pytest.raises(ModelFormatError, match="node 'k' attribute 'value'"):
        nn.from_onnx(m)


# ----------------------------------------------------------------------------- external data
def test_external_data_inside_the_folder_loads(tmp_path: Path) -> None:
    """The control for the cases below: a well-formed external reference is read (and the
    audit hook the fuzz tests rely on sees it opened)."""
    with _opened() as opened:
        model = nn.from_onnx(_external(tmp_path, length="48"))
    assert os.path.realpath(tmp_path / "w.bin") in {os.path.realpath(p) for p in opened}
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(np.asarray(model(x).numpy()), np.maximum(x @ np.arange(12, dtype=np.float32).reshape(3, 4) + 1, 0))


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "ABS"])
def test_external_data_outside_the_folder_is_refused(tmp_path: Path, location: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 48)
    location = str(secret) if location == "ABS" else location
    with _opened() as opened, pytest.raises(ModelFormatError, match="outside the model's folder") as info:
        nn.from_onnx(_external(folder, location))
    assert repr(location) in str(info.value)
    assert str(secret) not in {os.path.realpath(p) for p in opened}


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 48)
    (folder / "link.bin").symlink_to(secret)
    with _opened() as opened, pytest.raises(ModelFormatError, match="'link.bin', which resolves to .*secret.bin, outside"):
        nn.from_onnx(_external(folder, "link.bin"))
    assert str(secret) not in {os.path.realpath(p) for p in opened}


def test_missing_external_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match="'gone.bin', which does not exist"):
        nn.from_onnx(_external(tmp_path, "gone.bin"))


def test_external_data_with_a_lying_length_or_offset(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match=r"\(48 bytes\) but its external data length is 4000"):
        nn.from_onnx(_external(tmp_path, length="4000"))
    with pytest.raises(ModelFormatError, match="needs bytes 8..56 of 'w.bin', which holds 48"):
        nn.from_onnx(_external(tmp_path, offset="8"))
    with pytest.raises(ModelFormatError, match="not integers"):
        nn.from_onnx(_external(tmp_path, offset="x"))


def test_external_data_without_a_folder_is_refused(tmp_path: Path) -> None:
    """Bytes or a ModelProto have no folder: an external reference would be read from the cwd."""
    data = _external(tmp_path).read_bytes()
    with pytest.raises(ModelFormatError, match="pass the path of the .onnx file"):
        nn.from_onnx(data)


# ----------------------------------------------------------------------------- dims and dtypes
@pytest.mark.parametrize("dim, error, words", [(2**62, ShapeError, f"above the limit of {MAX_DIM} per axis"),
                                               (-3, ShapeError, "declares size -3 on axis 1"),
                                               (2**30, ShapeError, "more than this host's memory")])
def test_input_dims_out_of_bounds(dim: int, error: type[Exception], words: str) -> None:
    shape = (2**20, dim) if dim == 2**30 else (2, dim)
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", F, shape)], [_vi("y", F, None)])
    with pytest.raises(error, match=words):
        nn.from_onnx(m)


def test_add_of_float_and_int64_names_the_node() -> None:
    m = _model([helper.make_node("Add", ["x", "i"], ["y"], name="mix")], [_vi("x"), _vi("i", I64)], [_vi("y")])
    with pytest.raises(UnsupportedDTypeError, match=r"'mix' \(Add\).*'x' is float and 'i' is int64.*insert a Cast"):
        nn.from_onnx(m)


def test_add_of_float_and_an_int64_initializer_is_refused_too() -> None:
    k = numpy_helper.from_array(np.ones((2, 3), np.int64), "k")
    m = _model([helper.make_node("Add", ["x", "k"], ["y"], name="mix")], [_vi("x")], [_vi("y")], [k])
    with pytest.raises(UnsupportedDTypeError, match="'k' is int64"):
        nn.from_onnx(m)


def test_string_input_is_refused_not_an_object_tensor() -> None:
    m = _model([helper.make_node("Identity", ["s"], ["y"])], [_vi("s", TensorProto.STRING)], [_vi("y", TensorProto.STRING)])
    with pytest.raises(NeurenixError, match="strings"):
        nn.from_onnx(m)


def test_string_to_an_op_that_takes_no_strings_is_a_dtype_error() -> None:
    m = _model([helper.make_node("Relu", ["s"], ["y"], name="r")], [_vi("s", TensorProto.STRING)], [_vi("y")])
    with pytest.raises(UnsupportedDTypeError, match=r"'r' \(Relu\) takes 's' of type string"):
        nn.from_onnx(m)


# ----------------------------------------------------------------------------- folded constants
def _folding(node: Any, inits: list[Any]) -> Any:
    return _model([node], [], [_vi("y", F, None)], inits)


@pytest.mark.parametrize("case", ["ConstantOfShape", "Range", "Expand", "Tile"])
def test_huge_folded_constants_are_refused_before_allocation(case: str) -> None:
    """ConstantOfShape [2**20, 2**20] would be 4 TiB: refused in milliseconds, naming the node."""
    def arr(name: str, v: Any, dtype: Any = np.int64) -> Any:
        return numpy_helper.from_array(np.asarray(v, dtype), name)

    node, inits = {
        "ConstantOfShape": (helper.make_node("ConstantOfShape", ["s"], ["y"], name="big"), [arr("s", [2**20, 2**20])]),
        "Range": (helper.make_node("Range", ["a", "b", "c"], ["y"], name="big"),
                  [arr("a", 0.0, np.float32), arr("b", 2.0**40, np.float32), arr("c", 1.0, np.float32)]),
        "Expand": (helper.make_node("Expand", ["v", "s"], ["y"], name="big"), [arr("v", [1.0], np.float32), arr("s", [2**20, 2**20])]),
        "Tile": (helper.make_node("Tile", ["v", "r"], ["y"], name="big"), [arr("v", [[1.0]], np.float32), arr("r", [2**20, 2**20])]),
    }[case]
    with pytest.raises(ModelFormatError, match=rf"(?i)node 'big' \({case}\) would build a constant.*limit of {MAX_FOLDED_BYTES} bytes"):
        nn.from_onnx(_folding(node, inits))


def test_range_with_zero_delta_is_refused() -> None:
    inits = [numpy_helper.from_array(np.asarray(v, np.int64), n) for n, v in (("a", 0), ("b", 5), ("c", 0))]
    with pytest.raises(ModelFormatError, match="delta must be non-zero"):
        nn.from_onnx(_folding(helper.make_node("Range", ["a", "b", "c"], ["y"], name="r"), inits))


def test_small_folded_constants_still_fold() -> None:
    s = numpy_helper.from_array(np.asarray([2, 3], np.int64), "s")
    out = nn.from_onnx(_folding(helper.make_node("ConstantOfShape", ["s"], ["y"]), [s]))()
    assert np.asarray(out.numpy()).shape == (2, 3)


# ----------------------------------------------------------------------------- weight files
class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)


def test_float64_npz_weights_are_converted_with_a_warning(tmp_path: Path) -> None:
    net = _Net()
    state = {k: v.astype(np.float64) + 0.5 for k, v in net.state_dict().items()}
    np.savez(tmp_path / "w64.npz", **state)
    with pytest.warns(NeurenixWarning, match=r"fc.weight \(float64 -> float32\)"):
        net.load(tmp_path / "w64.npz")
    assert net.fc.weight.dtype == np.float32
    np.testing.assert_allclose(net.fc.weight.numpy(), state["fc.weight"].astype(np.float32))


def test_integer_weights_for_a_float_model_are_refused(tmp_path: Path) -> None:
    net = _Net()
    np.savez(tmp_path / "wi.npz", **{k: np.ones(v.shape, np.int64) for k, v in net.state_dict().items()})
    before = net.fc.weight.numpy().copy()
    with pytest.raises(UnsupportedDTypeError, match="fc.(weight|bias) is int64 in the file, the model holds float32"):
        net.load(tmp_path / "wi.npz")
    np.testing.assert_array_equal(net.fc.weight.numpy(), before)


def test_same_dtype_weights_load_without_a_warning(tmp_path: Path) -> None:
    net = _Net()
    net.save(tmp_path / "w.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        _Net().load(tmp_path / "w.npz")


def test_npz_header_claiming_more_than_its_bytes(tmp_path: Path) -> None:
    """A .npy member whose header declares 2**40 floats but holds 12 bytes: refused before
    NumPy allocates the declared shape."""
    import zipfile

    from numpy.lib import format as npy

    path = tmp_path / "lie.npz"
    with zipfile.ZipFile(path, "w") as archive, archive.open("fc.weight.npy", "w") as fh:
        npy.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (2**20, 2**20)})
        fh.write(b"\0" * 12)
    with pytest.raises(ModelFormatError, match=r"fc.weight.npy declares shape \(1048576, 1048576\) of float32 \(4398046511104 "
                                               r"bytes\) but holds 12 bytes"):
        _Net().load(path)


# ----------------------------------------------------------------------------- fuzzing
_OPENED: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Audit hooks cannot be removed: this one records only while _opened() is active.
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@contextmanager
def _opened() -> Iterator[list[str]]:
    """The paths Python opens inside the block (the ``open`` audit event)."""
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


@contextmanager
def _time_cap(seconds: float) -> Iterator[None]:
    """A hang fails the example (SIGALRM) instead of stalling the suite."""
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"from_onnx took more than {seconds} s on one mutated model")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_SMALL = _small().SerializeToString()
_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _only_typed_errors(load: Callable[[], Any], forbidden: set[str]) -> None:
    """``load`` either imports or raises a NeurenixError; it opens none of ``forbidden``."""
    with _opened() as opened, _time_cap(20.0):
        try:
            load()
        except NeurenixError:
            pass
    touched = {os.path.realpath(p) for p in opened} & forbidden
    assert not touched, f"opened {touched}, outside the model's folder"


_byte_edits = st.lists(st.one_of(
    st.tuples(st.just("flip"), st.integers(0, len(_SMALL) - 1), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, len(_SMALL) - 1), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, len(_SMALL)), st.integers(0, 255)),
), min_size=1, max_size=3)


@_FUZZ
@given(edits=_byte_edits)
def test_mutated_bytes_raise_only_typed_errors(edits: list[tuple[str, int, int]]) -> None:
    data = bytearray(_SMALL)
    for kind, at, value in edits:
        at = min(at, len(data))
        if kind == "flip" and at < len(data):
            data[at] ^= value
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = bytes([value])
    _only_typed_errors(lambda: nn.from_onnx(bytes(data)), set())


@pytest.fixture(scope="module")
def jail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A model folder with a symlink out of it, and a sentinel file outside it."""
    root = tmp_path_factory.mktemp("fuzz")
    folder = root / "model"
    folder.mkdir()
    sentinel = root / "secret.bin"
    sentinel.write_bytes(b"\1" * 4096)
    (folder / "link.bin").symlink_to(sentinel)
    return folder, sentinel


def _mutate(proto: Any, kind: str, pick: int, value: int) -> None:
    g = proto.graph
    if kind == "rename_input":
        g.node[pick % len(g.node)].input[0] = f"renamed{value}"
    elif kind == "remove_node":
        del g.node[pick % len(g.node)]
    elif kind == "wrong_dim":
        vi = (list(g.input) + list(g.output))[pick % 2]
        vi.type.tensor_type.shape.dim[0].dim_value = [-1, 0, 2**62, 2**31, value][pick % 5]
    elif kind == "wrong_init_dim":
        g.initializer[pick % len(g.initializer)].dims[0] = [-2, 0, 2**40, value][pick % 4]
    elif kind == "swap_nodes":
        nodes = list(g.node)
        i = pick % len(nodes)
        nodes[i], nodes[-1] = nodes[-1], nodes[i]
        del g.node[:]
        g.node.extend(nodes)
    elif kind == "output_name":
        g.output[0].name = ["h", "x", "W", f"o{value}"][pick % 4]
    elif kind == "op_type":
        g.node[pick % len(g.node)].op_type = ["Gemm", "Concat", "Range", "Tile", "ConstantOfShape", "If", "Nope"][value % 7]


_LOCATIONS = ["w.bin", "../secret.bin", "SENTINEL", "/etc/passwd", "link.bin", "missing.bin", "", "sub/../w.bin", "./w.bin"]


@_FUZZ
@given(kinds=st.lists(st.tuples(st.sampled_from(["rename_input", "remove_node", "wrong_dim", "wrong_init_dim", "swap_nodes",
                                                  "output_name", "op_type", "none"]), st.integers(0, 50), st.integers(0, 2**16)),
                      max_size=3),
       # Half the examples keep a valid external reference, so the graph mutations get past it.
       location=st.one_of(st.just("w.bin"), st.sampled_from(_LOCATIONS)),
       offset=st.one_of(st.none(), st.sampled_from(["0", "8", "-1", "99999", "x"])),
       length=st.one_of(st.none(), st.sampled_from(["48", "40", "4096", "0"])))
def test_structured_mutations_raise_only_typed_errors_and_stay_in_the_folder(
        jail: tuple[Path, Path], kinds: list[tuple[str, int, int]], location: str, offset: str | None, length: str | None) -> None:
    folder, sentinel = jail
    fields = {k: v for k, v in (("offset", offset), ("length", length)) if v is not None}
    path = _external(folder, str(sentinel) if location == "SENTINEL" else location, **fields)
    proto = onnx.load(str(path), load_external_data=False)
    for kind, pick, value in kinds:
        if kind != "none" and len(proto.graph.node) and len(proto.graph.initializer):
            _mutate(proto, kind, pick, value)
    path.write_bytes(proto.SerializeToString())
    _only_typed_errors(lambda: nn.from_onnx(path), {str(sentinel), os.path.realpath("/etc/passwd")})


def test_fold_limit_is_documented() -> None:
    """docs/errors.md states the limits the code applies."""
    text = (Path(__file__).parents[1] / "docs" / "errors.md").read_text()
    assert f"{MAX_FOLDED_BYTES}" in text.replace(",", "") or "2 GiB" in text
    assert f"{MAX_DIM}" in text.replace(",", "") or "2**31 - 1" in text
    assert math.isclose(MAX_FOLDED_BYTES, 2 * 2**30)
