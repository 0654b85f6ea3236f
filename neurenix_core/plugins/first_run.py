"""First-run protection: a third-party plugin version never seen before is tried in a child interpreter.

The crash journal (journal.py) remembers a plugin that killed the process only after the process
is dead, so on a fresh machine the very first ``import neurenix_core`` would die with a probe that
calls ``os._exit``. Before a third-party plugin version that the state folder has never seen runs
any code in this process, a child interpreter imports, registers and probes it
(first_run_child.py), journaled as usual and under the same probe deadline. A child that dies
leaves its journal behind: the plugin is quarantined with the child's exit status and skipped
here, and this process is unharmed. A child that returns marks the version seen; from then on
(this import included) the plugin runs in this process, still journaled.

Cost: one interpreter start per new third-party version, once; nothing for this repository's own
plugins (trusted) and nothing for versions already seen (registry.py loads this module only when
there is an unseen one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Final

from neurenix_core.plugins.entrypoints import EntryPoint
from neurenix_core.plugins.journal import Entry, mark_seen, quarantine_cause, read_quarantine, set_status
from neurenix_core.plugins.sanitize import CAUSE_LIMIT, clean

__all__ = ["MARK", "STARTUP_ALLOWANCE", "first_run"]

#: The child's last stdout line: ``MARK{"abandoned": bool}`` once the plugin's code has returned.
MARK: Final = "NEURENIX-FIRST-RUN:"
#: Seconds for the child's interpreter start and the plugin's import, on top of the probe deadline
#: the child enforces itself. In-process neither has a deadline; only a child stuck there is killed.
STARTUP_ALLOWANCE: Final = 30.0


def first_run(ep: EntryPoint, key: tuple[str, str, str], state_dir: str, probe_timeout: float) -> tuple[str, str] | None:
    """Try plugin ``ep`` in a child; None when it returned (load it here), else (phase, cause) to record.

    ``key`` is the plugin's (name, distribution, version) as the registry cleaned them: what the
    seen list and the child's journal hold.
    """
    try:
        proc = subprocess.run(
            _command(ep), capture_output=True, encoding="utf-8", errors="replace", env=_child_env(),
            timeout=probe_timeout + STARTUP_ALLOWANCE, check=False,
        )
    except subprocess.TimeoutExpired:
        # run() killed the child: its journal, left open, names the phase it was stuck in.
        return _quarantined(key, state_dir, f"did not finish within {probe_timeout + STARTUP_ALLOWANCE:g}s and was killed")
    except OSError as exc:  # no interpreter to start (a frozen app): the journal still covers the next import
        return ("probe", f"could not start its first-run child process ({exc.strerror}); not loaded in this import")
    verdict = _returned(proc.stdout) if proc.returncode == 0 else None
    if verdict is None:
        return _quarantined(key, state_dir, _how(proc.returncode), proc.stderr)
    if verdict["abandoned"]:
        # Not seen to return: the next import tries the child again, as an in-process probe would.
        return ("probe", f"probe did not return within {probe_timeout:g}s (NEURENIX_PROBE_TIMEOUT) in its first-run child process and was abandoned")
    mark_seen(state_dir, *key)
    return None


def _command(ep: EntryPoint) -> list[str]:
    spec = {"name": ep.name, "value": ep.value, "group": ep.group, "dist": ep.dist_name, "version": ep.dist_version}
    return [sys.executable, "-m", "neurenix_core.plugins.first_run_child", json.dumps(spec)]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The child must see the same plugins as this process, temporary sys.path entries included.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # Its own `import neurenix_core` must not discover the other plugins (cost, and recursion).
    env["NEURENIX_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("NEURENIX_STRICT", None)
    return env


def _returned(stdout: str) -> dict[str, bool] | None:
    """The child's verdict, or None when it printed none (it died, even with status 0: os._exit(0))."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK):])
            except ValueError:
                return None  # the plugin's own output mangled the line: not a verdict
            return {"abandoned": bool(data.get("abandoned"))} if isinstance(data, dict) else None
    return None


def _how(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def _quarantined(key: tuple[str, str, str], state_dir: str, how: str, stderr: str = "") -> tuple[str, str]:
    """Quarantine the plugin the dead child's journal names, with how the child ended."""
    name, distribution, version = key
    entry: Entry | None = read_quarantine(state_dir).get(name)
    if entry is not None and entry.matches(distribution, version):
        entry = set_status(state_dir, name, how) or entry
        return (entry.phase, quarantine_cause(entry))
    # No journal line names it: the child died outside the plugin's code (the core failed to start
    # there). Skipped in this import only; the next import tries again.
    tail = clean((stderr.strip().splitlines() or ["no output"])[-1], CAUSE_LIMIT)
    return ("probe", f"its first-run child process ended with {how} outside the plugin's code ({tail}); not loaded in this import")
