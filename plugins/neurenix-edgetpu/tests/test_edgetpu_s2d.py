"""The space-to-depth stem (lower_s2d.py): the same integers as the plain int8 lowering, the ops
it writes, and when ``stem="auto"`` applies it (only where XNNPACK runs int8 on AMX tiles).

Nothing here assumes the CPU: correctness is checked with the rewrite forced
(``stem="space_to_depth"``), and ``"auto"`` is checked against what this process's XNNPACK does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tflite
from edgetpu_helpers import cnn_graph
from neurenix_edgetpu.compiled import compile_graph
from neurenix_edgetpu.lower_s2d import STEMS, choose_stem, next_kernel, stem_kernel
from neurenix_edgetpu.lowering import lower

from neurenix_core.device import Device
from neurenix_core.errors import ConfigurationError
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.quantization import calibrate

DEV = Device("edgetpu", 0)
B = tflite.BuiltinOperator
_NO_AMX = Path(__file__).resolve().parents[3] / "benchmarks" / "no_amx.py"


def _conv(cin: int, cout: int, stride: int, rng: np.random.Generator, name: str, src: str, dst: str, k: int = 3) -> Node:
    attrs = {"in_channels": cin, "out_channels": cout, "kernel_size": (k, k), "groups": 1, "stride": (stride, stride),
             "padding": (k // 2, k // 2), "dilation": (1, 1)}
    params = {"weight": rng.normal(0, 0.4, (cout, cin, k, k)).astype(np.float32), "bias": rng.normal(0, 0.2, cout).astype(np.float32)}
    return Node(name, "conv2d", (src,), dst, attrs, params)


def seed_cnn(batch: int = 1, hw: int = 16, cin: int = 3, relu: bool = True, outputs: tuple[str, ...] = ("y",)) -> Graph:
    """The benchmark's seed ``cnn`` shape: cin->8 stride 1, 8->16 stride 2, 16->16 stride 2, Linear."""
    rng = np.random.default_rng(11)
    nodes = [_conv(cin, 8, 1, rng, "c1", "x", "a")]
    if relu:
        nodes.append(Node("r1", "relu", ("a",), "b"))
    nodes += [_conv(8, 16, 2, rng, "c2", "b" if relu else "a", "c"), Node("r2", "relu", ("c",), "d"),
              _conv(16, 16, 2, rng, "c3", "d", "e"), Node("r3", "relu", ("e",), "f"),
              Node("fl", "flatten", ("f",), "g", {"start_dim": 1, "end_dim": -1})]
    side = ((hw - 1) // 2) // 2 + 1  # two 3x3 stride-2 convolutions with padding 1
    fc = rng.normal(0, 0.1, (10, 16 * side * side)).astype(np.float32)
    nodes.append(Node("fc", "linear", ("g",), "y", {"in_features": fc.shape[1], "out_features": 10},
                      {"weight": fc, "bias": rng.normal(0, 0.1, 10).astype(np.float32)}))
    return Graph((TensorSpec("x", (batch, cin, hw, hw)),), tuple(nodes), outputs)


def _plan(graph: Graph, seed: int = 0):
    rng = np.random.default_rng(seed)
    shape = graph.inputs[0].shape
    return calibrate(graph, [rng.normal(size=shape).astype(np.float32) for _ in range(4)], progress=False)


def _compile(backend, graph, precision="int8", plan=None, **extra):
    return compile_graph(backend, graph, CompileOptions(device=DEV, precision=precision, quantization=plan, extra=extra))


def _ops(data: bytes) -> list[tuple[int, int]]:
    """(builtin code, version) of every operator of a written model."""
    m = tflite.Model.GetRootAsModel(data, 0)
    sg = m.Subgraphs(0)
    codes = [(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), c.Version()) for c in (m.OperatorCodes(i) for i in range(m.OperatorCodesLength()))]
    return [codes[sg.Operators(i).OpcodeIndex()] for i in range(sg.OperatorsLength())]


