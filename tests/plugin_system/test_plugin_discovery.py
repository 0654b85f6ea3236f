"""A healthy third-party plugin installed as a real distribution is discovered, ranked and selectable."""

from __future__ import annotations

from distributions import healthy_source

REPORT = """
import json, sys, neurenix_core as nx
rows = {b.name: b.as_dict() for b in nx.backends()}
print(json.dumps({"rows": rows, "default": str(nx.default_device()),
                  "devices": [str(d) for d in nx.devices()],
                  "modules": sorted(m for m in sys.modules if m.startswith("nx_plugin_"))}))
"""


def test_builtin_cpu_registers_through_the_entry_point_group(run_neurenix):
    out = run_neurenix(REPORT)
    cpu = out["rows"]["cpu"]
    assert cpu["distribution"] == "neurenix-core"
    assert cpu["status"] in {"selected", "available"}
    assert cpu["device_count"] == 1


def test_healthy_accelerator_plugin_is_ranked_first_and_selected(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(REPORT, site=site)
    acme = out["rows"]["acme"]
    assert acme["status"] == "selected"
    assert acme["distribution"] == "neurenix-acme" and acme["version"] == "1.2.3"
    assert acme["device_count"] == 2 and acme["band"] == "accelerator"
    assert out["default"] == "acme:0"
    assert out["devices"][:2] == ["acme:0", "acme:1"]
    assert out["rows"]["cpu"]["status"] == "available"


def test_tensors_are_created_on_the_third_party_device(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(
        """
        import json, neurenix_core as nx
        t = nx.Tensor([1.0, 2.0], device="acme:1")
        u = nx.asarray([3.0, 4.0])
        print(json.dumps({"t": str(t.device), "u": str(u.device), "sum": (t + t).tolist(),
                          "type": repr(nx.DeviceType.ACME), "backend": t.device.backend_name}))
        """,
        site=site,
    )
    assert out == {"t": "acme:1", "u": "acme:0", "sum": [2.0, 4.0], "type": "DeviceType('acme')", "backend": "acme"}


def test_band_beats_priority(plugin_site, run_neurenix):
    """An NPU plugin claiming priority 99 still ranks below an accelerator at priority 0."""
    plugin_site("loud-npu", healthy_source(name="loud-npu", device_type="loudnpu", band="NPU", priority=99))
    site = plugin_site("quiet", healthy_source(name="quiet", device_type="quiet", band="ACCELERATOR", priority=0))
    out = run_neurenix(REPORT, site=site)
    assert out["default"] == "quiet:0"
    assert list(out["rows"])[:3] == ["quiet", "loud-npu", "cpu"]


def test_emulated_plugin_is_never_auto_selected_but_is_selectable(plugin_site, run_neurenix):
    probe = "return ProbeResult.emulating(1) if context.emulate else ProbeResult.missing('no acme card: install the acme driver')"
    site = plugin_site("acme", healthy_source(emulation="acme", probe=probe))
    auto = run_neurenix(REPORT, site=site, env={"NEURENIX_EMULATE": "acme"})
    assert auto["rows"]["acme"]["status"] == "emulated"
    assert auto["rows"]["acme"]["emulated"] is True
    assert auto["default"] == "cpu:0"
    chosen = run_neurenix(REPORT, site=site, env={"NEURENIX_EMULATE": "acme", "NEURENIX_DEVICE": "acme:0"})
    assert chosen["default"] == "acme:0"
    assert chosen["rows"]["acme"]["status"] == "selected"
    absent = run_neurenix(REPORT, site=site)
    assert absent["rows"]["acme"]["status"] == "unavailable"
    assert "install the acme driver" in absent["rows"]["acme"]["reason"]
    assert "NEURENIX_EMULATE=acme" in absent["rows"]["acme"]["reason"]
