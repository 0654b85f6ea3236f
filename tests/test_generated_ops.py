"""neurenix_core/tensor/_generated_ops.py is current, and its functions are the namespace's.

The module is written by scripts/gen_ops.py from the signature table, so that import loads
compiled code instead of running ``exec`` ~80 times; these tests keep it from drifting.
"""

from __future__ import annotations

import ast
import inspect
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from repo_scripts import load_script

import neurenix_core as nx
from neurenix_core.tensor import _generated_ops, ops
from neurenix_core.tensor.signatures import GENERATED_OPS, parameters
from neurenix_core.tensor.tensor import BINARY_FUNCTIONS

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> Any:
    return load_script("gen_ops")


def test_generated_module_is_current() -> None:
    text = (ROOT / "neurenix_core" / "tensor" / "_generated_ops.py").read_text()
    assert _generator().render() == text, "neurenix_core/tensor/_generated_ops.py is stale: run python scripts/gen_ops.py"


def test_typed_stubs_are_current() -> None:
    # _generated_ops.pyi, linalg.pyi, fft.pyi: what a type checker reads for the generated namespaces.
    for path, text in _generator().outputs().items():
        assert path.exists() and path.read_text() == text, f"{path.name} is stale: run python scripts/gen_ops.py"


def test_every_stub_declares_exactly_its_module_functions() -> None:
    for module in (_generated_ops, nx.linalg, nx.fft):
        stub = ROOT / "neurenix_core" / "tensor" / f"{module.__name__.rsplit('.', 1)[-1]}.pyi"
        declared = [node.name for node in ast.parse(stub.read_text()).body if isinstance(node, ast.FunctionDef)]
        assert declared == list(module.__all__), stub.name
        for name in declared:
            fn = getattr(module, name)
            assert inspect.isfunction(fn), f"{module.__name__}.{name}"


def test_the_namespace_exports_the_generated_functions() -> None:
    binary = [q for q in ops.__all__ if q in BINARY_FUNCTIONS]
    assert list(_generated_ops.__all__[: len(GENERATED_OPS)]) == list(GENERATED_OPS)
    assert sorted(_generated_ops.__all__[len(GENERATED_OPS) :]) == sorted(binary) != []
    for name in binary:  # the operators' flat hot path, the very objects
        assert getattr(_generated_ops, name) is BINARY_FUNCTIONS[name] is getattr(nx, name), name
    for name in GENERATED_OPS:
        fn = getattr(nx, name)
        assert fn is getattr(_generated_ops, name) is getattr(ops, name), name
        assert fn.__module__ == "neurenix_core.tensor.ops", name  # pickled by reference from there
        assert pickle.loads(pickle.dumps(fn)) is fn
        assert inspect.signature(fn) == parameters(name), name
        assert name in (fn.__doc__ or "")


def test_generated_functions_pass_only_keywords_that_differ_from_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def record(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> None:
        calls.append((name, args, kwargs or {}))

    monkeypatch.setattr(_generated_ops, "_call", record)
    monkeypatch.setattr(_generated_ops, "_call1", record)  # std, sort, clip: x is the only positional argument
    monkeypatch.setattr(_generated_ops, "_call_with_dtype", record)
    nx.std("x")
    # The defaults themselves (the very objects) given explicitly: nothing is passed on.
    nx.std("x", axis=None, correction=nx.std.__kwdefaults__["correction"], keepdims=False)
    nx.std("x", correction=1.0)
    nx.sort("x", axis=-1, descending=False, stable=True)
    nx.sort("x", axis=0)
    nx.clip("x", None, 2.0)
    nx.sum("x", dtype="float64")
    nx.roll("x", 1, axis=1)
    assert calls == [
        ("std", ("x",), {}), ("std", ("x",), {}), ("std", ("x",), {"correction": 1.0}),
        ("sort", ("x",), {}), ("sort", ("x",), {"axis": 0}), ("clip", ("x",), {"max": 2.0}),
        ("sum", ("x",), {"dtype": "float64"}), ("roll", ("x", 1), {"axis": 1}),
    ]


def test_generated_functions_run_on_the_default_device() -> None:
    a = np.array([[3.0, 1.0, 2.0], [6.0, 5.0, 4.0]], dtype=np.float32)
    x = nx.asarray(a)
    np.testing.assert_allclose(nx.std(x, correction=1.0).numpy(), np.std(a, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(nx.sum(x, axis=1, dtype=nx.float64).numpy(), a.sum(axis=1))
    np.testing.assert_array_equal(nx.sort(x, axis=1, descending=True).numpy(), -np.sort(-a, axis=1))
