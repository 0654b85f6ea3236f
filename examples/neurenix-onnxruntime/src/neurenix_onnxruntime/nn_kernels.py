"""The ``nn.*`` extension ops (CONTRIBUTING.md signatures) as single ONNX nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_onnxruntime.eager import Rejected, guarded

if TYPE_CHECKING:
    from neurenix_onnxruntime.backend import ORTBackend

__all__ = ["nn_table", "pair"]


def pair(value: Any, what: str) -> tuple[int, int]:
    """An int or a 2-sequence of ints as a 2-tuple; anything else is not lowered."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (int(value[0]), int(value[1]))
    raise Rejected(f"{what}={value!r} is not an int or a pair of ints")


def _float(name: str, *arrays: Any) -> None:
    for a in arrays:
        if a is not None and a.dtype.kind != "f":
            raise Rejected(f"{name} is lowered for floating dtypes only, not {a.dtype}")


def _linear(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        _float("nn.linear", x, weight, bias)
        if x.ndim != 2 or len({x.dtype, weight.dtype, getattr(bias, "dtype", x.dtype)}) != 1:
            raise Rejected("nn.linear is lowered to Gemm for 2-D inputs of one dtype only")
        inputs = (x, weight) if bias is None else (x, weight, bias)
        return be.kernels.run("nn.linear", "Gemm", inputs, {"transB": 1})

    return guarded(be, "nn.linear", kernel)


def _conv2d(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> np.ndarray:
        _float("nn.conv2d", x, weight, bias)
        ph, pw = pair(padding, "padding")
        attrs = {"strides": list(pair(stride, "stride")), "pads": [ph, pw, ph, pw], "dilations": list(pair(dilation, "dilation")), "group": int(groups)}
        inputs = (x, weight) if bias is None else (x, weight, bias)
        return be.kernels.run("nn.conv2d", "Conv", inputs, attrs)

    return guarded(be, "nn.conv2d", kernel)


def _softmax(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, axis: int = -1) -> np.ndarray:
        _float("nn.softmax", x)
        return be.kernels.run("nn.softmax", "Softmax", (x,), {"axis": int(axis)})

    return guarded(be, "nn.softmax", kernel)


def _gelu(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, approximate: str = "none") -> np.ndarray:
        _float("nn.gelu", x)
        if approximate not in ("none", "tanh"):
            raise ValueError(f"nn.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return be.kernels.run("nn.gelu", "Gelu", (x,), {"approximate": approximate})

    return guarded(be, "nn.gelu", kernel)


def _pool_attrs(kernel_size: Any, stride: Any, padding: Any) -> dict[str, Any]:
    k = pair(kernel_size, "kernel_size")
    s = k if stride is None else pair(stride, "stride")
    ph, pw = pair(padding, "padding")
    return {"kernel_shape": list(k), "strides": list(s), "pads": [ph, pw, ph, pw]}


def _max_pool2d(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0) -> np.ndarray:
        _float("nn.max_pool2d", x)
        return be.kernels.run("nn.max_pool2d", "MaxPool", (x,), _pool_attrs(kernel_size, stride, padding))

    return guarded(be, "nn.max_pool2d", kernel)


def _avg_pool2d(be: ORTBackend) -> Callable[..., Any]:
    def kernel(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> np.ndarray:
        _float("nn.avg_pool2d", x)
        attrs = _pool_attrs(kernel_size, stride, padding) | {"count_include_pad": int(bool(count_include_pad))}
        return be.kernels.run("nn.avg_pool2d", "AveragePool", (x,), attrs)

    return guarded(be, "nn.avg_pool2d", kernel)


def nn_table(be: ORTBackend) -> dict[str, Callable[..., Any]]:
    return {
        "nn.linear": _linear(be),
        "nn.conv2d": _conv2d(be),
        "nn.softmax": _softmax(be),
        "nn.gelu": _gelu(be),
        "nn.max_pool2d": _max_pool2d(be),
        "nn.avg_pool2d": _avg_pool2d(be),
    }
