"""from_torch op coverage: one small forward per ATen op (importers/torch_ops.py), compiled on
cpu:0, against torch eager (same dtype and shape; integer and bool results exactly)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import model_zoo as zoo

import neurenix_core as nx
from neurenix_core import nn

_G = torch.Generator().manual_seed(0)


def _randn(*shape: int) -> Any:
    return torch.randn(*shape, generator=_G)


X3, X4, X5 = _randn(2, 4, 8), _randn(2, 4, 6, 6), _randn(1, 2, 4, 4, 5)
XI = torch.randint(-9, 10, (3, 4), generator=_G)
XI[XI == 0] = 3  # a divisor
IDX = torch.randint(0, 8, (2, 4, 5), generator=_G)
SPECIAL = torch.tensor([[0.5, 1.5, -2.5, float("nan")], [float("inf"), -float("inf"), 0.0, -0.0], [2.0, -3.0, 0.25, 7.0]])


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: Any) -> Any:
        return self.fn(*xs)


def _setitem(x: Any) -> Any:
    y = x.clone()
    y[torch.tensor([0, 1]), torch.tensor([2, -1])] = 5.0
    return y


def _accumulate(x: Any) -> Any:
    return x.index_put((torch.tensor([0, 0, 1]),), torch.ones(3, 4, 8), accumulate=True)


def _masked_set(x: Any) -> Any:
    y = x.clone()
    y[x > 0.5] = 0.0
    return y


CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    # scans and sorting
    "cumsum": (lambda x: x.cumsum(1), (X3,)), "cumsum_int": (lambda x: (x > 0).cumsum(-1), (X3,)),
    "cumprod": (lambda x: x.cumprod(-1), (X3,)),
    "topk": (lambda x: torch.topk(x, 3, dim=1), (X3,)), "topk_small": (lambda x: torch.topk(x, 2, largest=False), (X3,)),
    "sort": (lambda x: torch.sort(x, -1, descending=True), (X3,)), "sort_stable": (lambda x: torch.sort(x, stable=True, dim=1), (X3,)),
    "argsort": (lambda x: torch.argsort(x, -1), (X3,)),
    # shapes and indexing
    "roll": (lambda x: torch.roll(x, (1, -3), (1, 2)), (X3,)), "roll_flat": (lambda x: torch.roll(x, 5), (X3,)),
    "flip": (lambda x: x.flip(0, -1), (X3,)), "diff": (lambda x: torch.diff(x, 2, dim=1, prepend=x[:, :1]), (X3,)),
    "diff_int": (lambda x: x.diff(), (XI,)), "repeat": (lambda x: x.repeat(2, 1, 1, 2), (X3,)), "tile": (lambda x: x.tile(2), (X3,)),
    "tril": (lambda x: torch.tril(x, 1), (X3,)), "triu": (lambda x: torch.triu(x, -1), (X3,)),
    "one_hot": (lambda x: F.one_hot(x.argmax(-1), 8), (X3,)),
    "einsum": (lambda x: torch.einsum("bij,bkj->bik", x, x), (X3,)),
    "gather": (lambda x: torch.gather(x, 2, IDX), (X3,)),
    "scatter": (lambda x: x.scatter(2, IDX, 1.0), (X3,)), "scatter_src": (lambda x: x.scatter(2, IDX[:, :, :3], x), (X3,)),
    "scatter_add": (lambda x: x.scatter_add(2, IDX, x), (X3,)),
    "scatter_amax": (lambda x: x.scatter_reduce(2, IDX, x, "amax"), (X3,)),
    "scatter_sum_excl": (lambda x: x.scatter_reduce(2, IDX, x, "sum", include_self=False), (X3,)),
    "index_put": (_setitem, (X3,)), "index_put_acc": (_accumulate, (X3,)), "masked_set": (_masked_set, (X3,)),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), (X4,)), "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), (X4,)),
    "zeros_like": (lambda x: torch.zeros_like(x) + x, (X3,)), "full_like": (lambda x: torch.full_like(x, 2.0) * x, (X3,)),
    # pooling
    "adaptive_avg1d": (lambda x: F.adaptive_avg_pool1d(x, 3), (X3,)), "adaptive_avg2d": (lambda x: F.adaptive_avg_pool2d(x, (4, 5)), (X4,)),
    "adaptive_avg3d": (lambda x: F.adaptive_avg_pool3d(x, (3, 2, 3)), (X5,)),
    "adaptive_max1d": (lambda x: F.adaptive_max_pool1d(x, 3), (X3,)), "adaptive_max2d": (lambda x: F.adaptive_max_pool2d(x, 4), (X4,)),
    "adaptive_max3d": (lambda x: F.adaptive_max_pool3d(x, (3, 2, 3)), (X5,)),
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, 2, 1), (X3,)), "avg_pool1d": (lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), (X3,)),
    "max_pool2d_ceil": (lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True, dilation=1), (X4,)),
    "max_pool2d_indices": (lambda x: F.max_pool2d(x, 2, return_indices=True), (X4,)),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2), (X5,)), "avg_pool3d": (lambda x: F.avg_pool3d(x, 2, padding=1), (X5,)),
    # convolution and normalisation
    "conv3d": (torch.nn.Conv3d(2, 3, 3, padding=1), (X5,)), "conv_transpose1d": (torch.nn.ConvTranspose1d(4, 3, 3, stride=2), (X3,)),
    "conv_transpose3d": (torch.nn.ConvTranspose3d(2, 3, 2, stride=2), (X5,)),
    "group_norm": (torch.nn.GroupNorm(2, 4), (X4,)), "instance_norm": (torch.nn.InstanceNorm2d(4, affine=True), (X4,)),
    "batch_norm1d": (torch.nn.BatchNorm1d(4), (X3,)), "rms_norm": (lambda x: F.rms_norm(x, (8,)), (X3,)),
    # resize and sampling
    "nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (X4,)),
    "nearest_size": (lambda x: F.interpolate(x, size=(9, 4), mode="nearest"), (X4,)),
    "nearest_exact": (lambda x: F.interpolate(x, size=(9, 4), mode="nearest-exact"), (X4,)),
    "bilinear": (lambda x: F.interpolate(x, size=(9, 7), mode="bilinear"), (X4,)),
    "bilinear_corners": (lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True), (X4,)),
    "bicubic": (lambda x: F.interpolate(x, size=(9, 9), mode="bicubic"), (X4,)),
    "linear1d": (lambda x: F.interpolate(x, scale_factor=2, mode="linear"), (X3,)),
    "trilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), (X5,)),
    "grid_sample": (lambda x: F.grid_sample(x, torch.linspace(-1.2, 1.2, 36).reshape(2, 3, 3, 2), align_corners=False), (X4,)),
    # activations and elementwise math
    "elu": (lambda x: F.elu(x, 0.7), (X3,)), "selu": (F.selu, (X3,)), "celu": (lambda x: F.celu(x, 0.5), (X3,)),
    "softplus": (lambda x: F.softplus(x * 30, beta=2, threshold=10), (X3,)), "mish": (F.mish, (X3,)),
    "prelu": (torch.nn.PReLU(4), (X3,)), "log_sigmoid": (F.logsigmoid, (X3,)), "glu": (F.glu, (X3,)),
    "threshold": (lambda x: F.threshold(x, 0.1, 2.0), (X3,)),
    "remainder": (lambda x: torch.remainder(x, 0.3), (X3,)), "fmod": (lambda x: torch.fmod(x, 0.3), (X3,)),
    "remainder_int": (lambda x: torch.remainder(x, -4), (XI,)), "fmod_int": (lambda x: torch.fmod(x, 4), (XI,)),
    "round": (torch.round, (SPECIAL,)), "round_decimals": (lambda x: torch.round(x, decimals=1), (X3,)),
    "trunc": (torch.trunc, (X3,)), "frac": (torch.frac, (X3,)),
    "isinf": (torch.isinf, (SPECIAL,)), "isnan": (torch.isnan, (SPECIAL,)), "nan_to_num": (torch.nan_to_num, (SPECIAL,)),
    "atan2": (lambda x: torch.atan2(x, x.flip(0)), (SPECIAL[2:].repeat(2, 1) * torch.tensor([[1.0], [-1.0]]),)),
    "atan2_grid": (lambda x: torch.atan2(x[0], x[1]), (torch.tensor([[1.0, 1.0, 0.0, -1.0, -1.0, 0.0], [1.0, -1.0, -1.0, -1.0, 0.0, 2.0]]),)),
    "expm1": (torch.expm1, (X3,)), "log1p": (lambda x: torch.log1p(x.abs()), (X3,)), "log2": (lambda x: torch.log2(x.abs()), (X3,)),
    "exp2": (torch.exp2, (X3,)), "asin": (lambda x: torch.asin(x.clamp(-1, 1)), (X3,)), "tan": (torch.tan, (X3,)),
    "clamp_tensor": (lambda x: torch.clamp(x, x * 0 - 0.5, x * 0 + 0.5), (X3,)),
    "pow_int": (lambda x: torch.pow(x, 3), (XI,)), "pow_int_float": (lambda x: x.abs() ** 0.5, (XI,)),
    "div_int": (lambda x: x / 4, (XI,)), "floor_div_int": (lambda x: x // -4, (XI,)), "floor_div": (lambda x: x // 0.3, (X3,)),
    "div_trunc": (lambda x: torch.div(x, 0.3, rounding_mode="trunc"), (X3,)),
    "div_trunc_int": (lambda x: torch.div(x, 4, rounding_mode="trunc"), (XI,)),
    "bitwise_and": (lambda x: x & 6, (XI,)), "bitwise_or": (lambda x: x | 6, (XI,)), "bitwise_xor": (lambda x: x ^ 6, (XI,)),
    "bitwise_not": (lambda x: ~x, (XI,)), "shift": (lambda x: (x.abs() << 2) >> 1, (XI,)),
    "logical_xor": (lambda x: torch.logical_xor(x > 0, x < 2), (XI,)), "bool_and": (lambda x: (x > 0) & (x < 5), (XI,)),
    "max_other": (lambda x: torch.max(x, x.flip(-1)), (X3,)), "max_all": (lambda x: x.max(), (X3,)),
    "argmin": (lambda x: x.argmin(-1), (X3,)), "argmax_all": (lambda x: x.argmax(), (X3,)),
    "lerp": (lambda x: torch.lerp(x, x.flip(-1), 0.3), (X3,)), "addcmul": (lambda x: torch.addcmul(x, x, x, value=0.5), (X3,)),
    "baddbmm": (lambda x: torch.baddbmm(x[:, :, :4], x, x.transpose(1, 2)[:, :, :4], beta=0.5), (X3,)),
    # reductions
    "var": (lambda x: x.var(-1), (X3,)), "std_keep": (lambda x: x.std((0, 2), keepdim=True, correction=0), (X3,)),
    "var_mean": (lambda x: torch.var_mean(x, 1), (X3,)),
    "norm": (lambda x: torch.linalg.vector_norm(x, dim=-1), (X3,)), "norm_l1": (lambda x: torch.linalg.vector_norm(x, 1, dim=1), (X3,)),
    "norm_inf": (lambda x: torch.linalg.vector_norm(x, float("inf")), (X3,)),
    "normalize": (lambda x: F.normalize(x, dim=-1), (X3,)),
    "any": (lambda x: (x > 1).any(-1), (X3,)), "all": (lambda x: (x > -1).all(), (X3,)), "logsumexp": (lambda x: x.logsumexp(-1), (X3,)),
    "cosine": (lambda x: F.cosine_similarity(x, x + 1, dim=-1), (X3,)),
    "mse": (lambda x: F.mse_loss(x, x.flip(-1)), (X3,)),
}


def _flat(out: Any) -> list[Any]:
    if isinstance(out, (list, tuple)):
        return [v for o in out for v in _flat(o)]
    return [out]


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_imports_and_matches_torch(name: str) -> None:
    fn, inputs = CASES[name]
    torch.manual_seed(0)
    model = fn.eval() if isinstance(fn, torch.nn.Module) else _Fn(fn).eval()
    if isinstance(model, torch.nn.BatchNorm1d):
        with torch.no_grad():
            model.running_mean.uniform_(-0.5, 0.5)
            model.running_var.uniform_(0.5, 1.5)
    with torch.no_grad():
        wants = [w.numpy() for w in _flat(model(*inputs))]
    imported = nn.from_torch(model, inputs if len(inputs) > 1 else inputs[0], static=True)
    outs = nx.compile(imported, device="cpu:0")(*[x.numpy() for x in inputs])
    gots = [g.numpy() for g in _flat(outs)]
    assert len(gots) == len(wants)
    for got, want in zip(gots, wants):
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
        if want.dtype.kind in "biu":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            finite = np.isfinite(want)
            np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
            assert zoo.max_rel_err(got[finite], want[finite]) <= 1e-5


@pytest.mark.parametrize("name, fn, x, other", [
    ("cumsum", lambda x: x.cumsum(1), _randn(2, 5, 3), _randn(4, 5, 3)),
    ("roll", lambda x: torch.roll(x, 2, -1), _randn(2, 5, 3), _randn(3, 5, 3)),
    ("adaptive_avg1d", lambda x: F.adaptive_avg_pool1d(x, 2), _randn(2, 4, 7), _randn(5, 4, 7)),
    ("adaptive_avg3d", lambda x: F.adaptive_avg_pool3d(x, 2), _randn(2, 2, 4, 4, 4), _randn(3, 2, 4, 4, 4)),
    ("nearest", lambda x: F.interpolate(x, scale_factor=2), _randn(2, 3, 4, 4), _randn(1, 3, 4, 4)),
])
def test_dynamic_batch_stays_dynamic(name: str, fn: Callable[..., Any], x: Any, other: Any) -> None:
    model = _Fn(fn).eval()
    imported = nn.from_torch(model, x)  # axis 0 dynamic by default; a static fallback would warn
    got = nx.compile(imported, device="cpu:0")(other.numpy()).numpy()
    assert zoo.max_rel_err(got, fn(other).numpy()) <= 1e-5


def test_reading_adaptive_max_pool_indices_of_uneven_windows() -> None:
    model = _Fn(lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True)[1].float()).eval()
    got = nx.compile(nn.from_torch(model, X3, static=True), device="cpu:0")(X3.numpy()).numpy()
    np.testing.assert_array_equal(got, model(X3).numpy())


def _roberta() -> tuple[Any, dict[str, Any]]:
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           max_position_embeddings=64)
    ids = torch.from_numpy(np.random.default_rng(0).integers(2, 100, (2, 9)))
    mask = torch.ones(2, 9, dtype=torch.int64)
    ids[1, 6:], mask[1, 6:] = config.pad_token_id, 0
    return RobertaModel(config).eval(), {"input_ids": ids, "attention_mask": mask}


def _swin(**extra: Any) -> tuple[Any, dict[str, Any]]:
    from transformers import SwinConfig, SwinModel

    torch.manual_seed(0)
    config = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4, **extra)
    return SwinModel(config).eval(), {"pixel_values": torch.randn(2, 3, 32, 32)}


@pytest.mark.parametrize("build", [_roberta, _swin], ids=["roberta", "swin"])
def test_hugging_face_model_imports_and_matches_torch(build: Callable[[], tuple[Any, dict[str, Any]]]) -> None:
    pytest.importorskip("transformers")
    model, inputs = build()
    with torch.no_grad():
        want = model(**inputs)
    imported = nn.from_torch(model, inputs)
    outs = nx.compile(imported, device="cpu:0")(*[v.numpy() for v in inputs.values()])
    for got, key in zip(outs, ["last_hidden_state", "pooler_output"]):
        assert zoo.max_rel_err(got.numpy(), want[key].numpy()) <= 1e-4


def test_unread_results_add_no_nodes() -> None:
    """topk's indices, max_pool's indices, max(dim)'s values: built only where read."""
    model = _Fn(lambda x: torch.topk(x, 2)[0] + F.max_pool2d(x, 2, return_indices=True)[0].sum() + x.max(-1)[1].unsqueeze(-1)).eval()
    x = _randn(2, 4, 6, 6)
    graph = nn.from_torch(model, x, static=True).to_graph()
    ops = [node.op for node in graph.nodes]
    assert "max_pool" not in ops and "reduce_max" not in ops and ops.count("topk") == 1, ops
    got = nx.compile(nn.from_torch(model, x, static=True), device="cpu:0")(x.numpy()).numpy()
    assert zoo.max_rel_err(got, model(x).numpy()) <= 1e-5


