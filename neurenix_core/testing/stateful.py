"""The conformance check of a host runtime that keeps state (``HostRuntime.keeps_state``, API 1.7).

``check_stateful_runtime(runtime)`` compiles a small attention step whose keys and values are
joined to a past (the shape of a language model's cache update) with ``compile_stateful``, runs a
sequence of calls of changing lengths, resets, and runs another at another batch size, comparing
every output with the core's float64 reference fed the past the host kept itself. A vendor's
runtime passes it before declaring ``keeps_state``; the npu plugin's test runs it on OpenVINO's.
For a runtime that also declares ``stores_state_models`` (API 1.8), the model is compiled with a
folder, and the one ``load_stateful`` reads back from it runs the same calls against the same
reference.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    from neurenix_core.graph.ir import Graph
    from neurenix_core.graph.ir.host import HostRuntime
    from neurenix_core.graph.ir.host_state import StatefulModel

__all__ = ["check_stateful_runtime"]

_HEADS: Final = 2
_WIDTH: Final = 8
#: Per call: (batch, new entries); a reset comes before each batch size's sequence.
_CALLS: Final = ((2, 4), (2, 1), (2, 1), (2, 3), (3, 5), (3, 1))
#: fp32 against the float64 reference, relative to the largest output (the host-runtime contract).
_TOLERANCE: Final = 1e-5


def _step(batch: int, new: int, past: int) -> Graph:
    """q, k, v (B, H, n, D) and the past keys/values (B, H, S, D) -> the attention of q over the
    joined keys/values, and the joined keys and values (the states' outputs)."""
    from neurenix_core.graph.ir import Graph, Node, TensorSpec

    fresh, old = (batch, _HEADS, new, _WIDTH), (batch, _HEADS, past, _WIDTH)
    inputs = (TensorSpec("q", fresh), TensorSpec("k", fresh), TensorSpec("v", fresh), TensorSpec("past_k", old), TensorSpec("past_v", old))
    nodes = (Node("join_k", "concat", ("past_k", "k"), "keys", {"axis": 2}), Node("join_v", "concat", ("past_v", "v"), "values", {"axis": 2}),
             Node("attend", "scaled_dot_product_attention", ("q", "keys", "values"), "out", {"scale": None, "is_causal": False}))
    return Graph(inputs, nodes, ("out", "keys", "values"))


def check_stateful_runtime(runtime: HostRuntime, threads: int | None = 1) -> None:
    """Raise AssertionError where ``runtime``'s stateful model (and, with ``stores_state_models``,
    the one loaded back from its folder) differs from the reference."""
    from neurenix_core.graph.ir.host import HostOptions
    from neurenix_core.graph.ir.host_state import SIZES, StateSpec

    states = (StateSpec(past=3, joined=1, axis=2), StateSpec(past=4, joined=2, axis=2))
    graphs = (_step(*SIZES[0]), _step(*SIZES[1]))
    if not runtime.stores_state_models:
        _check_calls(runtime.name, runtime.compile_stateful(*graphs, states, HostOptions(threads=threads)))
        return
    with tempfile.TemporaryDirectory(prefix="neurenix-stateful-") as tmp:
        folder = Path(tmp)
        _check_calls(runtime.name, runtime.compile_stateful(*graphs, states, HostOptions(threads=threads), folder=folder))
        assert any(folder.iterdir()), f"{runtime.name}: stores_state_models, but compile_stateful(folder=) wrote nothing"
        _check_calls(f"{runtime.name} (loaded from its folder)", runtime.load_stateful(folder, HostOptions(threads=threads)))


def _check_calls(name: str, model: StatefulModel) -> None:
    from neurenix_core.graph.reference.run import run_graph

    rng = np.random.default_rng(0)
    batch = 0
    for call, (b, n) in enumerate(_CALLS):
        if b != batch:  # a new sequence: the runtime's state and the host's past both start empty
            model.reset()
            batch, past = b, [np.zeros((b, _HEADS, 0, _WIDTH), np.float32)] * 2
        q, k, v = (rng.standard_normal((b, _HEADS, n, _WIDTH)).astype(np.float32) for _ in range(3))
        want = run_graph(_step(b, n, past[0].shape[2]), q, k, v, *past)
        got = model(q, k, v)
        assert len(got) == 1, f"{name}: the stateful step returned {len(got)} outputs; the joined values are its state, not outputs"
        scale = float(np.abs(want[0]).max())
        error = float(np.abs(got[0] - want[0]).max())
        assert got[0].shape == want[0].shape and error <= _TOLERANCE * scale, (
            f"{name}: call {call} (batch {b}, {n} new after {past[0].shape[2]}): output {got[0].shape} is {error:.3g} "
            f"from the reference {want[0].shape} (bound {_TOLERANCE * scale:.3g})")
        past = [np.asarray(want[1], np.float32), np.asarray(want[2], np.float32)]
