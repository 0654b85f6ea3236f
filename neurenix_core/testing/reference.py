"""Float64 NumPy references and per-dtype tolerances for the conformance suite.

A result is compared with the same computation done in float64 NumPy on the *same input values*
(the inputs are first rounded to the dtype under test), so the tolerance measures only the
device's arithmetic. A backend that computes in a lower internal precision (a graph backend
running float32 in bfloat16) declares it in its manifest:
``Capabilities(extra={"conformance_tolerance": {"float32": [rtol, atol]}})``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.device import Device
from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.tensor.placement import default_backend
from neurenix_core.tensor.tensor import Tensor, asarray

__all__ = ["TOLERANCES", "assert_close", "declared", "on_device", "require_dtype", "rounded", "tolerance"]

#: (rtol, atol) per dtype name; integers and bool compare exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-6),
    "complex128": (1e-10, 1e-12),
    "complex64": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


def declared(device: Device) -> dict[str, Any]:
    """The ``extra`` mapping of the device's backend capabilities (empty if none)."""
    manifest = default_backend(device)[0].manifest
    return dict(manifest.capabilities.extra) if manifest is not None else {}


def tolerance(device: Device, dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for ``dtype`` on ``device``: the table, or what the backend declares."""
    name = str(as_dtype(dtype)) if not isinstance(dtype, str) else dtype
    custom = declared(device).get("conformance_tolerance", {})
    if name in custom:
        rtol, atol = custom[name]
        return float(rtol), float(atol)
    return TOLERANCES.get(name, (0.0, 0.0))


def require_dtype(device: Device, dtype: Any) -> Any:
    """Skip (with the reason, reported per capability) when the device does not declare ``dtype``."""
    import pytest

    dt = as_dtype(dtype)
    if not default_backend(device)[0].supports_dtype(dt):
        pytest.skip(f"{device} does not declare dtype {dt} (Capabilities.dtypes / runtime)")
    return dt


def rounded(values: np.ndarray, dtype: Any) -> np.ndarray:
    """``values`` rounded to ``dtype`` and back to float64: the exact inputs the device sees."""
    dt = as_dtype(dtype)
    out = np.asarray(values).astype(dt)
    if dt.kind in "fcV" or str(dt) == "bfloat16":
        return out.astype(np.complex128 if dt.kind == "c" else np.float64)
    return out


def on_device(values: Any, dtype: Any, device: Device) -> Any:
    """A tensor of ``values`` cast to ``dtype`` on ``device`` (checked to really be there)."""
    t = asarray(np.asarray(values).astype(as_dtype(dtype)), device=device)
    assert t.device == device, f"asarray(device={device}) produced a tensor on {t.device}"
    return t


def assert_close(actual: Any, expected: Any, device: Device, dtype: Any = None, *, scale: float = 1.0, check_dtype: bool = True) -> None:
    """``actual`` (a Tensor on ``device``) equals the float64 ``expected`` within the dtype's tolerance.

    ``scale`` widens atol for ops whose absolute error grows with the inputs' magnitude.
    """
    assert isinstance(actual, Tensor), f"expected a neurenix Tensor, got {type(actual).__name__}"
    assert actual.device == device, f"result is on {actual.device}, not on the device under test {device}"
    expected = np.asarray(expected)
    got = actual.numpy()
    assert got.shape == expected.shape, f"shape {got.shape} != reference shape {expected.shape}"
    if dtype is not None and check_dtype:
        want = as_dtype(dtype)
        assert actual.dtype == want, f"dtype {actual.dtype} != expected {want}"
    rtol, atol = tolerance(device, actual.dtype)
    kind = np.dtype(actual.dtype).kind
    if kind in "biu":
        np.testing.assert_array_equal(got, expected)
        return
    wide = np.complex128 if kind == "c" else np.float64
    np.testing.assert_allclose(got.astype(wide), expected.astype(wide), rtol=rtol, atol=atol * max(scale, 1.0), equal_nan=True)
