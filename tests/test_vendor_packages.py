"""Third-party packages proven from the outside: each is pip-installed into a fresh virtual
environment beside neurenix-core only, then discovered, ranked, selected, listed by ``neurenix
doctor``, run through the conformance kit and checked on real models.

Slow-ish (a venv and a pip install each, served from the pip cache) but part of the default run.
The whole file runs in one pytest-xdist worker (tests/conftest.py, ``ONE_WORKER``), which builds
each venv once; balanced test by test, every worker built every venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ORT = ROOT / "examples" / "neurenix-onnxruntime"
TEMPLATE = ROOT / "examples" / "vendor-template"
#: What a vendor's CI installs beside neurenix-core to run the conformance kit (pytest, hypothesis)
#: and read `neurenix doctor` (rich); the core's whole [test] extra (transformers, torchao, onnxscript,
#: matplotlib ...) doubled each venv's install time and is not what a vendor has.
KIT = ("pytest>=8", "hypothesis>=6.100", "rich>=13")
HEAVY = ("torch", "jax", "openvino", "ai_edge_litert", "tflite_runtime", "onnxruntime", "onnx")


class Env:
    """A fresh venv and a clean environment to run its interpreter in."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.python = str(path / "bin" / "python")

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR", "PIP_FIND_LINKS", "PIP_CERT") if k in os.environ}
        keep["PATH"] = f"{self.path / 'bin'}{os.pathsep}{keep.get('PATH', '')}"
        return {**keep, "JAX_PLATFORMS": "cpu", **extra}

    def run(self, args: list[str], timeout: float = 300, **extra: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(args, capture_output=True, text=True, env=self.env(**extra), timeout=timeout, cwd=str(self.path), check=False)
        return proc

    def py(self, code: str, **extra: str) -> Any:
        proc = self.run([self.python, "-c", code], **extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])


