"""The ``torch.compile`` backend: ``torch.compile(model, backend="neurenix", options={...})``.

PyTorch finds it through the ``torch_dynamo_backends`` entry point of ``neurenix-core``, so no
import of neurenix is needed. Dynamo calls the backend once per graph it captures (several where
the model has graph breaks, again where a guard fails); each becomes a :class:`Piece` compiled
for the options' device. :class:`Backend` is the same thing as an object whose ``pieces`` (with
their summaries and placement reports) can be read back; the string form records into
:func:`pieces`.

A graph neurenix cannot import (an op outside the mapping, a value input) runs in PyTorch as
dynamo gave it, with a :class:`~neurenix_core.tensor.fallback.FallbackWarning` naming the graph
and the reason; under ``fallback="error"`` (or ``nx.fallback_policy("error")``) it is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from neurenix_core.errors import CompilationError
from neurenix_core.torch_compile.options import TorchCompileOptions, parse
from neurenix_core.torch_compile.piece import Piece, policy
from neurenix_core.torch_compile.training import AtenPiece, train_backend, wants_grad

__all__ = ["Backend", "backend", "pieces"]


_RECORD: list[Piece | AtenPiece] = []


def pieces() -> list[Piece | AtenPiece]:
    """Every graph ``backend="neurenix"`` (the string) compiled in this process, oldest first."""
    return list(_RECORD)


def _compile(gm: Any, example_inputs: list[Any], options: TorchCompileOptions, record: list[Any]) -> Callable[..., Any]:
    """One graph from dynamo: inference (weights frozen) or, where autograd records and the
    device trains, forward and backward through AOTAutograd (training.py)."""
    if wants_grad(example_inputs):
        from neurenix_core.tensor.placement import default_backend

        with policy(options):
            owner, dev, _ = default_backend(options.device)
        if owner.trains:
            return train_backend(gm, example_inputs, options, record)
        piece = Piece(gm, example_inputs, options)
        piece.number = len(record) + 1
        piece.no_backward = (f"torch.compile(backend='neurenix'): {dev} (backend {owner.name}) runs inference only and cannot "
                             "train; run the model under torch.no_grad() there, or train on cpu, tpu or cuda and compile "
                             f"the trained model for {dev}")
    else:
        piece = Piece(gm, example_inputs, options)
        piece.number = len(record) + 1  # graphs are numbered per backend, in the order dynamo gave them
    record.append(piece)
    return piece


def backend(gm: Any, example_inputs: list[Any], options: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """The function PyTorch calls for ``backend="neurenix"``: one graph in, its compiled callable out."""
    return _compile(gm, example_inputs, parse(options), _RECORD)


class Backend:
    """``torch.compile(model, backend=nx.torch_backend(device="npu:0"))``: the backend with its
    options bound, keeping the graphs it compiled in ``pieces``."""

    def __init__(self, **options: Any) -> None:
        self.options = parse(options)
        self.pieces: list[Piece | AtenPiece] = []

    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        return _compile(gm, example_inputs, self.options, self.pieces)

    @property
    def summary(self) -> str:
        if not self.pieces:
            raise CompilationError("torch.compile compiles on the first call: call the compiled model before reading the summary")
        return "\n\n".join(p.summary for p in self.pieces)
