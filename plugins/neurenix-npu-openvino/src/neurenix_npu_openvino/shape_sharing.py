"""One compiled model for every input shape of a graph that lowers to the same OpenVINO model
(cpu:0's openvino runtime, ``host.py``).

``nx.compile`` compiles a graph once per input shape, and OpenVINO's CPU device packs its own copy
of the weights into each compiled model: a language model's decode step at two cache capacities
held two copies (0.6 GB each for 135M parameters). Where the lowered models of two input shapes
are the same model (the same ops in the same order and wiring, the same attributes, the same
constants byte for byte) and differ only in the sizes of their inputs, they are one function of
those inputs, which OpenVINO compiles once with the input axes that differ made dynamic: the
model compiled for the first shape is replaced by that one, and every later shape whose own
lowering has the same signature runs on it, without a compile. A shape whose lowering differs in
anything but its input sizes (a reshape to a size of that shape, a slice bound computed from it)
compiles on its own, as before; nothing is shared on a guess.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neurenix_core.errors import CompilationError

__all__ = ["ShapeSharing", "SharedModel", "first_line", "signature"]

def first_line(exc: BaseException) -> str:
    """The first line of an error's message (OpenVINO's run to a stack of them), else its type."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


#: An input's shape as compiled: None where the axis is dynamic.
Partial = tuple[int | None, ...]


@dataclass(eq=False)
class SharedModel:
    """The compiled model the shapes of one signature run on. ``version`` changes whenever the
    model is replaced by one with more dynamic axes: the infer requests of the old one are dropped
    first (``users``), so the old model, and its copy of the weights, is freed before the new one
    is compiled (a call already running on it keeps it until it returns); calls that come in the
    meantime wait for the new one (``request_for``)."""

    compiled: Any
    shapes: tuple[Partial, ...]
    version: int = 0
    served: set[tuple[tuple[int, ...], ...]] = field(default_factory=set)
    users: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    #: Why this shape did not join the model of its signature ("": it did, or it was the first).
    note: str = ""
    #: Why the last replacement failed (the model is gone): calls raise it.
    broken: str = ""
    ready: threading.Condition = field(default_factory=threading.Condition)

    def covers(self, shapes: tuple[tuple[int, ...], ...]) -> bool:
        return all(d is None or d == n for p, s in zip(self.shapes, shapes, strict=True) for d, n in zip(p, s, strict=True))

    def fits(self, shapes: tuple[tuple[int, ...], ...]) -> bool:
        """Whether ``shapes`` has this model's input ranks (the sizes may differ)."""
        return len(shapes) == len(self.shapes) and all(len(s) == len(p) for s, p in zip(shapes, self.shapes, strict=True))

    @property
    def dynamic_axes(self) -> list[tuple[int, int]]:
        """(input position, axis) of every dynamic axis."""
        return [(i, a) for i, p in enumerate(self.shapes) for a, d in enumerate(p) if d is None]

    def request_for(self) -> tuple[int, Any]:
        """(version, a new infer request) on the model as it is now, waiting while it is replaced."""
        with self.ready:
            self.ready.wait_for(lambda: self.compiled is not None or bool(self.broken))
            if self.compiled is None:
                raise CompilationError(f"host runtime openvino: the compiled model these input shapes share is gone: {self.broken}")
            return self.version, self.compiled.create_infer_request()

    def replace(self, compile_now: Callable[[], Any], shapes: tuple[Partial, ...]) -> None:
        """Drop the compiled model and every user's request on it, then compile its successor."""
        with self.ready:
            self.version += 1
            self.compiled = None
            for user in list(self.users):
                user.release()
        try:
            compiled = compile_now()
        except Exception as exc:
            with self.ready:
                self.broken = first_line(exc)
                self.ready.notify_all()
            raise
        with self.ready:
            self.compiled, self.shapes, self.broken = compiled, shapes, ""
            self.ready.notify_all()