def make_env(tmp: Path, package: Path) -> Env:
    venv.EnvBuilder(with_pip=True, clear=True).create(tmp)
    env = Env(tmp)
    cmd = [env.python, "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(ROOT), *KIT, str(package)]
    proc = env.run(cmd, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return env


#: One venv per package per worker process. pytest tears a module fixture down whenever a worker
#: runs a test without knowing its next one (xdist hands tests over in batches), which would
#: build a venv again (~85 s); the venvs outlive that here, in the session's temp folder.
_ENVS: dict[str, Env] = {}


def _env_for(name: str, package: Path, factory: pytest.TempPathFactory) -> Env:
    if name not in _ENVS:
        _ENVS[name] = make_env(factory.mktemp(name), package)
    return _ENVS[name]


@pytest.fixture(scope="module")
def ort_env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    return _env_for("venv-ort", ORT, tmp_path_factory)


@pytest.fixture(scope="module")
def acme_env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    return _env_for("venv-acme", TEMPLATE, tmp_path_factory)


_STATE = """
import json, sys, neurenix_core as nx
rows = [b.as_dict() for b in nx.backends()]
heavy = [m for m in {heavy!r} if m in sys.modules]
default = str(nx.default_device())
t = nx.zeros(3)
print(json.dumps({{"rows": rows, "heavy": heavy, "default": default, "tensor_device": str(t.device), "devices": [str(d) for d in nx.devices()]}}))
"""


def state(env: Env, **extra: str) -> dict[str, Any]:
    return env.py(_STATE.format(heavy=HEAVY), **extra)


def row(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in data["rows"] if r["name"] == name)


def doctor(env: Env, **extra: str) -> dict[str, Any]:
    proc = env.run([str(env.path / "bin" / "neurenix"), "doctor", "--json"], **extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def conformance(env: Env, backend: str, **extra: str) -> dict[str, Any]:
    code = f"import json; from neurenix_core.testing import run_conformance; r = run_conformance({backend!r}); print(json.dumps({{'totals': r['totals'], 'rc': r['returncode'], 'tail': r['output_tail'][-1500:]}}))"
    return env.py(code, **extra)


def models(env: Env, script: Path, **extra: str) -> list[dict[str, Any]]:
    proc = env.run([env.python, str(script), "--json"], **extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return list(json.loads(line[len("RESULT "):]))


# ----------------------------------------------------------------------------- ONNX Runtime
def test_ort_env_holds_only_core_and_plugin(ort_env: Env) -> None:
    names = ort_env.py("import json; from importlib import metadata as m; print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))")
    assert {"neurenix-core", "neurenix-onnxruntime", "onnxruntime", "onnx"} <= set(names)
    assert not {"torch", "jax", "openvino", "neurenix-tpu", "neurenix-npu-openvino", "neurenix-edgetpu", "neurenix-cuda-tc"} & set(names)


def test_ort_discovered_ranked_and_not_auto_selected(ort_env: Env) -> None:
    data = state(ort_env)
    ort = row(data, "ort")
    assert ort["status"] == "available" and ort["distribution"] == "neurenix-onnxruntime"
    assert (ort["band"], ort["priority"], ort["device_count"]) == ("cpu", 40, 1)
    names = [r["name"] for r in data["rows"]]
    assert names.index("cpu") < names.index("ort"), "the CPU provider must not outrank the built-in cpu backend"
    assert data["default"] == "cpu:0" and "ort:0" in data["devices"]
    assert data["heavy"] == [], f"import neurenix_core imported {data['heavy']}"


def test_ort_selectable_with_neurenix_device(ort_env: Env) -> None:
    data = state(ort_env, NEURENIX_DEVICE="ort:0")
    assert data["default"] == "ort:0" and data["tensor_device"] == "ort:0"
    assert row(data, "ort")["status"] == "selected"


def test_ort_listed_by_doctor(ort_env: Env) -> None:
    report = doctor(ort_env, NEURENIX_DEVICE="ort:0")
    ort = next(b for b in report["backends"] if b["name"] == "ort")
    assert ort["status"] == "selected" and ort["capabilities"]["compiles_models"] is True
    assert report["default_device"] == "ort:0" and report["failures"] == []


def test_ort_passes_the_conformance_kit(ort_env: Env) -> None:
    result = conformance(ort_env, "ort")
    assert result["totals"]["failed"] == 0 and result["rc"] == 0, result["tail"]
    assert result["totals"]["passed"] > 150


def test_ort_models_match_the_reference(ort_env: Env) -> None:
    for r in models(ort_env, ORT / "examples" / "ort_models.py", NEURENIX_DEVICE="ort:0"):
        assert r["device"] == "ort:0" and "CPUExecutionProvider" in r["summary_fp32"]
        assert r["fp32_rel_err"] <= 1e-5, r
        assert r["fp16_rel_err"] <= 1e-2, r
        assert r["int8_top1_agreement"] >= 0.99, r


def test_ort_missing_provider_is_a_clear_error(ort_env: Env) -> None:
    proc = ort_env.run([ort_env.python, "-c", "import neurenix_core as nx; nx.zeros(2, device='ort:0')"], NEURENIX_ORT_PROVIDER="cuda")
    assert proc.returncode != 0
    assert "BackendUnavailableError" in proc.stderr and "'CUDAExecutionProvider'" in proc.stderr
    assert "CPUExecutionProvider" in proc.stderr, "the error must list the providers this build has"


# ----------------------------------------------------------------------------- template
def test_template_discovered_only_when_emulated_and_never_auto_selected(acme_env: Env) -> None:
    missing = row(state(acme_env), "acme")
    assert missing["status"] == "unavailable" and "/dev/acme" in missing["reason"] and "NEURENIX_EMULATE=acme" in missing["reason"]
    data = state(acme_env, NEURENIX_EMULATE="acme")
    acme = row(data, "acme")
    assert acme["status"] == "emulated" and acme["band"] == "accelerator" and acme["emulated"] is True
    assert data["default"] == "cpu:0", "an emulated device is never chosen automatically"
    assert data["heavy"] == []


def test_template_selectable_and_in_doctor(acme_env: Env) -> None:
    data = state(acme_env, NEURENIX_EMULATE="acme", NEURENIX_DEVICE="acme:0")
    assert data["default"] == "acme:0" and data["tensor_device"] == "acme:0"
    report = doctor(acme_env, NEURENIX_EMULATE="acme", NEURENIX_DEVICE="acme:0")
    acme = next(b for b in report["backends"] if b["name"] == "acme")
    assert acme["status"] == "selected" and acme["emulated"] is True


def test_template_unavailable_device_raises_naming_the_driver(acme_env: Env) -> None:
    proc = acme_env.run([acme_env.python, "-c", "import neurenix_core as nx; nx.zeros(3, device='acme:0')"])
    assert proc.returncode != 0 and "BackendUnavailableError" in proc.stderr and "ACME accelerator driver" in proc.stderr


def test_template_passes_the_conformance_kit(acme_env: Env) -> None:
    result = conformance(acme_env, "acme", NEURENIX_EMULATE="acme")
    assert result["totals"]["failed"] == 0 and result["rc"] == 0, result["tail"]
    assert result["totals"]["passed"] > 150


def test_template_models_match_the_reference(acme_env: Env) -> None:
    for r in models(acme_env, TEMPLATE / "examples" / "acme_models.py", NEURENIX_EMULATE="acme"):
        assert r["device"] == "acme:0"
        assert r["fp32_rel_err"] <= 1e-5, r
        assert r["int8_top1_agreement"] >= 0.99, r


def test_vendor_package_for_another_api_is_refused(acme_env: Env, tmp_path: Path) -> None:
    """A vendor release written for API 2 is installed over the template: the core refuses it at
    phase ``api`` before calling anything but its manifest, names it and says what to do."""
    copy = tmp_path / "acme-next"
    shutil.copytree(TEMPLATE, copy, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    plugin = copy / "src" / "neurenix_acme" / "plugin.py"
    plugin.write_text(plugin.read_text().replace('api=">=1.4,<2"', 'api=">=2.0,<3"'))
    pyproject = copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.2.0"'))
    proc = acme_env.run([acme_env.python, "-m", "pip", "install", "-q", "--no-deps", str(copy)], timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = doctor(acme_env, NEURENIX_EMULATE="acme")
    acme = next(b for b in report["backends"] if b["name"] == "acme")
    assert acme["status"] == "failed" and acme["failure"]["phase"] == "api"
    from neurenix_core.plugins.manifest import NEURENIX_API_VERSION

    core_api = ".".join(str(v) for v in NEURENIX_API_VERSION)
    assert ">=2.0,<3" in acme["failure"]["cause"] and core_api in acme["failure"]["cause"] and "neurenix-acme" in acme["failure"]["cause"]
    proc = acme_env.run([acme_env.python, "-c", "import neurenix_core as nx; nx.zeros(3, device='acme:0')"], NEURENIX_EMULATE="acme")
    assert proc.returncode != 0 and "failed at api" in proc.stderr


def test_core_does_not_know_the_vendor_packages() -> None:
    for path in (ROOT / "neurenix_core").rglob("*.py"):
        text = path.read_text()
        for name in ("neurenix_onnxruntime", "neurenix-onnxruntime", "neurenix_acme", "neurenix-acme"):
            assert name not in text, f"{path} mentions {name}: third-party backends must be found only through entry points"


if sys.platform != "linux":  # the venv layout above (bin/) is POSIX
    pytest.skip("fresh-venv tests use the POSIX venv layout", allow_module_level=True)
