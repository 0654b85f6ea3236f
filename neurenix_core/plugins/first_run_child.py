"""Child side of first-run protection: ``python -m neurenix_core.plugins.first_run_child SPEC``.

Imports, registers and probes one third-party plugin exactly as discovery would, journaled, and
prints ``first_run.MARK{"abandoned": ...}`` when the plugin's code has returned. A plugin that
kills the process kills this child; its journal then names the plugin and the phase.
"""

from __future__ import annotations

import json
import sys

from neurenix_core.config import read_config
from neurenix_core.plugins.entrypoints import EntryPoint
from neurenix_core.plugins.first_run import MARK
from neurenix_core.plugins.registry import Registry


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    ep = EntryPoint(spec["name"], spec["value"], spec["group"], spec["dist"], spec["version"])
    abandoned = Registry(read_config()).trial(ep)
    print(MARK + json.dumps({"abandoned": abandoned}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