def signature(model: Any, props: Mapping[str, Any]) -> str:
    """A digest of ``model`` (an ``openvino.Model``) and its compile properties that leaves out the
    sizes of its inputs only: every op's type, version, attributes and wiring, every constant's
    element type, shape and bytes, the inputs' names and element types."""
    h = hashlib.sha256(repr(sorted((str(k), str(v)) for k, v in props.items())).encode())
    position: dict[str, int] = {}
    for k, op in enumerate(model.get_ordered_ops()):
        position[op.get_name()] = k
        kind = op.get_type_name()
        wiring = [(position[src.get_node().get_name()], src.get_index()) for src in (i.get_source_output() for i in op.inputs())]
        h.update(repr((kind, op.get_type_info().version_id, wiring, [str(o.get_element_type()) for o in op.outputs()])).encode())
        if kind == "Parameter":
            h.update(repr(sorted(op.output(0).get_names())).encode())
        elif kind == "Constant":
            data = np.ascontiguousarray(op.get_data())
            h.update(repr((tuple(op.get_output_shape(0)), data.dtype.str, data.shape)).encode())
            h.update(data.view(np.uint8).reshape(-1).data if data.size else b"")
        else:
            h.update(repr(sorted((name, repr(value)) for name, value in op.get_attributes().items())).encode())
    return h.hexdigest()


class ShapeSharing:
    """The shared models of one runtime, by signature (held weakly: a model lives while some
    compiled shape runs on it)."""

    def __init__(self) -> None:
        self._models: weakref.WeakValueDictionary[str, SharedModel] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def model_for(self, key: str, model: Any, shapes: tuple[tuple[int, ...], ...], compile_first: Callable[[Any], Any],
                  compile_model: Callable[[Any], Any]) -> tuple[SharedModel, bool]:
        """The shared model that runs ``shapes`` (the input shapes of ``model``, an
        ``openvino.Model`` whose signature is ``key``), and whether it was compiled before:
        ``compile_first(model)`` for the first shape of a signature (static: it may come from the
        persistent cache), ``compile_model`` for ``model`` reshaped with the differing axes dynamic
        where a model of this signature does not cover these sizes. A dynamic model OpenVINO
        refuses leaves the shared model as it was and compiles this shape on its own."""
        with self._lock:
            shared = self._models.get(key)
            if shared is None or not shared.fits(shapes):  # the first shape of this signature (or another rank)
                own = SharedModel(compile_first(model), shapes, served={shapes})
                if shared is None:
                    self._models[key] = own
                return own, False
            if shared.covers(shapes):
                shared.served.add(shapes)
                return shared, True
            before, wider = shared.shapes, _widened(shared.shapes, shapes)
            try:
                shared.replace(lambda: compile_model(_reshaped(model, wider)), wider)
            except (RuntimeError, CompilationError) as exc:  # OpenVINO refused the dynamic model: the shapes go back to one model each
                shared.replace(lambda: compile_model(_reshaped(model, before)), before)
                return SharedModel(compile_model(_reshaped(model, shapes)), shapes, served={shapes},
                                   note=f"compiled for this shape alone: OpenVINO refused one model for {len(shared.served) + 1} shapes "
                                        f"({first_line(exc)})"), False
            shared.served.add(shapes)
            return shared, False


def _reshaped(model: Any, shapes: tuple[Partial, ...]) -> Any:
    model.reshape({model.inputs[i]: _partial(p) for i, p in enumerate(shapes)})
    return model


def _widened(compiled: tuple[Partial, ...], shapes: tuple[tuple[int, ...], ...]) -> tuple[Partial, ...]:
    """The compiled shapes with every axis where ``shapes`` differs made dynamic."""
    return tuple(tuple(None if d is None or d != n else d for d, n in zip(p, s, strict=True)) for p, s in zip(compiled, shapes, strict=True))


def _partial(shape: Partial) -> Any:
    import openvino as ov

    return ov.PartialShape([ov.Dimension() if d is None else ov.Dimension(d) for d in shape])
