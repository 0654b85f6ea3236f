"""Child-process entry point for native probes: ``python -m neurenix_core.plugins.native_probe MODULE CTX``.

Prints one line ``NEURENIX-NATIVE-PROBE:{json}``; any crash is seen by the parent as a return code.
"""

from __future__ import annotations

import importlib
import json
import sys

from neurenix_core.plugins.manifest import ProbeContext, ProbeResult
from neurenix_core.plugins.probing import _MARK


def main(argv: list[str]) -> int:
    module = importlib.import_module(argv[1])
    ctx = json.loads(argv[2])
    result = module.neurenix_native_probe(context=ProbeContext(emulate=bool(ctx["emulate"]), timeout=0.0))
    if not isinstance(result, ProbeResult):
        print(f"native probe returned {type(result).__name__}, not ProbeResult", file=sys.stderr)
        return 3
    print(_MARK + json.dumps(result.as_dict()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
