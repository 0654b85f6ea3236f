"""dtypes as users write them (issue #38): every public ``dtype=`` goes through ``as_dtype``, which
reads NumPy, torch, JAX and ml_dtypes dtypes, their names and the precision spellings; anything
else is an UnsupportedDTypeError naming the valid names."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor.dtypes import DTYPE_NAMES, as_dtype

SPELLINGS: list[tuple[Any, str]] = [
    (np.float16, "float16"), (np.dtype("int8"), "int8"), ("float32", "float32"), ("bfloat16", "bfloat16"), ("uint64", "uint64"),
    ("fp16", "float16"), ("bf16", "bfloat16"), ("fp32", "float32"), ("fp64", "float64"), ("half", "float16"), ("double", "float64"),
    ("Float32", "float32"), (" int64 ", "int64"), ("f4", "float32"), ("long", "int64"), ("cfloat", "complex64"),
    (float, "float64"), (int, "int64"), (bool, "bool"), (complex, "complex128"),
    (ml_dtypes.bfloat16, "bfloat16"), (np.dtype(ml_dtypes.bfloat16), "bfloat16"), (nx.float32, "float32"),
]


@pytest.mark.parametrize(("spelling", "name"), SPELLINGS, ids=[repr(s) for s, _ in SPELLINGS])
def test_each_spelling_is_its_dtype(spelling: Any, name: str) -> None:
    assert str(as_dtype(spelling)) == name


def test_torch_dtypes_are_read_by_name() -> None:
    torch = pytest.importorskip("torch")
    pairs = {torch.float16: "float16", torch.half: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float: "float32",
             torch.float64: "float64", torch.int8: "int8", torch.int64: "int64", torch.long: "int64", torch.uint8: "uint8", torch.bool: "bool",
             torch.complex64: "complex64", torch.complex128: "complex128"}
    assert {str(k): str(as_dtype(k)) for k in pairs} == {str(k): v for k, v in pairs.items()}
    with pytest.raises(nx.UnsupportedDTypeError, match=r"torch dtype torch\.float8_e4m3fn has no neurenix equivalent; neurenix dtypes: bool"):
        as_dtype(torch.float8_e4m3fn)


def test_jax_scalar_types_are_read() -> None:
    jnp = pytest.importorskip("jax.numpy")
    assert (as_dtype(jnp.bfloat16), as_dtype(jnp.float16), as_dtype(jnp.dtype("int32"))) == (nx.bfloat16, nx.float16, nx.int32)


@pytest.mark.parametrize(("spelling", "pattern"), [
    ("flaot16", r"unknown dtype 'flaot16' \(did you mean 'float16'\?\); neurenix dtypes: bool, int8"),
    ("bf61", r"unknown dtype 'bf61' \(did you mean 'bf16'\?\)"),
    ("f16", r"dtype float128 \(from 'f16'\) is not a neurenix dtype \(did you mean 'fp16'\?\)"),
    (object, r"dtype object .* is not a neurenix dtype; neurenix dtypes: bool"),
    ("quux", r"unknown dtype 'quux'; neurenix dtypes: .*given as a neurenix or NumPy dtype"),
])
def test_an_unknown_dtype_names_the_valid_ones(spelling: Any, pattern: str) -> None:
    with pytest.raises(nx.UnsupportedDTypeError, match=pattern) as info:
        nx.zeros(2, dtype=spelling)
    assert all(name in str(info.value) for name in DTYPE_NAMES)


# --------------------------------------------------------------------------- every public dtype=
def _x() -> nx.Tensor:
    return nx.asarray(np.array([1.0, 2.0, 3.0], np.float32))


#: One call per public function with a dtype argument, given the spelling ``d``; the result's dtype.
CALLS: dict[str, Callable[[Any], Any]] = {
    "asarray": lambda d: nx.asarray([1.0, 2.0], dtype=d).dtype,
    "zeros": lambda d: nx.zeros(2, dtype=d).dtype,
    "ones": lambda d: nx.ones(2, dtype=d).dtype,
    "empty": lambda d: nx.empty(2, dtype=d).dtype,
    "full": lambda d: nx.full(2, 1.0, dtype=d).dtype,
    "arange": lambda d: nx.arange(3, dtype=d).dtype,
    "linspace": lambda d: nx.linspace(0.0, 1.0, 3, dtype=d).dtype,
    "eye": lambda d: nx.eye(2, dtype=d).dtype,
    "zeros_like": lambda d: nx.zeros_like(_x(), dtype=d).dtype,
    "ones_like": lambda d: nx.ones_like(_x(), dtype=d).dtype,
    "empty_like": lambda d: nx.empty_like(_x(), dtype=d).dtype,
    "full_like": lambda d: nx.full_like(_x(), 1.0, dtype=d).dtype,
    "astype": lambda d: nx.astype(_x(), d).dtype,
    "sum": lambda d: nx.sum(_x(), dtype=d).dtype,
    "prod": lambda d: nx.prod(_x(), dtype=d).dtype,
    "cumulative_sum": lambda d: nx.cumulative_sum(_x(), dtype=d).dtype,
    "cumulative_prod": lambda d: nx.cumulative_prod(_x(), dtype=d).dtype,
    "linalg.trace": lambda d: nx.linalg.trace(nx.eye(2), dtype=d).dtype,
    "fft.fftfreq": lambda d: nx.fft.fftfreq(4, dtype=d).dtype,
    "fft.rfftfreq": lambda d: nx.fft.rfftfreq(4, dtype=d).dtype,
    "finfo": lambda d: nx.finfo(d).dtype,
    "isdtype": lambda d: nx.float16 if nx.isdtype(d, "real floating") else None,
    "can_cast": lambda d: nx.float16 if nx.can_cast(d, nx.float32) else None,
    "result_type": lambda d: nx.result_type(d, nx.float16),
}


def _functions_taking_a_dtype() -> set[str]:
    found = set()
    for prefix, module in (("", nx), ("linalg.", nx.linalg), ("fft.", nx.fft)):
        for name in getattr(module, "__all__", []):
            fn = getattr(module, name)
            if not inspect.isfunction(fn):
                continue
            params = set(inspect.signature(fn).parameters) - ({"type"} if name == "devices" else set())  # a device type there
            if {"dtype", "type", "from_", "arrays_and_dtypes"} & params:
                found.add(prefix + name)
    return found


def test_the_table_covers_every_public_dtype_argument() -> None:
    """A new public function with a dtype argument must be added to CALLS (and so be tested)."""
    assert _functions_taking_a_dtype() == set(CALLS) | {"iinfo"}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_public_dtype_argument_takes_each_spelling(name: str) -> None:
    spellings: list[Any] = [np.float16, "float16", "fp16", "half"]
    try:
        import torch
    except ImportError:
        pass
    else:
        spellings.append(torch.float16)  # refused by every function before issue #38
    for spelling in spellings:
        assert CALLS[name](spelling) == nx.float16, (name, spelling)


def test_iinfo_takes_each_spelling() -> None:
    torch = pytest.importorskip("torch")
    assert nx.iinfo(torch.int8).max == nx.iinfo("int8").max == nx.iinfo(np.int8).max == 127


def test_result_type_reads_torch_tensors_and_python_scalars() -> None:
    torch = pytest.importorskip("torch")
    assert nx.result_type(torch.zeros(1, dtype=torch.float16), np.float32) == nx.float32
    assert nx.result_type(_x(), 1.0) == nx.float32 and nx.result_type(float, nx.int8) == nx.float64
