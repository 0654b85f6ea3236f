"""How facade modules find the names plugins provide (``Manifest.exports``).

``neurenix.hardware.npu`` serves whatever the installed plugin's module named in its manifest's
``exports`` provides; the plugin module is imported only when a user asks for such a name. With
no plugin installed, ``is_*_available()`` answers False (it never raises) and every other known
name raises ImportError naming the package to install.


A plugin may also export to a facade module that does not exist in this package
(``{"neurenix.hardware.acme": "acme_plugin.api"}``, as docs/vendors.md says): :class:`ExportFinder`,
put on ``sys.meta_path`` by ``neurenix/__init__.py``, creates it on ``import`` (and any missing
parent, e.g. ``neurenix.vendors``) from the exporting plugin's module. A module that cannot be
imported raises :class:`~neurenix_core.errors.FacadeExportError` naming the plugin.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = ["KNOWN", "ExportFinder", "install_finder", "names", "resolve"]

#: Names our first-party plugins provide, per facade module: (package to install, device type).
KNOWN: Final[dict[str, tuple[str, str, tuple[str, ...]]]] = {
    "neurenix.hardware": ("neurenix-cuda-tc", "cuda", ("is_tensor_cores_available", "TensorCoresBackend")),
    "neurenix.hardware.tensor_cores": ("neurenix-cuda-tc", "cuda", ("is_tensor_cores_available", "TensorCoresBackend")),
    "neurenix.hardware.tpu": ("neurenix-tpu", "tpu", ("is_tpu_available", "TPUBackend")),
    "neurenix.hardware.npu": ("neurenix-npu-openvino", "npu", ("is_npu_available", "NPUBackend")),
    "neurenix.hardware.edgetpu": ("neurenix-edgetpu", "edgetpu", ("is_edgetpu_available", "EdgeTPUBackend")),
}


def _records(facade: str) -> list[Any]:
    """Discovered plugins exporting to ``facade``, best-ranked first."""
    from neurenix_core.plugins.state import registry

    reg = registry()
    ranked = [r.name for r in reg.ranked]
    records = [r for r in reg.records if r.manifest is not None and facade in r.manifest.exports]
    records.sort(key=lambda r: ranked.index(r.name) if r.name in ranked else len(ranked))
    return records


def _exported_facades() -> set[str]:
    from neurenix_core.plugins.state import registry

    return {f for r in registry().records if r.manifest is not None for f in r.manifest.exports}


def _providers(facade: str) -> list[tuple[str, str]]:
    """(plugin name, module) of every discovered plugin exporting to ``facade``, best-ranked first."""
    return [(r.name, r.manifest.exports[facade]) for r in _records(facade)]


def names(facade: str) -> list[str]:
    out = set(KNOWN.get(facade, ("", "", ()))[2])
    for _, module in _providers(facade):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue  # dir() must not fail; the import error surfaces on attribute access
        out.update(getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")]))
    return sorted(out)


def resolve(facade: str, name: str) -> Any:
    """The object ``facade.name``: from a plugin that exports it, else the not-installed answer."""
    for plugin, module in _providers(facade):
        try:
            mod = importlib.import_module(module)
        except Exception as exc:
            raise ImportError(
                f"cannot import {name!r} from {facade}: plugin {plugin} exports {module}, whose import failed "
                f"({type(exc).__name__}: {exc}); reinstall the plugin or see `neurenix doctor`"
            ) from exc
        if hasattr(mod, name):
            return getattr(mod, name)
    package, device_type, known = KNOWN.get(facade, ("", "", ()))
    if name.startswith("is_") and name.endswith("_available") and name in known:
        return _unavailable(name, device_type)
    if name in known:
        raise ImportError(
            f"{facade}.{name} is provided by the {package} plugin, which is not installed or not loaded: pip install {package} "
            "(if it is installed, check NEURENIX_DISABLE_PLUGIN_AUTOLOAD / NEURENIX_BACKENDS and `neurenix doctor`)",
            name=name,
        )
    if f"{facade}.{name}" in _exported_facades():  # a submodule only a plugin provides: import it
        return importlib.import_module(f"{facade}.{name}")
    raise AttributeError(f"module {facade!r} has no attribute {name!r}")


def _unavailable(name: str, device_type: str) -> Callable[[], bool]:
    def is_available() -> bool:
        # No first-party plugin: only a vendor plugin serving this device type could make it True.
        from neurenix_core.plugins.state import registry

        return any(str(d.type) == device_type for d in registry().devices(device_type))

    is_available.__name__ = name
    is_available.__doc__ = f"True when an installed plugin serves {device_type} devices (False: none is installed)."
    return is_available


class ExportFinder:
    """Creates ``neurenix.*`` modules that exist only as a plugin's ``Manifest.exports`` key.

    Asked after the regular finders (appended to ``sys.meta_path``), so the package's own modules
    (``neurenix.hardware.npu`` ...) are never shadowed; it answers only names under ``neurenix.``
    that some discovered plugin exports, or a missing parent of one.
    """

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("neurenix."):
            return None
        facades = _exported_facades()
        parent = any(f.startswith(fullname + ".") for f in facades)
        if fullname not in facades and not parent:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, _ExportLoader(), is_package=parent)  # type: ignore[arg-type]  # a Loader by protocol
        if parent:
            spec.submodule_search_locations = []  # a package: children come from this finder too
        return spec


class _ExportLoader:
    """Fills the new facade module with the public names of every plugin module exporting to it."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        facade = module.__name__
        module.__doc__ = f"Facade module created from the plugins exporting to {facade} (Manifest.exports)."
        # Worst-ranked first, so the best-ranked plugin's names win where two export one name.
        for record in reversed(_records(facade)):
            target = record.manifest.exports[facade]
            mod = _import_export(record, facade, target)
            public = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
            module.__dict__.update({n: getattr(mod, n) for n in public if hasattr(mod, n)})


def _import_export(record: Any, facade: str, target: str) -> types.ModuleType:
    from neurenix_core.errors import FacadeExportError

    try:
        return importlib.import_module(target)
    except Exception as exc:  # any failure of the plugin's module, typed with its name
        raise FacadeExportError(
            f"cannot import {facade}: plugin {record.name} ({record.distribution or 'no distribution'}) exports it from "
            f"{target}, whose import failed ({type(exc).__name__}: {exc}); fix or reinstall {record.distribution or record.name}, "
            f"or see `neurenix doctor`",
            plugin=record.name, distribution=record.distribution, facade=facade, module=target,
        ) from exc


def install_finder() -> None:
    """Put one :class:`ExportFinder` at the end of ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, ExportFinder) for f in sys.meta_path):
        sys.meta_path.append(ExportFinder())
