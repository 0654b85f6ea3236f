"""NEURENIX_BACKENDS, NEURENIX_DISABLE_PLUGIN_AUTOLOAD, NEURENIX_DEVICE and selection in code."""

from __future__ import annotations

from distributions import healthy_source

STATE = """
import json, sys, neurenix_core as nx
rows = {b.name: b.as_dict() for b in nx.backends()}
print(json.dumps({"rows": rows, "default": str(nx.default_device()),
                  "imported": "nx_plugin_acme" in sys.modules}))
"""


def test_denied_plugin_module_is_never_imported(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(STATE, site=site, env={"NEURENIX_BACKENDS": "-acme"})
    assert out["imported"] is False
    assert out["rows"]["acme"]["status"] == "denied"
    assert "-acme" in out["rows"]["acme"]["reason"]
    assert out["default"] == "cpu:0"


def test_allow_list_excludes_unlisted_plugins(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(STATE, site=site, env={"NEURENIX_BACKENDS": "cpu"})
    assert out["imported"] is False
    assert out["rows"]["acme"]["status"] == "denied"


def test_allow_list_order_is_the_users_policy(plugin_site, run_neurenix):
    plugin_site("acme", healthy_source())
    site = plugin_site("beta", healthy_source(name="beta", device_type="beta", band="NPU"))
    out = run_neurenix(STATE, site=site, env={"NEURENIX_BACKENDS": "beta,acme,cpu"})
    assert out["default"] == "beta:0"


def test_disable_autoload_keeps_only_the_cpu(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(STATE, site=site, env={"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert out["imported"] is False
    assert out["default"] == "cpu:0"
    assert "autoload is disabled" in out["rows"]["acme"]["reason"]


def test_neurenix_device_selects_and_unavailable_request_raises(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(STATE, site=site, env={"NEURENIX_DEVICE": "acme:1"})
    assert out["default"] == "acme:1"
    proc = run_neurenix(
        "import neurenix_core as nx\nnx.zeros(2)", site=site, env={"NEURENIX_DEVICE": "acme:7"}, expect_ok=False
    )
    assert proc.returncode != 0
    assert "DeviceNotFoundError" in proc.stderr and "acme:7" in proc.stderr and "2 acme device(s)" in proc.stderr


def test_selection_in_code(plugin_site, run_neurenix):
    site = plugin_site("acme", healthy_source())
    out = run_neurenix(
        """
        import json, neurenix_core as nx
        nx.set_default_device("cpu")
        a = nx.zeros(1)
        with nx.device("acme:1"):
            b = nx.zeros(1)
            inner = str(nx.default_device())
        c = nx.zeros(1)
        nx.set_default_device(None)
        d = nx.zeros(1)
        print(json.dumps([str(a.device), str(b.device), inner, str(c.device), str(d.device),
                          [str(x) for x in nx.devices("acme")]]))
        """,
        site=site,
    )
    assert out == ["cpu:0", "acme:1", "acme:1", "cpu:0", "acme:0", ["acme:0", "acme:1"]]


def test_unknown_device_type_names_the_package(run_neurenix):
    out = run_neurenix(
        """
        import json, neurenix_core as nx
        errs = {}
        for dev in ("tpu:0", "xpu:0"):
            try:
                nx.zeros(1, device=dev)
            except nx.NeurenixError as exc:
                errs[dev] = [type(exc).__name__, str(exc)]
        print(json.dumps(errs))
        """,
        env={"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    kind, msg = out["xpu:0"]
    assert kind == "DeviceNotFoundError" and "xpu" in msg
    kind, msg = out["tpu:0"]
    assert kind in {"DeviceNotFoundError", "BackendUnavailableError"} and "neurenix-tpu" in msg or "tpu" in msg


def test_bad_environment_values_are_clear(run_neurenix):
    proc = run_neurenix("import neurenix_core", env={"NEURENIX_FALLBACK": "sometimes"}, expect_ok=False)
    assert "ConfigurationError" in proc.stderr and "error, warn, allow" in proc.stderr
    proc = run_neurenix("import neurenix_core", env={"NEURENIX_BACKENDS": "-cpu"}, expect_ok=False)
    assert "cannot deny 'cpu'" in proc.stderr
