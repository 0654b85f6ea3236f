"""nx.distributed (issue #27): 2 local processes under torchrun on cpu:0, cuda:0 (emulated:
PyTorch CPU, gloo) and tpu:0 (emulated: JAX CPU, jax.distributed) train to the parameters of one
process on the whole global batch, identical across ranks, and resume from rank 0's checkpoint;
collectives and the eager tape's average_gradients; a crashing rank and a mismatched world size
end the other rank with a typed error naming the rank, within the timeout."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.distributed.launch import read_launch_env
from neurenix_core.errors import DistributedError, ShapeError, WorldSizeMismatchError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "distributed_train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
LIMIT_S = 240  # a launch's wall-clock ceiling on a loaded 2-vCPU machine; a hang would exceed it


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_", "TORCHELASTIC"))}
    env.update(NEURENIX_EMULATE="cuda,tpu", JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1",
               XLA_FLAGS="--xla_force_host_platform_device_count=4", PYTHONPATH=str(ROOT))
    return env


def _torchrun(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=LIMIT_S, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    return proc


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("distributed_train_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


# ---------------------------------------------------------------------- 2 processes, 20 Adam steps
@pytest.mark.parametrize("device", ["cpu:0", "cuda:0", "tpu:0"])
def test_data_parallel_matches_one_process_on_the_global_batch(device: str, tmp_path: Path) -> None:
    if not nx.Device(device).is_available():
        pytest.fail(f"{device} should be emulated here (NEURENIX_EMULATE=cuda,tpu)")
    _torchrun(str(EXAMPLE), "--device", device, "--steps", "20", "--out", str(tmp_path), "--checkpoint", str(tmp_path / "ckpt"))
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    reference = _example().reference(device, 20)
    assert set(ranks[0]) == set(reference) and len(reference) == 4
    for name, want in reference.items():
        assert np.array_equal(ranks[0][name], ranks[1][name]), name  # identical across ranks, bit for bit
        assert _relative(ranks[0][name], want) <= 1e-5, (name, _relative(ranks[0][name], want))
    engine = "jax.distributed" if device.startswith("tpu") else "torch.distributed (gloo)"
    summaries = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(s["rank"], s["world_size"], s["device"], s["engine"]) for s in summaries] == [(r, 2, device, engine) for r in range(2)]
    # Rank 0 wrote the checkpoint; both ranks resumed from it and reached the same parameters.
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["meta.json", "model.npz", "optimizer.npz"]
    assert [(s["resumed_from"], s["resumed_identical"]) for s in summaries] == [(10, True), (10, True)]


@pytest.mark.parametrize("device", ["cpu:0", "tpu:0"])
def test_collectives_and_the_eager_tape(device: str, tmp_path: Path) -> None:
    _torchrun(str(ROOT / "tests" / "support" / "dist_collectives.py"), device, str(tmp_path))
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["rank"] for r in results] == [0, 1] and {r["world"] for r in results} == {2}
    base = np.arange(3, dtype=np.float32)
    for r in results:
        assert r["device"] == device
        assert r["sum"] == (2 * base + 10).tolist()
        assert r["mean"] == (base + 5).tolist()
        assert r["max"] == (base + 10).tolist()
        assert r["gather"] == [base.tolist(), (base + 10).tolist()]
        assert r["bcast"] == (base + 10).tolist()
    assert results[0]["params"] == results[1]["params"]
    # The eager tape with average_gradients equals one process on the whole batch.
    want = _eager_reference(device)
    for got, ref in zip(results[0]["params"], want):
        assert _relative(np.asarray(got, np.float32), ref) <= 1e-5


def _eager_reference(device: str) -> list[np.ndarray]:
    from neurenix_core import nn
    from neurenix_core.nn import functional as F
    from neurenix_core.optim import SGD

    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1)).to(device)
    opt = SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    for _ in range(3):
        gx = rng.standard_normal((8, 4)).astype(np.float32)
        gy = rng.standard_normal((8, 1)).astype(np.float32)
        opt.zero_grad()
        F.mse_loss(model(nx.asarray(gx, device=device)), nx.asarray(gy, device=device)).backward()
        opt.step()
    return [p.numpy().ravel() for p in model.parameters()]


# ---------------------------------------------------------------------- failures
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch_by_hand(args: list[str], worlds: list[int]) -> list[subprocess.Popen[str]]:
    """torchrun's contract set by hand (no agent that would end the survivors itself)."""
    port, procs = _free_port(), []
    for rank, world in enumerate(worlds):
        env = _env()
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(EXAMPLE), *args], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def _finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=LIMIT_S)
        finally:
            if p.poll() is None:
                p.kill()
        out.append((p.returncode, stdout + stderr))
    return out


