"""Two importer gaps the transformers sweep (benchmarks/transformers_sweep.py) found (issue 41).

``slice_scatter`` (Funnel's relative attention) was decomposed by PyTorch's table into an index
on a trailing axis, which the importer refuses; it is now mapped whole (a concat for step 1,
scatter_elements for other steps). A bfloat16 constant (Recurrent Gemma's normalizer buffer)
failed in ``Tensor.numpy`` with an untyped "Got unsupported ScalarType BFloat16"; constants are
now read as ml_dtypes' bfloat16. Each case is imported, run on cpu:0 and compared with eager
PyTorch (float32: rtol 1e-5, atol 1e-6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from neurenix_core import nn
from neurenix_core.errors import UnsupportedOperationError

_Module: Any = torch.nn.Module  # torch is imported by importorskip: typed Any for mypy


def _x(*shape: int, seed: int = 0) -> Any:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class _Call(_Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: Any) -> Any:
        return self.fn(*xs)


def _check(module: Any, inputs: tuple[Any, ...], static: bool = True) -> None:
    want = module(*inputs).detach().numpy()
    got = np.asarray(nn.from_torch(module, inputs, static=static)(*[t.numpy() for t in inputs]))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


SLICE_SCATTER: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "middle": (lambda x, s: torch.slice_scatter(x, s, dim=1, start=1, end=3), (_x(2, 5, 3), _x(2, 2, 3, seed=1))),
    "prefix_last_dim": (lambda x, s: torch.slice_scatter(x, s, dim=-1, start=0, end=2), (_x(2, 3, 5), _x(2, 3, 2, seed=1))),
    "suffix_open_end": (lambda x, s: torch.slice_scatter(x, s, dim=0, start=3), (_x(5, 2), _x(2, 2, seed=1))),
    "negative_bounds": (lambda x, s: torch.slice_scatter(x, s, dim=1, start=-3, end=-1), (_x(2, 6), _x(2, 2, seed=1))),
    "whole_axis": (lambda x, s: torch.slice_scatter(x, s, dim=0), (_x(3, 2), _x(3, 2, seed=1))),
    "step_2": (lambda x, s: torch.slice_scatter(x, s, dim=1, start=1, end=6, step=2), (_x(2, 7), _x(2, 3, seed=1))),
    "empty_src": (lambda x, s: torch.slice_scatter(x, s, dim=0, start=2, end=2), (_x(4, 3), _x(0, 3, seed=1))),
    "1d": (lambda x, s: torch.slice_scatter(x, s, start=2, end=4), (_x(6), _x(2, seed=1))),
}


@pytest.mark.parametrize("case", sorted(SLICE_SCATTER))
def test_slice_scatter_matches_torch(case: str) -> None:
    fn, inputs = SLICE_SCATTER[case]
    _check(_Call(fn).eval(), inputs)


def test_slice_scatter_with_dynamic_batch() -> None:
    """Funnel's pattern (the scattered axis static, the batch dynamic) imported with from_torch's
    default dynamic axes, then run at another batch size."""
    module = _Call(lambda x, s: torch.slice_scatter(x, s, dim=2, start=1)).eval()
    x, s = _x(2, 4, 6), _x(2, 4, 5, seed=1)
    imported = nn.from_torch(module, (x, s))
    x3, s3 = _x(3, 4, 6, seed=2), _x(3, 4, 5, seed=3)
    np.testing.assert_allclose(np.asarray(imported(x3.numpy(), s3.numpy())), module(x3, s3).numpy(), rtol=1e-5, atol=1e-6)


class _Bf16Buffer(_Module):
    """Recurrent Gemma's pattern: a bfloat16 buffer cast to the activations' dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("normalizer", torch.tensor(5.656854, dtype=torch.bfloat16), persistent=False)
        self.register_buffer("table", torch.linspace(-2, 2, 12, dtype=torch.bfloat16).reshape(3, 4), persistent=False)

    def forward(self, x: Any) -> Any:
        return x * self.normalizer.type(x.dtype) + self.table.float()


def test_bfloat16_constants_import() -> None:
    _check(_Bf16Buffer().eval(), (_x(2, 3, 4),))


def test_bfloat16_constant_folded_in_bfloat16() -> None:
    """An op on bfloat16 constants only is folded by PyTorch at import: the constant goes back to
    torch as bfloat16 and its result comes back as ml_dtypes' bfloat16."""

    class Folded(_Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.arange(6, dtype=torch.bfloat16).reshape(2, 3) / 3, persistent=False)

        def forward(self, x: Any) -> Any:
            return x + (self.w * 2).float()

    _check(Folded().eval(), (_x(2, 3),))


class _LengthsCheck(_Module):
    """Flaubert's pattern: a value read out of a tensor (``.item()``) only for a check."""

    def forward(self, ids: Any) -> Any:
        lengths = (ids != 0).sum(dim=1)
        torch._check(lengths.max().item() <= ids.shape[1])
        return (torch.arange(ids.shape[1]) < lengths[:, None]).float() * 2


def test_item_read_only_by_a_check_imports() -> None:
    ids = torch.tensor([[3, 1, 0, 0], [5, 2, 7, 0]])
    want = _LengthsCheck()(ids).numpy()
    for static in (True, False):
        got = np.asarray(nn.from_torch(_LengthsCheck().eval(), (ids,), static=static)(ids.numpy()))
        np.testing.assert_array_equal(got, want)


def test_item_used_as_a_value_is_refused_by_name() -> None:
    from neurenix_core.errors import NeurenixError

    class Scaled(_Module):
        def forward(self, x: Any, n: Any) -> Any:
            return x * n.sum().item()

    with pytest.raises(NeurenixError, match="read out of a tensor"):
        nn.from_torch(Scaled().eval(), (_x(2, 3), torch.tensor([1, 2])), static=True)


class _RewritesItsBuffer(_Module):
    """CTRL's pattern: forward assigns the buffer its own values again (``.to(dtype)``)."""

    def __init__(self, dtype: Any) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(6, dtype=torch.float32).reshape(2, 3))
        self.dtype_to = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.table = self.table.to(self.dtype_to)
        return x + self.table.float()


def test_a_buffer_written_with_its_own_values_imports() -> None:
    x = torch.randn(2, 3)
    model = nn.from_torch(_RewritesItsBuffer(torch.float32), (x,), static=True)
    np.testing.assert_allclose(np.asarray(model(x.numpy())), (x + torch.arange(6.0).reshape(2, 3)).numpy(), rtol=1e-6)


def test_a_buffer_write_that_changes_it_is_still_refused() -> None:
    """float32 -> float16 changes the buffer's dtype: a real write, which a graph cannot make."""
    with pytest.raises(UnsupportedOperationError, match=r"forward writes in place \(buffer mutation of table\)"):
        nn.from_torch(_RewritesItsBuffer(torch.float16), (torch.randn(2, 3),), static=True)
