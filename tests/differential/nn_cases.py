"""The catalogue of ``nn``: every layer of ``neurenix_core.nn.layers`` (alone, and in the small
models users write: a CNN ending in Flatten, an MLP), every loss of ``nn.losses`` and the
functional forms the layers do not cover, with hypothesis generators of their configuration and
input, and their float64 references: layers and models through the reference interpreter
(``neurenix_core.graph.reference.run.run_graph`` on the traced graph), losses and functional forms
through float64 NumPy (PyTorch's definitions).

``test_nn_catalogue_covers_every_layer`` (test_nn.py) fails when a layer or loss is added to
``nx.nn`` without an entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.nn import functional as F

from .gen import arr, shape, values
from .harness import Arr

__all__ = ["FUNCTIONAL", "LAYERS", "LOSSES", "Built", "Functional", "Layer", "Loss"]


@dataclass
class Built:
    """A drawn layer or model and its input (float32 values, NCHW for images)."""

    module: nn.Module
    x: Arr


@dataclass(frozen=True)
class Layer:
    """A layer (or a small model) and how to draw one with its input. ``compiled``: whether
    ``nx.compile`` takes it (every layer: the nn layers are the graph's leaves)."""

    name: str
    build: Callable[[st.DataObject], Built]
    compiled: bool = True


def _seeded(data: st.DataObject) -> None:
    nn.manual_seed(data.draw(st.integers(0, 2**16), label="weights seed"))


def _x(data: st.DataObject, shp: tuple[int, ...], low: float = -2.0, high: float = 2.0) -> Arr:
    return arr(data, shp, "float32", low, high)


def _any_shape(data: st.DataObject, min_dims: int = 1) -> tuple[int, ...]:
    return shape(data, min_dims=min_dims, max_dims=4, max_side=4)


def _linear(data: st.DataObject) -> Built:
    _seeded(data)
    fin, fout = data.draw(st.integers(1, 6), label="in"), data.draw(st.integers(1, 6), label="out")
    layer = nn.Linear(fin, fout, bias=data.draw(st.booleans(), label="bias"))
    return Built(layer, _x(data, (*shape(data, 1, 2, max_side=3), fin)))


def _conv(data: st.DataObject) -> Built:
    _seeded(data)
    groups = data.draw(st.sampled_from([1, 1, 2]), label="groups")
    cin, cout = groups * data.draw(st.integers(1, 2), label="cin"), groups * data.draw(st.integers(1, 3), label="cout")
    k = data.draw(st.integers(1, 3), label="kernel")
    stride, dilation = data.draw(st.integers(1, 2), label="stride"), data.draw(st.integers(1, 2), label="dilation")
    padding = data.draw(st.integers(0, 1), label="padding")
    span = dilation * (k - 1) + 1
    h, w = (data.draw(st.integers(max(span - 2 * padding, 1), 7), label=d) for d in "hw")
    layer = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=data.draw(st.booleans(), label="bias"))
    return Built(layer, _x(data, (data.draw(st.integers(1, 2), label="n"), cin, h, w)))


def _elementwise(make: Callable[[st.DataObject], nn.Module], low: float = -3, high: float = 3) -> Callable[[st.DataObject], Built]:
    def build(data: st.DataObject) -> Built:
        return Built(make(data), _x(data, _any_shape(data), low, high))

    return build


def _softmax(data: st.DataObject) -> Built:
    shp = _any_shape(data)
    return Built(nn.Softmax(dim=data.draw(st.integers(-len(shp), len(shp) - 1), label="dim")), _x(data, shp))


def _image(data: st.DataObject, min_side: int = 1) -> tuple[int, ...]:
    return (data.draw(st.integers(1, 2), label="n"), data.draw(st.integers(1, 3), label="c"),
            data.draw(st.integers(min_side, 7), label="h"), data.draw(st.integers(min_side, 7), label="w"))


