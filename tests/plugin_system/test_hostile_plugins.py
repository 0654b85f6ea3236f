"""Plugins that misbehave on purpose (issue 18), installed as real distributions, in fresh interpreters.

A probe that kills the process (os._exit, a ctypes segfault) does so at most once, then is
quarantined and explained; reserved names cannot be squatted; a hanging backend factory ends in a
typed error; plugin text is bounded and printable; environment changes are reported. In every
case ``import neurenix_core`` survives and ``cpu:0`` keeps working.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import tomllib
from distributions import healthy_source, write_distribution

from neurenix_core.plugins.names import RESERVED, alias_of

REPO = Path(__file__).resolve().parents[2]
SCRIPT = shutil.which("neurenix", path=str(Path(sys.executable).parent)) or "neurenix"

CHECK = """
import json, neurenix_core as nx
cpu = nx.ones((2,), device="cpu:0") * 3
rows = [b.as_dict() for b in nx.backends()]
print(json.dumps({"rows": rows, "cpu": cpu.tolist(), "default": str(nx.default_device())}))
"""


def _env(state: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update({"NEURENIX_STATE_DIR": str(state), "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}, **extra)
    return env


def _python(code: str, site: Path, state: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = _env(state, **extra)
    env["PYTHONPATH"] = str(site)
    # Run beside the site, not in the repository: its neurenix_core.egg-info would come first on sys.path.
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120, check=False, cwd=site.parent
    )


def _doctor(args: list[str], site: Path, state: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = _env(state, **extra)
    env["PYTHONPATH"] = str(site)
    return subprocess.run([SCRIPT, "doctor", *args], capture_output=True, text=True, env=env, timeout=120, check=False, cwd=site.parent)


def _check(site: Path, state: Path, **extra: str) -> dict[str, Any]:
    proc = _python(CHECK, site, state, **extra)
    assert proc.returncode == 0, f"import did not survive ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _row(out: dict[str, Any], name: str, distribution: str | None = None) -> dict[str, Any]:
    rows = [r for r in out["rows"] if r["name"] == name and (distribution is None or r["distribution"] == distribution)]
    assert len(rows) == 1, rows
    return rows[0]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


# ---------------------------------------------------------------------- probes that kill the process
KILLERS = {
    "os._exit": (healthy_source(probe="import os; os._exit(7)"), 7, "probe"),
    "ctypes segfault": (healthy_source(probe="import ctypes; ctypes.string_at(0)"), -signal.SIGSEGV, "probe"),
    "exit at import": ("import os\nos._exit(3)\n", 3, "import"),
}


@pytest.mark.parametrize("kind", sorted(KILLERS))
def test_a_plugin_that_kills_the_process_kills_only_its_first_run_child_then_is_quarantined(kind, plugin_site, state):
    source, status, phase = KILLERS[kind]
    site = plugin_site("acme", source)
    out = _check(site, state)  # the very first import on a fresh machine survives (plugins/first_run.py)
    assert out["cpu"] == [3.0, 3.0] and out["default"] == "cpu:0"
    acme = _row(out, "acme")
    assert acme["status"] == "failed" and acme["failure"]["phase"] == phase
    how = signal.Signals(-status).name if status < 0 else f"exit status {status}"
    assert f"killed its first-run child process ({how}) during its {phase} at 20" in acme["failure"]["cause"]
    assert "neurenix doctor --retry acme" in acme["failure"]["cause"]
    assert _check(site, state)["rows"] == out["rows"]  # stays quarantined: no second crash
    table = _doctor([], site, state)
    assert table.returncode == 0 and f"failed (failed at {phase})" in table.stdout and f"failed at {phase}: killed its" in table.stdout


def test_retry_after_fixing_lifts_the_quarantine(plugin_site, state):
    site = plugin_site("acme", healthy_source(probe="import os; os._exit(7)"))
    assert _python("import neurenix_core", site, state).returncode == 0  # its first-run child died
    still = _doctor(["--retry", "acme", "--json"], site, state)  # not fixed yet: the child dies, doctor lives
    assert still.returncode == 0, still.stderr
    assert "still kills the process (exit status 7)" in still.stderr
    failure = next(f for f in json.loads(still.stdout)["failures"] if f["plugin"] == "acme")
    assert failure["phase"] == "probe" and "killed its first-run child process (exit status 7)" in failure["cause"]
    plugin_site("acme", healthy_source())  # the vendor ships a fix
    fixed = _doctor(["--retry", "acme", "--json"], site, state)
    assert fixed.returncode == 0, fixed.stderr
    acme = next(b for b in json.loads(fixed.stdout)["backends"] if b["name"] == "acme")
    assert acme["status"] == "selected" and acme["failure"] is None
    again = _doctor(["--retry", "acme"], site, state)
    assert again.returncode == 2 and "not quarantined" in again.stderr


def test_a_new_version_of_the_distribution_gets_a_fresh_chance(plugin_site, state):
    site = plugin_site("acme", healthy_source(probe="import os; os._exit(7)"))
    assert _row(_check(site, state), "acme")["status"] == "failed"
    shutil.rmtree(next(site.glob("neurenix_acme-*.dist-info")))
    write_distribution(site, name="acme", module="nx_plugin_acme", source=healthy_source(), version="1.2.4")
    assert _row(_check(site, state), "acme")["status"] == "selected"
    assert (state / "quarantine.tsv").read_text() == ""  # the old version's entry was dropped


def test_a_live_process_mid_probe_is_not_mistaken_for_a_crash(plugin_site, state, tmp_path):
    gate = tmp_path / "gate"
    probe = (
        f"import os, time, pathlib; g = pathlib.Path({str(gate)!r})\n"
        "    if os.environ.get('ACME_BLOCK'):\n"
        "        (g / 'inside').touch()\n"
        "        while not (g / 'release').exists(): time.sleep(0.02)\n"
        "    return ProbeResult.found(1)"
    )
    gate.mkdir()
    site = plugin_site("acme", healthy_source(probe=probe))
    env = _env(state, ACME_BLOCK="1", NEURENIX_PROBE_TIMEOUT="60", PYTHONPATH=str(site))
    holder = subprocess.Popen([sys.executable, "-c", "import neurenix_core"], env=env)
    try:
        for _ in range(3000):
            if (gate / "inside").exists() or holder.poll() is not None:
                break
            time.sleep(0.02)
        assert (gate / "inside").exists(), "the blocking probe never started"
        assert list(state.glob("journal-*.log")), "a third-party probe runs with a journal"
        assert _row(_check(site, state), "acme")["status"] == "selected"  # its journal is locked: alive
    finally:
        (gate / "release").touch()
        assert holder.wait(60) == 0
    assert not list(state.glob("journal-*.log"))
    assert _row(_check(site, state), "acme")["status"] == "selected"


def test_no_journal_is_written_when_every_plugin_is_our_own(plugin_site, state, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    _check(empty, state, NEURENIX_BACKENDS="-onnxruntime")  # first-party plugins only (and ort denied)
    # Only the entry point cache (plugins/ep_cache.py); first-party plugins are not journaled.
    assert sorted(p.name for p in state.iterdir()) == ["entry-points.cache"]
    site = plugin_site("acme", healthy_source())
    _check(site, state)
    # The journal was written and removed; seen.tsv remembers acme's first run (plugins/first_run.py).
    assert sorted(p.name for p in state.iterdir()) == ["entry-points.cache", "seen.tsv"]


# ---------------------------------------------------------------------- reserved names
def _squatter(site: Path, *, name: str, dist: str, device_type: str, module: str = "nx_squatter") -> None:
    source = healthy_source(name=name, device_type=device_type).replace(
        "from __future__ import annotations\n", f"from __future__ import annotations\nopen({str(site / 'imported')!r}, 'w').close()\n"
    )
    write_distribution(site, name=name, module=module, source=source, dist=dist)


@pytest.mark.parametrize("dist", ["evil-cpu", "neurenix-core"])
def test_nobody_else_can_take_the_cpu_name(dist, plugin_site, state):
    site = plugin_site.site
    _squatter(site, name="cpu", dist=dist, device_type="cpu")
    out = _check(site, state)
    assert out["cpu"] == [3.0, 3.0] and out["default"] == "cpu:0"
    rows = [r for r in out["rows"] if r["name"] == "cpu"]
    real = [r for r in rows if r["failure"] is None]
    intruder = [r for r in rows if r["failure"] is not None]
    assert len(real) == 1 and real[0]["status"] == "selected" and real[0]["distribution"] == "neurenix-core"
    assert len(intruder) == 1 and intruder[0]["distribution"] == dist
    assert intruder[0]["failure"]["phase"] == "register"
    cause = intruder[0]["failure"]["cause"]
    assert "reserved for neurenix-core" in cause and dist in cause
    assert not (site / "imported").exists(), "a squatter's module is never imported"


def test_nobody_else_can_take_a_first_party_plugin_name(plugin_site, state):
    site = plugin_site.site
    _squatter(site, name="tpu", dist="tpu-turbo", device_type="tpu")
    out = _check(site, state, NEURENIX_EMULATE="tpu")
    real = _row(out, "tpu", "neurenix-tpu")
    assert real["status"] == "emulated" and real["failure"] is None
    intruder = _row(out, "tpu", "tpu-turbo")
    assert intruder["status"] == "failed" and intruder["failure"]["phase"] == "register"
    assert "reserved for neurenix-tpu" in intruder["failure"]["cause"] and "tpu-turbo" in intruder["failure"]["cause"]
    assert not (site / "imported").exists()
    table = _doctor([], site, state, NEURENIX_EMULATE="tpu")
    assert "tpu-turbo" in table.stdout and "failed at register" in table.stdout


def test_reserved_names_match_this_repository_s_entry_points():
    declared = {}
    for pyproject in [REPO / "pyproject.toml", *sorted(REPO.glob("plugins/*/pyproject.toml"))]:
        data = tomllib.loads(pyproject.read_text())
        for name, value in data["project"].get("entry-points", {}).get("neurenix.backends", {}).items():
            declared[name] = (data["project"]["name"], value)
    # Every entry point reserved; the other reserved names are the aliases users may type for them
    # (names.alias_of), reserved for the same distribution and module.
    assert {name: RESERVED[name] for name in declared} == declared
    aliases = {alias_of(name, dist): declared[name] for name, (dist, _) in declared.items() if alias_of(name, dist)}
    assert aliases == {"cuda-tc": declared["cuda"], "npu-openvino": declared["npu"]}
    assert RESERVED == {**declared, **aliases}


# ---------------------------------------------------------------------- a hanging backend factory
def test_a_hanging_backend_factory_ends_in_a_typed_error(plugin_site, state):
    site = plugin_site.site
    (site / "nx_slow_runtime.py").write_text("import time\ntime.sleep(600)\n")
    plugin_site("acme", healthy_source(probe="return ProbeResult.found(1)", backend="import nx_slow_runtime"))
    proc = _python(
        """
        import json, threading, neurenix_core as nx
        errors = []
        for _ in range(2):
            try:
                nx.zeros(2, device="acme:0")
            except nx.BackendUnavailableError as exc:
                errors.append(str(exc))
        cpu = (nx.ones((2,), device="cpu:0") + 1).tolist()
        workers = [t.name for t in threading.enumerate() if t.name.startswith("neurenix-backend-")]
        acme = next(b.as_dict() for b in nx.backends() if b.name == "acme")
        print(json.dumps({"errors": errors, "cpu": cpu, "workers": workers, "acme": acme}))
        """,
        site, state, NEURENIX_BACKEND_TIMEOUT="4",
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["errors"]) == 2 and out["errors"][0] == out["errors"][1]
    assert "plugin acme" in out["errors"][0] and "NEURENIX_BACKEND_TIMEOUT" in out["errors"][0]
    assert "importing nx_slow_runtime" in out["errors"][0]
    assert out["workers"] == ["neurenix-backend-acme"]  # the second call did not start another factory
    assert out["cpu"] == [2.0, 2.0]
    assert out["acme"]["failure"]["phase"] == "backend"
    assert "neurenix: starting backend acme (importing nx_slow_runtime)..." in proc.stderr


# ---------------------------------------------------------------------- plugin text
HUGE = "'\\x1b[2J\\x1b[31m' + 'x' * 10_000_000"  # built by the plugin at run time, 10 MB
HUGE_SIZE = len("\x1b[2J\x1b[31m") + 10_000_000


def test_huge_and_escaped_plugin_text_is_bounded_and_printable(plugin_site, state):
    plugin_site("acme", healthy_source(probe=f"return ProbeResult.missing({HUGE})").replace(
        'install_hint="pip install neurenix-acme"',
        'install_hint="[bold red]pip[/] \\x1b]8;;http://evil\\x07install\\x1b]8;;\\x07 \\u202eemosewa", description="d" * 5_000_000',
    ))
    site = plugin_site("beta", healthy_source(name="beta", device_type="beta", probe=f"raise OSError({HUGE} + '\\nline two')"))
    proc = _doctor(["--json"], site, state)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout) < 50_000
    data = json.loads(proc.stdout)
    acme = next(b for b in data["backends"] if b["name"] == "acme")
    assert acme["status"] == "unavailable"
    assert acme["reason"].startswith("xxxx") and acme["reason"].endswith(f"[truncated: {HUGE_SIZE} characters]")
    assert acme["install_hint"] == "[bold red]pip[/] install emosewa"
    beta = next(f for f in data["failures"] if f["plugin"] == "beta")
    assert beta["phase"] == "probe" and "OSError: xxx" in beta["cause"] and len(beta["cause"]) < 1100
    for text in (proc.stdout, json.dumps(data, ensure_ascii=False)):
        assert not any(ch in text for ch in "\x1b\x07\u202e")
    table = _doctor([], site, state)
    assert table.returncode == 0 and len(table.stdout) < 50_000
    assert "\x1b" not in table.stdout and "\u202e" not in table.stdout
    assert "[bold red]pip[/]" in table.stdout  # printed as text, not read as rich markup


# ---------------------------------------------------------------------- environment changes
def test_environment_changes_by_a_plugin_are_reported(plugin_site, state):
    source = healthy_source(
        probe="import os; os.environ['NEURENIX_DEVICE'] = 'acme:0'; return ProbeResult.missing('no /dev/acme0')"
    ).replace(
        "from __future__ import annotations\n",
        "from __future__ import annotations\nimport os, sys\nos.environ['ACME_TOKEN'] = 's3cr3t'\nsys.path.insert(0, '/opt/acme/lib')\n",
    )
    site = plugin_site("acme", source)
    out = _check(site, state)
    assert out["default"] == "cpu:0"  # NEURENIX_DEVICE set by the probe came after the configuration was read
    acme = _row(out, "acme")
    assert acme["status"] == "unavailable"
    warnings = acme["warnings"]
    assert "changed os.environ: set ACME_TOKEN during import" in warnings
    assert "changed sys.path: added /opt/acme/lib during import" in warnings
    assert any(w.startswith("changed os.environ: set NEURENIX_DEVICE") and w.endswith("during probe") and "unaffected" in w for w in warnings)
    assert "s3cr3t" not in json.dumps(out)
    assert all(not r["warnings"] for r in out["rows"] if r["name"] != "acme")
    table = _doctor([], site, state)
    assert "1 warning" not in table.stdout and "3 warning(s)" in table.stdout
    assert "warning: plugin acme (neurenix-acme) changed os.environ: set ACME_TOKEN during import" in table.stdout


def test_the_example_runs_as_written(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "hostile_plugin.py")], capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "1st import: survived; acme is failed at phase probe: killed its first-run child process (exit status 7)"
    assert "2nd import: acme is still failed at phase probe (quarantined, not tried again)" == lines[1]
    assert "cpu:0 works: [2.0, 2.0, 2.0]" in lines[2]
    assert lines[3] == "after `neurenix doctor --retry acme`: acme is unavailable (no /dev/acme0: install the ACME driver)"


def test_sys_exit_in_a_manifest_or_a_factory_does_not_end_the_program(plugin_site, state):
    plugin_site("acme", healthy_source().replace("def neurenix_manifest():\n", "def neurenix_manifest():\n    raise SystemExit(3)\n"))
    site = plugin_site("beta", healthy_source(name="beta", device_type="beta", backend="raise SystemExit(4)"))
    proc = _python(
        """
        import json, neurenix_core as nx
        try:
            nx.zeros(2, device="beta:0")
            error = None
        except nx.BackendUnavailableError as exc:
            error = str(exc)
        rows = {b.name: b.as_dict() for b in nx.backends()}
        print(json.dumps({"error": error, "acme": rows["acme"]["failure"], "beta": rows["beta"]["failure"]}))
        """,
        site, state,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["acme"]["phase"] == "manifest" and "SystemExit" in out["acme"]["cause"]
    assert "plugin beta" in out["error"] and "SystemExit: 4" in out["error"]
    assert out["beta"]["phase"] == "backend"
