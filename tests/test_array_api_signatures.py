"""Every function of the namespace has the array API 2024.12 signature.

The reference is array-api-strict, whose functions carry the standard's signatures; the table
neurenix generates its functions from (neurenix_core/tensor/signatures.py) is checked against it,
and every nx function against the table.
"""

from __future__ import annotations

import inspect
import pydoc
from collections.abc import Callable
from typing import Any

import array_api_strict as xp
import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.plugins.backend import ARRAY_API_FUNCTIONS, FFT_FUNCTIONS, LINALG_FUNCTIONS
from neurenix_core.tensor.signatures import HANDWRITTEN, SIGNATURES, make_function, parameters

# array-api-strict implements 2025.12 too; these functions are newer than the 2024.12 neurenix implements.
NEWER_THAN_2024_12 = {"isin", "broadcast_shapes", "linalg.eig", "linalg.eigvals"}
# Parameters of the standard that take *args / **kwargs themselves.
VARIADIC = {"meshgrid", "broadcast_arrays", "result_type"}


def _strict_functions() -> dict[str, Callable[..., Any]]:
    """Qualified name -> array-api-strict function, for every function of the standard it has."""
    out: dict[str, Callable[..., Any]] = {}
    sources = (("", xp, None), ("linalg.", xp.linalg, "array_api_strict._linalg"), ("fft.", xp.fft, "array_api_strict._fft"))
    for prefix, module, home in sources:
        for name in dir(module):
            fn = getattr(module, name)
            if name.startswith("_") or not inspect.isfunction(fn):
                continue
            # Helpers the submodules import (conj, reshape ...) and the library's own flag functions.
            if (home is not None and fn.__module__ != home) or fn.__module__ == "array_api_strict._flags":
                continue
            out[prefix + name] = fn
    return {k: v for k, v in out.items() if k not in NEWER_THAN_2024_12}


STRICT = _strict_functions()


def _nx(qualname: str) -> Callable[..., Any]:
    module: Any = nx
    *path, name = qualname.split(".")
    for part in path:
        module = getattr(module, part)
    fn = getattr(module, name, None)
    assert callable(fn), f"nx.{qualname} is missing"
    return fn


def _shape(sig: inspect.Signature) -> list[tuple[str, str]]:
    return [(p.name, p.kind.name) for p in sig.parameters.values()]


def test_the_table_is_the_standard_and_the_namespace_has_all_of_it() -> None:
    assert len(STRICT) > 150, "array-api-strict's namespace was not read"
    assert set(SIGNATURES) == set(STRICT)
    assert {n for n in SIGNATURES if "." not in n} >= set(ARRAY_API_FUNCTIONS)
    assert {f"linalg.{n}" for n in LINALG_FUNCTIONS} == {n for n in SIGNATURES if n.startswith("linalg.")}
    assert {f"fft.{n}" for n in FFT_FUNCTIONS} == {n for n in SIGNATURES if n.startswith("fft.")}
    for qualname in SIGNATURES:
        _nx(qualname)


@pytest.mark.parametrize("qualname", sorted(STRICT))
def test_signature_matches_array_api_strict(qualname: str) -> None:
    standard = inspect.signature(STRICT[qualname])
    ours = inspect.signature(_nx(qualname))
    assert _shape(ours) == _shape(standard), f"nx.{qualname}{ours} is not the standard's {qualname}{standard}"
    for name, p in standard.parameters.items():
        # array-api-strict marks "not given" with its own sentinel (astype's device, from_dlpack's
        # copy); every other default is the standard's value.
        if p.default is not p.empty and type(p.default).__name__ != "Undef":
            assert ours.parameters[name].default == p.default, f"nx.{qualname}: default of {name}"


@pytest.mark.parametrize("qualname", sorted(SIGNATURES))
def test_function_has_the_table_signature(qualname: str) -> None:
    want = parameters(qualname)
    got = inspect.signature(_nx(qualname))
    assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == [
        (p.name, p.kind, p.default) for p in want.parameters.values()
    ]


def _public_functions() -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for prefix, module in (("", nx), ("linalg.", nx.linalg), ("fft.", nx.fft)):
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                found[prefix + name] = obj
    return found


def test_no_public_function_hides_its_parameters() -> None:
    functions = _public_functions()
    assert set(SIGNATURES) <= set(functions)
    hidden = [
        f"{name}{inspect.signature(fn)}" for name, fn in functions.items()
        if name not in VARIADIC
        and any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in inspect.signature(fn).parameters.values())
    ]
    assert hidden == []


def _help(fn: Callable[..., Any]) -> str:
    return pydoc.render_doc(fn, renderer=pydoc.plaintext)


def test_help_shows_the_signature() -> None:
    assert "sum(x, /, *, axis=None, dtype=None, keepdims=False)" in _help(nx.sum)
    assert "fft(x, /, *, n=None, axis=-1, norm='backward')" in _help(nx.fft.fft)
    assert "qr(x, /, *, mode='reduced')" in _help(nx.linalg.qr)
    assert nx.linalg.qr.__name__ == "qr" and "linalg.qr" in (nx.linalg.qr.__doc__ or "")


