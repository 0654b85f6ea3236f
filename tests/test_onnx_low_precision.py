"""from_onnx on cpu:0 with ONNX's low-precision storage dtypes (float8 e4m3fn / e4m3fnuz / e5m2 /
e5m2fnuz, float8 e8m0, float4 e2m1, int4 / uint4 / int2 / uint2): Cast and CastLike (``saturate``,
e8m0's ``round_mode``, int4 / int2 wrapping as ONNX's reference does), QuantizeLinear and
DequantizeLinear to and from them, data movement carrying them, and typed refusals where an op
would compute on them. Each case is compared with a NumPy / ml_dtypes expectation of ONNX's
semantics, exact dtype and shape.

Models whose output is a storage dtype are checked on the imported graph run by the cpu:0
interpreter (``run_graph(..., float_dtype=None)``, every value in its declared dtype); the others
through ``nx.compile`` on cpu:0."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")

from onnx import TensorProto, helper, numpy_helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixError
from neurenix_core.graph.importers.onnx_import import import_onnx
from neurenix_core.graph.reference.run import run_graph

FLOAT8 = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}
SPECIAL = np.array([0.47892547, 1e6, -1e6, np.inf, -np.inf, np.nan, -0.0, 500.0, 449.0, 300.0, 1e-7, -3.3], np.float32)


def _model(nodes: list[Any], inputs: dict[str, tuple[int, tuple[int, ...]]], outputs: list[str], inits: list[Any] | None = None,
            version: int = 25) -> Any:
    graph = helper.make_graph(nodes, "low_precision",
                              [helper.make_tensor_value_info(k, code, shape) for k, (code, shape) in inputs.items()],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs], inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])


def compiled(model: Any, *xs: np.ndarray) -> list[np.ndarray]:
    out = nx.compile(nn.from_onnx(model), device="cpu:0", precision="fp32", outputs="host", progress=False)(*xs)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def interpreted(model: Any, *xs: np.ndarray) -> list[np.ndarray]:
    graph, _ = import_onnx(model)
    out = run_graph(graph, *xs, float_dtype=None)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def exact(got: np.ndarray, want: np.ndarray) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    wide = (lambda a: a.astype(np.float64)) if want.dtype.kind in "fV" else (lambda a: a)
    np.testing.assert_array_equal(wide(got), wide(want))


def _cast(x: str, y: str, to: int, **attrs: Any) -> Any:
    return helper.make_node("Cast", [x], [y], to=to, **attrs)


# ----------------------------------------------------------------------------- Cast to float8
@pytest.mark.parametrize("code", list(FLOAT8))
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8_and_back(code: int, saturate: int) -> None:
    f8 = FLOAT8[code]
    model = _model([_cast("x", "y8", code, saturate=saturate), _cast("y8", "y", TensorProto.FLOAT)],
                   {"x": (TensorProto.FLOAT, SPECIAL.shape)}, ["y", "y8"])
    top = float(ml_dtypes.finfo(f8).max)
    # saturate=1: finite overflow and infinities clip to the largest finite value, NaN stays NaN;
    # saturate=0: the type's own overflow (inf for e5m2, NaN for the others).
    want8 = (np.clip(SPECIAL, -top, top) if saturate else SPECIAL).astype(f8)
    y, y8 = interpreted(model, SPECIAL)
    exact(y8, want8)
    exact(y, want8.astype(np.float32))
    exact(compiled(_model(model.graph.node, {"x": (TensorProto.FLOAT, SPECIAL.shape)}, ["y"]), SPECIAL)[0], want8.astype(np.float32))


def test_float8_saturation_table() -> None:
    x = np.array([1e6, np.inf, -np.inf, -0.0], np.float32)
    got = {}
    for code in FLOAT8:
        for sat in (1, 0):
            model = _model([_cast("x", "y8", code, saturate=sat), _cast("y8", "y", TensorProto.FLOAT)],
                           {"x": (TensorProto.FLOAT, (4,))}, ["y"])
            got[code, sat] = compiled(model, x)[0]
    np.testing.assert_array_equal(got[TensorProto.FLOAT8E4M3FN, 1], [448, 448, -448, -0.0])
    np.testing.assert_array_equal(got[TensorProto.FLOAT8E4M3FNUZ, 1], [240, 240, -240, 0.0])
    np.testing.assert_array_equal(got[TensorProto.FLOAT8E5M2, 1], [57344, 57344, -57344, -0.0])
    np.testing.assert_array_equal(got[TensorProto.FLOAT8E5M2, 0], [np.inf, np.inf, -np.inf, -0.0])
    assert np.isnan(got[TensorProto.FLOAT8E4M3FN, 0][:3]).all() and np.isnan(got[TensorProto.FLOAT8E5M2FNUZ, 0][:3]).all()
    assert np.signbit(got[TensorProto.FLOAT8E4M3FN, 1][3]) and not np.signbit(got[TensorProto.FLOAT8E4M3FNUZ, 1][3])


def test_float16_input_rounds_once_to_float8() -> None:
    x = np.array([0.4790, 0.5, 3.3, 1000.0, -1e4], np.float16)
    model = _model([_cast("x", "y", TensorProto.FLOAT8E4M3FN)], {"x": (TensorProto.FLOAT16, (5,))}, ["y"])
    exact(interpreted(model, x)[0], np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn))


# ----------------------------------------------------------------------------- float8 e8m0
E8M0_IN = np.array([0.0, 0.124, 0.25, 1.1, 1.5, 3.0, 0.75, np.nan, 1.5 * 2.0**127], np.float32)
E8M0_WANT = {
    "up": [2.0**-127, 0.125, 0.25, 2, 2, 4, 1, np.nan, 2.0**127],
    "down": [2.0**-127, 0.0625, 0.25, 1, 1, 2, 0.5, np.nan, 2.0**127],
    "nearest": [2.0**-127, 0.125, 0.25, 1, 2, 4, 1, np.nan, 2.0**127],
}


@pytest.mark.parametrize("mode", list(E8M0_WANT))
def test_cast_to_e8m0_round_modes(mode: str) -> None:
    model = _model([_cast("x", "e", TensorProto.FLOAT8E8M0, round_mode=mode), _cast("e", "y", TensorProto.FLOAT)],
                   {"x": (TensorProto.FLOAT, E8M0_IN.shape)}, ["y"])
    exact(compiled(model, E8M0_IN)[0], np.array(E8M0_WANT[mode], np.float32))


def test_e8m0_without_saturate_overflows_to_nan_and_reads_back() -> None:
    model = _model([_cast("x", "e", TensorProto.FLOAT8E8M0, saturate=0, round_mode="nearest")], {"x": (TensorProto.FLOAT, (2,))}, ["e"])
    got = interpreted(model, np.array([1.5 * 2.0**127, 3.0], np.float32))[0]
    assert got.dtype == ml_dtypes.float8_e8m0fnu and np.isnan(got.astype(np.float32)[0]) and got.astype(np.float32)[1] == 4
    back = _model([_cast("e", "y", TensorProto.FLOAT16)], {"e": (TensorProto.FLOAT8E8M0, (3,))}, ["y"])
    e = np.array([0.5, 1.0, 64.0], np.float32).astype(ml_dtypes.float8_e8m0fnu)
    exact(compiled(back, e)[0], np.array([0.5, 1.0, 64.0], np.float16))


# ----------------------------------------------------------------------------- 4 and 2-bit integers, float4
INTS = {TensorProto.INT4: (ml_dtypes.int4, -8, 16), TensorProto.UINT4: (ml_dtypes.uint4, 0, 16),
        TensorProto.INT2: (ml_dtypes.int2, -2, 4), TensorProto.UINT2: (ml_dtypes.uint2, 0, 4)}


@pytest.mark.parametrize("code", list(INTS))
def test_cast_to_small_integers_wraps_like_onnx_reference(code: int) -> None:
    dtype, lo, span = INTS[code]
    x = np.arange(-9, 16).astype(np.float32)
    wide = TensorProto.INT8 if lo < 0 else TensorProto.UINT8
    model = _model([_cast("x", "q", code), _cast("q", "y", wide)], {"x": (TensorProto.FLOAT, x.shape)}, ["y", "q"])
    want = ((x.astype(np.int64) - lo) % span + lo).astype(np.int8 if lo < 0 else np.uint8)  # two's complement wrap
    y, q = interpreted(model, x)
    assert q.dtype == dtype
    exact(y, want)
    exact(compiled(_model(model.graph.node, {"x": (TensorProto.FLOAT, x.shape)}, ["y"]), x)[0], want)


def test_storage_inputs_cast_to_float() -> None:
    x8 = np.array([[0.5, -104, 448], [np.nan, 0.0, 1.75]], np.float32).astype(ml_dtypes.float8_e4m3fn)
    x4 = np.array([[-8, 7, 0], [1, -1, 3]], np.int8).astype(ml_dtypes.int4)
    f4 = np.array([[0.5, 6, -6], [1.5, 0, -0.0]], np.float32).astype(ml_dtypes.float4_e2m1fn)
    model = _model([_cast("a", "ya", TensorProto.FLOAT), _cast("b", "yb", TensorProto.FLOAT16), _cast("c", "yc", TensorProto.FLOAT)],
                   {"a": (TensorProto.FLOAT8E4M3FN, (2, 3)), "b": (TensorProto.INT4, (2, 3)), "c": (TensorProto.FLOAT4E2M1, (2, 3))},
                   ["ya", "yb", "yc"])
    ya, yb, yc = compiled(model, x8, x4, f4)
    exact(ya, x8.astype(np.float32))
    exact(yb, x4.astype(np.int8).astype(np.float16))
    exact(yc, f4.astype(np.float32))


def test_castlike_takes_saturate_and_the_like_type() -> None:
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    x = np.array([1e6, 3.3, -np.inf], np.float32)
    for sat, want in ((1, [57344, 3.5, -57344]), (0, [np.inf, 3.5, -np.inf])):
        model = _model([helper.make_node("CastLike", ["x", "like"], ["y"], saturate=sat)],
                       {"x": (TensorProto.FLOAT, (3,)), "like": (TensorProto.FLOAT8E5M2, (1,))}, ["y"])
        exact(interpreted(model, x, like)[0], np.array(want, np.float32).astype(ml_dtypes.float8_e5m2))


def test_constant_casts_fold_with_saturation() -> None:
    init = numpy_helper.from_array(np.array([1e6, -2.0], np.float32), "c")
    model = _model([_cast("c", "c8", TensorProto.FLOAT8E4M3FN), _cast("c8", "cf", TensorProto.FLOAT),
                    helper.make_node("Add", ["cf", "x"], ["y"])], {"x": (TensorProto.FLOAT, (2,))}, ["y"], [init])
    exact(compiled(model, np.zeros(2, np.float32))[0], np.array([448, -2], np.float32))


# ----------------------------------------------------------------------------- QuantizeLinear / DequantizeLinear
def test_quantize_dequantize_int4_per_axis() -> None:
    x = np.array([[0, 2.5, 4.8, 8.6], [-30, -20, 6, 9], [12, 15, 16, 40]], np.float32)
    scale, zp = np.array([2, 3, 4], np.float32), np.array([1, 1, 1], np.int8).astype(ml_dtypes.int4)
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")]
    model = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0),
                    helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0)],
                   {"x": (TensorProto.FLOAT, (3, 4))}, ["q", "y"], inits)
    want_q = np.clip(np.rint(x / scale[:, None]) + 1, -8, 7)
    q, y = interpreted(model, x)
    exact(q, want_q.astype(ml_dtypes.int4))
    exact(y, ((want_q - 1) * scale[:, None]).astype(np.float32))
    exact(compiled(_model(model.graph.node, {"x": (TensorProto.FLOAT, (3, 4))}, ["y"], inits), x)[0], y)


@pytest.mark.parametrize("code", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E4M3FNUZ])
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_to_float8(code: int, saturate: int) -> None:
    f8 = FLOAT8[code]
    x = np.array([0, 1, 2, 1e5, 200, -3.3, np.inf], np.float32)
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [2.0]), helper.make_tensor("z", code, [], [0.0])]
    model = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], saturate=saturate)],
                   {"x": (TensorProto.FLOAT, x.shape)}, ["q"], inits)
    top = float(ml_dtypes.finfo(f8).max)
    want = (np.clip(x / 2, -top, top) if saturate else x / 2).astype(f8)
    exact(interpreted(model, x)[0], want)


def test_dequantize_float8_and_float4_with_float16_scale() -> None:
    x8 = np.array([0, 0.5, 448, -104], np.float32).astype(ml_dtypes.float8_e4m3fn)
    x4 = np.array([0, 1, -1.5, 6], np.float32).astype(ml_dtypes.float4_e2m1fn)
    model = _model([helper.make_node("DequantizeLinear", ["a", "s"], ["ya"]), helper.make_node("DequantizeLinear", ["b", "s"], ["yb"])],
                   {"a": (TensorProto.FLOAT8E4M3FN, (4,)), "b": (TensorProto.FLOAT4E2M1, (4,))}, ["ya", "yb"],
                   [helper.make_tensor("s", TensorProto.FLOAT16, [], [np.float16(2.0)])])
    ya, yb = compiled(model, x8, x4)
    exact(ya, (x8.astype(np.float32) * 2).astype(np.float16))
    exact(yb, (x4.astype(np.float32) * 2).astype(np.float16))


def test_e8m0_scale_dequantizes_with_output_dtype() -> None:
    x = np.array([1, -2, 3, 7], np.int8).astype(ml_dtypes.int4)
    scale = np.array(0.25, np.float32).astype(ml_dtypes.float8_e8m0fnu)
    model = _model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], output_dtype=TensorProto.FLOAT)],
                   {"x": (TensorProto.INT4, (4,)), "s": (TensorProto.FLOAT8E8M0, ())}, ["y"])
    exact(compiled(model, x, scale)[0], np.array([0.25, -0.5, 0.75, 1.75], np.float32))


def test_nonzero_float8_zero_point_is_refused() -> None:
    model = _model([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])],
                   {"x": (TensorProto.FLOAT8E4M3FN, (2,)), "s": (TensorProto.FLOAT, ()), "z": (TensorProto.FLOAT8E4M3FN, ())}, ["y"])
    x = np.array([1, 2], np.float32).astype(ml_dtypes.float8_e4m3fn)
    with pytest.raises(NeurenixError, match="zero point must be zero"):
        compiled(model, x, np.float32(1), np.array(1.0, np.float32).astype(ml_dtypes.float8_e4m3fn))


def test_float6_is_refused_by_name() -> None:
    model = _model([helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=TensorProto.FLOAT6E2M3)],
                   {"x": (TensorProto.FLOAT, (4,))}, ["y"], [helper.make_tensor("s", TensorProto.FLOAT, [], [1.0])])
    with pytest.raises(NeurenixError, match="float6"):
        nn.from_onnx(model)


# ----------------------------------------------------------------------------- other ops
def test_data_movement_carries_float8() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.float8_e5m2)
    shape = numpy_helper.from_array(np.array([3, 2], np.int64), "shape")
    model = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("Reshape", ["t", "shape"], ["r"]),
                    helper.make_node("Identity", ["r"], ["i"]), _cast("i", "y", TensorProto.FLOAT)],
                   {"x": (TensorProto.FLOAT8E5M2, (2, 3))}, ["y"], [shape])
    exact(compiled(model, x)[0], x.astype(np.float32).T.reshape(3, 2))


@pytest.mark.parametrize("code, op", [(TensorProto.FLOAT8E4M3FN, "Relu"), (TensorProto.INT4, "Neg"), (TensorProto.FLOAT4E2M1, "Abs")])
def test_compute_ops_refuse_storage_dtypes(code: int, op: str) -> None:
    model = _model([helper.make_node(op, ["x"], ["y"])], {"x": (code, (3,))}, ["y"])
    with pytest.raises(NeurenixError, match="storage types"):
        nn.from_onnx(model)


def test_host_inputs_convert_to_and_from_declared_storage_dtypes() -> None:
    to_f32 = _model([_cast("x", "y", TensorProto.FLOAT)], {"x": (TensorProto.FLOAT8E4M3FN, (3,))}, ["y"])
    # numbers into a float8 input: Cast's default conversion (saturating)
    exact(compiled(to_f32, np.array([1e6, 0.3, -np.inf], np.float32))[0], np.array([448, 0.3125, -448], np.float32))
    to_i32 = _model([_cast("x", "y", TensorProto.INT32)], {"x": (TensorProto.INT8, (3,))}, ["y"])
    exact(compiled(to_i32, np.array([1, -8, 7], np.int8).astype(ml_dtypes.int4))[0], np.array([1, -8, 7], np.int32))


@pytest.mark.parametrize("to", ["int32", "uint8", "int8", "uint4", "int4", "int2", "uint64"])
def test_float_to_integer_casts_have_one_result_on_every_cpu(to: str) -> None:
    """Through a wide integer, never NumPy's straight float-to-narrow conversion (undefined in C,
    so it differed between CPUs): truncation, then a two's complement wrap; NaN gives 0 and what
    int64 cannot hold saturates. No 'invalid value encountered in cast' warning either."""
    from neurenix_core.graph.opset.tensor import convert

    target = np.dtype(getattr(ml_dtypes, to)) if to in ("uint4", "int4", "int2") else np.dtype(to)
    info = ml_dtypes.iinfo(target)
    span = int(info.max) - int(info.min) + 1
    finite = np.array([-9.7, -1.5, -0.5, 0.5, 7.9, 300.2, -300.2, 70000.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = convert(finite, to)
        special = convert(np.array([np.nan, np.inf, -np.inf, 1e30, -1e30]), to)
    lo = int(info.min)
    want = [(int(v) - lo) % span + lo for v in np.trunc(finite)]  # exact, in Python integers
    assert got.dtype == target
    assert [int(v) for v in got] == want
    assert [int(v) for v in special] == [0, int(info.max), lo, int(info.max), lo]
