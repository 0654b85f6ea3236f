"""Module and Sequential: parameters as Tensors on one device, state dicts, graph walking.

Parameters are Tensors that require grad (neurenix_core/autograd records what they feed);
``train()`` / ``eval()`` switch Dropout and BatchNorm between their training and inference
behaviour. Parameters are created on the default device, like any tensor; ``model.to(device)``
moves them all (really copying, through the backends) and returns the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from neurenix_core.device import Device, DeviceLike, as_device
from neurenix_core.errors import ModelFormatError, ShapeError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.nn import tracing
from neurenix_core.tensor.tensor import Tensor

__all__ = ["Module", "ModuleList", "Sequential"]


class Module:
    """Base class of layers and models. Subclasses set attributes in ``__init__`` (after
    ``super().__init__()``) and define ``forward``."""

    #: Graph op of a leaf layer (see graph.py); None for containers whose forward is walked.
    graph_op: ClassVar[str | None] = None

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_training", False)  # built for inference; train() switches

    # ------------------------------------------------------------------ attributes
    def __setattr__(self, name: str, value: Any) -> None:
        if "_modules" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() before setting {name!r}")
        if isinstance(value, Tensor) and name in self._buffers:
            self._buffers[name] = value
            return
        if value is None and name in self._parameters:
            self._parameters[name] = None
            return
        for store in (self._parameters, self._buffers, self._modules):
            store.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor):
            self._parameters[name] = _trainable(value)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        if "_modules" not in d:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() first")
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_parameter(self, name: str, value: Tensor | None) -> None:
        self.__dict__.pop(name, None)
        self._parameters[name] = None if value is None else _trainable(value)

    def register_buffer(self, name: str, value: Tensor | None) -> None:
        self.__dict__.pop(name, None)
        self._buffers[name] = value

    # ------------------------------------------------------------------ calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if tracing.is_symbolic(args):
            return tracing.call_module(self, args, kwargs)
        return self.forward(*(self._as_input(a) for a in args), **kwargs)

    def _as_input(self, value: Any) -> Any:
        # NumPy arrays and lists are placed on the model's device; tensors are never moved silently.
        if isinstance(value, (np.ndarray, list)):
            from neurenix_core.tensor.creation import asarray

            return asarray(value, dtype=np.float32, device=self.device)
        return value

    def _is_leaf(self) -> bool:
        return self.graph_op is not None

    def _graph_attrs(self) -> dict[str, Any]:
        return {}

    def _graph_params(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v.numpy(), dtype=np.float32) for k, v in self._parameters.items() if v is not None} | {
            k: np.asarray(v.numpy(), dtype=np.float32) for k, v in self._buffers.items() if v is not None
        }

    def _trace(self, tracer: tracing.Tracer, name: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != 1:
            raise UnsupportedOperationError(f"layer {name!r} ({type(self).__name__}) takes one input in a graph")
        assert self.graph_op is not None
        return tracer.record(name, self.graph_op, args, self._graph_attrs(), self._graph_params())

    def to_graph(self, *shapes: tuple[int, ...] | None, inputs: int | None = None) -> Graph:
        """Walk the model once into a :class:`~neurenix_core.graph.ir.Graph`.

        ``shapes`` are the input shapes (NCHW for images); omit them to get a graph whose input
        shapes are set later with ``Graph.with_input_shapes``. ``inputs`` is the number of inputs
        when no shapes are given (default: the forward's required positional parameters).
        """
        if not shapes:
            shapes = (None,) * (inputs if inputs is not None else self.input_count())
        return tracing.trace(self, [tuple(int(d) for d in s) if s is not None else None for s in shapes])

    def input_count(self) -> int:
        """How many inputs ``forward`` requires (from its signature)."""
        import inspect

        params = inspect.signature(self.forward).parameters.values()
        required = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        return max(1, len(required))

    # ------------------------------------------------------------------ traversal
    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from self._modules.items()

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        for mod_name, mod in self.named_modules(prefix):
            for name, p in mod._parameters.items():
                if p is not None:
                    yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self) -> Iterator[Tensor]:
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        for mod_name, mod in self.named_modules(prefix):
            for name, b in mod._buffers.items():
                if b is not None:
                    yield (f"{mod_name}.{name}" if mod_name else name), b

    def buffers(self) -> Iterator[Tensor]:
        for _, b in self.named_buffers():
            yield b

    def _slots(self) -> Iterator[tuple[str, Module, str, Tensor]]:
        """(qualified name, owner module, attribute, tensor) of every parameter and buffer."""
        for mod_name, mod in self.named_modules():
            for store in (mod._parameters, mod._buffers):
                for attr, t in store.items():
                    if t is not None:
                        yield (f"{mod_name}.{attr}" if mod_name else attr), mod, attr, t

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, np.ndarray]:
        """Host NumPy copies of every parameter and buffer, by dotted name (PyTorch's names)."""
        return {name: t.numpy() for name, _, _, t in self._slots()}

    @strict_kwargs("Module.load_state_dict")
    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> None:
        """Load weights; everything is checked before anything is assigned (no half-loaded model)."""
        slots = {name: (mod, attr, t) for name, mod, attr, t in self._slots()}
        missing = sorted(set(slots) - set(state))
        unexpected = sorted(set(state) - set(slots))
        if strict and (missing or unexpected):
            raise ModelFormatError(
                f"{type(self).__name__}.load_state_dict: missing keys {missing}, unexpected keys {unexpected}; "
                "the weights belong to a different architecture (pass strict=False to load the overlap)"
            )
        staged: list[tuple[Module, str, Tensor, np.ndarray]] = []
        for name, value in state.items():
            if name not in slots:
                continue
            mod, attr, old = slots[name]
            arr = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            if tuple(arr.shape) != tuple(old.shape):
                raise ShapeError(f"{type(self).__name__}.load_state_dict: {name} has shape {tuple(arr.shape)}, the model expects {tuple(old.shape)}")
            if not np.issubdtype(arr.dtype, np.number):
                raise ModelFormatError(f"{type(self).__name__}.load_state_dict: {name} has non-numeric dtype {arr.dtype}")
            staged.append((mod, attr, old, arr))
        from neurenix_core.tensor.creation import asarray

        for mod, attr, old, arr in staged:
            new = asarray(arr.astype(old.dtype, copy=False), device=old.device)
            store = mod._parameters if attr in mod._parameters else mod._buffers
            store[attr] = new.requires_grad_(True) if store is mod._parameters and old.requires_grad else new

    @strict_kwargs("Module.save")
    def save(self, path: Any) -> None:
        """Save the weights to ``.npz`` or ``.safetensors`` (atomic: a temp file, then rename)."""
        from neurenix_core.nn.serialization import save_state

        save_state(self.state_dict(), path)

    @strict_kwargs("Module.load")
    def load(self, path: Any, strict: bool = True) -> Module:
        """Load weights saved by :meth:`save` (no pickle); returns the model."""
        from neurenix_core.nn.serialization import conform_dtypes, load_state

        # A file in other dtypes than the model's is converted with a warning or refused (issue #28).
        expected = {name: t.dtype for name, _, _, t in self._slots()}
        self.load_state_dict(conform_dtypes(load_state(path), expected, path), strict=strict)
        return self

    # ------------------------------------------------------------------ devices
    @property
    def device(self) -> Device:
        """The device of the parameters (the default device for a model without any)."""
        for _, _, _, t in self._slots():
            return t.device
        from neurenix_core.plugins.state import default_device

        return default_device()

    def to(self, device: DeviceLike) -> Module:
        """Move every parameter and buffer to ``device`` (a real copy); returns this model."""
        dev = as_device(device)
        moved = [(mod, attr, t.to(dev), t.requires_grad) for _, mod, attr, t in self._slots()]
        for mod, attr, t, grad in moved:
            store = mod._parameters if attr in mod._parameters else mod._buffers
            # The copy is a new leaf: a parameter keeps requiring grad on its new device.
            store[attr] = t.requires_grad_(True) if grad and t._p.backend.trains else t
        return self

    def cpu(self) -> Module:
        return self.to("cpu:0")

    def train(self, mode: bool = True) -> Module:
        """Training behaviour for this module and its children (Dropout drops, BatchNorm uses and
        updates batch statistics); returns the model."""
        for m in self.modules():
            object.__setattr__(m, "_training", bool(mode))
        return self

    def eval(self) -> Module:
        """Inference behaviour (the default): Dropout is the identity, BatchNorm uses running statistics."""
        return self.train(False)

    @property
    def training(self) -> bool:
        return bool(self.__dict__.get("_training", False))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients accumulated in every parameter."""
        from neurenix_core.tensor.creation import zeros_like

        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else zeros_like(p.grad)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter; returns the model."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): {m!r}".replace("\n", "\n  ") for name, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"


def _trainable(t: Tensor) -> Tensor:
    # A parameter is a leaf that requires grad (PyTorch's nn.Parameter); integer tensors and
    # tensors on inference-only devices (npu, edgetpu) cannot.
    if t.is_leaf and not t.requires_grad and (t.dtype.kind == "f" or t.dtype.name == "bfloat16") and t._p.backend.trains:
        t.requires_grad_(True)
    return t


class Sequential(Module):
    """Layers applied in order. ``Sequential(a, b)`` and ``Sequential([a, b])`` are the same."""

    def __init__(self, *layers: Module | Sequence[Module]) -> None:
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(f"Sequential item {i} is a {type(layer).__name__}, not a neurenix.nn Module")
            self._modules[str(i)] = layer

    def forward(self, x: Any) -> Any:
        for layer in self._modules.values():
            x = layer(x)
        return x

    def __getitem__(self, index: int | slice) -> Module:
        layers = list(self._modules.values())
        if isinstance(index, slice):
            return Sequential(layers[index])
        return layers[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, layer: Module) -> Sequential:
        self._modules[str(len(self._modules))] = layer
        return self


class ModuleList(Module):
    """A list of modules, registered so their parameters are found; the user's forward calls them."""

    def __init__(self, modules: Sequence[Module] = ()) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> ModuleList:
        self._modules[str(len(self._modules))] = module
        return self
