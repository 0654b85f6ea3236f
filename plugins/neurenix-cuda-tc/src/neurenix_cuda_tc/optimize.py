"""``optimize_model``: put a PyTorch module in the form Tensor Cores run fast, and say what changed.

The steps follow the Ampere guide: dtype conversion (fp16/bf16, or fp32 weights under fp16
autocast for "mixed"), ``channels_last`` for convolutions, TF32 and cuDNN-benchmark switches,
optionally ``torch.compile`` and CUDA graphs for fixed shapes. Every change lands in
:class:`OptimizationReport`; global switches go through the backend's ``SwitchState`` so
releasing the backend restores them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from neurenix_core.contract import Device, Tensor, deliver, to_device_inputs, wrap_on
from neurenix_core.errors import UnsupportedOperationError
from neurenix_cuda_tc.switches import SwitchState

if TYPE_CHECKING:
    import torch

__all__ = ["OptimizationReport", "compute_dtype", "optimize_module", "tensor_core_model_class"]


@dataclass
class OptimizationReport:
    """What optimize_model did, one line per change."""

    precision: str
    device: str
    emulated: bool
    changes: list[str] = field(default_factory=list)
    switches: dict[str, tuple[bool, bool]] = field(default_factory=dict)

    def __str__(self) -> str:
        head = f"optimize_model: {self.precision} on {self.device}" + (" (emulated on the host CPU)" if self.emulated else "")
        return "\n".join([head, *(f"  - {c}" for c in self.changes)])


def compute_dtype(precision: str) -> torch.dtype:
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)


def _convert_dtype(module: torch.nn.Module, dtype: torch.dtype, device: torch.device, report: OptimizationReport) -> None:
    converted = sum(1 for p in module.parameters() if p.is_floating_point() and p.dtype != dtype)
    module.to(device=device, dtype=dtype)
    if converted:
        report.changes.append(f"converted {converted} parameter tensor(s) to {str(dtype).removeprefix('torch.')}")
    report.changes.append(f"moved the model to {device}")


def _channels_last(module: torch.nn.Module, report: OptimizationReport) -> bool:
    import torch

    convs = [n for n, m in module.named_modules() if isinstance(m, torch.nn.Conv2d)]
    if not convs:
        return False
    module.to(memory_format=torch.channels_last)
    report.changes.append(f"channels_last memory format for {len(convs)} convolution(s): {', '.join(convs[:6])}{' ...' if len(convs) > 6 else ''}")
    return True


def _switches(precision: str, tf32_ok: bool, state: SwitchState, report: OptimizationReport) -> None:
    # fp32 means strict fp32 (TF32 off); every other mode lets residual fp32 matmuls/convs use
    # TF32 where the GPU has it (the guide's "TF32 enabled for residual FP32 ops").
    tf32 = precision != "fp32" and tf32_ok
    wanted = {
        "torch.backends.cuda.matmul.allow_tf32": tf32,
        "torch.backends.cudnn.allow_tf32": tf32,
        "torch.backends.cudnn.benchmark": True,
    }
    for name, value in wanted.items():
        old, new = state.set(name, value)
        report.switches[name] = (old, new)
        if old != new:
            report.changes.append(f"{name}: {old} -> {new}")


def optimize_module(
    module: torch.nn.Module,
    *,
    precision: str,
    device: torch.device,
    tf32_ok: bool,
    switches: SwitchState,
    emulated: bool,
    channels_last: bool = True,
    compile: bool | str = False,  # mirrors torch.compile
    cuda_graphs: bool = False,
    target: Device | None = None,
    backend: Any = None,
    outputs: str = "device",
) -> torch.nn.Module:
    """Optimise ``module`` in place for ``precision`` and wrap it in a TensorCoreModel.

    ``target``/``backend``: the neurenix device the model runs on and its backend, for inputs
    that are not torch tensors (``neurenix_core.graph.compile.inputs``); ``outputs`` says where their
    results go ("device" or "host").
    """
    import torch

    report = OptimizationReport(precision=precision, device=str(device), emulated=emulated)
    dtype = compute_dtype(precision)
    module.eval()
    _convert_dtype(module, dtype, device, report)
    uses_cl = channels_last and _channels_last(module, report)
    _switches(precision, tf32_ok, switches, report)
    if precision == "mixed":
        report.changes.append("forward runs under torch.autocast(float16) with float32 weights")
    runner: Any = module
    if compile:
        # Not ``backend``: that name is the neurenix backend the wrapper delivers results on.
        compiler = compile if isinstance(compile, str) else "inductor"
        runner = torch.compile(module, backend=compiler)
        report.changes.append(f"torch.compile(backend={compiler!r})")
    if cuda_graphs:
        if device.type != "cuda":
            raise UnsupportedOperationError(
                f"plugin cuda: CUDA graphs need a real NVIDIA GPU; {device} is {'emulated on the host CPU' if emulated else 'not a CUDA device'}. "
                "Call optimize_model(..., cuda_graphs=False)"
            )
        runner = _CudaGraphRunner(runner)
        report.changes.append("CUDA graph capture per input shape (replayed for fixed shapes)")
    return tensor_core_model_class()(module, runner, dtype=dtype, precision=precision, channels_last=uses_cl, report=report,
                                     target=target, backend=backend, outputs=outputs)


class _CudaGraphRunner:
    """Captures one CUDA graph per input signature and replays it (inference, fixed shapes)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.graphs: dict[tuple[Any, ...], tuple[Any, list[Any], Any]] = {}

    def __call__(self, *inputs: Any) -> Any:
        import torch

        key = tuple((tuple(x.shape), x.dtype, x.stride()) for x in inputs)
        if key not in self.graphs:
            static = [x.clone() for x in inputs]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):  # warm-up on a side stream, as torch.cuda.graphs requires
                    self.fn(*static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self.fn(*static)
            self.graphs[key] = (graph, static, out)
        graph, static, out = self.graphs[key]
        for s, x in zip(static, inputs):
            s.copy_(x)
        graph.replay()
        return out.clone()


_CLASS: list[type] = []


def tensor_core_model_class() -> type:
    """The wrapper module class (defined on first use, since torch loads lazily)."""
    if _CLASS:
        return _CLASS[0]
    import torch

    class TensorCoreModel(torch.nn.Module):
        """An optimised model. Torch tensors in, torch tensors out (a torch module like any other);
        anything else follows the compiled-model input rule (``neurenix_core.graph.compile.inputs``):
        cuda tensors of its device are used, host data (NumPy, cpu tensors) is copied in, tensors
        on other accelerators are refused, and results are neurenix Tensors on its device (NumPy
        with ``outputs="host"``).

        ``report`` lists the changes; ``parameters()`` are the optimised module's (train it with
        :class:`~neurenix_cuda_tc.amp.MixedPrecision`).
        """

        def __init__(self, inner: torch.nn.Module, runner: Any, *, dtype: torch.dtype, precision: str, channels_last: bool,
                     report: OptimizationReport, target: Device | None = None, backend: Any = None, outputs: str = "device") -> None:
            super().__init__()
            self.inner = inner
            self._runner = runner
            # The same runner outside torch's module registry: ``self._runner`` of a registered
            # submodule goes through nn.Module.__getattr__, a Python call on every model call.
            object.__setattr__(self, "_call", runner)
            self.dtype = dtype
            self.precision = precision
            self.channels_last = channels_last
            self.report = report
            self.target = target
            self._nx_backend = backend
            self.outputs = outputs
            # The parameters' device, read on the first call and forgotten by ``_apply`` (what
            # .to(), .cuda(), .half() ... go through): next(parameters()) costs ~3 µs per call.
            self._param_device: torch.device | None = None
            # Whether the parameters are on ``target``'s device (then a Tensor of ``target`` needs
            # only the cast); None until read, with ``_param_device``.
            self._on_target: bool | None = None
            # A neurenix Tensor already on ``target`` skips the input rule's checks (its placement
            # is the same object); the result is wrapped with the placement resolved once.
            self._placement = None if target is None or backend is None else backend.placement(target.index)

        def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
            self._param_device = self._on_target = None
            out = super()._apply(fn, *args, **kwargs)
            self._follow_parameter_dtype()
            return out

        def __deepcopy__(self, memo: dict[int, Any]) -> Any:
            # The backend and its placement are the process's device state (locks, memory
            # counters), shared by every model on the device: a copy keeps them, and copies the
            # module, its runner and its settings.
            import copy

            for shared in (self._nx_backend, self._placement):
                if shared is not None:
                    memo[id(shared)] = shared
            new = type(self).__new__(type(self))
            memo[id(self)] = new
            for key, value in self.__dict__.items():
                new.__dict__[key] = copy.deepcopy(value, memo)
            return new

        def _follow_parameter_dtype(self) -> None:
            # .float(), .half(), .bfloat16() and .to(dtype) change the parameters' dtype: inputs
            # are cast to it from then on (the old dtype would make the first matmul refuse). A
            # float32 model made from fp16/bf16 keeps the TF32 switches optimize_model set: "tf32".
            dtype = next((p.dtype for p in self.inner.parameters() if p.is_floating_point()), None)
            if dtype is None or dtype == self.dtype or self.precision == "mixed":
                return
            self.dtype = dtype
            self.precision = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, "tf32")

        def _prepare_own(self, x: torch.Tensor) -> torch.Tensor:
            """``_prepare`` for the data of a Tensor of ``target``: what a torch user writes,
            ``x.to(dtype)`` (+ channels_last), when the parameters are on that device too."""
            if not self._on_target:
                return self._prepare(x)
            if x.is_floating_point():
                x = x.to(self.dtype)
            if self.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            return x

        def _prepare(self, x: torch.Tensor) -> torch.Tensor:
            device = self._param_device
            if device is None:
                device = self._param_device = next(self.inner.parameters()).device
                self._on_target = self.target is not None and device == self._nx_backend._native_device(self.target.index)
            if x.is_floating_point():
                x = x.to(device=device, dtype=self.dtype)
            else:
                x = x.to(device=device)
            if self.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            return x

        def forward(self, *inputs: Any) -> Any:
            if len(inputs) == 1:
                x = inputs[0]
                placement = self._placement
                # The common call, first and with nothing else on its way: one Tensor of this
                # device in, one Tensor out. It runs right after the previous call's kernels have
                # flushed the CPU caches, where each Python step costs several times its warm
                # price (docs/tensor-cores.md, benchmark section).
                if type(x) is Tensor and x._p is placement and self.outputs == "device":
                    if self._on_target and self.precision != "mixed":
                        # _prepare_own and _execute1 written out: two Python calls less per call.
                        n = x._data
                        if n.is_floating_point():
                            n = n.to(self.dtype)
                        if self.channels_last and n.dim() == 4:
                            n = n.contiguous(memory_format=torch.channels_last)
                        out = self._call(n)
                    else:
                        out = self._execute1(self._prepare_own(x._data))
                    return wrap_on(out, placement) if type(out) is torch.Tensor else deliver(_results(out), self.target, self._nx_backend, self.outputs)
                if isinstance(x, torch.Tensor):
                    return self._execute1(self._prepare(x))
            if all(isinstance(x, torch.Tensor) for x in inputs):
                return self._execute([self._prepare(x) for x in inputs])
            if self.target is None:
                raise UnsupportedOperationError(
                    "this Tensor Core model was built without a neurenix device; call it with torch tensors, "
                    "or build it with TensorCoresBackend().optimize_model(...)"
                )
            natives = to_device_inputs(inputs, self.target, self._nx_backend)
            out = self._execute([self._prepare(x) for x in natives])
            return deliver(_results(out), self.target, self._nx_backend, self.outputs)

        def _execute1(self, x: torch.Tensor) -> Any:
            if self.precision == "mixed":
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    return self._runner(x)
            return self._runner(x)

        def _execute(self, xs: list[torch.Tensor]) -> Any:
            if self.precision == "mixed":
                with torch.autocast(device_type=xs[0].device.type, dtype=torch.float16):
                    return self._runner(*xs)
            return self._runner(*xs)

    _CLASS.append(TensorCoreModel)
    return TensorCoreModel


def _results(out: Any) -> Any:
    # torch's graph stays attached when torch recorded one: loss.backward() on a neurenix loss of
    # this output then runs torch's backward into the module's parameters (mixed-precision training).
    # A result without a graph is returned as it is (detaching it would only allocate an alias).
    if isinstance(out, (tuple, list)):
        return tuple(_results(o) for o in out)
    return out
