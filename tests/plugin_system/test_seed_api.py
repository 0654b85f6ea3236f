"""The shared seed-API shape (is_<x>_available, XBackend.initialize/get_device_*) on a real plugin."""

from __future__ import annotations

from distributions import healthy_source

CODE = """
import json, neurenix_core as nx
from neurenix_core.plugins.seed_api import DeviceBackend, device_available

class AcmeBackend(DeviceBackend):
    device_type = "acme"
    backend_class = "nx_plugin_acme:AcmeBackend"

class WrongBackend(DeviceBackend):
    device_type = "acme"
    backend_class = "neurenix_core.backends.cpu:CPUBackend"

out = {"available": device_available("acme"), "real_only": device_available("acme", allow_emulated=False),
       "missing": device_available("nosuch")}
acme = AcmeBackend(1)
out["init"] = acme.initialize()
out["count"] = acme.get_device_count()
out["info"] = acme.get_device_info()["device"]
for label, make in (("range", lambda: acme.get_device_info(5)), ("type", lambda: AcmeBackend("cpu:0")),
                    ("wrong", lambda: WrongBackend().initialize())):
    try:
        make()
        out[label] = "no error"
    except nx.NeurenixError as exc:
        out[label] = [type(exc).__name__, str(exc)]
print(json.dumps(out))
"""


def test_device_backend_shape_and_errors(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(CODE, site=site)
    assert out["available"] is True and out["real_only"] is True and out["missing"] is False
    assert out["init"] is True and out["count"] == 2 and out["info"] == "acme:1"
    assert out["range"][0] == "DeviceNotFoundError" and "acme:5" in out["range"][1]
    assert out["type"][0] == "DeviceMismatchError"
    assert out["wrong"][0] == "BackendUnavailableError" and "NEURENIX_BACKENDS=-acme" in out["wrong"][1]


def test_emulated_device_counts_only_when_allowed(plugin_site, run_neurenix):
    probe = "return ProbeResult.emulating(1) if context.emulate else ProbeResult.missing('no acme card')"
    site = plugin_site("acme", healthy_source(emulation="acme", probe=probe))
    code = "import json\nfrom neurenix_core.plugins.seed_api import device_available\nprint(json.dumps([device_available('acme'), device_available('acme', allow_emulated=False)]))"
    assert run_neurenix(code, site=site, env={"NEURENIX_EMULATE": "acme"}) == [True, False]
    assert run_neurenix(code, site=site) == [False, False]
