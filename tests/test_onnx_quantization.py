"""from_onnx on cpu:0: one-node models of ONNX's quantization family (QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv), each compared with a
NumPy expectation of ONNX's semantics, exact dtype and shape: rounding half to even, saturation,
per-tensor / per-axis / blocked scales, and typed refusals for float8 / int4 types neurenix lacks.

The 0-d outputs of DynamicQuantizeLinear are checked on the imported graph run node by node in the
declared dtypes (what cpu:0 runs)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.importers.onnx_import import import_onnx
from neurenix_core.graph.reference.run import eval_node

RNG = np.random.default_rng(5)


def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[str], attrs: dict[str, Any] | None = None,
           version: int = 21, types: dict[str, int] | None = None) -> Any:
    node = helper.make_node(op, [k if not k.startswith("_") else "" for k in inputs], outputs, **(attrs or {}))
    types = types or {}
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, types.get(k, helper.np_dtype_to_tensor_dtype(v.dtype)), v.shape)
         for k, v in inputs.items() if not k.startswith("_")],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])


def run(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **kw: Any) -> list[np.ndarray]:
    compiled = nx.compile(nn.from_onnx(_model(op, inputs, outputs, **kw)), device="cpu:0", precision="fp32", outputs="host",
                          progress=False)
    out = compiled(*[v for k, v in inputs.items() if not k.startswith("_")])
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def run_nodes(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **kw: Any) -> list[np.ndarray]:
    graph, _ = import_onnx(_model(op, inputs, outputs, **kw))
    env = {s.name: x for s, x in zip(graph.inputs, inputs.values())}
    for n in graph.nodes:
        env[n.output] = n.params["value"] if n.op == "constant" else eval_node(n, [env[i] for i in n.inputs], float_dtype=None)
    return [env[o] for o in graph.outputs]


def exact(got: np.ndarray, want: np.ndarray) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- QuantizeLinear / DequantizeLinear
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16])
def test_quantize_rounds_half_to_even_and_saturates(dtype: Any) -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, 1e9, -1e9, np.inf, -np.inf], np.float32)
    zero = np.array(3, dtype)
    got = run("QuantizeLinear", {"x": x, "s": np.array(0.5, np.float32), "z": zero}, ["y"])[0]
    info = np.iinfo(dtype)
    # x / 0.5 = 1, 3, 5, -1, -3, -5, 6.98 ...: exact halves never arise; rounding is checked on x below
    want = np.clip(np.array([1, 3, 5, -1, -3, -5, 7, 2e9, -2e9, 2e9, -2e9]) + 3, info.min, info.max).astype(dtype)
    exact(got, want)
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], np.float32)
    got = run("QuantizeLinear", {"x": halves, "s": np.array(1.0, np.float32), "z": zero}, ["y"])[0]
    exact(got, np.clip(np.array([0, 2, 2, 0, -2, -2]) + 3, info.min, info.max).astype(dtype))


def test_quantize_defaults_to_uint8_and_output_dtype() -> None:
    x = np.array([-3.0, 0.2, 7.6, 400.0], np.float32)
    exact(run("QuantizeLinear", {"x": x, "s": np.array(2.0, np.float32)}, ["y"])[0], np.array([0, 0, 4, 200], np.uint8))
    got = run("QuantizeLinear", {"x": x, "s": np.array(0.01, np.float32)}, ["y"], attrs={"output_dtype": TensorProto.INT16})[0]
    exact(got, np.array([-300, 20, 760, 32767], np.int16))


def test_quantize_and_dequantize_per_axis() -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 40
    scale = np.array([0.5, 0.25, 2.0], np.float32)
    zero = np.array([-3, 0, 9], np.int8)
    want = np.clip(np.rint(x / scale[:, None]) + zero[:, None], -128, 127).astype(np.int8)
    q = run("QuantizeLinear", {"x": x, "s": scale, "z": zero}, ["y"], attrs={"axis": -2})[0]
    exact(q, want)
    back = run("DequantizeLinear", {"x": q, "s": scale, "z": zero}, ["y"], attrs={"axis": 1})[0]
    exact(back, ((want.astype(np.int32) - zero[:, None]) * scale[:, None]).astype(np.float32))


def test_blocked_quantize_with_a_partial_last_block() -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32) * 20
    scale = RNG.uniform(0.1, 1.0, (3, 3)).astype(np.float32)  # blocks of 2 on axis 1: columns 0-1, 2-3, 4
    zero = RNG.integers(0, 9, (3, 3)).astype(np.uint8)
    full_s, full_z = np.repeat(scale, 2, axis=1)[:, :5], np.repeat(zero, 2, axis=1)[:, :5]
    q = run("QuantizeLinear", {"x": x, "s": scale, "z": zero}, ["y"], attrs={"axis": 1, "block_size": 2})[0]
    exact(q, np.clip(np.rint(x / full_s) + full_z, 0, 255).astype(np.uint8))
    back = run("DequantizeLinear", {"x": q, "s": scale, "z": zero}, ["y"], attrs={"axis": 1, "block_size": 2})[0]
    exact(back, ((q.astype(np.int32) - full_z) * full_s).astype(np.float32))


def test_dequantize_int32_and_float16_scale() -> None:
    x = np.array([2**31 - 1, -2**31, 12345, -7], np.int32)
    exact(run("DequantizeLinear", {"x": x, "s": np.array(0.5, np.float32)}, ["y"])[0],
          (x.astype(np.float64) * 0.5).astype(np.float32))
    q = np.array([0, 1, 200, 255], np.uint8)
    got = run("DequantizeLinear", {"x": q, "s": np.array(0.1, np.float16), "z": np.array(100, np.uint8)}, ["y"])[0]
    exact(got, ((q.astype(np.float32) - 100) * np.float32(np.float16(0.1))).astype(np.float16))


def test_dynamic_quantize_linear() -> None:
    x = np.array([[-1.0, 0.5, 2.0], [3.3, -0.25, 1.0]], np.float32)
    y, scale, zero = run_nodes("DynamicQuantizeLinear", {"x": x}, ["y", "s", "z"], version=13)
    want_scale = np.float32(np.float32(3.3) - np.float32(-1.0)) / np.float32(255)
    want_zero = np.rint(np.clip(-np.float32(-1.0) / want_scale, 0, 255))
    exact(scale, np.array(want_scale, np.float32))
    exact(zero, np.array(want_zero, np.uint8))
    exact(y, np.clip(np.rint(x / want_scale) + want_zero, 0, 255).astype(np.uint8))
    graph, _ = import_onnx(_model("DynamicQuantizeLinear", {"x": x}, ["y", "", "z"], version=13))
    assert [n.attrs["output"] for n in graph.nodes] == [0, 2]  # the unused y_scale is not computed


# ----------------------------------------------------------------------------- integer matmul
def test_matmul_integer_zero_points() -> None:
    a = RNG.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    b = RNG.integers(-128, 127, (4, 5)).astype(np.int8)
    bz = np.array([0, 1, -2, 3, 4], np.int8)
    got = run("MatMulInteger", {"a": a, "b": b, "_az": a, "bz": bz}, ["y"], version=13)[0]  # a's zero point left out
    exact(got, (a.astype(np.int64) @ (b.astype(np.int64) - bz)).astype(np.int32))
    az = np.array(128, np.uint8)
    got = run("MatMulInteger", {"a": a, "b": b, "az": az}, ["y"], version=13)[0]
    exact(got, ((a.astype(np.int64) - 128) @ b.astype(np.int64)).astype(np.int32))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul_per_column(dtype: Any) -> None:
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, (2, 3, 6)).astype(dtype)
    b = RNG.integers(info.min, info.max, (6, 4)).astype(dtype)
    sa, za = np.array(0.02, np.float32), np.array(3, dtype)
    sb, zb = RNG.uniform(0.01, 0.05, 4).astype(np.float32), np.array([1, 2, 3, 4], dtype)
    sy, zy = np.array(0.4, np.float32), np.array(-5 if dtype == np.int8 else 100, dtype)
    got = run("QLinearMatMul", {"a": a, "sa": sa, "za": za, "b": b, "sb": sb, "zb": zb, "sy": sy, "zy": zy}, ["y"])[0]
    acc = (a.astype(np.int64) - za.astype(np.int64)) @ (b.astype(np.int64) - zb.astype(np.int64))
    want = np.clip(np.rint(acc * (sa * sb / sy).astype(np.float64) + zy), info.min, info.max).astype(dtype)
    exact(got, want)


# ----------------------------------------------------------------------------- integer convolution
def _conv(x: np.ndarray, w: np.ndarray, strides: tuple[int, int], pads: tuple[int, int, int, int], group: int) -> np.ndarray:
    """Direct int64 2-D convolution, one output element at a time."""
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, _c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh, ow = (h - kh) // strides[0] + 1, (wd - kw) // strides[1] + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    for b, o, i, j in itertools.product(range(n), range(m), range(oh), range(ow)):
        g = o // (m // group)
        patch = x[b, g * cg:(g + 1) * cg, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
        out[b, o, i, j] = np.sum(patch.astype(np.int64) * w[o].astype(np.int64))
    return out


def test_conv_integer_pads_strides_groups() -> None:
    x = RNG.integers(0, 255, (1, 4, 6, 5)).astype(np.uint8)
    w = RNG.integers(-128, 127, (4, 2, 3, 2)).astype(np.int8)
    wz = np.array([0, 1, -1, 2], np.int8)
    attrs = {"pads": [1, 0, 2, 1], "strides": [2, 1], "group": 2}
    got = run("ConvInteger", {"x": x, "w": w, "xz": np.array(7, np.uint8), "wz": wz}, ["y"], attrs=attrs, version=13)[0]
    want = _conv(x.astype(np.int64) - 7, w.astype(np.int64) - wz[:, None, None, None], (2, 1), (1, 0, 2, 1), 2)
    exact(got, want.astype(np.int32))


def test_conv_integer_same_upper() -> None:
    x = RNG.integers(0, 255, (1, 1, 5, 5)).astype(np.uint8)
    w = RNG.integers(0, 255, (2, 1, 2, 2)).astype(np.uint8)
    got = run("ConvInteger", {"x": x, "w": w}, ["y"], attrs={"auto_pad": "SAME_UPPER"}, version=13)[0]
    exact(got, _conv(x, w, (1, 1), (0, 0, 1, 1), 1).astype(np.int32))


def test_qlinear_conv_per_channel_with_bias() -> None:
    x = RNG.integers(0, 255, (2, 2, 5, 4)).astype(np.uint8)
    w = RNG.integers(-128, 127, (3, 2, 2, 2)).astype(np.int8)
    xs, xz = np.array(0.05, np.float32), np.array(100, np.uint8)
    ws, wz = RNG.uniform(0.01, 0.04, 3).astype(np.float32), np.zeros(3, np.int8)
    ys, yz = np.array(0.2, np.float32), np.array(128, np.uint8)
    bias = np.array([-300, 0, 450], np.int32)
    got = run("QLinearConv", {"x": x, "xs": xs, "xz": xz, "w": w, "ws": ws, "wz": wz, "ys": ys, "yz": yz, "b": bias}, ["y"],
              attrs={"pads": [1, 1, 1, 1]}, version=13)[0]
    acc = _conv(x.astype(np.int64) - 100, w, (1, 1), (1, 1, 1, 1), 1) + bias[None, :, None, None]
    scale = (xs * ws / ys).astype(np.float64)[None, :, None, None]
    exact(got, np.clip(np.rint(acc * scale + 128), 0, 255).astype(np.uint8))
