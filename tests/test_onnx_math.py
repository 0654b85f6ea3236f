"""from_onnx on cpu:0: one-node models of ONNX's math, logical and activation families, each
compared with a NumPy expectation of ONNX's semantics, exact dtype and shape."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper, numpy_helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph import opset

RNG = np.random.default_rng(7)


def _model(op: str, inputs: dict[str, np.ndarray], out_dtype: Any, attrs: dict[str, Any] | None = None,
           consts: dict[str, np.ndarray] | None = None, order: list[str] | None = None, version: int = 21) -> Any:
    consts = consts or {}
    names = order or list(inputs) + list(consts)
    node = helper.make_node(op, names, ["y"], **(attrs or {}))
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)), None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])


def run(op: str, inputs: dict[str, np.ndarray], out_dtype: Any, **kw: Any) -> np.ndarray:
    compiled = nx.compile(nn.from_onnx(_model(op, inputs, out_dtype, **kw)), device="cpu:0", precision="fp32", outputs="host", progress=False)
    return np.asarray(compiled(*inputs.values()))


def check(got: np.ndarray, want: np.ndarray, rtol: float = 1e-6, atol: float = 0.0) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- dtypes of elementwise ops
@pytest.mark.parametrize("base, exp", [("int32", "float32"), ("int64", "float32"), ("float32", "int32"), ("float32", "int64")])
def test_pow_returns_the_base_type(base: str, exp: str) -> None:
    x = np.array([1, 2, 3], base)
    y = np.array([4, 5, 6], exp)
    check(run("Pow", {"x": x, "y": y}, base), np.power(x, y).astype(base))


def test_integer_pow_is_exact_beyond_float_precision() -> None:
    x, y = np.array([3, -7], np.int64), np.array([39, 21], np.int64)
    got = run("Pow", {"x": x, "y": y}, np.int64)
    assert got.dtype == np.int64 and got.tolist() == [3**39, (-7) ** 21]


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_div_truncates_toward_zero(dtype: str) -> None:
    x = np.array([7, -7, 7, -7, 0], dtype)
    y = np.array([2, 2, -2, -2, 3], dtype)
    check(run("Div", {"x": x, "y": y}, dtype), np.array([3, -3, -3, 3, 0], dtype))


def test_int64_div_keeps_its_precision() -> None:
    x, y = np.array([2**62 + 1], np.int64), np.array([3], np.int64)
    assert run("Div", {"x": x, "y": y}, np.int64).tolist() == [(2**62 + 1) // 3]


@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Max", np.maximum), ("Min", np.minimum)])
@pytest.mark.parametrize("dtype", ["float16", "float64", "uint8", "int16", "uint32", "uint64"])
def test_binary_ops_keep_the_input_type(op: str, fn: Any, dtype: str) -> None:
    x = np.array([[1, 200, 7], [3, 4, 250]]).astype(dtype)
    y = np.array([100, 60, 9]).astype(dtype)
    with np.errstate(all="ignore"):
        check(run(op, {"x": x, "y": y}, dtype), fn(x, y))


def test_bfloat16_elementwise_keeps_bfloat16() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([0.5, -1.25, 3.0], ml_dtypes.bfloat16)
    got = run("Exp", {"x": x}, ml_dtypes.bfloat16)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got.astype(np.float32), np.exp(x.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_mod_follows_the_divisor_or_the_dividend_sign(fmod: int, dtype: str) -> None:
    if dtype == "int32" and fmod == 1:
        dtype = "int64"
    x = np.array([5, -5, 5, -5, 7], dtype)
    y = np.array([3, 3, -3, -3, 7], dtype)
    want = np.fmod(x, y) if fmod else np.mod(x, y)
    check(run("Mod", {"x": x, "y": y}, dtype, attrs={"fmod": fmod}, version=13), want)


def test_mean_and_sum_of_three() -> None:
    a, b, c = (RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
    check(run("Mean", {"a": a, "b": b, "c": c[0]}, np.float32), (a + b + c[0]) / 3, rtol=1e-6)
    check(run("Sum", {"a": a, "b": b, "c": c}, np.float32), a + b + c, rtol=1e-6)


# ----------------------------------------------------------------------------- clip
def test_clip_with_run_time_bounds() -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    lo, hi = np.float32(-0.5), np.float32(0.25)
    check(run("Clip", {"x": x, "lo": np.array(lo), "hi": np.array(hi)}, np.float32), np.clip(x, lo, hi))


def test_clip_of_integers_with_one_constant_bound() -> None:
    x = np.array([-128, -3, 0, 5, 127], np.int8)
    check(run("Clip", {"x": x}, np.int8, consts={"hi": np.array(4, np.int8)}, order=["x", "", "hi"]), np.minimum(x, 4))


def test_clip_with_an_empty_bound_leaves_that_side_open() -> None:
    x = np.array([-2.0, 0.0, 2.0], np.float32)
    check(run("Clip", {"x": x}, np.float32, consts={"lo": np.array([], np.float32), "hi": np.array(1.0, np.float32)}), np.minimum(x, 1))


def test_clip_min_greater_than_max_gives_max() -> None:
    x = np.array([-2.0, 0.0, 2.0], np.float32)
    check(run("Clip", {"x": x}, np.float32, consts={"lo": np.array(1.0, np.float32), "hi": np.array(0.5, np.float32)}),
          np.full(3, 0.5, np.float32))


# ----------------------------------------------------------------------------- unary math and logical
@pytest.mark.parametrize("op, fn, lo, hi", [
    ("Tan", np.tan, -1, 1), ("Asin", np.arcsin, -0.9, 0.9), ("Acos", np.arccos, -0.9, 0.9), ("Atan", np.arctan, -3, 3),
    ("Sinh", np.sinh, -2, 2), ("Cosh", np.cosh, -2, 2), ("Asinh", np.arcsinh, -3, 3), ("Acosh", np.arccosh, 1, 4),
    ("Atanh", np.arctanh, -0.9, 0.9),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_trig_and_hyperbolic(op: str, fn: Any, lo: float, hi: float, dtype: str) -> None:
    x = RNG.uniform(lo, hi, (2, 5)).astype(dtype)
    check(run(op, {"x": x}, dtype), fn(x), rtol=1e-6 if dtype == "float32" else 1e-12)


def test_round_halves_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6], np.float32)
    check(run("Round", {"x": x}, np.float32), np.array([0, 2, 2, -0, -2, 2, -3], np.float32))


def test_isinf_detects_the_signs_asked_for() -> None:
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    check(run("IsInf", {"x": x}, np.bool_), np.array([True, True, False, False]))
    check(run("IsInf", {"x": x}, np.bool_, attrs={"detect_negative": 0}), np.array([True, False, False, False]))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint64"])
def test_bit_shift_with_counts_out_of_range(direction: str, dtype: str) -> None:
    signed = np.dtype(dtype).kind == "i"
    x = np.array([1, 5, 100, -3 if signed else 3, 7, 9], dtype)
    bits = np.iinfo(dtype).bits
    n = np.array([1, 2, 3, 1, bits, bits + 3], dtype)
    shift = np.array(list(n[:4]) + [0, 0], dtype)
    if direction == "LEFT":
        want = np.left_shift(x.view(f"u{x.itemsize}"), shift.astype(f"u{x.itemsize}")).view(dtype)
        want[4:] = 0
    else:
        want = np.right_shift(x, shift)
        want[4:] = 0
    check(run("BitShift", {"x": x, "n": n}, dtype, attrs={"direction": direction}), want)


@pytest.mark.parametrize("op, fn", [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)])
def test_bitwise_binary(op: str, fn: Any) -> None:
    x = RNG.integers(0, 2**16, (2, 3)).astype(np.uint16)
    y = RNG.integers(0, 2**16, (3,)).astype(np.uint16)
    check(run(op, {"x": x, "y": y}, np.uint16), fn(x, y))


def test_bitwise_not_and_logical_xor() -> None:
    x = np.array([0, -1, 5], np.int32)
    check(run("BitwiseNot", {"x": x}, np.int32), np.invert(x))
    a, b = np.array([True, False, True]), np.array([True, True, False])
    check(run("Xor", {"a": a, "b": b}, np.bool_), np.logical_xor(a, b))


# ----------------------------------------------------------------------------- activations
def _elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * (np.exp(x) - 1))


ACTIVATIONS = [
    ("Elu", {"alpha": 0.75}, lambda x: _elu(x, 0.75)),
    ("Selu", {}, lambda x: 1.05070102214813232421875 * _elu(x, 1.67326319217681884765625)),
    ("Celu", {"alpha": 2.0}, lambda x: np.maximum(0, x) + np.minimum(0, 2.0 * (np.exp(x / 2.0) - 1))),
    ("ThresholdedRelu", {"alpha": 0.5}, lambda x: np.where(x > 0.5, x, 0)),
    ("Softplus", {}, lambda x: np.log1p(np.exp(x))),
    ("Softsign", {}, lambda x: x / (1 + np.abs(x))),
    ("Mish", {}, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    ("Swish", {"alpha": 0.5}, lambda x: x / (1 + np.exp(-0.5 * x))),
    ("Shrink", {"bias": 0.25, "lambd": 0.5}, lambda x: np.where(x < -0.5, x + 0.25, np.where(x > 0.5, x - 0.25, 0))),
    ("HardSigmoid", {}, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    ("LeakyRelu", {"alpha": 0.125}, lambda x: np.where(x >= 0, x, 0.125 * x)),
]


@pytest.mark.parametrize("op, attrs, fn", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_activation(op: str, attrs: dict[str, Any], fn: Any, dtype: str) -> None:
    x = RNG.uniform(-3, 3, (2, 7)).astype(dtype)
    want = fn(x.astype(np.float64)).astype(dtype)
    check(run(op, {"x": x}, dtype, attrs=attrs, version=24), want, rtol={"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}[dtype])


def test_prelu_broadcasts_its_slope() -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    check(run("PRelu", {"x": x}, np.float32, consts={"slope": slope}), np.where(x < 0, x * slope, x))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_axis_ops_default_to_the_last_axis(op: str) -> None:
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    want = {"Softmax": e / e.sum(-1, keepdims=True), "LogSoftmax": np.log(e / e.sum(-1, keepdims=True)),
            "Hardmax": (x == x.max(-1, keepdims=True)).astype(np.float32)}[op]
    check(run(op, {"x": x}, np.float32), want, rtol=1e-5, atol=1e-6)
    check(run(op, {"x": x}, np.float32, attrs={"axis": 0}), run(op, {"x": x}, np.float32, attrs={"axis": -3}))


def test_hardmax_picks_the_first_maximum() -> None:
    x = np.array([[1, 3, 3], [2, 2, 1]], np.float32)
    check(run("Hardmax", {"x": x}, np.float32), np.array([[0, 1, 0], [1, 0, 0]], np.float32))


# ----------------------------------------------------------------------------- products and scans
@pytest.mark.parametrize("a, b", [((3,), (3, 4)), ((2, 3), (3,)), ((2, 1, 2, 3), (5, 3, 2))])
def test_matmul_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    x, y = RNG.standard_normal(a).astype(np.float32), RNG.standard_normal(b).astype(np.float32)
    check(run("MatMul", {"x": x, "y": y}, np.float32), np.matmul(x, y), rtol=1e-5)


def test_matmul_1d_by_1d_is_a_scalar_in_the_opset() -> None:
    assert opset.infer("matmul", {}, [(3,), (3,)], ["float32", "float32"], {}) == ((), "float32")
    assert opset.evaluate("matmul", {}, [np.ones(3, np.float32)] * 2, {}).shape == ()


def test_integer_matmul_keeps_int32() -> None:
    x, y = RNG.integers(-5, 5, (2, 3)).astype(np.int32), RNG.integers(-5, 5, (3, 2)).astype(np.int32)
    check(run("MatMul", {"x": x, "y": y}, np.int32), x @ y)


def test_gemm_with_a_constant_weight_and_bias_row() -> None:
    a, w = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((5, 4)).astype(np.float32)
    c = RNG.standard_normal((1, 5)).astype(np.float32)
    check(run("Gemm", {"a": a}, np.float32, attrs={"transB": 1}, consts={"w": w, "c": c}), a @ w.T + c, rtol=1e-5)
    check(run("Gemm", {"a": a}, np.float32, attrs={"transB": 1, "alpha": 0.5, "beta": 2.0}, consts={"w": w, "c": c}),
          0.5 * a @ w.T + 2.0 * c, rtol=1e-5)


def test_gemm_float64_of_run_time_operands() -> None:
    a, w, c = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 5)), RNG.standard_normal((3, 1))
    check(run("Gemm", {"a": a, "w": w, "c": c}, np.float64, attrs={"transA": 1, "alpha": 0.5, "beta": 2.0}),
          0.5 * a.T @ w + 2.0 * c, rtol=1e-12)


@pytest.mark.parametrize("op, fn, identity", [("CumSum", np.cumsum, 0), ("CumProd", np.cumprod, 1)])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumulative(op: str, fn: Any, identity: int, exclusive: int, reverse: int) -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    v = x[:, ::-1] if reverse else x
    out = fn(v, axis=1).astype(np.int32)
    if exclusive:
        out = np.concatenate([np.full((2, 1), identity, np.int32), out[:, :-1]], axis=1)
    want = out[:, ::-1] if reverse else out
    check(run(op, {"x": x}, np.int32, attrs={"exclusive": exclusive, "reverse": reverse}, consts={"axis": np.array(-1, np.int64)},
              version=26), want)


@pytest.mark.parametrize("equation, shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("ij", [(3, 4)]), ("ji", [(3, 4)]),
    ("...ii->...i", [(2, 3, 3)]), ("i,i", [(5,), (5,)]), ("ij,jk", [(2, 3), (3, 4)]), ("...j,jk->...k", [(2, 3, 4), (4, 2)]),
])
def test_einsum(equation: str, shapes: list[tuple[int, ...]]) -> None:
    xs = {f"x{i}": RNG.standard_normal(s) for i, s in enumerate(shapes)}
    want = np.einsum(equation, *xs.values())
    assert opset.infer("einsum", {"equation": equation}, shapes, ["float64"] * len(shapes), {}) == (want.shape, "float64")
    if want.ndim:
        check(run("Einsum", xs, np.float64, attrs={"equation": equation}), want, rtol=1e-12)


def test_einsum_rejects_mismatched_sizes() -> None:
    with pytest.raises(ValueError, match="sizes"):
        opset.infer("einsum", {"equation": "ij,jk->ik"}, [(2, 3), (4, 5)], ["float32"] * 2, {})


def test_det_of_a_batch() -> None:
    x = RNG.standard_normal((2, 3, 3)).astype(np.float32)
    check(run("Det", {"x": x}, np.float32), np.linalg.det(x).astype(np.float32), rtol=1e-5)
