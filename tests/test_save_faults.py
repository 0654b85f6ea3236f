"""Saves that lose nothing (issue #38, docs/saving.md): real processes killed with SIGKILL while
they save, a real full filesystem, a real read-only one and a folder the process may not write to,
on every save path (``model.save``, ``nx.nn.save`` of weights and of a model file, ``save_state``,
``compiled.save``, ``save_checkpoint``, ``neurenix export`` with OpenVINO's save).

After every kill the target holds one complete version, the one before the save or the one being
saved, each value exactly that version's; a load never fails and never mixes two versions; the next
save removes what the killed one left. A save that cannot write is a SaveError naming the path and
the remedy, the previous version unchanged, nothing left beside it; the CLI prints one line and
exits 2. On the main branch before this change a kill between removing the old artifact and
renaming the new one left no artifact, a checkpoint killed after model.npz loaded as a mix of two
steps, and a full disk was a bare OSError (a traceback and status 1 from the CLI).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import ModelFormatError, SaveError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.models.graph_module import GraphModule
from neurenix_core.io import atomic
from neurenix_core.nn import functional as F
from neurenix_core.optim import Adam

SUPPORT = Path(__file__).parent / "support"
KINDS = ("weights_npz", "weights_safetensors", "model_file", "artifact", "checkpoint")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1", **extra)
    return env


def _reports(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


# ------------------------------------------------------------------------------------ kills
@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every save path killed at every line of its commit and at sampled lines of the whole save
    (traced), and at random moments (timed), in forked writers of one child process; the backup
    scheme of filesystems without RENAME_EXCHANGE in a second child."""
    folder = tmp_path_factory.mktemp("killed")
    env = _env(NEURENIX_DISABLE_PLUGIN_AUTOLOAD="1")  # forked writers: no plugin runtime threads
    reports = {}
    for kinds in (KINDS, ("artifact_no_exchange",)):
        cmd = [sys.executable, str(SUPPORT / "save_faults.py"), str(folder / kinds[0]), *kinds, "--traced", "12", "--timed", "5",
               "--seed", "38"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        reports.update({r["kind"]: r for r in _reports(proc)})
    return reports


@pytest.mark.parametrize("kind", [*KINDS, "artifact_no_exchange"])
def test_a_killed_save_leaves_one_complete_version(killed: dict[str, dict[str, Any]], kind: str) -> None:
    r = killed[kind]
    commit_lines = sum(r["commit_lines"].values())
    assert r["kills"] >= commit_lines + 12, r  # every commit line was a kill point, and killed there
    assert r["mixed"] == [] and r["errors"] == [] and r["writer_errors"] == [], r
    # Kills landed on both sides of the swap: the previous version kept, and the new one complete.
    assert r["old"] > 0 and r["new"] > 0, r
    assert r["left_after_next_save"] == [], r
    if kind == "artifact_no_exchange":
        # Killed between its two renames, the target was missing; loading put the backup back.
        assert r.get("target_missing", 0) >= 1, r
        assert "_exchange" not in r["commit_lines"], r
    elif kind in ("artifact", "checkpoint"):
        assert r["commit_lines"].get("_exchange", 0) > 0, r  # this filesystem exchanges: the folder is never missing
        assert "target_missing" not in r, r


def _tiny_model_file(path: Path, v: int, rows: int = 8) -> Path:
    w = {"weight": np.full((rows, 64), v, np.float32) + np.arange(64, dtype=np.float32) / 128, "bias": np.full(rows, -v, np.float32)}
    graph = Graph((TensorSpec("x", (2, 64), "float32"),), (Node("fc", "linear", ("x",), "y", {}, w),), ("y",))
    nx.nn.save(GraphModule(graph, "cli"), path)
    return path


def _version_of_artifact(folder: Path) -> int:
    """The version an artifact holds: read_manifest checks every file against its SHA-256 (the
    OpenVINO IR, the blob, the graph), then the graph's weights say which version it is."""
    from neurenix_core.deploy import read_manifest
    from neurenix_core.graph.compile.artifact_arrays import read_arrays

    read_manifest(folder)
    weight = next(a for a in read_arrays(folder / "graph.arrays").values() if a.ndim == 2)
    v = round(float(weight[0, 0]))
    assert np.array_equal(weight, np.full((8, 64), v, np.float32) + np.arange(64, dtype=np.float32) / 128), f"{folder}: mixed weights"
    return v


def _runs_as_version(folder: Path, v: int) -> bool:
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(2, 64)
    w = np.full((8, 64), v, np.float32) + np.arange(64, dtype=np.float32) / 128
    return bool(np.allclose(np.asarray(nx.load_compiled(folder, device="npu:0")(x)), x @ w.T - v, rtol=1e-5, atol=1e-4))


def _export(model: Path, out: Path) -> subprocess.Popen[str]:
    cmd = [str(Path(sys.executable).with_name("neurenix")), "export", str(model), "--device", "npu", "--out", str(out), "--outputs", "host"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(NEURENIX_EMULATE="npu"))


def _staging_life(proc: subprocess.Popen[str], folder: Path, prefix: str, kill_after: float | None) -> tuple[float, bool]:
    """Wait for the export's staging folder to appear, then for ``kill_after`` seconds (SIGKILL) or
    for the process to end; returns (seconds the staging existed or until the kill, killed)."""
    while proc.poll() is None and not any(n.startswith(prefix) for n in os.listdir(folder)):
        time.sleep(0.001)
    seen = time.perf_counter()
    if kill_after is None:
        proc.wait(timeout=120)
        return time.perf_counter() - seen, False
    while proc.poll() is None and time.perf_counter() - seen < kill_after:
        time.sleep(0.0005)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return time.perf_counter() - seen, killed


def test_neurenix_export_killed_while_it_saves_keeps_a_complete_artifact(tmp_path: Path) -> None:
    """The CLI as a user runs it, killed while OpenVINO writes the IR and the blob into the staging
    folder, or during the swap: the artifact is a complete version, and the next export cleans up."""
    pytest.importorskip("openvino")
    models = [_tiny_model_file(tmp_path / f"v{v}.nxm", v) for v in (1, 2)]
    out = tmp_path / "out"
    prefix = ".out.nx"
    proc = _export(models[0], out)
    life, _ = _staging_life(proc, tmp_path, prefix, None)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    current, outcomes, rng = 1, [], random.Random(38)
    for _ in range(3):
        proc = _export(models[current % 2], out)  # the other version
        _, was_killed = _staging_life(proc, tmp_path, prefix, rng.uniform(0, life * 0.8))
        v = _version_of_artifact(out)
        assert v in (current, current % 2 + 1), v
        outcomes.append((was_killed, v == current))
        current = v
        for p in (proc.stdout, proc.stderr):
            if p:
                p.close()
    assert any(k for k, _ in outcomes), outcomes  # killed while saving, not after (a faster run may finish first)
    proc = _export(models[current % 2], out)
    _staging_life(proc, tmp_path, prefix, None)
    assert proc.returncode == 0
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".out")) == []  # the killed exports' staging removed
    assert _version_of_artifact(out) == current % 2 + 1 and _runs_as_version(out, current % 2 + 1)


