"""How facade modules find the names plugins provide (``Manifest.exports``).

``neurenix.hardware.npu`` serves whatever the installed plugin's module named in its manifest's
``exports`` provides; the plugin module is imported only when a user asks for such a name. With
no plugin installed, ``is_*_available()`` answers False (it never raises) and every other known
name raises ImportError naming the package to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Final

__all__ = ["resolve", "names", "KNOWN"]

#: Names our first-party plugins provide, per facade module: (package to install, device type).
KNOWN: Final[dict[str, tuple[str, str, tuple[str, ...]]]] = {
    "neurenix.hardware": ("neurenix-cuda-tc", "cuda", ("is_tensor_cores_available", "TensorCoresBackend")),
    "neurenix.hardware.tensor_cores": ("neurenix-cuda-tc", "cuda", ("is_tensor_cores_available", "TensorCoresBackend")),
    "neurenix.hardware.tpu": ("neurenix-tpu", "tpu", ("is_tpu_available", "TPUBackend")),
    "neurenix.hardware.npu": ("neurenix-npu-openvino", "npu", ("is_npu_available", "NPUBackend")),
    "neurenix.hardware.edgetpu": ("neurenix-edgetpu", "edgetpu", ("is_edgetpu_available", "EdgeTPUBackend")),
}


def _providers(facade: str) -> list[tuple[str, str]]:
    """(plugin name, module) of every discovered plugin exporting to ``facade``, best-ranked first."""
    from neurenix_core.plugins.state import registry

    reg = registry()
    ranked = [r.name for r in reg.ranked]
    records = [r for r in reg.records if r.manifest is not None and facade in r.manifest.exports]
    records.sort(key=lambda r: ranked.index(r.name) if r.name in ranked else len(ranked))
    return [(r.name, r.manifest.exports[facade]) for r in records if r.manifest is not None]


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
    raise AttributeError(f"module {facade!r} has no attribute {name!r}")


def _unavailable(name: str, device_type: str) -> Callable[[], bool]:
    def is_available() -> bool:
        # No first-party plugin: only a vendor plugin serving this device type could make it True.
        from neurenix_core.plugins.state import registry

        return any(str(d.type) == device_type for d in registry().devices(device_type))

    is_available.__name__ = name
    is_available.__doc__ = f"True when an installed plugin serves {device_type} devices (False: none is installed)."
    return is_available