@pytest.mark.parametrize(("device", "dies"), [("cpu", 1), ("cpu", 0), ("tpu", 1)])
def test_a_dying_rank_ends_the_other_with_rank_failed_error(device: str, dies: int) -> None:
    timeout_s = 10.0  # the engine's own timeouts; the heartbeat names the dead rank well before them
    start = time.monotonic()
    args = ["--device", device, "--steps", "20", "--die-rank", str(dies), "--die-at-step", "5", "--timeout", str(timeout_s)]
    results = _finish(_launch_by_hand(args, [2, 2]))
    (rc_dead, out_dead), (rc, out) = results[dies], results[1 - dies]
    assert rc_dead == 17, out_dead  # the crash itself
    # cpu: the exception ends the process (1); tpu: after it, jax's own shutdown gives up on the dead
    # task once its heartbeat timeout (= the timeout) passes, and aborts (SIGABRT).
    assert rc in ((1,) if device == "cpu" else (1, -6)), out
    error = [line for line in out.splitlines() if "neurenix_core.errors.RankFailedError: " in line]  # torch prefixes "[rank0]: "
    # Rank 0 hosts the store here (no torchrun agent): its death is told by the store going away.
    assert error and f"rank(s) [{dies}] stopped" in error[0], out
    assert time.monotonic() - start < LIMIT_S


def test_mismatched_world_sizes_end_both_ranks_with_a_typed_error() -> None:
    procs = _launch_by_hand(["--device", "cpu", "--steps", "2", "--timeout", "20"], [2, 3])
    results = _finish(procs)
    for rc, out in results:
        assert rc == 1, out
        assert "WorldSizeMismatchError" in out, out
    assert "rank 1 with 3" in results[0][1] or "rank 0 with 2" in results[1][1]


def test_a_rank_that_never_starts_is_named_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    for var, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(var, value)
    start = time.monotonic()
    with pytest.raises(WorldSizeMismatchError, match=r"rank\(s\) \[1\] did not join within 2 s"):
        nx.distributed.init("cpu", timeout=2.0)
    assert time.monotonic() - start < 60
    assert not nx.distributed.is_initialized()


def test_a_slurm_launch_is_read_from_slurm_variables(tmp_path: Path) -> None:
    port, procs = _free_port(), []
    for task in range(2):
        env = _env()  # no RANK/WORLD_SIZE: srun's variables only
        env.update(SLURM_PROCID=str(task), SLURM_NTASKS="2", SLURM_LOCALID=str(task), SLURM_JOB_NODELIST="localhost",
                   SLURM_JOB_ID="4242", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "dist_collectives.py"), "cpu:0", str(tmp_path)], env=env,
                                      text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = _finish(procs)
    for rc, out in results:
        assert rc == 0, out
    lines = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert sorted((r["rank"], r["world"], r["engine"]) for r in lines) == [(0, 2, "torch.distributed (gloo)"), (1, 2, "torch.distributed (gloo)")]
    assert lines[0]["sum"] == [10.0, 12.0, 14.0]


