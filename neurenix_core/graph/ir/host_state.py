"""Stateful host models: a step graph whose cache the runtime keeps between calls (API 1.7).

A language model's decode step takes the past keys and values of every layer and appends the
step's new ones (``concat(past, new)`` along the sequence axis). Fed from the host, the whole
cache goes in on every call and the join writes a copy of it per layer. A runtime that keeps
state between calls (OpenVINO's stateful models: ReadValue / Assign) holds the joined value
itself, updated in place, and one compiled model serves the prompt and every decode step, at any
length. A host runtime offering this sets ``HostRuntime.keeps_state`` and implements
``HostRuntime.compile_stateful``.

Contract for implementers:

* ``compile_stateful(graph, other, states, options)`` gets the same step graph specialized at two
  sets of input sizes (static shapes, ``graph`` and ``other``): the runtime compiles **one** model
  with every input axis where the two differ dynamic, and raises ``CompilationError`` naming the
  reason where the two lower to models that differ in anything but their input sizes (a size
  baked into a constant would give wrong results at a third size: nothing is shared on a guess).
* ``states``: each :class:`StateSpec` names a graph input (``past``) and a graph output
  (``joined``) that is that input with the step's new entries appended along ``axis``. The
  runtime keeps ``joined`` after each call and reads it as ``past`` in the next one; the caller
  neither passes the ``past`` inputs nor receives the ``joined`` outputs. A state's axis 0 is the
  batch, sized as the graph's first input's axis 0; ``axis`` starts empty.
* The returned :class:`StatefulModel` takes the other inputs in graph order and returns the other
  outputs; ``reset()`` starts a new sequence (every state empty). fp32 results must match the
  core's float64 reference within 1e-5 relative, as for ``HostRuntime.compile``.
* API 1.8, optional: a runtime with ``stores_state_models`` writes the model it compiles into
  ``compile_stateful(..., folder=)`` (an empty folder the core owns: its own files, in any
  layout) and ``load_stateful(folder, options)`` compiles it from there in another process,
  without the graph, with the same results. The core keys, checksums, and moves the folder
  (``neurenix_core.generation.state_store``): the runtime only writes and reads its files. A
  folder it cannot read raises ``ModelFormatError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import numpy as np

__all__ = ["SIZES", "StateSpec", "StatefulModel"]

#: (batch, new entries, past length) of the two specializations the core hands a runtime: primes,
#: so that no size (nor the past plus the new entries) equals another, a size of the other set, 1,
#: or a model's head count or width (a size that coincides with a model's could lower as "keep
#: this axis", which the other set then contradicts: the runtime refuses rather than guesses).
SIZES: Final = ((5, 37, 47), (7, 41, 59))


@dataclass(frozen=True, slots=True)
class StateSpec:
    """A value the runtime keeps between calls: graph input ``past`` (by position) in, graph
    output ``joined`` (by position) out, where ``joined`` is ``past`` with the step's new entries
    appended along ``axis``."""

    past: int
    joined: int
    axis: int


class StatefulModel(ABC):
    """A step graph compiled by a host runtime that keeps its :class:`StateSpec` values."""

    #: One line for summaries: the runtime, precision, threads, and what keeps the state.
    summary: str = ""
    #: Threads the runtime uses for this model, read back (None where it cannot say).
    threads: int | None = None

    @abstractmethod
    def reset(self) -> None:
        """Start a new sequence: every state empty (length 0 along its axis)."""

    @abstractmethod
    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run one step on the graph's non-state inputs (host arrays, in graph order); the graph's
        non-state outputs, fresh arrays the caller may keep."""
