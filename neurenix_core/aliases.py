"""Old module paths, kept for one release after the core moved into subpackages (0.2).

``import neurenix_core.hookspecs`` (and every other module that used to sit at the top of the
package) still works: a meta path finder hands back the module at its new path, so both names are
the same module object (hook markers, exception classes and registries stay identical). Each old
path warns once with ``DeprecationWarning`` naming the new one. The table is data, not imports, so
this file adds no edge to the import graph and costs nothing until an old path is used.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Final

#: old module name -> new module name (0.1 -> 0.2). Removed in 0.3.
MOVED: Final[dict[str, str]] = {
    "neurenix_core._state": "neurenix_core.plugins.state",
    "neurenix_core._native_probe": "neurenix_core.plugins.native_probe",
    "neurenix_core.backend": "neurenix_core.plugins.backend",
    "neurenix_core.entrypoints": "neurenix_core.plugins.entrypoints",
    "neurenix_core.hookspecs": "neurenix_core.plugins.hookspecs",
    "neurenix_core.manifest": "neurenix_core.plugins.manifest",
    "neurenix_core.memory": "neurenix_core.plugins.memory",
    "neurenix_core.probing": "neurenix_core.plugins.probing",
    "neurenix_core.registry": "neurenix_core.plugins.registry",
    "neurenix_core.report": "neurenix_core.plugins.report",
    "neurenix_core.seed_api": "neurenix_core.plugins.seed_api",
    "neurenix_core.creation": "neurenix_core.tensor.creation",
    "neurenix_core.ops": "neurenix_core.tensor.ops",
    "neurenix_core.indexing": "neurenix_core.tensor.indexing",
    "neurenix_core.transfer": "neurenix_core.tensor.transfer",
    "neurenix_core.dtypes": "neurenix_core.tensor.dtypes",
    "neurenix_core.fallback": "neurenix_core.tensor.fallback",
    "neurenix_core.info": "neurenix_core.tensor.info",
    "neurenix_core.compiler": "neurenix_core.graph.compile.compiler",
    "neurenix_core.quantization": "neurenix_core.graph.quantization",
    "neurenix_core.reference": "neurenix_core.graph.reference.run",
    "neurenix_core.nn.shapes": "neurenix_core.graph.ir.shapes",
    "neurenix_core.nn.executor": "neurenix_core.graph.compile.executor",
}


# Duck-typed finder and loader (the import protocol needs only these methods): subclassing
# importlib.abc would load importlib.resources, tempfile and shutil at every import of neurenix.
class _MovedLoader:
    def __init__(self, new: str) -> None:
        self._new = new
        self._spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self._new} in neurenix 0.2; the old path is removed in 0.3",
            DeprecationWarning,
            stacklevel=4,
        )
        module = importlib.import_module(self._new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module already ran under its new name (running it again would make a second copy);
        # importlib stamped the alias spec on it, so put the real one back (reload, pickling).
        module.__spec__ = self._spec


class _MovedFinder:
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return ModuleSpec(fullname, _MovedLoader(new))  # type: ignore[arg-type]  # a Loader by protocol; importlib.abc stays unimported


class _Package(ModuleType):
    """``neurenix_core`` itself, keeping its functions when an old path of the same name loads.

    Python binds every submodule it loads on its package: ``import neurenix_core.backend`` (the 0.1
    path of ``plugins.backend``) would replace the function ``nx.backend`` with that module.
    """

    _functions: tuple[str, ...] = ("backend",)

    def __setattr__(self, name: str, value: object) -> None:
        if name in self._functions and isinstance(value, ModuleType) and callable(self.__dict__.get(name)):
            return
        super().__setattr__(name, value)


def protect(package: ModuleType) -> None:
    """Make ``package`` keep its public functions whose names are also old module paths."""
    package.__class__ = _Package


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``nx.rediscover`` and reloads call it again)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
