"""Shape buckets, the call: one bucketed call (inputs padded to the bucket shape, the bucket's
program, outputs cut back to the real sizes), and the per-bucket statistics of the summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neurenix_core.errors import CompilationError, ShapeError
from neurenix_core.graph.compile.buckets.policy import BucketPolicy, PaddingRefusedError, pad_array
from neurenix_core.graph.compile.buckets.proof import PaddingProof, prove_padding

__all__ = ["BucketStats", "bucket_report", "call_bucketed", "check_early"]


@dataclass(slots=True)
class BucketStats:
    """The calls one compiled shape served: how many, how many padded, from which real shapes."""

    calls: int = 0
    padded: int = 0
    shapes: list[tuple[tuple[int, ...], ...]] = field(default_factory=list)
    exact: bool = False  # compiled for a call's own shapes (padding would have broken a class's one size)

    def note(self, shapes: tuple[tuple[int, ...], ...], padded: bool) -> None:
        self.calls += 1
        self.padded += int(padded)
        if shapes not in self.shapes:
            self.shapes.append(shapes)


def _proof(compiled: Any, key: tuple[tuple[int, ...], ...]) -> PaddingProof:
    proof = compiled._proofs.get(key)
    if proof is None:
        try:
            proof = prove_padding(compiled.graph, key, compiled._buckets)
        except ShapeError:
            compiled._runner_for(key)  # the model does not fit the bucket shapes: the compiler's own message, naming the layer
            raise
        except PaddingRefusedError as exc:
            raise PaddingRefusedError(
                f"{compiled.device}: buckets ({compiled._buckets.describe()}) at bucket shapes {list(key)}: {exc}. Compile without "
                "buckets=, or bucket only the axes padding cannot change (buckets={input: {axis: sizes}})") from None
        compiled._proofs[key] = proof
    return proof


def check_early(compiled: Any) -> None:
    """At ``nx.compile``: the proof at the bucket of the example's shapes, so an unsafe request
    fails there rather than at the first padded call (an ``nn`` model has no shapes yet)."""
    shapes = tuple(tuple(int(d) for d in s.shape) for s in compiled.graph.inputs)
    if not all(shapes) or any(d < 1 for s in shapes for d in s):
        return
    try:
        key = compiled._buckets.shapes_for(shapes)
        proof = prove_padding(compiled.graph, key, compiled._buckets)
    except ShapeError:
        return  # the example is above a bucket, or the model does not fit it: said at the call, as without buckets
    except PaddingRefusedError:
        _proof(compiled, key)  # raises it again with the device and the buckets named
        raise
    compiled._proofs[key] = proof


def call_bucketed(compiled: Any, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """One call of a bucketed compiled model: inputs padded up to their bucket shapes (on the
    host), the bucket's runner, and every output cut back to the real sizes."""
    policy: BucketPolicy = compiled._buckets
    natives = [compiled._native(x, i) for i, x in enumerate(inputs)]
    shape_of = compiled._backend._shape_of
    shapes = tuple(tuple(int(d) for d in (n.shape if isinstance(n, np.ndarray) else shape_of(n))) for n in natives)
    key = policy.shapes_for(shapes)
    if key == shapes:
        compiled._bucket_stats.setdefault(key, BucketStats()).note(shapes, False)
        return tuple(compiled._runner_for(key)(*natives))
    proof = _proof(compiled, key)
    if not proof.consistent(shapes):
        # Input axes the model combines position by position came with different sizes (one
        # broadcasting from size 1): padding them to one bucket would change the broadcast, so
        # this call compiles for its own shapes.
        compiled._bucket_stats.setdefault(shapes, BucketStats(exact=True)).note(shapes, False)
        return tuple(compiled._runner_for(shapes)(*natives))
    to_host = compiled._backend._to_host
    padded = []
    for i, (n, shape) in enumerate(zip(natives, key)):
        if tuple(shape) == shapes[i]:
            padded.append(n)
            continue
        host = n if isinstance(n, np.ndarray) else np.asarray(to_host(n))
        padded.append(compiled._native(pad_array(host, shape, policy.pad_values[i]), i))
    with np.errstate(invalid="ignore", divide="ignore"):  # padded rows of a NumPy runner may be 0/0 (fully masked); never read
        outs = compiled._runner_for(key)(*padded)
    compiled._bucket_stats.setdefault(key, BucketStats()).note(shapes, True)
    sizes = proof.sizes(shapes)
    return tuple(_cut(compiled, o, tags, sizes) for o, tags in zip(outs, proof.outputs))


def _cut(compiled: Any, out: Any, tags: tuple[int | None, ...], sizes: tuple[int, ...]) -> Any:
    """An output without its padded positions."""
    if all(t is None for t in tags):
        return out
    index = tuple(slice(None) if t is None else slice(0, sizes[t]) for t in tags)
    from neurenix_core.tensor.dtypes import contiguous
    from neurenix_core.tensor.tensor import Tensor, wrap_on

    if isinstance(out, Tensor):
        cut = out._data[index]
        if isinstance(cut, np.ndarray):
            cut = contiguous(cut)
        return wrap_on(cut, out._p)
    array = getattr(out, "array", None)  # a result kept in host memory (compiler._HostValue)
    if isinstance(array, np.ndarray):
        out.array = contiguous(array[index])
        return out
    raise CompilationError(f"{compiled.device}: a bucketed output of type {type(out).__name__} cannot be cut back to the real sizes")


def bucket_report(compiled: Any) -> str:
    """``Compiled.summary``'s bucket part: the policy, then per compiled shape the calls it served."""
    parts = []
    for key, stats in compiled._bucket_stats.items():
        seen = ", ".join(str(list(s)) for s in stats.shapes[:6]) + (" ..." if len(stats.shapes) > 6 else "")
        kind = "exact shapes (inputs the model combines had different sizes)" if stats.exact else f"bucket {list(key)}"
        parts.append(f"{kind}: {stats.calls} call(s), {stats.padded} padded, from shapes {seen}")
    policy = compiled._buckets.describe()
    return f"buckets ({policy}; {len(compiled._runners)} compiled shape(s)): " + ("; ".join(parts) or "no calls yet")
