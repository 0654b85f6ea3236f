"""Arguments that are not arguments (issue #38): a misspelt keyword is a TypeError naming the
closest valid name, on every public entry point; nx.compile's options are checked against what
the core and the device's plugin declare, names and values, before anything compiles."""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.compile import options as compile_options
from neurenix_core.graph.compile.compiler import Compiled
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.plugins.manifest import Capabilities, CompileOption, Manifest, PriorityBand, validate_manifest
from neurenix_core.plugins.registry import PluginRecord
from neurenix_core.plugins.state import registry
from neurenix_core.tensor.signatures import SIGNATURES

ROOT = Path(__file__).resolve().parents[1]
PRESENT = {str(d).split(":")[0] for d in nx.devices()}


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3))


def _needs(device_type: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(device_type not in PRESENT, reason=f"no {device_type} device (its plugin is not installed or not emulated)")


# ----------------------------------------------------------------------------- nx.compile's own names
def test_a_misspelt_compile_parameter_is_refused_naming_the_parameter() -> None:
    """Before: ``nx.compile(model, devcie="npu:0", precison="fp16")`` compiled for cpu:0 in fp32."""
    with pytest.raises(TypeError, match=r"nx\.compile\(\) got an unexpected keyword argument 'devcie'; did you mean 'device'\?") as info:
        nx.compile(_model(), devcie="npu:0", precison="fp16")
    assert "cpu:0" in str(info.value) and "plugin cpu" in str(info.value)  # what was checked
    with pytest.raises(TypeError, match=r"'precison'; did you mean 'precision'\?"):
        nx.compile(_model(), precison="fp16")
    with pytest.raises(TypeError, match=r"'calibraton'; did you mean 'calibration'\?"):
        nx.compile(_model(), calibraton=[])


def test_an_option_of_another_device_names_the_plugin_that_declares_it() -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'stem'.*cpu:0.*'stem' is an option of plugin edgetpu") as info:
        nx.compile(_model(), device="cpu", stem="plain")
    if "edgetpu" not in {r.name for r in registry().records if r.manifest is not None}:
        pytest.fail(f"the edgetpu plugin is part of this repository's environment: {info.value}")


def test_the_core_sets_shape_buckets_itself() -> None:
    with pytest.raises(TypeError, match=r"'shape_buckets': nx\.compile sets it itself \(pass buckets=\)"):
        nx.compile(_model(), device="cpu", shape_buckets=True)
    with pytest.raises(TypeError, match=r"'shape_buckets'"):
        nx.compile(_model(), device="cpu", options={"shape_buckets": True})
    bucketed = nx.compile(_model(), device="cpu", buckets=[2, 4])
    assert bucketed.extra == {"shape_buckets": True}  # set by buckets=, as before


def test_options_and_keywords_merge_and_a_name_given_twice_is_refused() -> None:
    compiled = nx.compile(_model(), device="cpu", options={"runtime": "numpy"}, threads=1)
    assert compiled.extra == {"runtime": "numpy", "threads": 1}
    compiled(np.ones((2, 4), np.float32))
    assert "1 thread" in compiled.summary and "runtime numpy" in compiled.summary
    with pytest.raises(TypeError, match=r"option 'threads' twice"):
        nx.compile(_model(), device="cpu", options={"threads": 1}, threads=1)
    with pytest.raises(TypeError, match=r"options=\.\.\.\) takes a dict"):
        nx.compile(_model(), device="cpu", options=[("threads", 1)])
    with pytest.raises(TypeError, match=r"unexpected option 'thread'; did you mean 'threads'\?"):
        nx.compile(_model(), device="cpu", options={"thread": 1})


# ----------------------------------------------------------------------------- values
def test_an_unknown_runtime_is_refused_at_compile_time_with_the_installed_ones() -> None:
    """Before: ``runtime="onnx"`` compiled, and the first call raised."""
    names = compile_options.host_runtime_names(registry())
    with pytest.raises(nx.InvalidOptionError, match=r"cpu:0: runtime='onnx' names no host runtime installed here") as info:
        nx.compile(_model(), device="cpu", runtime="onnx")
    assert all(repr(n) in str(info.value) for n in names), (names, str(info.value))
    if "onnxruntime" in names:
        assert "Did you mean 'onnxruntime'?" in str(info.value)


def test_a_value_of_the_wrong_type_or_outside_the_declared_values_is_refused() -> None:
    with pytest.raises(nx.InvalidOptionError, match=r"threads='2' is refused by the core: threads takes an int or None"):
        nx.compile(_model(), device="cpu", threads="2")
    with pytest.raises(nx.InvalidOptionError, match=r"threads=0 must be a positive int"):
        nx.compile(_model(), device="cpu", threads=0)
    assert issubclass(nx.InvalidOptionError, nx.ConfigurationError) and issubclass(nx.InvalidOptionError, ValueError)


@_needs("npu")
def test_npu_options_are_the_plugins_declared_ones() -> None:
    with pytest.raises(nx.InvalidOptionError, match=r"npu:0: optimize_for='fastest' is refused by plugin npu: optimize_for "
                                                     r"takes one of 'performance', 'accuracy', 'latency', 'throughput' or None"):
        nx.compile(_model(), device="npu", optimize_for="fastest")
    with pytest.raises(TypeError, match=r"unexpected option 'optimise_for'; did you mean 'optimize_for'\?.*plugin npu declares "
                                        r"optimize_for, threads, ov_properties"):
        nx.compile(_model(), device="npu", options={"optimise_for": "latency"})
    compiled = nx.compile(_model(), device="npu", options={"optimize_for": "latency"})
    compiled(np.ones((2, 4), np.float32))
    assert "optimize_for=latency" in compiled.summary  # the option reached the plugin


@_needs("edgetpu")
def test_edgetpu_values_suggest_the_closest() -> None:
    with pytest.raises(nx.InvalidOptionError, match=r"io='int16' is refused by plugin edgetpu: io takes one of 'float', 'int8'; did you mean 'int8'\?"):
        nx.compile(_model(), device="edgetpu", io="int16")


#: Keywords the documentation shows on nx.compile (docs/, README.md, examples/), each on the device
#: whose plugin reads it: they keep working as keywords, and reach the plugin unchanged.
DOCUMENTED = [
    ("cpu", {"runtime": "numpy", "threads": 1}),
    ("npu", {"optimize_for": "throughput", "threads": 1, "ov_properties": {"PERFORMANCE_HINT": "LATENCY"}}),
    ("edgetpu", {"kernels": "reference", "io": "float", "stem": "plain", "num_threads": 1}),
    ("tpu", {"batch_buckets": (1, 8), "data_parallel": False}),
    ("ort", {"provider": "cpu", "threads": 1}),
]


@pytest.mark.parametrize(("device", "given"), DOCUMENTED, ids=[d for d, _ in DOCUMENTED])
def test_documented_keywords_keep_working(device: str, given: dict[str, Any]) -> None:
    if device not in PRESENT:
        pytest.skip(f"no {device} device here")
    assert nx.compile(_model(), device=device, **given).extra == given
    assert nx.compile(_model(), device=device, options=given).extra == given


def test_every_plugin_in_this_repository_declares_its_options() -> None:
    for r in registry().records:
        if r.manifest is not None and r.distribution and r.distribution.startswith("neurenix-"):
            assert r.manifest.capabilities.compile_options is not None, f"plugin {r.name} declares no compile options"


def test_option_declarations_match_what_the_plugins_read() -> None:
    """The manifests write the values out (they load without the frameworks); these are the
    constants the compile hooks check against."""
    by_plugin = {r.name: {o.name: o for o in r.manifest.capabilities.compile_options or ()} for r in registry().records if r.manifest}
    if "npu" in by_plugin:
        from neurenix_npu_openvino.config import OPTIMIZE_FOR

        assert set(by_plugin["npu"]["optimize_for"].values or ()) == set(OPTIMIZE_FOR)
    if "edgetpu" in by_plugin:
        from neurenix_edgetpu.lower_s2d import STEMS
        from neurenix_edgetpu.lowering import IO_KINDS
        from neurenix_edgetpu.runtime import KERNELS

        options = by_plugin["edgetpu"]
        assert (options["io"].values, set(options["kernels"].values or ()), options["stem"].values) == (IO_KINDS, set(KERNELS), STEMS)


# ----------------------------------------------------------------------------- the contract
def _record(compile_options_: Any) -> PluginRecord:
    record = PluginRecord("legacy", "nx_legacy", "neurenix-legacy", "1.0", builtin=False)
    record.manifest = Manifest(name="legacy", distribution="neurenix-legacy", version="1.0", api=">=1.0,<2", device_types=("cpu",),
                               band=PriorityBand.CPU, capabilities=Capabilities(compile_options=compile_options_))
    return record


def test_a_plugin_written_before_api_1_4_gets_unknown_names_unless_they_are_misspellings() -> None:
    params = frozenset({"device", "precision"})
    given = compile_options.checked(nx.Device("cpu:0"), _record(None), {"vendor_knob": 3}, None, params)
    assert given == {"vendor_knob": 3}  # its own option, as the 1.3 contract passed it
    with pytest.raises(TypeError, match=r"'devcie'; did you mean 'device'\?.*predates plugin API 1\.4"):
        compile_options.checked(nx.Device("cpu:0"), _record(None), {"devcie": "npu"}, None, params)
    with pytest.raises(TypeError, match=r"'vendor_knob'; valid: .*declares none"):
        compile_options.checked(nx.Device("cpu:0"), _record(()), {"vendor_knob": 3}, None, params)


def test_manifests_declare_options_as_checked_data() -> None:
    good = {"name": "acme", "distribution": "neurenix-acme", "version": "1", "api": ">=1.4,<2", "device_types": ("acme",), "band": "npu"}
    m = validate_manifest({**good, "capabilities": {"compile_options": [{"name": "cores", "type": "int|none", "doc": "cores"}]}})
    (cores,) = m.capabilities.compile_options or ()
    assert cores == CompileOption(name="cores", type="int|none", doc="cores") and cores.accepts(np.int64(2)) and cores.accepts(None)
    assert not cores.accepts(True) and not cores.accepts(2.5) and cores.expected() == "an int or None"
    assert m.capabilities.as_dict()["compile_options"] == [{"name": "cores", "type": "int|none", "values": None, "doc": "cores"}]
    for bad, why in (({"name": "device"}, "reserved"), ({"name": "shape_buckets"}, "reserved"), ({"name": "x", "type": "integer"}, "type"),
                     ({"name": "x", "values": ()}, "values"), ({"name": "not valid"}, "identifier"), ({"name": "x", "values": ("\x1b[2J",)}, "values")):
        with pytest.raises(ValueError, match=why):
            validate_manifest({**good, "capabilities": {"compile_options": [bad]}})
    with pytest.raises(ValueError, match="declared twice"):
        validate_manifest({**good, "capabilities": {"compile_options": [{"name": "x"}, {"name": "x"}]}})


# ----------------------------------------------------------------------------- every entry point
#: The array API namespace (per-op paths: Python's own signature checks, no wrapper) and functions
#: that take no argument. Everything else public must refuse a misspelt keyword with a suggestion.
_ARRAY_API = {*SIGNATURES, "asarray", "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "zeros_like", "ones_like",
              "empty_like", "full_like", "from_numpy", "from_dlpack", "isdtype", "result_type", "can_cast", "finfo", "iinfo"}


def _public_functions() -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    namespaces = (("nx.", nx, [*nx.__all__, "compile", "generate", "load_compiled"]), ("nx.nn.", nx.nn, nx.nn.__all__),
                  ("nx.distributed.", nx.distributed, nx.distributed.__all__), ("nx.generation.", nx.generation, nx.generation.__all__))
    for prefix, module, names in namespaces:
        for name in names:
            obj = getattr(module, name)
            if inspect.isfunction(obj) and not (module is nx and name in _ARRAY_API):
                found[prefix + name] = obj
    from neurenix_core.generation import CausalLM

    for cls, methods in ((Compiled, ("save", "verify")), (nn.Module, ("save", "load", "load_state_dict")),
                         (CausalLM, ("__init__", "generate"))):
        for method in methods:
            found[f"{cls.__name__}.{method}"] = getattr(cls, method)
    return found


def _keyword_parameter(fn: Callable[..., Any]) -> inspect.Parameter | None:
    """The parameter a caller names by keyword: the first optional one (``device=``), else the first."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [p for p in inspect.signature(fn).parameters.values() if p.kind in kinds and p.name != "self"]
    return next((p for p in named if p.default is not p.empty), named[0] if named else None)


_ENTRY_POINTS = _public_functions()
_WITH_KEYWORDS = sorted(name for name, fn in _ENTRY_POINTS.items() if _keyword_parameter(fn) is not None)


def test_the_walk_finds_the_entry_points_of_the_issue() -> None:
    names = set(_ENTRY_POINTS)
    assert {"nx.compile", "nx.compile_step", "nx.generate", "nx.load_compiled", "nx.nn.from_torch", "nx.nn.from_onnx", "nx.nn.save",
            "nx.distributed.save_checkpoint", "nx.distributed.load_checkpoint", "Compiled.save", "CausalLM.generate"} <= names


def test_the_entry_points_left_out_take_no_argument() -> None:
    left = {name: str(inspect.signature(_ENTRY_POINTS[name])) for name in set(_ENTRY_POINTS) - set(_WITH_KEYWORDS)}
    assert all(sig.startswith("()") for sig in left.values()), left
    assert len(_WITH_KEYWORDS) >= 30, _WITH_KEYWORDS


@pytest.mark.parametrize("name", _WITH_KEYWORDS)
def test_every_public_entry_point_suggests_the_keyword_meant(name: str) -> None:
    """A new entry point without strict_kwargs fails here: Python 3.11 names no suggestion."""
    fn = _ENTRY_POINTS[name]
    param = _keyword_parameter(fn)
    assert param is not None
    typo = param.name[:-1] + param.name[-1] * 2  # "device" -> "devicee"
    required = [object() for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != param.name]
    if name.startswith(("Compiled.", "Module.", "CausalLM.")):
        required = required or [object()]  # self
    with pytest.raises(TypeError) as info:
        fn(*required, **{typo: 1})
    assert f"unexpected keyword argument '{typo}'; did you mean '{param.name}'?" in str(info.value), str(info.value)


# ----------------------------------------------------------------------------- the helper
def test_strict_kwargs_keeps_the_function_and_lets_python_word_its_own_errors() -> None:
    @strict_kwargs("demo")
    def demo(a: int, /, b: int, *, scale: float = 1.0) -> float:
        return (a + b) * scale

    assert demo(1, b=2, scale=2.0) == 6.0 and str(inspect.signature(demo)) == "(a: 'int', /, b: 'int', *, scale: 'float' = 1.0) -> 'float'"
    with pytest.raises(TypeError, match=r"demo\(\) got an unexpected keyword argument 'scal'; did you mean 'scale'\?"):
        demo(1, 2, scal=2.0)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'zzz'; it takes b, scale"):
        demo(1, 2, zzz=0)
    with pytest.raises(TypeError, match="positional-only"):  # Python's own wording for its own rule
        demo(a=1, b=2)
    assert pickle.loads(pickle.dumps(nx.nn.from_torch)) is nx.nn.from_torch
    with pytest.raises(TypeError, match=r"without \*\*kwargs"):
        strict_kwargs("bad")(lambda **kw: kw)


def test_the_example_runs() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "strict_arguments.py")], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "did you mean 'device'?" in out and "did you mean 'quantization_plan'?" in out and "runtime='onnx' names no host runtime" in out, out
    assert "did you mean 'float16'?" in out and ("dtype torch.float16 -> float16" in out or "torch is not installed" in out), out
    assert "did you mean 'npu:0'" in out.lower() and "did you mean 'cuda:0'" in out.lower(), out
