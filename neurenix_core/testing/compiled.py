"""Checks of the compiled-model input rule (``neurenix_core.graph.compile.inputs``) for any compiled path.

A backend author calls :func:`check_input_rule` with the callable their path returns
(``nx.compile(...)``, a seed-style ``optimize_model(...)``, a runtime model) and one input
array: every form of host memory gives the same result, a Tensor on the device is used as it
is, and a Tensor on another accelerator is refused with the ``.to(...)`` remedy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core.device import Device, DeviceLike, as_device
from neurenix_core.testing.reference import TOLERANCES

__all__ = ["ArrayOnly", "DeviceBuffer", "HostBuffer", "as_host", "check_input_rule", "other_accelerator"]


@dataclass(frozen=True)
class HostBuffer:
    """A third-party array in host memory that only speaks DLPack."""

    array: np.ndarray

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


@dataclass(frozen=True)
class DeviceBuffer:
    """A third-party array that says it lives in CUDA device memory (DLPack kDLCUDA)."""

    array: np.ndarray

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise BufferError("device memory: not readable from the host")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA


@dataclass(frozen=True)
class ArrayOnly:
    """An object that only has ``__array__`` (pandas-like)."""

    array: np.ndarray

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self.array if dtype is None else self.array.astype(dtype)


def other_accelerator(device: DeviceLike) -> Device | None:
    """An available non-CPU device other than ``device`` (another index first), or None."""
    dev = as_device(device)
    candidates = [d for d in nx.devices(dev.type) if d != dev]
    candidates += [d for d in nx.devices() if str(d.type) not in ("cpu", str(dev.type))]
    return candidates[0] if candidates else None


def as_host(result: Any) -> np.ndarray:
    """A compiled model's result (Tensor, NumPy or framework array) as a float64 host array."""
    data = result.numpy() if isinstance(result, nx.Tensor) else result
    if hasattr(data, "detach"):
        data = data.detach().cpu().float().numpy()
    return np.asarray(data, dtype=np.float64)


def check_input_rule(model: Callable[..., Any], x: np.ndarray, device: DeviceLike, *, dtype: str = "float32",
                     expect_device: bool = True) -> dict[str, Any]:
    """Call ``model`` with ``x`` in every form of the rule and check what comes back.

    ``expect_device``: Tensor inputs give Tensors on ``device`` (False for models compiled with
    outputs="host", which give NumPy). Results must agree within the ``dtype`` tolerance (the
    same computation on the same values: only the input path differs). Returns the results.
    """
    dev = as_device(device)
    x = np.ascontiguousarray(x, dtype=np.float32)
    want = as_host(model(x))
    rtol, atol = TOLERANCES[dtype]
    forms = {
        "cpu tensor": nx.asarray(x, device="cpu"),
        "device tensor": nx.asarray(x, device=dev),
        "float64 numpy": x.astype(np.float64),
        "DLPack host buffer": HostBuffer(x.copy()),
        "__array__ object": ArrayOnly(x.copy()),
        "nested list": x.tolist(),
    }
    results: dict[str, Any] = {}
    for name, value in forms.items():
        out = model(value)
        results[name] = out
        if isinstance(value, nx.Tensor):
            if expect_device:
                assert isinstance(out, nx.Tensor) and out.device == dev, f"{name}: result {type(out).__name__} not on {dev}"
            else:
                assert isinstance(out, np.ndarray), f"{name}: outputs='host' must give NumPy, got {type(out).__name__}"
        np.testing.assert_allclose(as_host(out), want, rtol=rtol, atol=atol, err_msg=f"input as {name}")
    _check_refusals(model, x, dev)
    return results


def _check_refusals(model: Callable[..., Any], x: np.ndarray, dev: Device) -> None:
    import pytest

    with pytest.raises(nx.DeviceMismatchError, match=r"DLPack device \(2, 0\)"):
        model(DeviceBuffer(x))
    other = other_accelerator(dev)
    if other is None:
        return  # the caller reports this (no second accelerator in this process)
    with pytest.raises(nx.DeviceMismatchError, match=rf"{other}.*x\.to\('{dev}'\)"):
        model(nx.asarray(x, device=other))
