"""What ``import neurenix_core`` must not load (issue 17, the import-time budget).

Each of these was measured at ~0.2-3 ms of import and moved to first use; a fresh interpreter with
this repository's plugins (no third-party plugin, so no crash journal) checks they stay out.
Counting modules, not timing: no timed asserts in tests (benchmarks/import_time.py times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

DEFERRED = (
    "threading",  # the probe worker runs on _thread
    "glob",  # the tpu and edgetpu probes list folders themselves
    "dataclasses",
    "neurenix_core.autograd.engine",  # loaded by the first autograd use (autograd/on_demand.py)
    "neurenix_core.autograd.grad",
    "neurenix_core.autograd.amp",
    "neurenix_core.tensor.signatures",  # the generated ops need no table at import
    "neurenix_core.tensor.dtype_info",  # finfo/iinfo answer types
    "neurenix_core.plugins.journal",  # only with a third-party plugin
    "neurenix_core.plugins.first_run",  # only for a third-party version never seen (subprocess, json)
    "fcntl",
    "pluggy",  # only for a plugin whose hooks need pluggy's registration (plugins/hooktable.py)
)

#: Never loaded by ``import neurenix_core; nx.default_device()``, whatever plugins are installed
#: (this repository's, and the onnxruntime example, a third-party plugin).
NEVER = (
    "pluggy",  # every installed plugin registers without it
    "importlib.metadata",  # entry points are read by plugins/entrypoints.py (~40 ms with email)
    "email",
    "neurenix_core.graph",  # the compiler and its IR: nx.compile
    "neurenix_core.nn",
    "neurenix_core.tensor.tensor",  # the tensor layer loads with the first tensor name (nx.zeros ...)
    "neurenix_core.tensor.creation",
    "neurenix_core.tensor.ops",
    "neurenix_core.tensor._generated_ops",
    "neurenix_core.tensor.fallback",
    "neurenix_core.tensor.host_run",
    "neurenix_core.autograd.engine",
    "neurenix_core.plugins.backend",  # the backend base classes load when the first backend starts
    "neurenix_core.plugins.memory",
    "neurenix_core.backends.cpu_backend",
    "torch",
    "jax",
    "openvino",
    "ai_edge_litert",
    "tflite_runtime",
)


def _loaded_after_import(env_extra: dict[str, str]) -> list[str]:
    code = f"import sys, json, neurenix_core; print(json.dumps([m for m in {DEFERRED!r} if m in sys.modules]))"
    return _json_of(code, env_extra)


def test_import_leaves_deferred_modules_unloaded() -> None:
    assert _loaded_after_import({"NEURENIX_BACKENDS": "-onnxruntime"}) == []


def test_default_device_loads_none_of_the_deferred_modules() -> None:
    """``import neurenix_core`` and then ``nx.default_device()``, the issue 43 measurement (and the
    seed-style facade): discovery with every plugin installed, the third-party example included."""
    for module in ("neurenix_core", "neurenix"):
        code = (
            f"import sys, json, {module} as nx\n"
            "device = str(nx.default_device())\n"
            f"print(json.dumps([device, [m for m in {NEVER!r} if m in sys.modules]]))"
        )
        device, loaded = _json_of(code)
        assert loaded == [], module
        assert device == "cpu:0"


def test_lazily_resolved_names_work() -> None:
    """Names loaded on first attribute access resolve to the real objects, and only then load."""
    code = (
        "import sys, json, neurenix_core as nx\n"
        "before = [m for m in ('neurenix_core.graph.compile.compiler', 'neurenix_core.nn', 'neurenix_core.autograd.grad') if m in sys.modules]\n"
        "from neurenix_core.graph.compile.compiler import compile as compiler_compile\n"
        "from neurenix_core.autograd.grad import no_grad\n"
        "layer = nx.nn.Linear(2, 3)\n"
        "print(json.dumps([before, nx.compile is compiler_compile, nx.no_grad is no_grad, type(layer).__module__,"
        " nx.BackendInfo.__name__, sorted({'nn', 'no_grad', 'hookimpl', 'Tensor'} - set(dir(nx)))]))"
    )
    assert _json_of(code) == [[], True, True, "neurenix_core.nn.layers", "BackendInfo", []]


def test_the_cpu_backend_class_loads_when_the_backend_starts() -> None:
    code = (
        "import sys, json, neurenix_core as nx\n"
        "before = 'neurenix_core.backends.cpu_backend' in sys.modules\n"
        "from neurenix_core.backends.cpu import CPUBackend\n"
        "from neurenix_core.contract import CPUBackend as from_contract\n"
        "print(json.dumps([before, type(nx.backend('cpu')) is CPUBackend is from_contract, issubclass(CPUBackend, nx.ArrayNamespaceBackend),"
        " nx.MemoryStats.__name__, sorted({'Backend', 'CompiledModel', 'MemoryStats'} - set(dir(nx)))]))"
    )
    assert _json_of(code) == [False, True, True, "MemoryStats", []]


def test_the_namespace_lists_the_tensor_layer_before_loading_it() -> None:
    """``nx.__all__`` names the array API functions from op_names.py (ops unloaded): the same list."""
    code = (
        "import sys, json, neurenix_core as nx\n"
        "names, listed = list(nx.__all__), {'Tensor', 'zeros', 'matmul', 'fallback_policy'} <= set(dir(nx))\n"
        "loaded = 'neurenix_core.tensor.ops' in sys.modules\n"
        "from neurenix_core.tensor import ops, creation, fallback, tensor\n"
        "fallback_names = ['fallback_policy', 'fallback_stats', 'get_fallback_policy', 'reset_fallback_stats', 'set_fallback_policy']\n"
        "homes = [(tensor, ['Tensor', 'from_dlpack']), (creation, creation.__all__), (fallback, fallback_names), (ops, ops.__all__)]\n"
        "print(json.dumps([loaded, listed, [n for n in ops.__all__ if n not in names],"
        " [n for home, ns in homes for n in ns if getattr(nx, n) is not getattr(home, n)]]))"
    )
    assert _json_of(code) == [False, True, [], []]


def test_a_wheel_install_loads_no_pathlib() -> None:
    """Without the editable installs' path finder (which loads pathlib at start-up), import +
    default_device() loads no pathlib (~4 ms; the plugins' probes use os.path): the checkout, the
    plugins' sources and site-packages on PYTHONPATH, site's .pth files not run (-S)."""
    purelib = sysconfig.get_paths()["purelib"]
    roots = [str(ROOT)]
    for pth in sorted(os.listdir(purelib)):
        if pth.startswith("__editable__.") and pth.endswith(".pth"):
            with open(os.path.join(purelib, pth)) as fh:
                roots += [line.strip() for line in fh if line.strip() and not line.startswith("import ") and os.path.isdir(line.strip())]
    code = (
        "import sys, json, numpy\n"
        "before = set(sys.modules)\n"
        "import neurenix_core as nx\n"
        "device = str(nx.default_device())\n"
        "print(json.dumps([device, 'pathlib' in before, sorted(b.name for b in nx.backends()),"
        " [m for m in ('pathlib', *NEVER) if m in sys.modules]]))"
    ).replace("*NEVER", repr(NEVER)[1:-1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env["PYTHONPATH"] = os.pathsep.join([*roots, purelib])
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, check=True)
    device, preloaded, names, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert device == "cpu:0" and not preloaded
    assert {"cpu", "tpu", "edgetpu"} <= set(names)  # the plugins were discovered
    assert loaded == []


def test_the_autograd_engine_loads_on_first_use() -> None:
    code = (
        "import sys, json, numpy as np, neurenix_core as nx\n"
        "x = nx.asarray(np.ones(3, dtype=np.float32))\n"
        "before = 'neurenix_core.autograd.engine' in sys.modules\n"
        "leaf = x.is_leaf\n"
        "x.requires_grad_()\n"
        "nx.sum(x * x).backward()\n"
        "print(json.dumps([before, leaf, x.grad.numpy().tolist(), 'neurenix_core.autograd.engine' in sys.modules]))"
    )
    assert _json_of(code) == [False, True, [2.0, 2.0, 2.0], True]


def test_the_seed_facade_costs_what_the_core_costs() -> None:
    """``import neurenix as nx`` (the seeds' spelling) loads no more than ``import neurenix_core``:
    nn (with the graph tracer), the graph IR and the optimizers load on first use."""
    code = (
        "import sys, json, neurenix_core\n"
        "core = set(sys.modules)\n"
        "import neurenix as nx\n"
        "extra = sorted(m for m in set(sys.modules) - core if not m.startswith('neurenix.') and m != 'neurenix')\n"
        "layer = nx.nn.Linear(2, 3)\n"
        "print(json.dumps([extra, type(layer).__module__, 'neurenix_core.nn' in sys.modules, nx.device is sys.modules['neurenix.device'],"
        " sorted({'nn', 'optim', 'hardware', 'compile', 'Tensor'} - set(dir(nx)))]))"
    )
    assert _json_of(code) == [[], "neurenix_core.nn.layers", True, True, []]


def _json_of(code: str, env_extra: dict[str, str] | None = None) -> Any:
    """The last line ``code`` prints, as JSON, from a fresh interpreter without the caller's
    NEURENIX_* settings (plus ``env_extra``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
