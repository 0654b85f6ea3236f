"""What a compiled model says about itself: ``Compiled.summary``, one line per compiled input
shape (what the backend did), then the shape buckets' calls and the int8 verification."""

from __future__ import annotations

from neurenix_core.graph.compile.state import CompiledState

__all__ = ["summary"]


def summary(compiled: CompiledState) -> str:
    if not compiled._summaries:
        graph = compiled.graph
        dynamic = f", dynamic input shapes {[s.display_shape for s in graph.inputs]}" if graph.dynamic else ""
        return f"{compiled.device}: not compiled yet (compiles on the first call per input shape), {len(graph.nodes)} layers{dynamic}"
    text = "; ".join(f"{shapes}: {text}" for shapes, text in compiled._summaries.items())
    if compiled._buckets is not None:
        from neurenix_core.graph.compile.buckets import bucket_report

        text += "; " + bucket_report(compiled)
    if compiled.weights_note is not None:
        text += "; weights " + compiled.weights_note
    if compiled._verification is not None:
        text += "; " + compiled._verification.line()
    return text