def _run(backend, data: bytes, x: np.ndarray) -> list[np.ndarray]:
    """Every output of the model on ``x``, through LiteRT's default (XNNPACK) kernels."""
    it = backend.litert.Interpreter(model_content=data, num_threads=1)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


# ---------------------------------------------------------------------- the kernels alone
def _conv_int(x: np.ndarray, w: np.ndarray, stride: int, pad: tuple[int, int, int, int]) -> np.ndarray:
    """Integer NHWC convolution; ``w`` in TFLite layout (O, kh, kw, I); pad (top, bottom, left, right) zeros."""
    t, bo, le, ri = pad
    xp = np.pad(x, ((0, 0), (t, bo), (le, ri), (0, 0)))
    o, kh, kw, _ = w.shape
    oh, ow = (xp.shape[1] - kh) // stride + 1, (xp.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, o), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + stride * oh:stride, j:j + stride * ow:stride, :]
            out += np.einsum("nhwc,oc->nhwo", patch, w[:, i, j, :].astype(np.int64))
    return out


def _space_to_depth(x: np.ndarray) -> np.ndarray:
    n, h, w, c = x.shape  # TFLite's channel order: (row offset * 2 + column offset) * C + c
    return x.reshape(n, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, h // 2, w // 2, 4 * c)


def test_blocked_kernels_give_the_same_integer_sums():
    """The weight rearrangement alone, in integers: A' on the blocked image is A blocked, and
    B' after a top/left pad of one block is B (every int32 sum, before any requantization)."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (2, 12, 10, 3))
    wa = rng.integers(-127, 128, (5, 3, 3, 3))
    wb = rng.integers(-127, 128, (7, 5, 3, 3))
    y = _conv_int(x, wa.transpose(0, 2, 3, 1), 1, (1, 1, 1, 1))
    yb = _conv_int(_space_to_depth(x), stem_kernel(wa), 1, (1, 1, 1, 1))
    np.testing.assert_array_equal(yb, _space_to_depth(y))
    z = _conv_int(y, wb.transpose(0, 2, 3, 1), 2, (1, 1, 1, 1))
    np.testing.assert_array_equal(_conv_int(yb, next_kernel(wb), 1, (1, 0, 1, 0)), z)
    assert stem_kernel(wa).shape == (20, 3, 3, 12) and next_kernel(wb).shape == (7, 2, 2, 20)


# ---------------------------------------------------------------------- through LiteRT
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("io", ["float", "int8"])
def test_rewrite_is_bit_exact_with_the_plain_lowering(edgetpu, batch, io):
    graph = seed_cnn(batch, outputs=("y", "d"))  # the logits and the rewritten successor's own output
    plan = _plan(graph)
    plain, s2d = lower(graph, "int8", plan, io=io, stem="plain"), lower(graph, "int8", plan, io=io, stem="space_to_depth")
    assert (plain.stem, s2d.stem) == ("plain", "space_to_depth")
    rng = np.random.default_rng(batch)
    for _ in range(3):
        x = rng.normal(size=(batch, 3, 16, 16)).astype(np.float32)
        if io == "int8":
            scale, zp = s2d.inputs[0].quant
            x = np.clip(np.round(x.transpose(0, 2, 3, 1) / scale) + zp, -128, 127).astype(np.int8)
        want, got = _run(edgetpu, plain.data, x), _run(edgetpu, s2d.data, x)
        assert len(want) == len(got) == 2
        for w, g in zip(want, got):
            assert np.unique(w).size > 8  # not saturated: the comparison has something to compare
            assert w.shape == g.shape and np.array_equal(g, w)


def test_rewritten_ops_stay_in_the_edge_tpu_op_set(edgetpu):
    graph = seed_cnn()
    plan = _plan(graph)
    ops = _ops(lower(graph, "int8", plan, io="int8", stem="space_to_depth").data)
    names = [code for code, _ in ops]
    assert names[:5] == [B.SPACE_TO_DEPTH, B.CONV_2D, B.PAD, B.CONV_2D, B.PAD]  # blocked stem, its successor, then c3 as before
    assert B.DEPTH_TO_SPACE not in names and names.count(B.CONV_2D) == 3
    # the versions the TFLite converter writes for int8 (op_version.cc), which the Edge TPU compiler checks
    assert {code: v for code, v in ops} == {B.SPACE_TO_DEPTH: 2, B.CONV_2D: 3, B.PAD: 2, B.RESHAPE: 1, B.FULLY_CONNECTED: 4}
    model = _compile(edgetpu, graph, "int8", plan, stem="space_to_depth")
    assert model.config["stem"] == "space_to_depth" and "space-to-depth stem" in model.summary
    done, total = map(int, model.config["delegated_ops"].split("/"))
    assert done == total, model.config  # XNNPACK takes SPACE_TO_DEPTH and PAD too


def test_reference_kernels_stay_bit_exact_with_the_core(edgetpu):
    """The reference-kernel check (TFLite BUILTIN_REF against the core's integer reference) holds
    for the rewritten model."""
    from neurenix_core.graph.reference import run as reference

    graph = seed_cnn()
    plan = _plan(graph)
    model = _compile(edgetpu, graph, "int8", plan, stem="space_to_depth", kernels="reference")
    assert model.config["stem"] == "space_to_depth" and "SPACE_TO_DEPTH" in model.info.ops
    out = plan.activations["y"]
    rng = np.random.default_rng(9)
    for _ in range(3):
        x = rng.normal(size=(1, 3, 16, 16)).astype(np.float32)
        want = reference.run_quantized(graph, plan, x, dequantize=False)
        got = np.rint(model(x) / np.float32(out.scale[0])).astype(np.int64) + int(out.zero_point[0])
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("graph", [
    pytest.param(cnn_graph(), id="stem-then-depthwise"),
    pytest.param(seed_cnn(hw=15), id="odd-size"),
    pytest.param(seed_cnn(cin=8), id="wide-stem"),
    pytest.param(seed_cnn(outputs=("y", "b")), id="stem-output-read-twice"),
])
def test_no_rewrite_where_the_pattern_does_not_match(edgetpu, graph):
    plan = _plan(graph)
    forced, plain = lower(graph, "int8", plan, stem="space_to_depth"), lower(graph, "int8", plan, stem="plain")
    assert forced.stem == "plain" and "SPACE_TO_DEPTH" not in forced.op_counts
    assert forced.data == plain.data  # byte for byte the plain model
    model = _compile(edgetpu, graph, "int8", plan, stem="space_to_depth")
    assert model.config["stem"] == "plain"


def test_relu_less_stem_is_rewritten_too(edgetpu):
    graph = seed_cnn(relu=False)
    plan = _plan(graph)
    s2d, plain = lower(graph, "int8", plan, stem="space_to_depth"), lower(graph, "int8", plan, stem="plain")
    assert s2d.stem == "space_to_depth"
    x = np.random.default_rng(2).normal(size=(1, 3, 16, 16)).astype(np.float32)
    assert np.array_equal(_run(edgetpu, s2d.data, x)[0], _run(edgetpu, plain.data, x)[0])


# ---------------------------------------------------------------------- the option and the gate
def test_forced_plain_never_rewrites(edgetpu):
    graph = seed_cnn()
    model = _compile(edgetpu, graph, "int8", _plan(graph), stem="plain")
    assert model.config["stem"] == "plain" and "SPACE_TO_DEPTH" not in model.info.ops


def test_auto_follows_whether_xnnpack_runs_int8_on_amx(edgetpu):
    from neurenix_edgetpu.amx import amx_state

    graph = seed_cnn()
    plan = _plan(graph)
    model = _compile(edgetpu, graph, "int8", plan)  # stem="auto" is the default
    amx = edgetpu.xnnpack_amx()
    assert amx == model.config["x86_amx"] == amx_state()  # read after XNNPACK has initialised: the same answer
    assert model.config["stem"] == ("space_to_depth" if amx == "granted" else "plain")
    # TFLite's own kernels and fp32 models: never
    assert _compile(edgetpu, graph, "int8", plan, kernels="reference").config["stem"] == "plain"
    assert _compile(edgetpu, graph, "fp32").config["stem"] == "plain"


def test_choose_stem_decides_from_the_kernels_and_amx():
    calls: list[str] = []

    def amx(answer: str):
        return lambda: calls.append(answer) or answer

    int8 = {"precision": "int8", "kernels": "xnnpack", "emulated": True}
    assert choose_stem("auto", **int8, amx=amx("granted")) == "space_to_depth"
    for answer in ("not granted", "absent", "unknown"):
        assert choose_stem("auto", **int8, amx=amx(answer)) == "plain"
    calls.clear()
    assert choose_stem("auto", precision="int8", kernels="optimized", emulated=True, amx=amx("granted")) == "plain"
    assert choose_stem("auto", precision="int8", kernels="xnnpack", emulated=False, amx=amx("granted")) == "plain"
    assert choose_stem("auto", precision="fp32", kernels="xnnpack", emulated=True, amx=amx("granted")) == "plain"
    assert calls == []  # no XNNPACK start where the answer cannot matter
    assert choose_stem("space_to_depth", **int8, amx=amx("absent")) == "space_to_depth"
    assert choose_stem("plain", **int8, amx=amx("granted")) == "plain"


def test_bad_stem_values_raise_naming_edgetpu_and_the_choices(edgetpu):
    graph = seed_cnn()
    with pytest.raises(ConfigurationError, match="edgetpu.*auto, space_to_depth, plain.*'s2d'"):
        _compile(edgetpu, graph, "int8", _plan(graph), stem="s2d")
    with pytest.raises(ConfigurationError, match="edgetpu.*int8 models only"):
        _compile(edgetpu, graph, "fp32", stem="space_to_depth")
    assert STEMS == ("auto", "space_to_depth", "plain")


def test_nx_compile_passes_the_stem_option(edgetpu):
    import neurenix_core as nx
    from neurenix_core import nn

    nn.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 8 * 8, 10))
    rng = np.random.default_rng(0)
    calibration = [rng.normal(size=(1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    x = nx.asarray(calibration[0], device="edgetpu:0")
    ys = {}
    for stem in ("space_to_depth", "plain"):
        compiled = nx.compile(model, device="edgetpu:0", precision="int8", calibration=calibration, progress=False, stem=stem)
        ys[stem] = compiled(x).numpy()
        assert compiled.native((1, 3, 16, 16)).config["stem"] == stem
    assert np.array_equal(ys["space_to_depth"], ys["plain"])


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="the AMX filter is x86-64 Linux seccomp")
def test_auto_does_not_rewrite_when_amx_is_withheld():
    """Under benchmarks/no_amx.py's seccomp filter XNNPACK cannot get AMX: ``"auto"`` writes the
    plain model (a separate process: the filter cannot be removed)."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(_NO_AMX.parent)!r})
        from no_amx import withhold
        withhold()
        import numpy as np
        import neurenix_core as nx
        from neurenix_core import nn
        nn.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1))
        cal = [np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32) for _ in range(2)]
        compiled = nx.compile(model, device="edgetpu:0", precision="int8", calibration=cal, progress=False)
        compiled(nx.asarray(cal[0], device="edgetpu:0"))
        cfg = compiled.native((1, 3, 16, 16)).config
        print(cfg["stem"], cfg["x86_amx"], sep="|")
    """)
    env = {**os.environ, "NEURENIX_EMULATE": "edgetpu"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    stem, amx = proc.stdout.strip().splitlines()[-1].split("|")
    assert amx != "granted" and stem == "plain"
