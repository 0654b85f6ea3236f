"""benchmarks/opinfo_sweep.py on five OpInfo ops, one sample each: it runs, writes sorted records
with known outcomes, ``add`` and ``__rmul__`` import and match eager PyTorch, and ``--diff``
names an op whose outcome changed. Per emulated device (skipped where its plugin is not
installed), a handful of ops run with ``--device`` and their placement (native or on cpu:0) is
recorded."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTCOMES = {"pass", "eager float32 off", "wrong", "run refused", "import refused", "crash", "timeout", "export failed", "no float32",
            "unsupported sample"}


def test_opinfo_sweep_smoke(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the sweep imports PyTorch's OpInfo database")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"meta": {}, "ops": [{"name": "add", "variant": "", "outcome": "crash", "error": ""}]}))
    out = tmp_path / "now.json"
    env = {**os.environ, "NEURENIX_STATE_DIR": str(tmp_path / "state"), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "opinfo_sweep.py"), "--ops", "add,mul", "--limit", "5",
                           "--samples", "1", "--json", str(out), "--diff", str(old)],
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads(out.read_text())["ops"]
    assert len(records) == 5
    assert records == sorted(records, key=lambda r: (r["name"], r["variant"]))
    assert all(r["outcome"] in OUTCOMES for r in records), records
    by_name = {r["name"]: r for r in records if not r["variant"]}
    assert by_name["add"]["outcome"] == "pass", by_name["add"]
    assert by_name["__rmul__"]["outcome"] == "pass", by_name["__rmul__"]
    assert "torch " in proc.stdout and "cpu: " in proc.stdout and "imported: " in proc.stdout
    assert any(line.split()[:4] == ["add", "crash", "->", "pass"] for line in proc.stdout.splitlines()), proc.stdout


def test_the_float64_arbiter_tells_a_less_exact_eager_float32_from_a_wrong_result() -> None:
    """A float32 mismatch counts as "eager float32 off" only where eager float64 agrees with
    neurenix's result and not with eager float32's; any other mismatch stays wrong."""
    torch = pytest.importorskip("torch")
    sweep = load_script_from(ROOT / "benchmarks" / "opinfo_sweep.py")
    sample = types.SimpleNamespace(input=torch.tensor([1.0, 2.5, -3.0]), args=(), kwargs={})
    one = sweep.OneOp(torch, lambda x: (x + 1e8) - 1e8, sample)  # float32 loses x, float64 keeps it
    want32 = sweep.eager(torch, one, 0)
    exact = [np.array([1.0, 2.5, -3.0], np.float32)]
    assert sweep.mismatch(want32, exact)  # eager float32 is off here
    assert sweep.eager_float32_off(torch, one, want32, exact)
    assert not sweep.eager_float32_off(torch, one, want32, [exact[0] + 1])  # wrong against both
    assert not sweep.eager_float32_off(torch, one, exact, exact)  # nothing to arbitrate: float32 eager agrees


def load_script_from(path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("opinfo_sweep_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: (device, extra arguments, the plugin's package): each emulated device the sweep runs on.
DEVICES = [
    ("npu:0", [], "neurenix_npu_openvino"),
    ("tpu:0", ["--precision", "fp32"], "neurenix_tpu"),
    ("cuda:0", [], "neurenix_cuda_tc"),
    ("edgetpu:0", [], "neurenix_edgetpu"),
]
#: Ops every plugin lowers (they must run natively), and one (a masked index_put) that some plugins
#: leave to the partitioner: it must pass either way, its placement recorded.
NATIVE_OPS = ("add", "mul", "nn.functional.relu", "sum")
ANY_OPS = ("_unsafe_masked_index_put_accumulate",)


@pytest.mark.parametrize(("device", "extra", "package"), DEVICES, ids=[d[0] for d in DEVICES])
def test_opinfo_sweep_on_an_emulated_device(tmp_path: Path, device: str, extra: list[str], package: str) -> None:
    pytest.importorskip("torch", reason="the sweep imports PyTorch's OpInfo database")
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{device}: its plugin ({package}) is not installed")
    out = tmp_path / "now.json"
    kind = device.split(":")[0]
    env = {**os.environ, "NEURENIX_STATE_DIR": str(tmp_path / "state"), "JAX_PLATFORMS": "cpu", "NEURENIX_EMULATE": kind,
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    ops = ",".join(f"={name}" for name in NATIVE_OPS + ANY_OPS)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "opinfo_sweep.py"), "--device", device, *extra, "--ops", ops,
                           "--samples", "1", "--json", str(out)], capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["meta"]["device"] == device
    records = {r["name"]: r for r in data["ops"] if not r["variant"]}
    assert set(records) == set(NATIVE_OPS + ANY_OPS), records
    for name, record in records.items():
        assert record["outcome"] == "pass", record
        assert record["placement"] in ("native", "cpu:0"), record
        assert bool(record["fallback"]) == (record["placement"] == "cpu:0"), record  # a fallback names its op and reason
    for name in NATIVE_OPS:
        assert records[name]["placement"] == "native", records[name]
    assert f"ops on {device}" in proc.stdout and "pass or eager float32 off: " in proc.stdout, proc.stdout


def test_where_records_the_first_node_the_partitioner_put_on_cpu() -> None:
    """An op is ``native`` until one of its samples compiles with a node off the device; then it
    stays ``cpu:0`` with that node's op and reason, whatever later samples do."""
    sweep = load_script_from(ROOT / "benchmarks" / "opinfo_sweep.py")

    def compiled(*off: tuple[str, str]) -> types.SimpleNamespace:
        nodes = tuple(types.SimpleNamespace(node=f"n{i}", op=op, reason=why) for i, (op, why) in enumerate(off))
        return types.SimpleNamespace(placement=types.SimpleNamespace(off_device=nodes))

    where = sweep.Where()
    where.note(compiled())
    assert (where.placement, where.fallback) == ("native", "")
    where.note(compiled(("index_put", "op not declared by plugin npu"), ("sort", "x")))
    assert (where.placement, where.fallback) == ("cpu:0", "index_put: op not declared by plugin npu")
    where.note(compiled())
    where.note(compiled(("sort", "later")))
    assert (where.placement, where.fallback) == ("cpu:0", "index_put: op not declared by plugin npu")