def _pool(kind: str) -> Callable[[st.DataObject], Built]:
    def build(data: st.DataObject) -> Built:
        k = data.draw(st.integers(1, 3), label="kernel")
        stride = data.draw(st.one_of(st.none(), st.integers(1, 3)), label="stride")
        padding = data.draw(st.integers(0, k // 2), label="padding")  # PyTorch's rule: at most half the kernel
        shp = _image(data, min_side=k)
        if kind == "max":
            return Built(nn.MaxPool2d(k, stride, padding), _x(data, shp))
        return Built(nn.AvgPool2d(k, stride, padding, count_include_pad=data.draw(st.booleans(), label="count_include_pad")), _x(data, shp))

    return build


def _adaptive(data: st.DataObject) -> Built:
    shp = _image(data)
    out = (data.draw(st.integers(1, shp[2]), label="oh"), data.draw(st.integers(1, shp[3]), label="ow"))
    return Built(nn.AdaptiveAvgPool2d(out), _x(data, shp))


def _flatten(data: st.DataObject) -> Built:
    shp = _any_shape(data, min_dims=2)
    start = data.draw(st.integers(0, len(shp) - 1), label="start")
    end = data.draw(st.integers(start, len(shp) - 1), label="end")
    neg = data.draw(st.booleans(), label="negative end")
    return Built(nn.Flatten(start, end - len(shp) if neg else end), _x(data, shp))


def _batchnorm(data: st.DataObject) -> Built:
    shp = _image(data)
    c = shp[1]
    bn = nn.BatchNorm2d(c, eps=data.draw(st.sampled_from([1e-5, 1e-3]), label="eps"), affine=data.draw(st.booleans(), label="affine"))
    # Running statistics other than 0 and 1, so inference normalisation does something.
    bn.running_mean = nx.asarray(values(data, (c,), "float32", -1, 1).astype(np.float32))
    bn.running_var = nx.asarray(values(data, (c,), "float32", 0.5, 2).astype(np.float32))
    if bn.weight is not None:
        bn.weight = nx.asarray(values(data, (c,), "float32", 0.5, 1.5).astype(np.float32))
        bn.bias = nx.asarray(values(data, (c,), "float32", -0.5, 0.5).astype(np.float32))
    return Built(bn.eval(), _x(data, shp))


def _layernorm(data: st.DataObject) -> Built:
    # At least 3 normalized values: over 2 the output is +-1 whatever the input (a zero gradient
    # made of rounding), which no precision can compare.
    shp = shape(data, min_dims=2, max_dims=3, min_side=3, max_side=4)
    k = data.draw(st.integers(1, len(shp) - 1), label="normalized dims")
    affine = data.draw(st.booleans(), label="affine")
    layer = nn.LayerNorm(shp[-k:], elementwise_affine=affine, bias=data.draw(st.booleans(), label="bias"))
    if affine:
        layer.weight = nx.asarray(values(data, shp[-k:], "float32", 0.5, 1.5).astype(np.float32))
    x = _x(data, shp)
    # Normalising values that nearly coincide divides by a near-zero deviation: the gradient's
    # condition number grows as 1/std, past what float32 can be compared at; such draws are rejected.
    assume(float(np.min(np.std(x.values, axis=tuple(range(len(shp) - k, len(shp)))))) >= 0.25)
    return Built(layer, x)


def _mha(data: st.DataObject) -> Built:
    _seeded(data)
    heads = data.draw(st.integers(1, 2), label="heads")
    e = heads * data.draw(st.integers(1, 3), label="head dim")
    batch_first = data.draw(st.booleans(), label="batch_first")
    layer = nn.MultiheadAttention(e, heads, bias=data.draw(st.booleans(), label="bias"), batch_first=batch_first)
    n, length = data.draw(st.integers(1, 2), label="n"), data.draw(st.integers(1, 4), label="length")
    return Built(layer, _x(data, (n, length, e) if batch_first else (length, n, e)))


def _cnn(data: st.DataObject) -> Built:
    """The issue's model: convolution, ReLU, max pooling, Flatten (and a Linear head, sometimes)."""
    _seeded(data)
    c = data.draw(st.integers(1, 3), label="channels")
    side = data.draw(st.sampled_from([4, 6, 8]), label="side")
    layers: list[nn.Module] = [nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()]
    if data.draw(st.booleans(), label="head"):
        layers.append(nn.Linear(c * (side // 2) ** 2, 3))
    return Built(nn.Sequential(*layers), _x(data, (data.draw(st.integers(1, 2), label="n"), 1, side, side)))


def _mlp(data: st.DataObject) -> Built:
    _seeded(data)
    fin, hidden = data.draw(st.integers(1, 6), label="in"), data.draw(st.integers(1, 8), label="hidden")
    act = data.draw(st.sampled_from([nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid]), label="activation")
    # No LayerNorm inside: on a hidden row the activation flattened (ReLU zeros) it is ill-conditioned
    # (LayerNorm is a case of its own, on well-conditioned rows).
    model = nn.Sequential(nn.Linear(fin, hidden), act(), nn.Linear(hidden, 2), nn.Softmax(-1))
    return Built(model, _x(data, (data.draw(st.integers(1, 3), label="batch"), fin)))


LAYERS: dict[str, Layer] = {layer.name: layer for layer in (
    Layer("Linear", _linear),
    Layer("Conv2d", _conv),
    Layer("ReLU", _elementwise(lambda d: nn.ReLU())),
    Layer("GELU", _elementwise(lambda d: nn.GELU(d.draw(st.sampled_from(["none", "tanh"]), label="approximate")))),
    Layer("Sigmoid", _elementwise(lambda d: nn.Sigmoid())),
    Layer("Tanh", _elementwise(lambda d: nn.Tanh())),
    Layer("Softmax", _softmax),
    Layer("MaxPool2d", _pool("max")),
    Layer("AvgPool2d", _pool("avg")),
    Layer("AdaptiveAvgPool2d", _adaptive),
    Layer("Flatten", _flatten),
    Layer("BatchNorm2d", _batchnorm),
    Layer("LayerNorm", _layernorm),
    Layer("Dropout", _elementwise(lambda d: nn.Dropout(d.draw(st.sampled_from([0.0, 0.3, 0.9]), label="p")).eval())),
    Layer("Identity", _elementwise(lambda d: nn.Identity())),
    Layer("MultiheadAttention", _mha),
    Layer("model:cnn", _cnn),
    Layer("model:mlp", _mlp),
)}


# --------------------------------------------------------------------------- losses
@dataclass(frozen=True)
class Loss:
    """A loss module, its drawn (input, target) and its float64 reference (PyTorch's definition)."""

    name: str
    draw: Callable[[st.DataObject], tuple[nn.Module, Arr, Arr]]
    ref: Callable[[nn.Module, np.ndarray, np.ndarray], np.ndarray]


def _reduce(loss: np.ndarray, reduction: str) -> np.ndarray:
    return np.asarray(loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _classes(data: st.DataObject) -> tuple[int, int, tuple[int, ...]]:
    return data.draw(st.integers(1, 4), label="n"), data.draw(st.integers(2, 5), label="classes"), shape(data, 0, 1, max_side=3)


def _reduction(data: st.DataObject) -> str:
    return data.draw(st.sampled_from(["mean", "sum", "none"]), label="reduction")


def _mse(data: st.DataObject) -> tuple[nn.Module, Arr, Arr]:
    shp = _any_shape(data, 0)
    return nn.MSELoss(_reduction(data)), _x(data, shp), _x(data, shp)


def _cross_entropy(data: st.DataObject) -> tuple[nn.Module, Arr, Arr]:
    n, c, rest = _classes(data)
    module = nn.CrossEntropyLoss(_reduction(data), label_smoothing=data.draw(st.sampled_from([0.0, 0.1]), label="smoothing"))
    if data.draw(st.booleans(), label="index targets"):
        return module, _x(data, (n, c, *rest)), Arr(np.random.default_rng(n * c).integers(0, c, (n, *rest)).astype(np.int64), "int64")
    probs = values(data, (n, c, *rest), "float32", 0.1, 1)
    return module, _x(data, (n, c, *rest)), Arr((probs / probs.sum(axis=1, keepdims=True)).astype(np.float32).astype(np.float64), "float32")


def _ce_ref(module: nn.Module, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    logp = _log_softmax(x, 1)
    c = x.shape[1]
    probs = np.moveaxis(np.eye(c)[t], -1, 1) if t.dtype.kind in "iu" else t
    eps = module.label_smoothing
    probs = probs * (1 - eps) + eps / c
    return _reduce(-(probs * logp).sum(axis=1), module.reduction)


def _nll(data: st.DataObject) -> tuple[nn.Module, Arr, Arr]:
    n, c, rest = _classes(data)
    return nn.NLLLoss(_reduction(data)), _x(data, (n, c, *rest), -3, 0), Arr(np.random.default_rng(n + c).integers(0, c, (n, *rest)).astype(np.int64), "int64")


def _nll_ref(module: nn.Module, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    picked = np.take_along_axis(x, np.expand_dims(t, 1), axis=1)[:, 0]
    return _reduce(-picked, module.reduction)


def _bce(data: st.DataObject) -> tuple[nn.Module, Arr, Arr]:
    shp = _any_shape(data, 1)
    pos = None
    if data.draw(st.booleans(), label="pos_weight"):
        pos = nx.asarray(values(data, shp[-1:], "float32", 0.5, 2).astype(np.float32))
    return nn.BCEWithLogitsLoss(_reduction(data), pos_weight=pos), _x(data, shp, -4, 4), Arr(values(data, shp, "float32", 0, 1), "float32")


def _bce_ref(module: nn.Module, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    log_sig = -np.logaddexp(0, -x)      # log(sigmoid(x))
    log_one_minus = -np.logaddexp(0, x)  # log(1 - sigmoid(x))
    pw = module.pos_weight.numpy().astype(np.float64) if module.pos_weight is not None else 1.0
    return _reduce(-(pw * t * log_sig + (1 - t) * log_one_minus), module.reduction)


LOSSES: dict[str, Loss] = {loss.name: loss for loss in (
    Loss("MSELoss", _mse, lambda m, x, t: _reduce((x - t) ** 2, m.reduction)),
    Loss("CrossEntropyLoss", _cross_entropy, _ce_ref),
    Loss("NLLLoss", _nll, _nll_ref),
    Loss("BCEWithLogitsLoss", _bce, _bce_ref),
)}


# --------------------------------------------------------------------------- functional forms
@dataclass(frozen=True)
class Functional:
    """A functional form the layers do not run: ``call(x, **kwargs)`` against ``ref(x, **kwargs)``."""

    name: str
    draw: Callable[[st.DataObject], tuple[Arr, dict[str, Any]]]
    call: Callable[..., Any]
    ref: Callable[..., np.ndarray]


def _log_softmax_case(data: st.DataObject) -> tuple[Arr, dict[str, Any]]:
    shp = _any_shape(data)
    return _x(data, shp, -4, 4), {"axis": data.draw(st.integers(-len(shp), len(shp) - 1), label="axis")}


FUNCTIONAL: dict[str, Functional] = {f.name: f for f in (
    Functional("functional.log_softmax", _log_softmax_case, lambda x, axis: F.log_softmax(x, axis=axis), _log_softmax),
)}
