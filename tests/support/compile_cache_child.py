"""A fresh process that compiles a small seeded CNN for one device and prints, as one JSON line,
the compiled summary, the output's SHA-256 and its values (the compile-cache tests run it twice
against one state folder and compare).

    python compile_cache_child.py DEVICE [PRECISION]
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np


def main(argv: list[str]) -> None:
    import neurenix_core as nx
    from neurenix_core import nn

    device = argv[0]
    precision = argv[1] if len(argv) > 1 and argv[1] != "-" else None
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    compiled = nx.compile(model, device=device, precision=precision, outputs="host")
    y = np.ascontiguousarray(compiled(x))
    print(json.dumps({"summary": compiled.summary, "sha256": hashlib.sha256(y.tobytes()).hexdigest(), "values": y.ravel().tolist()}))


if __name__ == "__main__":
    main(sys.argv[1:])
