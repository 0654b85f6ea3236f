"""What a compiled model says about itself: ``Compiled.summary``, one line per compiled input
shape (what the backend did), then the shape buckets' calls, the layers an int8 mix kept in float
and the int8 verification."""

from __future__ import annotations

from typing import Any

from neurenix_core.graph.compile.state import CompiledState

__all__ = ["summary"]


def _shapes_text(shapes: tuple[tuple[int, ...], ...]) -> str:
    """The input shapes in words: "input (64, 64)", "inputs (1, 8), (1, 8)"; runs of three or more
    equal ones written once with their count (a language model's step takes 60 cache buffers of one
    shape): "inputs (1, 8), (1, 4, 7, 16) x60"."""
    if not shapes:
        return "no inputs"
    runs: list[list[Any]] = []
    for shape in shapes:
        if runs and runs[-1][0] == shape:
            runs[-1][1] += 1
        else:
            runs.append([shape, 1])
    parts: list[str] = []
    for shape, n in runs:
        parts += [str(shape)] * n if n < 3 else [f"{shape} x{n}"]
    return f"input{'' if len(shapes) == 1 else 's'} " + ", ".join(parts)


def summary(compiled: CompiledState) -> str:
    if not compiled._summaries:
        graph = compiled.graph
        dynamic = f", dynamic input shapes {[s.display_shape for s in graph.inputs]}" if graph.dynamic else ""
        return f"{compiled.device}: not compiled yet (compiles on the first call per input shape), {len(graph.nodes)} layers{dynamic}"
    text = "; ".join(f"{_shapes_text(shapes)}: {text}" for shapes, text in compiled._summaries.items())
    if compiled._buckets is not None:
        from neurenix_core.graph.compile.buckets import bucket_report

        text += "; " + bucket_report(compiled)
    if compiled.weights_note is not None:
        text += "; weights " + compiled.weights_note
    mixed = getattr(compiled, "_mixed", None)  # set by nx.compile (Compiled), not by every state
    if mixed is not None:
        text += "; " + mixed.line()
    if compiled._verification is not None:
        text += "; " + compiled._verification.line()
    return text
