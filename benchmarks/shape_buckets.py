"""Shape buckets against one compilation per shape: a tiny BERT (tests/support/hf_zoo.py) called
at 20 random (batch, length) pairs, compiled per shape and with 2 x 3 buckets, in the same run.

    NEURENIX_EMULATE=npu,tpu JAX_PLATFORMS=cpu .venv/bin/python benchmarks/shape_buckets.py npu:0 tpu:0

Prints, per device: compiled shapes, the wall time of the 20 calls (compilations included: that
is the cost buckets bound) and the largest difference of the first output from the per-shape
compile. No timing is asserted anywhere: the numbers are for people.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

_HERE = str(Path(__file__).resolve().parent)
# benchmarks/openvino.py would shadow the real OpenVINO package while this folder is on sys.path.
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _HERE]
sys.path.insert(0, str(Path(_HERE).parent / "tests" / "support"))

import neurenix_core as nx

BUCKETS = {name: {0: [2, 4], 1: [8, 16, 32]} for name in ("input_ids", "attention_mask")}


def main(devices: list[str]) -> None:
    import hf_zoo as hz

    warnings.simplefilter("ignore")
    model, inputs = hz.build("bert")
    imported = nx.nn.from_torch(model, inputs(2, 16))
    rng = np.random.default_rng(3)
    shapes = [(int(b), int(s)) for b, s in zip(rng.integers(1, 5, 20), rng.integers(2, 33, 20))]
    calls = [inputs(b, s) for b, s in shapes]
    for device in devices:
        reference: list[np.ndarray] = []
        for label, options in (("per shape", {}), ("buckets", {"buckets": BUCKETS})):
            compiled = nx.compile(imported, device=device, precision="fp32", outputs="host", **options)
            start = time.perf_counter()
            firsts = [compiled(ex["input_ids"].numpy(), ex["attention_mask"].numpy())[0] for ex in calls]
            seconds = time.perf_counter() - start
            reference = reference or firsts
            diff = max(float(np.abs(a - r).max()) for a, r in zip(firsts, reference))
            print(f"{device} {label}: {len(compiled.compiled_shapes)} compiled shapes for {len(set(shapes))} distinct call shapes, "
                  f"20 calls {seconds:.2f} s, max |diff vs per shape| {diff:.1e}")


if __name__ == "__main__":
    main(sys.argv[1:] or [str(nx.default_device())])
