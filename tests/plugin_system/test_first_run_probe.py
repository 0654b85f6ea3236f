"""First-run protection (issue #28 C1): on a fresh machine a third-party plugin version never seen
before is imported and probed in a child interpreter first, so a probe that kills the process kills
the child, not the user's very first ``import neurenix_core``.

Real distributions in a temporary site, fresh interpreters, an empty state folder per test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from distributions import healthy_source, write_distribution

REPORT = """
import json, sys, neurenix_core as nx
rows = {b.name: b.as_dict() for b in nx.backends()}
print(json.dumps({"rows": rows, "cpu": (nx.ones((2,), device="cpu:0") * 3).tolist(),
                  "first_run_loaded": "neurenix_core.plugins.first_run" in sys.modules}))
"""


def _python(code: str, site: Path, state: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    # onnxruntime (a third-party example, installed in the venv) is denied: each test sees acme alone.
    env.update(NEURENIX_STATE_DIR=str(state), PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", NEURENIX_BACKENDS="-onnxruntime")
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120, check=False, cwd=site.parent
    )


def _report(site: Path, state: Path, **extra: str) -> dict[str, Any]:
    proc = _python(REPORT, site, state, **extra)
    assert proc.returncode == 0, f"import did not survive ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"  # does not exist yet: a fresh machine


def test_the_very_first_import_survives_a_probe_that_calls_os_exit(plugin_site, state):
    site = plugin_site("acme", healthy_source(probe="import os; os._exit(7)"))
    out = _report(site, state)
    assert out["cpu"] == [3.0, 3.0]
    failure = out["rows"]["acme"]["failure"]
    assert failure["phase"] == "probe"
    assert "killed its first-run child process (exit status 7) during its probe" in failure["cause"]
    assert "neurenix doctor --retry acme" in failure["cause"]
    # Quarantined with the exit status: the next import neither imports it nor starts a child.
    row = (state / "quarantine.tsv").read_text().rstrip("\n").split("\t")
    assert row[:4] == ["acme", "neurenix-acme", "1.2.3", "probe"] and row[6] == "exit status 7"
    again = _report(site, state)
    assert again["rows"]["acme"]["failure"] == failure and not again["first_run_loaded"]
    assert not (state / "seen.tsv").exists()


def test_a_plugin_seen_to_return_probes_in_process_afterwards(plugin_site, tmp_path, state):
    marks = tmp_path / "probes"
    marks.mkdir()
    # Each probe leaves a file named after the process it ran in.
    probe = f"import os; open(os.path.join({str(marks)!r}, str(os.getpid())), 'w').close(); return ProbeResult.found(1)"
    site = plugin_site("acme", healthy_source(probe=probe))
    first = _report(site, state)
    assert first["rows"]["acme"]["status"] == "selected" and first["first_run_loaded"]
    assert len(list(marks.iterdir())) == 2  # once in the child, once in the importing process
    assert (state / "seen.tsv").read_text() == "acme\tneurenix-acme\t1.2.3\n"
    second = _report(site, state)
    assert second["rows"]["acme"]["status"] == "selected" and not second["first_run_loaded"]
    assert len(list(marks.iterdir())) == 3  # in-process only: no child for a version already seen


def test_the_journal_still_catches_a_seen_plugin_that_kills_later(plugin_site, tmp_path, state):
    trigger = tmp_path / "trigger"
    probe = f"import os\n    if os.path.exists({str(trigger)!r}): os._exit(9)\n    return ProbeResult.found(1)"
    site = plugin_site("acme", healthy_source(probe=probe))
    assert _report(site, state)["rows"]["acme"]["status"] == "selected"
    trigger.touch()  # the seen version now crashes in-process: the second line of defence
    assert _python("import neurenix_core", site, state).returncode == 9
    failure = _report(site, state)["rows"]["acme"]["failure"]
    assert failure["phase"] == "probe" and "killed the process during its probe at" in failure["cause"]


def test_a_new_version_is_tried_in_a_child_again(plugin_site, state):
    site = plugin_site("acme", healthy_source())
    assert _report(site, state)["rows"]["acme"]["status"] == "selected"
    for info in site.glob("neurenix_acme-*.dist-info"):
        for f in info.iterdir():
            f.unlink()
        info.rmdir()
    write_distribution(site, name="acme", module="nx_plugin_acme", source=healthy_source(probe="import os; os._exit(5)"), version="2.0.0")
    failure = _report(site, state)["rows"]["acme"]["failure"]
    assert "killed its first-run child process (exit status 5)" in failure["cause"]
    assert (state / "seen.tsv").read_text() == "acme\tneurenix-acme\t1.2.3\n"  # 2.0.0 was never seen to return


def test_a_probe_that_hangs_in_the_child_is_abandoned_not_quarantined(plugin_site, state):
    site = plugin_site("acme", healthy_source(probe="import time; time.sleep(60)"))
    failure = _report(site, state, NEURENIX_PROBE_TIMEOUT="0.5")["rows"]["acme"]["failure"]
    assert failure["phase"] == "probe"
    assert "did not return within 0.5s (NEURENIX_PROBE_TIMEOUT) in its first-run child process" in failure["cause"]
    assert not (state / "quarantine.tsv").exists() or "acme" not in (state / "quarantine.tsv").read_text()


def test_a_python_exception_is_an_ordinary_failure_and_the_version_is_seen(plugin_site, state):
    site = plugin_site("acme", healthy_source(probe="raise OSError('no /dev/acme0')"))
    failure = _report(site, state)["rows"]["acme"]["failure"]
    assert failure["phase"] == "probe" and "OSError: no /dev/acme0" in failure["cause"]
    assert (state / "seen.tsv").exists()  # it returned (by raising): in-process from now on


def test_first_party_plugins_never_start_a_child(tmp_path, state):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _report(empty, state, NEURENIX_EMULATE="tpu")
    assert out["rows"]["tpu"]["status"] == "emulated"
    assert not out["first_run_loaded"] and not (state / "seen.tsv").exists()
