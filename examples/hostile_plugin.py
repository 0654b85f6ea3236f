"""A plugin whose probe kills the process: it kills only a child, then neurenix quarantines and explains it.

Installs a tiny third-party plugin (a real ``*.dist-info`` folder in a temporary directory put on
``PYTHONPATH``) whose probe calls ``os._exit(7)``, then runs ``import neurenix_core`` in fresh
interpreters, as a user would, with a fresh ``NEURENIX_STATE_DIR``: first-run protection tries the
unseen plugin in a child interpreter, which dies instead of the user's import:

    python examples/hostile_plugin.py

See docs/plugins.md ("A plugin that misbehaves") for every guarantee and its limits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PLUGIN = '''
from neurenix_core import Manifest, PriorityBand, ProbeResult, hookimpl

@hookimpl
def neurenix_manifest():
    return Manifest(name="acme", distribution="neurenix-acme", version="0.1.0", api=">=1.0,<2",
                    device_types=("acme",), band=PriorityBand.ACCELERATOR)

@hookimpl
def neurenix_probe(context):
    {probe}

@hookimpl
def neurenix_backend(manifest, probe):
    raise RuntimeError("not needed here")
'''

REPORT = """
import json, neurenix_core as nx
acme = next(b for b in nx.backends() if b.name == "acme")
print(json.dumps({"acme": acme.status.value, "failure": acme.as_dict()["failure"],
                  "cpu": (nx.ones((3,), device="cpu:0") * 2).tolist()}))
"""


def install(site: Path, probe: str) -> None:
    (site / "nx_acme_plugin.py").write_text(PLUGIN.format(probe=probe))
    info = site / "neurenix_acme-0.1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: neurenix-acme\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[neurenix.backends]\nacme = nx_acme_plugin\n")


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
        env.update(PYTHONPATH=str(site), NEURENIX_STATE_DIR=str(Path(tmp) / "state"), PYTHONDONTWRITEBYTECODE="1")
        install(site, "import os; os._exit(7)")
        # A fresh state folder: acme's version was never seen, so its probe runs in a child first.
        first = json.loads(python(REPORT, env).stdout)
        cause = first["failure"]["cause"].split(" during ")[0]
        print(f"1st import: survived; acme is {first['acme']} at phase {first['failure']['phase']}: {cause}")
        second = json.loads(python(REPORT, env).stdout)
        print(f"2nd import: acme is still {second['acme']} at phase {second['failure']['phase']} (quarantined, not tried again)")
        print(f"            cpu:0 works: {second['cpu']}")
        install(site, "return ProbeResult.missing('no /dev/acme0: install the ACME driver')")  # the vendor's fix
        retry = subprocess.run(
            [sys.executable, "-m", "neurenix_core.cli.main", "doctor", "--retry", "acme", "--json"],
            capture_output=True, text=True, env=env, check=True,
        )
        acme = next(b for b in json.loads(retry.stdout)["backends"] if b["name"] == "acme")
        print(f"after `neurenix doctor --retry acme`: acme is {acme['status']} ({acme['reason']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