# ------------------------------------------------------------------------------------ full, read-only, denied
def _can(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _own_mount_namespace(probe: Path) -> list[str] | None:
    """A command prefix that gives the child its own mount namespace in which it may mount a tmpfs:
    as root ``unshare --mount``, else a user namespace mapping this user to root."""
    for prefix in (["unshare", "--mount"], ["unshare", "--user", "--map-root-user", "--mount"]):
        if shutil.which("unshare") and _can([*prefix, "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)]):
            return prefix
    return None


def _assert_refused(checks: dict[str, Any], code: str) -> None:
    for kind, c in checks.items():
        if kind == "neurenix export":
            assert c["status"] == 2 and c["one_line"] and c["typed"] and c["names_path"] and c["remedy"], (kind, c)
            assert c["previous"] == [1, True] and c["unchanged"], (kind, c)
            continue
        assert c["raised"] == "SaveError" and c["typed"] and c["one_line"], (kind, c)
        assert c["errno"] == c["expected_errno"], (kind, code, c)
        assert c["names_path"] and c["remedy"] and c["cause"] is not None, (kind, c)
        assert c["unchanged"] and c["previous"] == [1, True], (kind, c)  # exact old values, nothing left beside


def test_full_and_read_only_filesystems(tmp_path: Path) -> None:
    """A real 1 MiB tmpfs: a version that does not fit is refused with ENOSPC (OpenVINO's
    'basic_ios::clear' included), then, remounted read-only, every save is refused with EROFS."""
    prefix = _own_mount_namespace(tmp_path)
    if prefix is None:
        pytest.skip("this machine lets no process mount a tmpfs (no root, no user namespaces): no real small filesystem to fill")
    fs, models = tmp_path / "fs", tmp_path / "models"
    fs.mkdir()
    models.mkdir()
    script = (f"mount -t tmpfs -o size=1m tmpfs {fs} && exec {sys.executable} {SUPPORT / 'save_disk_faults.py'} {fs} {models} "
              "first full readonly")
    proc = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True, env=_env(NEURENIX_EMULATE="npu"), timeout=300,
                          check=False)
    phases = {r["phase"]: r["checks"] for r in _reports(proc)}
    assert all(v[-2:] == [1, True] for v in phases["first"].values()), phases["first"]
    _assert_refused(phases["full"], "ENOSPC")
    assert "basic_ios::clear" in phases["full"]["neurenix export"]["lines"][0]  # OpenVINO's own error, diagnosed as a full disk
    assert "disk is full" in phases["full"]["neurenix export"]["lines"][0]
    _assert_refused(phases["readonly"], "EROFS")


def test_a_folder_the_process_may_not_write_to(tmp_path: Path) -> None:
    """Folders made 0o555 (as root: in a user namespace, where root's permission override does
    not apply to this filesystem): every save is refused with EACCES."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not (shutil.which("unshare") and _can(["unshare", "--user", "true"])):
            pytest.skip("running as root, which writes through 0o555, and no user namespace to run without that power")
        prefix = ["unshare", "--user"]
    fs, models = tmp_path / "fs", tmp_path / "models"
    fs.mkdir()
    models.mkdir()
    cmd = [*prefix, sys.executable, str(SUPPORT / "save_disk_faults.py"), str(fs), str(models), "first", "denied"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(NEURENIX_EMULATE="npu"), timeout=300, check=False)
    phases = {r["phase"]: r["checks"] for r in _reports(proc)}
    _assert_refused(phases["denied"], "EACCES")


# ------------------------------------------------------------------------------------ stale staging
def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_the_next_save_removes_staging_of_dead_writers_only(tmp_path: Path) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        time.sleep(0.05)
        host, dead, old = atomic._host(), _dead_pid(), time.time() - 3 * 24 * 3600
        names = {
            f".w.npz.nx{dead}-0000abcd-{host}.tmp": "removed",  # its process is gone
            f".w.npz.nx{os.getpid()}-0000abce-{host}.tmp": "removed",  # our pid, but not a save of ours (a restarted container)
            f".w.npz.nx{live.pid}-0000abcf-{host}.tmp": "kept",  # a live writer
            f".w.npz.nx{live.pid}-0000abd0-{host}.tmp@old": "removed",  # written before that process started: its pid reused
            f".w.npz.nx{dead}-0000abd1-otherhost.tmp": "kept",  # another host's, recent: its pid cannot be checked here
            f".w.npz.nx{dead}-0000abd2-otherhost.tmp@old": "removed",  # another host's, untouched for days
            ".w.npz.k2j4h5g6.tmp@old": "removed",  # an earlier version's mkstemp staging, untouched for days
            ".w.npz.k2j4h5g7.tmp": "kept",  # ... recent: maybe a running process of that version
            ".w.npz.settings@old": "kept",  # a user's file
        }
        for name in names:
            path = tmp_path / name.removesuffix("@old")
            path.write_bytes(b"partial")
            if name.endswith("@old"):
                os.utime(path, (old, old))
        nx.nn.Linear(2, 2).save(tmp_path / "w.npz")
        left = sorted(os.listdir(tmp_path))
        for name, fate in names.items():
            assert (name.removesuffix("@old") in left) == (fate == "kept"), (name, fate, left)
    finally:
        live.kill()
        live.wait()


def test_staging_folders_of_an_earlier_version_are_removed_when_they_hold_an_artifacts_files(tmp_path: Path) -> None:
    old = time.time() - 2 * 3600
    (tmp_path / ".art.k2j4h5g6" / "parts" / "0").mkdir(parents=True)  # what a killed compiled.save of main left
    (tmp_path / ".art.k2j4h5g6" / "graph.json").write_text("{}")
    (tmp_path / ".art.abcdefgh").mkdir()
    (tmp_path / ".art.abcdefgh" / "notes.txt").write_text("mine")  # named alike, but a user's folder
    for p in (tmp_path / ".art.k2j4h5g6", tmp_path / ".art.abcdefgh"):
        os.utime(p, (old, old))
    compiled = nx.compile(nx.nn.Linear(4, 2), device="cpu", outputs="host", runtime="numpy")
    compiled(np.ones((1, 4), np.float32))
    compiled.save(tmp_path / "art")
    assert sorted(os.listdir(tmp_path)) == [".art.abcdefgh", "art"]


# ------------------------------------------------------------------------------------ checkpoints
@pytest.fixture
def world_of_one(monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "TPU_WORKER_HOSTNAMES", "CLOUD_TPU_TASK_ID"):
        monkeypatch.delenv(var, raising=False)
    nx.distributed.init("cpu")
    yield nx.distributed
    nx.distributed.shutdown()


def _trained(seed: int) -> tuple[nx.nn.Module, Adam]:
    nx.nn.init.manual_seed(seed)
    model = nx.nn.Sequential(nx.nn.Linear(4, 3), nx.nn.ReLU(), nx.nn.Linear(3, 1))
    opt = Adam(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        loss = F.mse_loss(model(nx.asarray(np.ones((2, 4), np.float32))), nx.asarray(np.zeros((2, 1), np.float32)))
        loss.backward()
        opt.step()
    return model, opt


def test_a_checkpoint_of_files_from_two_saves_is_refused(world_of_one: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    world_of_one.save_checkpoint(a, *_trained(0), step=9)
    world_of_one.save_checkpoint(b, *_trained(1), step=19)
    shutil.copyfile(b / "model.npz", a / "model.npz")  # step 19's parameters beside step 9's optimizer and meta.json
    model, opt = _trained(2)
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises(ModelFormatError, match=r"model\.npz is not the file this checkpoint's meta\.json was written with"):
        world_of_one.load_checkpoint(a, model, opt)
    assert all(np.array_equal(p.numpy(), q) for p, q in zip(model.parameters(), before))  # nothing was loaded


def test_a_checkpoint_written_before_whole_folder_saves_still_loads(world_of_one: Any, tmp_path: Path) -> None:
    """The previous layout: the same three files written one by one, no digests in meta.json (and
    the hidden temporary file a killed save of it left)."""
    from neurenix_core.distributed.checkpoint import _split_optimizer
    from neurenix_core.nn.serialization import save_state

    model, opt = _trained(0)
    folder = tmp_path / "ckpt"
    folder.mkdir()
    model.save(folder / "model.npz")
    arrays, scalars = _split_optimizer(opt.state_dict())
    save_state(arrays, folder / "optimizer.npz")
    (folder / "meta.json").write_text(json.dumps({"step": 5, "world_size": 1, "optimizer": scalars}))
    (folder / ".meta.json.tmp").write_text("{")
    fresh, fresh_opt = _trained(3)
    assert world_of_one.load_checkpoint(folder, fresh, fresh_opt) == 5
    assert all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(fresh.parameters(), model.parameters()))
    world_of_one.save_checkpoint(folder, fresh, fresh_opt, step=6)  # saving over it replaces the whole folder
    assert sorted(os.listdir(folder)) == ["meta.json", "model.npz", "optimizer.npz"]
    assert world_of_one.load_checkpoint(folder, *_trained(4)) == 6


def test_a_checkpoint_is_not_saved_over_a_folder_of_other_files(world_of_one: Any, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(SaveError, match=r"run: it holds notes\.txt, which is not part of a checkpoint.*choose a new or empty folder"):
        world_of_one.save_checkpoint(folder, *_trained(0), step=1)
    assert sorted(os.listdir(folder)) == ["notes.txt"] and sorted(os.listdir(tmp_path)) == ["run"]


def test_a_save_through_a_symbolic_link_replaces_the_folder_it_names(tmp_path: Path) -> None:
    compiled = nx.compile(nx.nn.Linear(4, 2), device="cpu", outputs="host", runtime="numpy")
    x = np.ones((1, 4), np.float32)
    want = np.asarray(compiled(x))
    (tmp_path / "releases").mkdir()
    compiled.save(tmp_path / "releases" / "v1")
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "v1")
    compiled.save(tmp_path / "current")
    assert (tmp_path / "current").is_symlink() and sorted(os.listdir(tmp_path / "releases")) == ["v1"]
    np.testing.assert_array_equal(np.asarray(nx.load_compiled(tmp_path / "current")(x)), want)


def test_a_save_under_a_file_is_a_save_error_naming_the_path(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(SaveError, match=r"cannot save the weights file to .*file\.txt/w\.npz: a part of the path is a file") as info:
        nx.nn.Linear(2, 2).save(tmp_path / "file.txt" / "w.npz")
    assert isinstance(info.value, OSError) and isinstance(info.value.__cause__, OSError)