# ---------------------------------------------------------------------- in process
def test_launch_environment_is_read_from_torchrun_and_slurm() -> None:
    tr = read_launch_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500",
                          "TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert (tr.source, tr.rank, tr.world_size, tr.local_rank, tr.master_addr, tr.master_port, tr.agent_store) == (
        "torchrun", 1, 4, 1, "h", 29500, True)
    sl = read_launch_env({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_JOB_NODELIST": "gpu[07-08]",
                          "SLURM_JOB_ID": "1234"})
    assert (sl.source, sl.rank, sl.world_size, sl.local_rank, sl.master_addr, sl.master_port) == ("slurm", 3, 8, 1, "gpu07", 21234)
    assert read_launch_env({}).source == "single"
    assert read_launch_env({"TPU_WORKER_HOSTNAMES": "a,b"}).source == "tpu-pod"
    with pytest.raises(WorldSizeMismatchError, match="rank 2 was launched with world size 2"):
        read_launch_env({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    with pytest.raises(DistributedError, match="MASTER_ADDR/MASTER_PORT are not set"):
        read_launch_env({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(DistributedError, match="RANK='x'"):
        read_launch_env({"RANK": "x", "WORLD_SIZE": "2"})


def test_a_world_of_one_without_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "TPU_WORKER_HOSTNAMES", "CLOUD_TPU_TASK_ID"):
        monkeypatch.delenv(var, raising=False)
    d = nx.distributed
    with pytest.raises(DistributedError, match="call nx.distributed.init"):
        d.rank()
    assert d.init("cpu") == nx.Device("cpu:0")
    try:
        assert (d.rank(), d.world_size(), d.engine()) == (0, 1, "local")
        x = nx.asarray(np.arange(4, dtype=np.float32))
        assert d.all_reduce(x, "mean").numpy().tolist() == [0, 1, 2, 3]
        assert d.all_gather(x).shape == (1, 4)
        assert d.shard(np.arange(6)).tolist() == list(range(6))
        with pytest.raises(DistributedError, match="op 'avg'"):
            d.all_reduce(x, "avg")
        with pytest.raises(DistributedError, match="not a rank"):
            d.broadcast(x, src=1)
        with pytest.raises(DistributedError, match="already initialised"):
            d.init("cpu")
    finally:
        d.shutdown()
    assert not d.is_initialized()


def test_shard_refuses_a_batch_that_does_not_divide(monkeypatch: pytest.MonkeyPatch) -> None:
    from neurenix_core.distributed.engine import LocalEngine, install, uninstall
    from neurenix_core.distributed.launch import LaunchEnv

    install(LocalEngine(LaunchEnv("env", 1, 2, 1, "h", 1, False, "t"), nx.Device("cpu:0")))  # rank 1 of 2, without peers
    try:
        assert nx.distributed.shard(np.arange(6)).tolist() == [3, 4, 5]
        with pytest.raises(ShapeError, match="7 samples .* world size 2"):
            nx.distributed.shard(np.arange(7))
    finally:
        uninstall()


def test_compile_step_data_parallel_needs_init_and_the_engine_s_device() -> None:
    from neurenix_core import nn
    from neurenix_core.optim import Adam

    model: Any = nn.Linear(2, 1)
    with pytest.raises(DistributedError, match="call nx.distributed.init"):
        nx.compile_step(lambda m, x: m(x).sum(), model, Adam(model.parameters()), data_parallel=True)


def test_import_starts_no_engine() -> None:
    code = ("import sys, neurenix_core as nx; nx.distributed.init; "
            "print(sorted(m for m in ('torch', 'jax', 'ray', 'torch.distributed') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("device", ["cpu:0", "tpu:0"])
def test_a_process_ending_without_shutdown_stops_the_watchdog_first(device: str) -> None:
    # A daemon thread that returns from the store's C++ call while the interpreter finalizes aborts
    # the process after its work is done. The watchdog's threads must be gone before finalization:
    # this exit handler, registered before init(), runs after neurenix's own.
    code = ("import atexit, threading, numpy as np, neurenix_core as nx\n"
            "atexit.register(lambda: print(sorted(t.name for t in threading.enumerate() if t.name.startswith('neurenix-'))))\n"
            f"nx.distributed.init({device!r}, timeout=30)\n"
            "print(nx.distributed.all_reduce(nx.asarray(np.ones(2, np.float32))).numpy().tolist())\n")
    env = _env()
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=LIMIT_S, check=False)
    assert out.returncode == 0, out.stdout + out.stderr[-4000:]
    assert out.stdout.split() == ["[1.0,", "1.0]", "[]"], out.stdout + out.stderr[-4000:]
