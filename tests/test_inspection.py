"""The array API 2024.12 inspection namespace and ``finfo``/``iinfo`` over every usable device.

What each device supports comes from its backend (manifest and runtime): the test checks that
every dtype the namespace claims can really be created there, and that the answers have the
standard's names and types.
"""

from __future__ import annotations

import array_api_strict as xp
import ml_dtypes
import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor.dtypes import as_dtype, dtype_table
from neurenix_core.tensor.info import STANDARD_DTYPES

INFO = nx.__array_namespace_info__()
KINDS = ["bool", "signed integer", "unsigned integer", "integral", "real floating", "complex floating", "numeric"]


def _devices() -> list[nx.Device]:
    return INFO.devices()


def test_standard_dtype_names_are_the_standards() -> None:
    assert set(STANDARD_DTYPES) == set(xp.__array_namespace_info__().dtypes())


def test_devices_and_default_device() -> None:
    devices = INFO.devices()
    assert isinstance(devices, list) and devices
    assert all(isinstance(d, nx.Device) for d in devices)
    assert INFO.default_device() in devices
    assert nx.Device("cpu:0") in devices


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_capabilities(device: nx.Device) -> None:
    caps = INFO.capabilities(device=device)
    assert caps["boolean indexing"] is True and caps["data-dependent shapes"] is True
    assert type(caps["max dimensions"]) is int and caps["max dimensions"] > 0
    extra = caps["neurenix"]
    assert extra["device"] == str(device) and extra["backend"] == nx.backend(device).name
    assert extra["fft"] == any(op.startswith("fft.") for op in nx.backend(device).ops)
    assert all(name not in STANDARD_DTYPES for name in extra["extra dtypes"])


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_dtypes_are_standard_names_the_device_creates(device: nx.Device) -> None:
    supported = INFO.dtypes(device=device)
    assert supported and set(supported) <= set(STANDARD_DTYPES)
    for name, dt in supported.items():
        assert dt == dtype_table()[name]
        t = nx.empty(1, dtype=dt, device=device)
        assert t.dtype == dt and t.device == device
    refused = [n for n in STANDARD_DTYPES if n not in supported]
    for name in refused:  # what is left out really is refused
        with pytest.raises(nx.UnsupportedDTypeError):
            nx.empty(1, dtype=dtype_table()[name], device=device)


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_default_dtypes(device: nx.Device) -> None:
    defaults = INFO.default_dtypes(device=device)
    assert set(defaults) == {"real floating", "complex floating", "integral", "indexing"}
    assert defaults["real floating"] == nx.float32
    supported = set(INFO.dtypes(device=device).values())
    assert all(dt in supported for dt in defaults.values() if dt is not None)


def test_cpu_supports_every_standard_dtype_and_lists_float16_as_extra() -> None:
    assert list(INFO.dtypes(device="cpu")) == list(STANDARD_DTYPES)
    assert list(INFO.dtypes()) == list(STANDARD_DTYPES)  # the default device: cpu (emulated ones are never defaults)
    # The 2024.12 text: dtypes "not present in this specification should not be included" in
    # dtypes(); float16 and bfloat16 are not, and the CPU names them as its extra dtypes.
    assert "float16" not in INFO.dtypes(device="cpu", kind="real floating")
    assert INFO.capabilities(device="cpu")["neurenix"]["extra dtypes"] == ["float16", "bfloat16"]
    assert nx.empty(1, dtype=nx.float16, device="cpu").dtype == nx.float16


@pytest.mark.parametrize("device", _devices(), ids=str)
def test_extra_dtypes_are_what_the_device_creates(device: nx.Device) -> None:
    extra = INFO.capabilities(device=device)["neurenix"]["extra dtypes"]
    for name in ("float16", "bfloat16"):
        dt = dtype_table()[name]
        if name in extra:
            assert nx.empty(1, dtype=dt, device=device).dtype == dt
        else:
            with pytest.raises(nx.UnsupportedDTypeError):
                nx.empty(1, dtype=dt, device=device)


@pytest.mark.parametrize("kind", [*KINDS, ("bool", "complex floating"), nx.float32])
def test_dtypes_by_kind(kind: object) -> None:
    got = INFO.dtypes(device="cpu", kind=kind)
    want = {n for n in STANDARD_DTYPES if nx.isdtype(dtype_table()[n], kind)}
    assert set(got) == want and got


FLOATS = ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("name", FLOATS)
def test_finfo_fields_are_python_numbers(name: str) -> None:
    fi = nx.finfo(dtype_table()[name])
    assert {f for f in dir(fi) if not f.startswith("_")} >= {"bits", "eps", "max", "min", "smallest_normal", "dtype"}
    assert type(fi.bits) is int
    for field in ("eps", "max", "min", "smallest_normal"):
        assert type(getattr(fi, field)) is float, f"finfo({name}).{field} is {type(getattr(fi, field)).__name__}"
    # A complex dtype is described by its real component.
    real = {"complex64": "float32", "complex128": "float64"}.get(name, name)
    assert fi.dtype == as_dtype(real) and fi.dtype in dtype_table().values()
    ref = ml_dtypes.finfo(as_dtype(real))
    assert (fi.bits, fi.eps, fi.max, fi.min, fi.smallest_normal) == (
        int(ref.bits), float(ref.eps), float(ref.max), float(ref.min), float(ref.smallest_normal)
    )
    assert nx.finfo(nx.zeros(2, dtype=dtype_table()[name])) == fi  # a tensor works too


@pytest.mark.parametrize("name", INTS)
def test_iinfo_fields_are_python_ints(name: str) -> None:
    ii = nx.iinfo(dtype_table()[name])
    assert type(ii.bits) is int and type(ii.max) is int and type(ii.min) is int
    ref = np.iinfo(name)
    assert (ii.bits, ii.max, ii.min) == (ref.bits, int(ref.max), int(ref.min))
    assert ii.dtype == dtype_table()[name]
    assert nx.iinfo(nx.zeros(2, dtype=dtype_table()[name])) == ii


def test_info_refuses_the_wrong_kind_of_dtype() -> None:
    with pytest.raises(nx.UnsupportedDTypeError, match="use iinfo"):
        nx.finfo(nx.int32)
    with pytest.raises(nx.UnsupportedDTypeError, match="use finfo"):
        nx.iinfo(nx.float32)
    with pytest.raises(nx.UnsupportedDTypeError, match="iinfo"):
        nx.iinfo(nx.bool)
