"""Shape buckets: the policy that picks a compiled shape per call, and the proof that padding to
it changes no result.

``nx.compile(model, device=..., buckets=...)`` compiles once per *bucket* instead of once per
input shape: each bucketed axis of a call is padded up to its bucket (the next power of two, or
the next size the user listed), the model runs at the bucket shape, and the outputs are sliced
back. Static-shape hardware (an NPU through OpenVINO, the Edge TPU, XLA) then compiles a bounded
number of programs. Padding is only done where the graph itself shows it cannot change a result.

- ``policy.py``: which axes are bucketed and to which sizes (``buckets=``, ``pad_values=``), and
  the padding of one input;
- ``proof.py``: :func:`prove_padding`, the dataflow analysis that shows padding is safe (its
  docstring says what the analysis tracks and what it assumes);
- ``calls.py``: one bucketed call (pad, run the bucket's program, cut back) and the per-bucket
  statistics ``Compiled.summary`` reports.

``neurenix_core.graph.compile.compiler`` imports this package lazily, only for a model compiled with
``buckets=``.
"""

from __future__ import annotations

from neurenix_core.graph.compile.buckets.calls import BucketStats, bucket_report, call_bucketed, check_early
from neurenix_core.graph.compile.buckets.policy import BucketPolicy, PaddingRefusedError, pad_array, parse_buckets, pow2_bucket
from neurenix_core.graph.compile.buckets.proof import MASK_NEGATIVE, PaddingProof, prove_padding

__all__ = [
    "MASK_NEGATIVE",
    "BucketPolicy",
    "BucketStats",
    "PaddingProof",
    "PaddingRefusedError",
    "bucket_report",
    "call_bucketed",
    "check_early",
    "pad_array",
    "parse_buckets",
    "pow2_bucket",
    "prove_padding",
]
