"""Arguments that are not arguments: what neurenix says when a name, an option, a dtype or a
device is written the way people write them, or misspelt.

    NEURENIX_EMULATE=npu,cuda python examples/strict_arguments.py

Each case prints the error neurenix raises (a misspelling is refused before anything runs, with
the name that was probably meant) or, for the spellings it reads, what they became.
tests/test_strict_arguments.py runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core import nn


def show(what: str, attempt: Callable[[], Any]) -> None:
    try:
        result = attempt()
    except (TypeError, nx.NeurenixError) as exc:  # the point of the example: print what was refused, and why
        print(f"{what}\n    {type(exc).__name__}: {exc}")
    else:
        print(f"{what}\n    -> {result}")


def main() -> None:
    model = nn.Sequential(nn.Linear(4, 3))

    print("== keyword arguments")
    show("nx.compile(model, devcie='npu:0', precison='fp16')", lambda: nx.compile(model, devcie="npu:0", precison="fp16"))
    show("nx.nn.save(model, 'm.npz', quantisation_plan=None)", lambda: nx.nn.save(model, "m.npz", quantisation_plan=None))

    print("== compile options (the core's runtime and threads, and what the device's plugin declares)")
    show("nx.compile(model, device='cpu', runtime='onnx')", lambda: nx.compile(model, device="cpu", runtime="onnx"))
    show("nx.compile(model, device='cpu', options={'thread': 2})", lambda: nx.compile(model, device="cpu", options={"thread": 2}))
    show("nx.compile(model, device='cpu', stem='plain')", lambda: nx.compile(model, device="cpu", stem="plain"))
    compiled = nx.compile(model, device="cpu", options={"runtime": "numpy", "threads": 1})
    compiled(np.ones((2, 4), np.float32))
    show("nx.compile(model, device='cpu', options={'runtime': 'numpy', 'threads': 1}).summary", lambda: compiled.summary)

    print("== dtypes as they are written")
    for spelling in ("fp16", "bf16", float, np.int8):
        show(f"nx.zeros(2, dtype={spelling!r}).dtype", lambda s=spelling: nx.zeros(2, dtype=s).dtype)
    _torch_dtype()
    show("nx.zeros(2, dtype='flaot16')", lambda: nx.zeros(2, dtype="flaot16"))

    print("== device strings")
    for text in ("npu0", "gpu", "cuda0", "CPU:0", "tpu:9", "Edge-TPU"):
        show(f"nx.zeros(2, device={text!r}).device", lambda t=text: nx.zeros(2, device=t).device)


def _torch_dtype() -> None:
    try:
        import torch
    except ImportError:
        print("dtype torch.float16: torch is not installed")
        return
    print(f"dtype {torch.float16} -> {nx.zeros(2, dtype=torch.float16).dtype}")


if __name__ == "__main__":
    main()