def test_python_enforces_the_signature() -> None:
    x = nx.asarray([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(TypeError):
        nx.sum(x, 0)  # axis is keyword-only
    with pytest.raises(TypeError):
        nx.sum(x, axes=0)  # misspelt keyword
    with pytest.raises(TypeError):
        nx.sum(x=x)  # x is positional-only
    with pytest.raises(TypeError):
        nx.fft.fft(x, 4)
    with pytest.raises(TypeError):
        nx.linalg.matrix_power(x, n=2)


def test_keywords_reach_the_backend() -> None:
    a = np.array([[3.0, 1.0, 2.0], [6.0, 5.0, 4.0]], dtype=np.float32)
    x = nx.asarray(a)
    assert nx.sum(x, axis=1, keepdims=True).shape == (2, 1)
    assert nx.sum(x, axis=None, keepdims=False).shape == ()  # defaults given explicitly
    np.testing.assert_allclose(nx.std(x, correction=1.0).numpy(), np.std(a, ddof=1), rtol=1e-6)
    np.testing.assert_array_equal(nx.sort(x, axis=1, descending=True).numpy(), -np.sort(-a, axis=1))
    np.testing.assert_array_equal(nx.clip(x, max=3.0).numpy(), np.minimum(a, 3.0))
    np.testing.assert_array_equal(nx.clip(x, 2.0, 5.0).numpy(), np.clip(a, 2.0, 5.0))
    np.testing.assert_allclose(nx.linalg.vector_norm(x, axis=0, ord=1).numpy(), np.abs(a).sum(axis=0))
    np.testing.assert_array_equal(nx.roll(x, 1, axis=1).numpy(), np.roll(a, 1, axis=1))
    np.testing.assert_array_equal(nx.expand_dims(x, axis=0).shape, (1, 2, 3))
    np.testing.assert_array_equal(nx.cumulative_sum(x, axis=1, include_initial=True).numpy()[:, 0], [0, 0])


def test_generated_functions_pass_only_keywords_that_differ_from_the_default() -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any] | None]] = []

    def record(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> None:
        calls.append((name, args, kwargs or {}))

    fake_sum = make_function("sum", record, "doc")
    fake_sum("x")
    fake_sum("x", axis=None, keepdims=False)
    fake_sum("x", axis=(0, 1), keepdims=True)
    fake_clip = make_function("clip", record, "doc")
    fake_clip("x", None, 2.0)
    fake_fft = make_function("fft.fft", record, "doc")
    fake_fft("x", norm="ortho")
    assert calls == [
        ("sum", ("x",), {}), ("sum", ("x",), {}), ("sum", ("x",), {"axis": (0, 1), "keepdims": True}),
        ("clip", ("x",), {"max": 2.0}), ("fft.fft", ("x",), {"norm": "ortho"}),
    ]
    assert set(HANDWRITTEN) <= set(SIGNATURES)
    with pytest.raises(ValueError, match="written by hand"):
        make_function("meshgrid", record, "doc")


@pytest.mark.parametrize("device", sorted({str(nx.Device(d.type, 0)) for d in nx.devices()}))
def test_the_dtype_keyword_reaches_every_backend_as_its_own_dtype(device: str) -> None:
    """sum/prod/cumulative_sum/linalg.trace(dtype=...): torch needs a torch.dtype, JAX and NumPy
    take NumPy's; a host fallback gets the neurenix dtype."""
    if not nx.backend(device).supports_dtype(nx.float64):
        pytest.skip(f"{device} has no float64")
    x = nx.asarray(np.array([1.5, 2.0, 4.0], dtype=np.float32), device=device)
    with nx.fallback_policy("allow"):
        results = {
            "sum": nx.sum(x, dtype=nx.float64), "prod": nx.prod(x, dtype="float64"),
            "cumulative_sum": nx.cumulative_sum(x, dtype=nx.float64),
            "linalg.trace": nx.linalg.trace(nx.reshape(nx.concat([x, x, x]), (3, 3)), dtype=nx.float64),
        }
    want = {"sum": 7.5, "prod": 12.0, "cumulative_sum": [1.5, 3.5, 7.5], "linalg.trace": 1.5 + 4.0 + 2.0}
    for name, out in results.items():
        assert out.dtype == nx.float64 and out.device == nx.Device(device), name
        np.testing.assert_array_equal(out.numpy(), want[name])


@pytest.mark.parametrize("qualname", sorted(SIGNATURES))
def test_functions_name_their_module_and_pickle_by_reference(qualname: str) -> None:
    import pickle

    fn = _nx(qualname)
    assert fn.__name__ == qualname.rsplit(".", 1)[-1]
    assert (fn.__module__ or "").startswith("neurenix_core"), f"nx.{qualname}.__module__ is {fn.__module__!r}"
    assert pickle.loads(pickle.dumps(fn)) is fn
