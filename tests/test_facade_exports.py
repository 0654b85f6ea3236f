"""Manifest.exports to facade modules that do not exist in the ``neurenix`` package (issue #28 C3):
``import neurenix.hardware.acme`` is created from the plugin's module; a bad export is a typed
FacadeExportError naming the plugin. Real plugins written as files, fresh interpreters."""

from __future__ import annotations

PLUGIN = '''
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, PriorityBand, ProbeResult, ArrayNamespaceBackend

class B(ArrayNamespaceBackend):
    def __init__(self):
        super().__init__(np, device_type="acme", device_count=1)
    def _native_device(self, index):
        return "cpu"

@hookimpl
def neurenix_manifest():
    return Manifest(name="acme", distribution="neurenix-acme", version="1.0", api=">=1.0,<2", device_types=("acme",),
                    band=PriorityBand.ACCELERATOR, exports={EXPORTS})

@hookimpl
def neurenix_probe(context):
    return ProbeResult.found(1)

@hookimpl
def neurenix_backend(manifest, probe):
    return B()
'''

API = '''
"""The vendor's seed-style API."""
__all__ = ["is_acme_available", "AcmeBackend"]

def is_acme_available():
    return True

class AcmeBackend:
    vendor = "acme"

def _private():
    return None
'''

ENV = {"NEURENIX_BACKENDS": "-onnxruntime"}


def _site(plugin_site, exports: str):
    site = plugin_site("acme", PLUGIN.replace("{EXPORTS}", exports))
    (site / "acme_plugin_api.py").write_text(API)
    return site


def test_import_of_a_facade_module_only_a_plugin_exports(plugin_site, run_neurenix) -> None:
    site = _site(plugin_site, '{"neurenix.hardware.acme": "acme_plugin_api", "neurenix.vendors.acme": "acme_plugin_api"}')
    out = run_neurenix(
        """
        import json, sys
        import neurenix as nx
        import neurenix.hardware.acme
        from neurenix.hardware.acme import AcmeBackend, is_acme_available
        import acme_plugin_api
        from neurenix.vendors.acme import AcmeBackend as Again  # a missing parent package is created too
        import neurenix.hardware as hw
        print(json.dumps({
            "same": AcmeBackend is acme_plugin_api.AcmeBackend and Again is AcmeBackend,
            "available": is_acme_available(), "vendor": AcmeBackend.vendor,
            "private": hasattr(neurenix.hardware.acme, "_private"),
            "attribute": hw.acme is sys.modules["neurenix.hardware.acme"],
            "npu_still_ours": sys.modules["neurenix.hardware"].npu.__file__.endswith("hardware/npu.py"),
        }))
        """,
        site=site, env=ENV,
    )
    assert out == {"same": True, "available": True, "vendor": "acme", "private": False, "attribute": True, "npu_still_ours": True}


def test_attribute_access_imports_the_exported_submodule(plugin_site, run_neurenix) -> None:
    site = _site(plugin_site, '{"neurenix.hardware.acme": "acme_plugin_api"}')
    out = run_neurenix(
        "import json, neurenix as nx\nprint(json.dumps(nx.hardware.acme.AcmeBackend.vendor))", site=site, env=ENV
    )
    assert out == "acme"


def test_a_bad_export_is_a_typed_error_naming_the_plugin(plugin_site, run_neurenix) -> None:
    site = _site(plugin_site, '{"neurenix.hardware.acme": "acme_plugin_missing"}')
    out = run_neurenix(
        """
        import json, sys
        from neurenix_core.errors import FacadeExportError
        try:
            import neurenix.hardware.acme
            caught = None
        except FacadeExportError as exc:
            caught = {"msg": str(exc), "plugin": exc.plugin, "module": exc.module, "facade": exc.facade,
                      "import_error": isinstance(exc, ImportError), "left": "neurenix.hardware.acme" in sys.modules}
        print(json.dumps(caught))
        """,
        site=site, env=ENV,
    )
    assert out["plugin"] == "acme" and out["module"] == "acme_plugin_missing" and out["facade"] == "neurenix.hardware.acme"
    assert out["import_error"] and not out["left"]
    assert "plugin acme (neurenix-acme) exports it from acme_plugin_missing, whose import failed (ModuleNotFoundError" in out["msg"]


def test_an_unexported_name_is_still_module_not_found(run_neurenix, tmp_path) -> None:
    out = run_neurenix(
        """
        import json
        try:
            import neurenix.hardware.nothing_exports_this
            print(json.dumps("imported"))
        except ModuleNotFoundError as exc:
            print(json.dumps(type(exc).__name__))
        """,
        env=ENV,
    )
    assert out == "ModuleNotFoundError"
