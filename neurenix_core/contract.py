"""Everything a backend plugin imports from the core, in one module (docs/vendors.md).

The hooks and their values (``hookimpl``, ``Manifest``, ``Capabilities``, ``ProbeContext`` ...),
the backend base classes, the graph IR the compile hook receives, the host-runtime contract, and
the helpers the first-party plugins build on (references, quantization parameters, the
compiled-input rule, compile-cache keys, seed-style classes). The hooks and manifest fields are
versioned by ``NEURENIX_API_VERSION``; the helpers follow ``neurenix-core``'s minor releases.

Each name lives in its own layer (docs/architecture.md) and loads on first access, so a plugin's
hook module can import this one at discovery without loading the compiler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the names for type checkers; at run time __getattr__ loads each from HOMES
    from neurenix_core.autograd.grad import no_grad  # noqa: F401
    from neurenix_core.backends.cpu import CPUBackend  # noqa: F401
    from neurenix_core.device import Device, DeviceLike, DeviceType, as_device  # noqa: F401
    from neurenix_core.graph import opset  # noqa: F401
    from neurenix_core.graph.compile import cache as compile_cache  # noqa: F401
    from neurenix_core.graph.compile.artifact import member  # noqa: F401
    from neurenix_core.graph.compile.artifact_arrays import read_arrays, write_arrays  # noqa: F401
    from neurenix_core.graph.compile.cache import cache_key, plan_fingerprint, runtime_folder  # noqa: F401
    from neurenix_core.graph.compile.inputs import call_runtime, check_outputs, deliver, to_device_input, to_device_inputs  # noqa: F401
    from neurenix_core.graph.exporters import onnx_export  # noqa: F401
    from neurenix_core.graph.ir import CompileOptions, Graph, Node, QuantizationPlan, QuantParams, TensorSpec  # noqa: F401
    from neurenix_core.graph.ir.host import HostModel, HostOptions, HostRuntime  # noqa: F401
    from neurenix_core.graph.ir.host_state import StatefulModel, StateSpec  # noqa: F401
    from neurenix_core.graph.ir.qmath import fake_quantize, quantize_weight, softmax_output_params, weight_params  # noqa: F401
    from neurenix_core.graph.ir.shapes import ValueSpec, infer_values, node_spec  # noqa: F401
    from neurenix_core.graph.opset import OPSET, attrs_of  # noqa: F401
    from neurenix_core.graph.opset.nn import conv_geometry, conv_transpose_geometry  # noqa: F401
    from neurenix_core.graph.quantization.activation_groups import ACTIVATION_GROUP, quantize_groups  # noqa: F401
    from neurenix_core.graph.quantization.calibration import calibrate  # noqa: F401
    from neurenix_core.graph.quantization.weights import (  # noqa: F401
        ACTIVATION_SCHEMES,
        WEIGHT_SCHEMES,
        dequantize,
        is_weight_plan,
        quantizes_activations,
        scheme_of,
        weight_codes,
    )
    from neurenix_core.graph.reference.run import run_graph, run_quantized  # noqa: F401
    from neurenix_core.nn.module import Module  # noqa: F401
    from neurenix_core.plugins.backend import ArrayNamespaceBackend, Backend, CompiledModel  # noqa: F401
    from neurenix_core.plugins.hookspecs import hookimpl  # noqa: F401
    from neurenix_core.plugins.manifest import (  # noqa: F401
        NEURENIX_API_VERSION,
        Capabilities,
        CompileOption,
        Manifest,
        PriorityBand,
        ProbeContext,
        ProbeResult,
        api_compatible,
        validate_manifest,
    )
    from neurenix_core.plugins.opnames import OPSET_NAMES  # noqa: F401
    from neurenix_core.plugins.seed_api import DeviceBackend, device_available  # noqa: F401
    from neurenix_core.plugins.state import registry  # noqa: F401
    from neurenix_core.tensor import fallback  # noqa: F401
    from neurenix_core.tensor.dtypes import DTYPE_NAMES, DTYPES, result_type  # noqa: F401
    from neurenix_core.tensor.tensor import Tensor, adopt, replace_data, wrap_on  # noqa: F401
    from neurenix_core.training.step import refuse_random_layers, swapped, trainable_state  # noqa: F401
    from neurenix_core.user_frame import user_stacklevel  # noqa: F401

#: name -> the module that defines it (a module name alone: the name is that module).
HOMES: Final[dict[str, str]] = {
    # The hooks (plugins/hookspecs.py) and the values they take and return.
    "hookimpl": "neurenix_core.plugins.hookspecs",
    **dict.fromkeys(("NEURENIX_API_VERSION", "Capabilities", "CompileOption", "Manifest", "PriorityBand", "ProbeContext", "ProbeResult",
                     "api_compatible", "validate_manifest"), "neurenix_core.plugins.manifest"),
    **dict.fromkeys(("Backend", "ArrayNamespaceBackend", "CompiledModel"), "neurenix_core.plugins.backend"),
    # The graph IR that neurenix_compile receives, and the host-runtime contract of cpu:0.
    **dict.fromkeys(("Graph", "Node", "TensorSpec", "QuantizationPlan", "QuantParams", "CompileOptions"), "neurenix_core.graph.ir"),
    **dict.fromkeys(("HostRuntime", "HostModel", "HostOptions"), "neurenix_core.graph.ir.host"),
    **dict.fromkeys(("StatefulModel", "StateSpec"), "neurenix_core.graph.ir.host_state"),
    **dict.fromkeys(("ValueSpec", "infer_values", "node_spec"), "neurenix_core.graph.ir.shapes"),
    "OPSET_NAMES": "neurenix_core.plugins.opnames",
    # The op table: what each op takes, for a lowering.
    **dict.fromkeys(("OPSET", "attrs_of"), "neurenix_core.graph.opset"),
    # The reference's padding and output window of conv / conv_transpose, for a lowering to follow.
    **dict.fromkeys(("conv_geometry", "conv_transpose_geometry"), "neurenix_core.graph.opset.nn"),
    # What a lowering is checked against, and quantization parameters computed the core's way.
    **dict.fromkeys(("run_graph", "run_quantized"), "neurenix_core.graph.reference.run"),
    **dict.fromkeys(("weight_params", "softmax_output_params", "fake_quantize", "quantize_weight"), "neurenix_core.graph.ir.qmath"),
    "calibrate": "neurenix_core.graph.quantization.calibration",
    **dict.fromkeys(("weight_codes", "dequantize", "is_weight_plan", "quantizes_activations", "scheme_of", "WEIGHT_SCHEMES",
                     "ACTIVATION_SCHEMES"), "neurenix_core.graph.quantization.weights"),
    # The int8 activations of the "-int8-activations" weight schemes: the group and its rounding.
    **dict.fromkeys(("ACTIVATION_GROUP", "quantize_groups"), "neurenix_core.graph.quantization.activation_groups"),
    # Seed-style optimize_model / load_model following the compiled-input rule.
    **dict.fromkeys(("to_device_input", "to_device_inputs", "deliver", "call_runtime", "check_outputs"), "neurenix_core.graph.compile.inputs"),
    # A persistent compile cache keyed like the core's.
    **dict.fromkeys(("cache_key", "plan_fingerprint", "runtime_folder"), "neurenix_core.graph.compile.cache"),
    # Compiled artifacts (neurenix_save_compiled / neurenix_load_compiled): files inside the part's folder.
    "member": "neurenix_core.graph.compile.artifact",
    **dict.fromkeys(("read_arrays", "write_arrays"), "neurenix_core.graph.compile.artifact_arrays"),
    # Tensors a backend makes and trains: wrapping natives, replacing a parameter's data in place.
    **dict.fromkeys(("Tensor", "adopt", "wrap_on", "replace_data"), "neurenix_core.tensor.tensor"),
    "no_grad": "neurenix_core.autograd.grad",
    "Module": "neurenix_core.nn.module",
    **dict.fromkeys(("trainable_state", "refuse_random_layers", "swapped"), "neurenix_core.training.step"),
    # The registry (which plugin serves a device) and the built-in CPU backend's host kernels.
    "registry": "neurenix_core.plugins.state",
    "CPUBackend": "neurenix_core.backends.cpu",
    # Seed-style XBackend().initialize() and is_x_available().
    **dict.fromkeys(("DeviceBackend", "device_available"), "neurenix_core.plugins.seed_api"),
    # dtype names and promotion, device parsing.
    **dict.fromkeys(("DTYPES", "DTYPE_NAMES", "result_type"), "neurenix_core.tensor.dtypes"),
    **dict.fromkeys(("Device", "DeviceLike", "DeviceType", "as_device"), "neurenix_core.device"),
    # A warning that names the user's line, however deep in the plugin it is raised.
    "user_stacklevel": "neurenix_core.user_frame",
}

#: name -> a module exported whole (its functions read better qualified: ``fallback.record``).
MODULES: Final[dict[str, str]] = {
    "opset": "neurenix_core.graph.opset",  # attrs_of, OPSET ...
    "onnx_export": "neurenix_core.graph.exporters.onnx_export",  # export, Exporter, GRAPH_OPS, MIN_OPSET, EMIT
    "compile_cache": "neurenix_core.graph.compile.cache",  # cached, cache_root ...: a cache keyed like the core's
    "fallback": "neurenix_core.tensor.fallback",  # record, get_fallback_policy: a kernel that declines at run time
}

__all__ = sorted([*HOMES, *MODULES])  # noqa: PLE0605 - the names load on first access (__getattr__)


def __getattr__(name: str) -> Any:
    if name in MODULES:
        value = importlib.import_module(MODULES[name])
    elif name in HOMES:
        value = getattr(importlib.import_module(HOMES[name]), name)
    else:
        raise AttributeError(f"module 'neurenix_core.contract' has no attribute {name!r}; docs/vendors.md lists what it has")
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return __all__
