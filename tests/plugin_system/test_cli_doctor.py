"""`neurenix doctor` and `neurenix devices`, run as the installed console script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from distributions import healthy_source

SCRIPT = shutil.which("neurenix", path=str(Path(sys.executable).parent)) or "neurenix"


def _run(args: list[str], site: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    full.update(env)
    full["COLUMNS"] = "200"
    if site is not None:
        full["PYTHONPATH"] = str(site)
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=full, timeout=120, check=False)


def test_doctor_table_lists_every_backend_and_status(plugin_site):
    plugin_site("acme", healthy_source())
    site = plugin_site("broken", "raise ImportError('libbroken.so missing')\n")
    proc = _run(["doctor"], site=site)
    assert proc.returncode == 0, proc.stderr
    assert "acme" in proc.stdout and "selected" in proc.stdout
    assert "broken" in proc.stdout and "failed" in proc.stdout and "import" in proc.stdout
    assert "cpu" in proc.stdout and "neurenix-core" in proc.stdout
    assert _run(["doctor", "--strict"], site=site).returncode == 1


def test_doctor_json_is_the_documented_schema(plugin_site):
    site = plugin_site("acme", healthy_source())
    proc = _run(["doctor", "--json"], site=site, NEURENIX_BACKENDS="-acme")
    data = json.loads(proc.stdout)
    assert data["schema"] == "neurenix.doctor/1"
    assert set(data) >= {"api_version", "default_device", "selection", "devices", "backends", "failures", "notes", "environment"}
    acme = next(b for b in data["backends"] if b["name"] == "acme")
    assert acme["status"] == "denied"
    assert set(acme) >= {"distribution", "version", "status", "device_count", "reason", "install_hint", "failure", "emulated"}
    assert data["environment"]["NEURENIX_BACKENDS"] == "-acme"


def test_devices_json(plugin_site):
    site = plugin_site("acme", healthy_source())
    rows = json.loads(_run(["devices", "--json"], site=site).stdout)
    assert {"device": "acme:1", "backend": "acme", "emulated": False} in rows
    assert any(r["device"] == "cpu:0" for r in rows)


def test_unavailable_explicit_default_is_reported_not_crashing():
    proc = _run(["doctor", "--json"], NEURENIX_DEVICE="nosuch:0")
    data = json.loads(proc.stdout)
    assert data["default_device"] is None
    assert "nosuch" in data["default_device_error"]


def test_explain_prints_the_reasoning(run_neurenix):
    out = run_neurenix("import json, io, neurenix_core as nx\nbuf = io.StringIO()\ntext = nx.explain(file=buf)\nprint(json.dumps(text))")
    assert "default device: cpu:0" in out and "ranking:" in out
