"""neurenix dtypes: names, kinds, promotion, finfo/iinfo, and per-device support."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor.dtypes import DTYPES, as_dtype


def test_names_and_bfloat16() -> None:
    assert as_dtype("bfloat16") == nx.bfloat16 and str(nx.bfloat16) == "bfloat16"
    assert as_dtype(float) == nx.float64 and as_dtype("int8") == nx.int8
    with pytest.raises(nx.UnsupportedDTypeError, match="unknown dtype"):
        as_dtype("float7")
    with pytest.raises(nx.UnsupportedDTypeError, match="not a neurenix dtype"):
        as_dtype(np.dtype("datetime64[s]"))


def test_kinds() -> None:
    assert nx.isdtype(nx.bfloat16, "real floating")
    assert nx.isdtype(nx.int8, ("signed integer", "bool"))
    assert not nx.isdtype(nx.uint8, "signed integer")
    assert nx.isdtype(nx.float16, nx.float16)
    with pytest.raises(ValueError, match="unknown dtype kind"):
        nx.isdtype(nx.int8, "whole")


def test_promotion_and_info() -> None:
    assert nx.result_type(nx.int8, nx.uint8) == nx.int16
    assert nx.result_type(nx.float16, nx.float32) == nx.float32
    assert nx.result_type(nx.asarray([1.0]), 2.0) == nx.float32
    assert nx.can_cast(nx.int8, nx.int32) and not nx.can_cast(nx.float32, nx.int8)
    assert nx.finfo(nx.bfloat16).bits == 16 and nx.finfo(nx.float32).eps == np.finfo(np.float32).eps
    assert nx.iinfo(nx.int8).max == 127


@pytest.mark.parametrize("name", list(DTYPES))
def test_every_dtype_on_cpu(name: str) -> None:
    t = nx.asarray(np.array([0, 1, 1]).astype(DTYPES[name]))
    assert t.dtype == DTYPES[name]
    assert (t == t).numpy().all()  # noqa: PLR0124 - the elementwise == of a tensor with itself, per dtype
