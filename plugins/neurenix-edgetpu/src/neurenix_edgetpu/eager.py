"""Eager ops on edgetpu tensors through cached single-op TFLite models.

Each (op, shapes, attributes) gets one tiny float32 TFLite model, built once with the writer and
kept with its interpreter. Arguments the model cannot take (other dtypes, rank > 4, axes other
than the last) go through the core's fallback policy: counted, warned once, or refused.
The Edge TPU itself executes int8 only, so on real hardware these float models run inside LiteRT
on the host CPU; whole int8 models (nx.compile) are what the Edge TPU runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import tflite

from neurenix_core.contract import fallback
from neurenix_edgetpu import tflite_writer as w
from neurenix_edgetpu.runtime import Runner
from neurenix_edgetpu.tflite_writer import ModelBuilder
from neurenix_edgetpu.verify import ModelInfo, inspect_model

__all__ = ["OpCache", "op_table"]

OP = tflite.BuiltinOperator
_F32 = np.dtype(np.float32)
_BINARY = {"add": OP.ADD, "subtract": OP.SUB, "multiply": OP.MUL, "maximum": OP.MAXIMUM, "minimum": OP.MINIMUM, "divide": OP.DIV}


class Interpreters(Protocol):
    """What the ops need of the backend (backend.LiteRTBackend): its name for the fallback
    count, and an interpreter per single-op model. Typed here, not imported, because the
    backend builds its op table from this module."""

    name: str

    def interpreter(self, data: bytes, index: int, info: ModelInfo, *, source: str) -> Runner: ...


class OpCache:
    """Single-op models by key; building one costs ~1 ms, running it ~10 us."""

    def __init__(self, backend: Interpreters) -> None:
        self.backend = backend
        self._runners: dict[tuple[Any, ...], Runner] = {}
        self._lock = threading.Lock()
        self.built = 0

    def run(self, key: tuple[Any, ...], build: Callable[[], bytes], *arrays: np.ndarray) -> np.ndarray:
        runner = self._runners.get(key)
        if runner is None:
            with self._lock:
                runner = self._runners.get(key)
                if runner is None:
                    data = build()
                    runner = self.backend.interpreter(data, 0, inspect_model(data, f"single-op model {key[0]}"), source=f"eager {key[0]}")
                    self._runners[key] = runner
                    self.built += 1
        return runner.invoke(*arrays)[0]


def _f32(x: Any) -> np.ndarray | None:
    """The float32 array an op model can take, or None when the value needs the fallback."""
    if isinstance(x, np.ndarray):
        return x if x.dtype == _F32 and x.ndim <= 4 else None
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float)):
        return None
    return np.asarray(x, np.float32)


def _single(opcode: int, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], **kw: Any) -> bytes:
    m = ModelBuilder(description="neurenix edgetpu eager op")
    ins = [m.tensor(f"x{i}", s, np.float32) for i, s in enumerate(shapes)]
    extra = kw.pop("constants", [])
    consts = [m.constant(f"c{i}", c) for i, c in enumerate(extra)]
    out = m.tensor("y", out_shape, np.float32)
    m.op(opcode, ins + consts, [out], **kw)
    return m.finish(ins, [out])


class _Ops:
    def __init__(self, backend: Interpreters) -> None:
        self.backend = backend
        self.cache = OpCache(backend)
        self._cpu_ops: dict[str, Callable[..., Any]] | None = None

    def host(self, name: str, *args: Any, **kwargs: Any) -> Any:
        # Not expressible as a float32 single-op model: the fallback policy decides (it may raise).
        fallback.record(name, self.backend.name, "edgetpu")
        if self._cpu_ops is None:
            from neurenix_core.contract import Device, registry

            reg = registry()
            self._cpu_ops = reg.backend(reg.plugin_for(Device("cpu", 0))).ops
        return self._cpu_ops[name](*args, **kwargs)

    def binary(self, name: str) -> Callable[..., Any]:
        opcode = _BINARY[name]

        def op(x1: Any, x2: Any) -> Any:
            a, b = _f32(x1), _f32(x2)
            if a is None or b is None or not (isinstance(x1, np.ndarray) or isinstance(x2, np.ndarray)):
                return self.host(name, x1, x2)
            shape = tuple(np.broadcast_shapes(a.shape, b.shape))
            key = (name, a.shape, b.shape)
            return self.cache.run(key, lambda: _single(opcode, [a.shape, b.shape], shape), a, b)

        return op

    def matmul(self, x1: Any, x2: Any) -> Any:
        a, b = _f32(x1), _f32(x2)
        if a is None or b is None or a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            return self.host("matmul", x1, x2)
        key = ("matmul", a.shape, b.shape)
        return self.cache.run(key, lambda: _single(OP.BATCH_MATMUL, [a.shape, b.shape], (a.shape[0], b.shape[1])), a, b)

    def linear(self, x: Any, weight: Any, bias: Any = None) -> Any:
        a, wt = _f32(x), _f32(weight)
        bb = None if bias is None else _f32(bias)
        if a is None or wt is None or a.ndim != 2 or wt.ndim != 2 or (bias is not None and bb is None):
            return self.host("nn.linear", x, weight, bias)
        shapes = [a.shape, wt.shape] + ([bb.shape] if bb is not None else [])  # type: ignore[union-attr]
        key = ("nn.linear", *shapes)
        build = lambda: _single(OP.FULLY_CONNECTED, shapes, (a.shape[0], wt.shape[0]),
                                options_type=w.OPTIONS.FullyConnectedOptions, options=w.fc_options(0))
        args = (a, wt) if bb is None else (a, wt, bb)
        if bb is None:
            # FULLY_CONNECTED takes a missing bias as tensor -1; express "no bias" as zeros instead.
            zeros = np.zeros(wt.shape[0], np.float32)
            key = ("nn.linear", a.shape, wt.shape, "nobias")
            build = lambda: _single(OP.FULLY_CONNECTED, [a.shape, wt.shape], (a.shape[0], wt.shape[0]), constants=[zeros],
                                    options_type=w.OPTIONS.FullyConnectedOptions, options=w.fc_options(0))
        return self.cache.run(key, build, *args)

    def relu(self, x: Any) -> Any:
        a = _f32(x)
        if a is None or not isinstance(x, np.ndarray):
            return self.host("nn.relu", x)
        return self.cache.run(("nn.relu", a.shape), lambda: _single(OP.RELU, [a.shape], a.shape), a)

    def softmax(self, x: Any, axis: int = -1) -> Any:
        a = _f32(x)
        if a is None or a.ndim == 0 or axis % a.ndim != a.ndim - 1:
            return self.host("nn.softmax", x, axis)
        build = lambda: _single(OP.SOFTMAX, [a.shape], a.shape, options_type=w.OPTIONS.SoftmaxOptions, options=w.softmax_options(1.0))
        return self.cache.run(("nn.softmax", a.shape), build, a)

    def concat(self, arrays: Any, /, *, axis: int | None = 0) -> Any:
        items = [_f32(x) for x in arrays]
        if axis is None or not items or any(i is None or not isinstance(x, np.ndarray) or i.ndim == 0 for i, x in zip(items, arrays)):
            return self.host("concat", arrays, axis=axis)
        ndim = items[0].ndim  # type: ignore[union-attr]
        ax = axis % ndim
        shapes = [i.shape for i in items]  # type: ignore[union-attr]
        try:
            out = np.concatenate([np.empty(s, np.float32) for s in shapes], axis=ax).shape
        except ValueError:
            return self.host("concat", arrays, axis=axis)
        build = lambda: _single(OP.CONCATENATION, shapes, out, options_type=w.OPTIONS.ConcatenationOptions, options=w.concat_options(ax))
        return self.cache.run(("concat", ax, *shapes), build, *items)


def op_table(backend: Interpreters) -> dict[str, Callable[..., Any]]:
    ops = _Ops(backend)
    table: dict[str, Callable[..., Any]] = {name: ops.binary(name) for name in _BINARY}
    table.update({"matmul": ops.matmul, "nn.linear": ops.linear, "nn.relu": ops.relu, "nn.softmax": ops.softmax, "concat": ops.concat})
    backend.op_cache = ops.cache  # type: ignore[attr-defined]
    return table