def test_unbatched_pool_inputs() -> None:
    for fn, x in [(lambda v: F.max_pool1d(v, 2, return_indices=True), _randn(4, 8)), (lambda v: F.adaptive_avg_pool2d(v, 2), _randn(3, 5, 5))]:
        model = _Fn(fn).eval()
        outs = nx.compile(nn.from_torch(model, x, static=True), device="cpu:0")(x.numpy())
        for got, want in zip(_flat(outs), _flat(model(x))):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def _swin_eager() -> tuple[Any, dict[str, Any]]:
    # torch.onnx's decomposition of Swin's sdpa path fails inside PyTorch (a view of a transposed
    # tensor), so the ONNX route exports the eager attention.
    return _swin(attn_implementation="eager")


@pytest.mark.slow
@pytest.mark.parametrize("build", [_roberta, _swin_eager], ids=["roberta", "swin"])
def test_hugging_face_model_through_onnx_matches_torch(build: Callable[[], tuple[Any, dict[str, Any]]], tmp_path: Any) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")
    model, inputs = build()
    with torch.no_grad():
        want = model(**inputs)
    path = tmp_path / "model.onnx"
    torch.onnx.export(model, (), str(path), kwargs=inputs, input_names=list(inputs), dynamo=True, verbose=False)
    outs = nx.compile(nn.from_onnx(path), device="cpu:0")(*[v.numpy() for v in inputs.values()])
    for got, key in zip(outs, ["last_hidden_state", "pooler_output"]):
        assert zoo.max_rel_err(got.numpy(), want[key].numpy()) <= 1e-4
