"""The 0.1 module paths keep working for one release: same module objects, a DeprecationWarning
naming the new path, and the public namespace ``nx.*`` unchanged by the move into subpackages."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import neurenix_core as nx
from neurenix_core.aliases import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_and_warns(old: str) -> None:
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__name__ == MOVED[old]
    assert module.__spec__.name == MOVED[old]  # the alias does not relabel the real module
    assert any(issubclass(w.category, DeprecationWarning) and MOVED[old] in str(w.message) for w in caught)


def test_names_plugins_import_from_old_paths_are_the_same_objects() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from neurenix_core.backend import Backend  # type: ignore[import-not-found]
        from neurenix_core.hookspecs import hookimpl  # type: ignore[import-not-found]
        from neurenix_core.manifest import Manifest  # type: ignore[import-not-found]

        from neurenix_core.tensor import Tensor
    assert (Backend, hookimpl, Manifest, Tensor) == (nx.Backend, nx.hookimpl, nx.Manifest, nx.Tensor)


def test_every_public_name_resolves() -> None:
    missing = [name for name in nx.__all__ if not hasattr(nx, name)]
    assert not missing


def test_importing_the_package_loads_no_alias_and_no_framework() -> None:
    code = (
        "import sys, neurenix_core\n"
        "old = [m for m in neurenix_core.aliases.MOVED if m in sys.modules]\n"
        "heavy = [m for m in ('torch', 'jax', 'openvino', 'ai_edge_litert', 'onnx', 'importlib.resources') if m in sys.modules]\n"
        "print(old, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[] []"


def test_importing_the_old_backend_module_keeps_the_backend_function() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        sys.modules.pop("neurenix_core.backend", None)
        importlib.import_module("neurenix_core.backend")
    assert callable(nx.backend) and nx.backend("cpu:0").name == "cpu"