def test_a_worker_killed_by_a_signal_has_its_running_op_recorded_as_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor records the op a worker died in (its last "running" line) as a crash naming
    the signal, and starts a new worker, which goes on after it."""
    sweep = load_script_from(ROOT / "benchmarks" / "opinfo_sweep.py")
    progress = tmp_path / "progress.jsonl"
    calls: list[list[str]] = []

    def worker(command: list[str], check: bool) -> types.SimpleNamespace:
        calls.append(command)
        with progress.open("a") as log:
            if len(calls) == 1:  # the first worker finishes add, then dies in pdist
                log.write(json.dumps({"meta": {"device": "npu:0"}}) + "\n")
                log.write(json.dumps({"running": {"name": "add", "variant": ""}}) + "\n")
                log.write(json.dumps({"name": "add", "variant": "", "outcome": "pass", "error": ""}) + "\n")
                log.write(json.dumps({"running": {"name": "nn.functional.pdist", "variant": ""}}) + "\n")
                return types.SimpleNamespace(returncode=-8)
            log.write(json.dumps({"running": {"name": "sub", "variant": ""}}) + "\n")
            log.write(json.dumps({"name": "sub", "variant": "", "outcome": "pass", "error": ""}) + "\n")
            return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(sweep.subprocess, "run", worker)
    assert sweep.supervise(["--device", "npu:0"], progress) == 0
    assert len(calls) == 2 and calls[1][-2:] == ["--worker", str(progress)]
    meta, records, running = sweep.read_progress(progress)
    assert meta == {"device": "npu:0"} and not running
    assert [(r["name"], r["outcome"]) for r in records] == [("add", "pass"), ("nn.functional.pdist", "crash"), ("sub", "pass")]
    assert records[1]["error"].startswith("SIGFPE")
