"""Compute capability -> Tensor Core precision rules, and the errors for bad precision requests."""

from __future__ import annotations

import pytest
from neurenix_cuda_tc.capability import (
    UnknownPrecisionError,
    architecture,
    check_precision,
    has_tensor_cores,
    tensor_core_precisions,
)

from neurenix_core.errors import ConfigurationError, NeurenixError, UnsupportedDTypeError


@pytest.mark.parametrize(
    ("cc", "expected"),
    [
        ((6, 1), ()),
        ((7, 0), ("fp16",)),
        ((7, 5), ("fp16", "int8")),
        ((8, 0), ("fp16", "bf16", "tf32", "int8")),
        ((8, 6), ("fp16", "bf16", "tf32", "int8")),
        ((8, 9), ("fp16", "bf16", "tf32", "int8", "fp8")),
        ((9, 0), ("fp16", "bf16", "tf32", "int8", "fp8")),
    ],
)
def test_precisions_grow_with_the_architecture(cc: tuple[int, int], expected: tuple[str, ...]) -> None:
    assert tensor_core_precisions(cc) == expected
    assert has_tensor_cores(cc) == bool(expected)


def test_fp16_on_compute_capability_6_is_refused_with_the_reason() -> None:
    with pytest.raises(UnsupportedDTypeError) as info:
        check_precision("fp16", (6, 1), "cuda:0")
    msg = str(info.value)
    assert "cuda:0" in msg and "6.1" in msg and "Pascal" in msg and "7.0" in msg and "fp32" in msg


def test_bf16_and_tf32_need_ampere() -> None:
    for precision in ("bf16", "tf32"):
        with pytest.raises(UnsupportedDTypeError, match="7.0"):
            check_precision(precision, (7, 0), "cuda:1")
    assert check_precision("fp16", (7, 0)) == "fp16"
    assert check_precision("mixed", (7, 0)) == "mixed"
    assert check_precision("bf16", (8, 0)) == "bf16"
    # fp32 runs on CUDA cores: allowed everywhere.
    assert check_precision("fp32", (6, 1)) == "fp32"


@pytest.mark.parametrize("bad", ["fp64", "half", "", "FP-16", 16])
def test_unknown_precision_string(bad: object) -> None:
    with pytest.raises(UnknownPrecisionError) as info:
        check_precision(bad, (8, 0))  # type: ignore[arg-type]
    assert isinstance(info.value, NeurenixError) and isinstance(info.value, ConfigurationError) and isinstance(info.value, ValueError)
    assert "fp32, tf32, fp16, bf16, mixed" in str(info.value)


def test_architecture_names() -> None:
    assert architecture((8, 0)) == "Ampere"
    assert architecture((8, 9)) == "Ada Lovelace"
    assert architecture((9, 0)) == "Hopper"
    assert architecture((7, 5)) == "Turing"
