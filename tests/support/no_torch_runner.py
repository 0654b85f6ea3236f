"""Run saved model files in a process where the source frameworks cannot be imported.

``python no_torch_runner.py DIR``: for every ``DIR/<name>.nxm`` with inputs ``DIR/<name>.inputs.npz``
(positional, ``arr_0``, ``arr_1`` ...), loads the model with ``nx.nn.load`` and runs it on each
device of ``DIR/<name>.devices.txt`` (``device precision`` per line; ``default`` compiles with the
device's defaults and the file's own quantization plan), writing ``DIR/<name>.<device>.out.npz``.
Importing torch, transformers, onnx or onnxruntime raises ImportError here (a meta-path finder,
installed before anything else), and the script checks at the end that none of them was loaded.
Used by tests/test_model_file.py.
"""

from __future__ import annotations

import importlib.abc
import sys
from pathlib import Path
from typing import Any

BLOCKED = ("torch", "transformers", "onnx", "onnxruntime", "torchvision", "torchao", "safetensors")


class _Blocker(importlib.abc.MetaPathFinder):
    """Refuses the source frameworks, as on a board where they are not installed."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.split(".")[0] in BLOCKED:
            raise ImportError(f"{fullname} is blocked in this process (no_torch_runner)")


sys.meta_path.insert(0, _Blocker())


def main(folder: Path) -> None:
    import numpy as np

    import neurenix_core as nx

    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("torch imported although it is blocked")
    for path in sorted(folder.glob("*.nxm")):
        name = path.stem
        model = nx.nn.load(path)
        with np.load(folder / f"{name}.inputs.npz") as data:
            inputs = [data[f"arr_{i}"] for i in range(len(data.files))]
        for line in (folder / f"{name}.devices.txt").read_text().split("\n"):
            if not line.strip():
                continue
            device, precision = line.split()
            compiled = nx.compile(model, device=device, precision=None if precision == "default" else precision, outputs="host",
                                  progress=False)
            outs = compiled(*inputs)
            outs = outs if isinstance(outs, tuple) else (outs,)
            np.savez(folder / f"{name}.{device.replace(':', '')}.out.npz", *[np.asarray(o) for o in outs])
            print(f"{name} {device}: {compiled.precision}")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    if loaded:
        raise SystemExit(f"blocked modules were loaded: {loaded}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
