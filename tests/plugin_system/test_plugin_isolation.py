"""Each way a plugin can fail leaves ``import neurenix_core`` working and is reported with its phase."""

from __future__ import annotations

import json

import pytest
from distributions import healthy_source

BROKEN = {
    "import": "raise ImportError('libacme.so.3: cannot open shared object file')\n",
    "register": "from neurenix_core import hookimpl\n@hookimpl\ndef neurenix_probe(ctx, unexpected_arg):\n    pass\n",
    "manifest": healthy_source().replace("def neurenix_manifest():\n", "def neurenix_manifest():\n    raise RuntimeError('manifest exploded')\n"),
    "malformed": healthy_source(priority=500),
    "api": healthy_source(api=">=2.0,<3", probe="open(__file__ + '.probed', 'w').close(); return ProbeResult.found(1)"),
    "probe": healthy_source(probe="raise OSError('ioctl failed on /dev/acme0')"),
    "hang": healthy_source(probe="import time; time.sleep(60)"),
    "bad-result": healthy_source(probe="return 3"),
}

EXPECTED_PHASE = {
    "import": ("import", "libacme.so.3"),
    "register": ("register", "unexpected_arg"),
    "manifest": ("manifest", "manifest exploded"),
    "malformed": ("manifest", "priority"),
    "api": ("api", ">=2.0,<3"),
    "probe": ("probe", "ioctl failed"),
    "hang": ("probe", "did not return within"),
    "bad-result": ("probe", "not ProbeResult"),
}

CHECK = """
import json, neurenix_core as nx
t = nx.asarray([1.0, 2.0]) * 2
rows = {b.name: b.as_dict() for b in nx.backends()}
print(json.dumps({"rows": rows, "ok": t.tolist(), "default": str(nx.default_device())}))
"""


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_failure_is_isolated_and_reported_with_its_phase(kind, plugin_site, run_neurenix):
    site = plugin_site("acme", BROKEN[kind])
    out = run_neurenix(CHECK, site=site, env={"NEURENIX_PROBE_TIMEOUT": "0.5"})
    assert out["ok"] == [2.0, 4.0]
    assert out["default"] == "cpu:0"
    row = out["rows"]["acme"]
    phase, needle = EXPECTED_PHASE[kind]
    assert row["status"] == "failed"
    assert row["failure"]["phase"] == phase
    assert needle in row["failure"]["cause"]
    assert row["distribution"] == "neurenix-acme"


def test_api_mismatch_is_refused_before_the_probe_runs(plugin_site, run_neurenix):
    site = plugin_site("acme", BROKEN["api"])
    run_neurenix(CHECK, site=site)
    assert not list(site.glob("*.probed")), "the probe of an incompatible plugin must never run"


NATIVE_CRASH = healthy_source(probe="return ProbeResult.native('driver present')").replace(
    "@hookimpl\ndef neurenix_backend",
    "@hookimpl\ndef neurenix_native_probe(context):\n    import ctypes\n    ctypes.string_at(0)\n\n@hookimpl\ndef neurenix_backend",
).replace("emulation=None)", "emulation=None, native_probe=True)")

NATIVE_OK = healthy_source(probe="return ProbeResult.native('driver present')").replace(
    "@hookimpl\ndef neurenix_backend",
    "@hookimpl\ndef neurenix_native_probe(context):\n    return ProbeResult.found(3, driver='525.1')\n\n@hookimpl\ndef neurenix_backend",
).replace("emulation=None)", "emulation=None, native_probe=True)")


def test_native_probe_segfault_is_contained(plugin_site, run_neurenix):
    site = plugin_site("acme", NATIVE_CRASH)
    out = run_neurenix(CHECK, site=site)
    row = out["rows"]["acme"]
    assert row["failure"]["phase"] == "probe"
    assert "SIGSEGV" in row["failure"]["cause"]
    assert out["ok"] == [2.0, 4.0]


def test_native_probe_result_crosses_the_process_boundary(plugin_site, run_neurenix):
    site = plugin_site("acme", NATIVE_OK)
    out = run_neurenix(CHECK, site=site)
    assert out["rows"]["acme"]["status"] == "selected"
    assert out["rows"]["acme"]["device_count"] == 3


def test_backend_factory_failure_explicit_raises_auto_moves_on(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source(backend="raise RuntimeError('firmware handshake failed')"))
    out = run_neurenix(
        """
        import json, warnings, neurenix_core as nx
        try:
            nx.zeros(2, device="acme:0")
            explicit = "no error"
        except nx.BackendUnavailableError as exc:
            explicit = str(exc)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = nx.zeros(2)
        rows = {b.name: b.as_dict() for b in nx.backends()}
        print(json.dumps({"explicit": explicit, "auto_device": str(t.device),
                          "warned": [str(w.message) for w in caught], "acme": rows["acme"]}))
        """,
        site=site,
    )
    assert "firmware handshake failed" in out["explicit"] and "acme" in out["explicit"]
    assert out["auto_device"] == "cpu:0"
    assert out["acme"]["failure"]["phase"] == "backend"


def test_backend_factory_failure_on_automatic_default(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source(backend="raise RuntimeError('firmware handshake failed')"))
    out = run_neurenix(
        """
        import json, warnings, neurenix_core as nx
        before = str(nx.default_device())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t = nx.zeros(2)
        print(json.dumps({"before": before, "after": str(t.device), "warned": [str(w.message) for w in caught]}))
        """,
        site=site,
    )
    assert out["before"] == "acme:0"
    assert out["after"] == "cpu:0"
    assert any("firmware handshake failed" in w and "cpu:0" in w for w in out["warned"])


def test_strict_mode_raises_at_import(plugin_site, run_neurenix):
    site = plugin_site("acme", BROKEN["probe"])
    proc = run_neurenix("import neurenix_core", site=site, env={"NEURENIX_STRICT": "1"}, expect_ok=False)
    assert proc.returncode != 0
    assert "StrictModeError" in proc.stderr
    assert "acme" in proc.stderr and "probe" in proc.stderr


def test_doctor_json_reports_failures_with_phase(plugin_site, run_neurenix):
    plugin_site("acme", BROKEN["import"])
    site = plugin_site("beta", healthy_source(name="beta", device_type="beta", probe="raise OSError('bad ioctl')"))
    out = run_neurenix(
        "import json\nfrom neurenix_core.plugins.report import doctor_data\nprint(json.dumps(doctor_data()))", site=site
    )
    assert out["schema"] == "neurenix.doctor/1"
    failures = {f["plugin"]: f for f in out["failures"]}
    assert failures["acme"]["phase"] == "import" and failures["acme"]["distribution"] == "neurenix-acme"
    assert failures["beta"]["phase"] == "probe"
    json.dumps(out)  # the whole document is JSON
