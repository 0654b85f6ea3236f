"""Child of tests/test_save_faults.py: real processes killed with SIGKILL while they save.

For each kind of save (a weights file ``.npz`` / ``.safetensors``, a model file ``.nxm``, a cpu
compiled artifact, a checkpoint), this process saves version 0, then forks a writer per kill: the
writer saves the next version and is killed with SIGKILL

* ``traced``: at one line event of its save, counted by ``sys.settrace`` (a count over the whole
  save, every line of the save's commit functions in ``neurenix_core/io/atomic.py``, and a sample
  of every other line), so the kills cover each step of the swap, not only where time is spent;
* ``timed``: after a random delay while it saves version after version, reporting each completed
  one through a pipe (kills inside NumPy's writes, fsync, rename: anywhere).

After each kill this process loads the target and identifies its version from every value it
holds: it must be the version before the kill or the one being saved (only when the kill came after
the swap), each array, step and optimizer value exactly that version's. A value of another version
is a mix; a load that fails is an error; both are reported. A last save, not killed, must leave no
staging file or folder beside the target (stale ones are removed by the next save).

Usage: ``python save_faults.py FOLDER KIND [KIND ...] [--traced N] [--timed N] [--seed S]``; prints
one JSON line per kind. Run with NEURENIX_DISABLE_PLUGIN_AUTOLOAD=1: forking is safe without the
plugins' runtime threads (OpenVINO's save path is killed through ``neurenix export`` instead).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.models.graph_module import GraphModule
from neurenix_core.optim import Adam

#: atomic.py's functions that commit a save: every line of them is a kill point in traced mode.
COMMIT = ("replace_file", "replace_folder", "_swap", "_exchange", "_remove_leftover", "_remove")
ATOMIC = str(Path(nx.__file__).parent / "io" / "atomic.py")
X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


# ------------------------------------------------------------------------------------ versions
def _weights(v: int) -> dict[str, np.ndarray]:
    """Version ``v``: every value is its position plus 1000 * v, so any one value names its version."""
    shapes = {"0.weight": (3, 4), "0.bias": (3,), "2.weight": (2, 3), "2.bias": (2,)}
    out, start = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape))
        out[name] = (np.arange(start, start + n, dtype=np.float32) / 64 + 1000 * v).reshape(shape)
        start += n
    return out


def _model(v: int) -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model.load_state_dict(_weights(v))
    return model


def _version_of(arrays: dict[str, np.ndarray], where: str) -> int:
    """The one version every array is exactly; AssertionError ("mixed") otherwise."""
    first = next(iter(_weights(0)))
    v = round(float(arrays[first].flat[0] - _weights(0)[first].flat[0]) / 1000)
    want = _weights(v)
    bad = [k for k in want if k not in arrays or not np.array_equal(arrays[k], want[k])]
    assert not bad, f"mixed: {where} holds {bad} of another version than {first} (version {v})"
    return v


@dataclass
class Kind:
    """One save path: ``prepare(v)`` (before the fork: not part of the save), ``save(obj, target)``
    (killed) and ``identify(target)`` (the version on disk, or AssertionError for a mix)."""

    name: str
    target: str
    prepare: Callable[[int], Any]
    save: Callable[[Any, Path], Any]
    identify: Callable[[Path], int]
    is_folder: bool = False
    stats: dict[str, Any] = field(default_factory=dict)


def _identify_nxm(path: Path) -> int:
    model = nx.nn.load(path)
    params = {k: p.numpy() for k, p in model.named_parameters()}
    return _version_of({"0.weight": params["fc1.weight"], "0.bias": params["fc1.bias"], "2.weight": params["fc2.weight"],
                        "2.bias": params["fc2.bias"]}, str(path))


def _graph_module(v: int) -> GraphModule:
    w = _weights(v)
    nodes = (Node("fc1", "linear", ("x",), "h", {}, {"weight": w["0.weight"], "bias": w["0.bias"]}),
             Node("act", "relu", ("h",), "a", {}),
             Node("fc2", "linear", ("a",), "y", {}, {"weight": w["2.weight"], "bias": w["2.bias"]}))
    return GraphModule(Graph((TensorSpec("x", (2, 4), "float32"),), nodes, ("y",)), "faults")


_EXPECTED: dict[int, np.ndarray] = {}


def _compiled(v: int) -> Any:
    compiled = nx.compile(_model(v), device="cpu", outputs="host")
    _EXPECTED[v] = np.asarray(compiled(X))
    return compiled


def _identify_artifact(path: Path) -> int:
    out = np.asarray(nx.load_compiled(path)(X))  # read_manifest checks every file's SHA-256 first
    found = [v for v, want in _EXPECTED.items() if np.array_equal(out, want)]
    assert len(found) == 1, f"mixed: {path} computes {out.tolist()}, no saved version's result"
    return found[0]


def _checkpoint(v: int) -> tuple[nn.Module, Adam]:
    model = _model(v)
    opt = Adam(model.parameters(), lr=0.001 * (v + 1))
    state = {i: {"step": v, "exp_avg": np.full(p.shape, v + 0.5, np.float32), "exp_avg_sq": np.full(p.shape, v + 0.25, np.float32)}
             for i, p in enumerate(model.parameters())}
    opt.load_state_dict({"state": state, "param_groups": [{**opt.state_dict()["param_groups"][0]}]})
    return model, opt


def _identify_checkpoint(path: Path) -> int:
    model, opt = _checkpoint(0)
    step = nx.distributed.load_checkpoint(path, model, opt)
    v = _version_of(model.state_dict(), f"{path} (model)")
    sd = opt.state_dict()
    assert step == v, f"mixed: {path} has step {step} and the model of version {v}"
    assert sd["param_groups"][0]["lr"] == 0.001 * (v + 1), f"mixed: {path} has the optimizer hyperparameters of another version than {v}"
    for entries in sd["state"].values():
        assert entries["step"] == v and np.all(entries["exp_avg"] == v + 0.5) and np.all(entries["exp_avg_sq"] == v + 0.25), \
            f"mixed: {path} has the optimizer state of another version than {v}"
    return v


KINDS: dict[str, Callable[[], Kind]] = {
    "weights_npz": lambda: Kind("weights_npz", "w.npz", _model, lambda m, t: m.save(t), lambda t: _version_of(nx.nn.load_state(t), str(t))),
    "weights_safetensors": lambda: Kind("weights_safetensors", "w.safetensors", _weights, lambda s, t: nx.nn.save(s, t),
                                        lambda t: _version_of(nx.nn.load_state(t), str(t))),
    "model_file": lambda: Kind("model_file", "m.nxm", _graph_module, lambda g, t: nx.nn.save(g, t), _identify_nxm),
    "artifact": lambda: Kind("artifact", "art", _compiled, lambda c, t: c.save(t), _identify_artifact, is_folder=True),
    # A filesystem that cannot exchange two names (NFS, FUSE: EINVAL): the backup scheme, whose
    # interrupted swap settled() undoes when the artifact is next loaded or saved.
    "artifact_no_exchange": lambda: Kind("artifact_no_exchange", "art", _compiled, lambda c, t: c.save(t), _identify_artifact, is_folder=True),
    "checkpoint": lambda: Kind("checkpoint", "ckpt", _checkpoint, lambda mo, t: nx.distributed.save_checkpoint(t, *mo, step=_version(mo)),
                               _identify_checkpoint, is_folder=True),
}


def _version(mo: tuple[nn.Module, Adam]) -> int:
    return _version_of(mo[0].state_dict(), "the model being saved")


# ------------------------------------------------------------------------------------ killing
class _Tracer:
    """Counts line events of the save (all, and per commit function of atomic.py); kills this
    process with SIGKILL at the one chosen, or records the counts when none is chosen."""

    def __init__(self, kill_at: tuple[str, int] | None) -> None:
        self.kill_at = kill_at
        self.total = 0
        self.per_function: dict[str, int] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            self.total += 1
            if frame.f_code.co_filename == ATOMIC and frame.f_code.co_name in COMMIT:
                self.per_function[frame.f_code.co_name] = self.per_function.get(frame.f_code.co_name, 0) + 1
                if self.kill_at is not None and self.kill_at[0] == frame.f_code.co_name and self.kill_at[1] == self.per_function[frame.f_code.co_name]:
                    os.kill(os.getpid(), signal.SIGKILL)
            if self.kill_at is not None and self.kill_at[0] == "all" and self.kill_at[1] == self.total:
                os.kill(os.getpid(), signal.SIGKILL)
        return self


def _fork(body: Callable[[int], None]) -> tuple[int, int]:
    """Run ``body(write_fd)`` in a forked writer; returns (its pid, the read end of its pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            body(w)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent through the pipe, then the writer exits
            os.write(w, (json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
            os._exit(3)
        os._exit(0)
    os.close(w)
    return pid, r


def _read_all(fd: int) -> list[dict[str, Any]]:
    chunks = []
    while block := os.read(fd, 65536):
        chunks.append(block)
    os.close(fd)
    return [json.loads(line) for line in b"".join(chunks).decode().splitlines() if line.strip()]


def _traced_save(kind: Kind, obj: Any, target: Path, kill_at: tuple[str, int] | None) -> tuple[int, list[dict[str, Any]]]:
    def body(w: int) -> None:
        tracer = _Tracer(kill_at)
        sys.settrace(tracer)
        try:
            kind.save(obj, target)
        finally:
            sys.settrace(None)
        os.write(w, (json.dumps({"done": True, "total": tracer.total, "per_function": tracer.per_function}) + "\n").encode())

    pid, r = _fork(body)
    messages = _read_all(r)
    _, status = os.waitpid(pid, 0)
    return status, messages


def _timed_save(kind: Kind, versions: list[tuple[int, Any]], target: Path, delay: float) -> tuple[int, list[dict[str, Any]]]:
    """The writer saves ``versions`` one after the other (prepared before the fork, so that this
    process knows each one's values); killed after ``delay`` seconds."""
    def body(w: int) -> None:
        for v, obj in versions:
            kind.save(obj, target)
            os.write(w, (json.dumps({"saved": v}) + "\n").encode())

    pid, r = _fork(body)
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    messages = _read_all(r)
    _, status = os.waitpid(pid, 0)
    return status, messages


def _identify(kind: Kind, target: Path, allowed: set[int], report: dict[str, Any]) -> int | None:
    if not target.exists():
        report["target_missing"] = report.get("target_missing", 0) + 1  # loading must restore the previous version
    try:
        v = kind.identify(target)
    except AssertionError as exc:
        report["mixed"].append(str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - every failed load is reported (the test requires none)
        report["errors"].append(f"{type(exc).__name__}: {exc}")
        return None
    if v not in allowed:
        report["mixed"].append(f"{target} holds version {v}, expected one of {sorted(allowed)}")
    return v


def run_kind(kind: Kind, folder: Path, traced: int, timed: int, rng: random.Random) -> dict[str, Any]:
    target = folder / kind.target
    report: dict[str, Any] = {"kind": kind.name, "kills": 0, "old": 0, "new": 0, "mixed": [], "errors": [], "writer_errors": []}
    kind.save(kind.prepare(0), target)
    # One save, not killed, with the tracer counting: where the kill points are.
    status, messages = _traced_save(kind, kind.prepare(1), target, None)
    done = next((m for m in messages if m.get("done")), None)
    assert done is not None and os.WIFEXITED(status), f"{kind.name}: the counting save failed: {messages}"
    current = 1
    _identify(kind, target, {current}, report)
    report["line_events"], report["commit_lines"] = done["total"], done["per_function"]
    # Every line of the commit functions, then ``traced`` lines drawn from the whole save.
    points = [(name, i) for name, n in sorted(done["per_function"].items()) for i in range(1, n + 1)]
    points += [("all", rng.randint(1, done["total"])) for _ in range(traced)]
    for point in points:
        status, messages = _traced_save(kind, kind.prepare(current + 1), target, point)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        report["writer_errors"] += [m["error"] for m in messages if "error" in m]
        v = _identify(kind, target, {current, current + 1} if killed else {current + 1}, report)
        if killed:
            report["kills"] += 1
            report["old" if v == current else "new"] += 1
        current = current if v is None else v
    # Kills at random moments while the writer saves version after version.
    started = time.perf_counter()
    current = _plain_save(kind, current, target, report)
    one_save = time.perf_counter() - started
    report["save_s"] = round(one_save, 4)
    for _ in range(timed):
        versions = [(v, kind.prepare(v)) for v in range(current + 1, current + 5)]
        status, messages = _timed_save(kind, versions, target, rng.uniform(0, 3 * one_save))
        report["writer_errors"] += [m["error"] for m in messages if "error" in m]
        saved = [m["saved"] for m in messages if "saved" in m]
        last = saved[-1] if saved else current
        v = _identify(kind, target, {last, last + 1}, report)
        if os.WIFSIGNALED(status):
            report["kills"] += 1
            report["old" if v == last else "new"] += 1
        current = current if v is None else v
    # A save not killed removes what the killed ones left (their processes are gone).
    current = _plain_save(kind, current, target, report)
    report["left_after_next_save"] = sorted(p.name for p in folder.iterdir() if p.name != kind.target)
    _identify(kind, target, {current}, report)
    return report


def _plain_save(kind: Kind, current: int, target: Path, report: dict[str, Any]) -> int:
    """Save the next version without killing; a failure (a target a kill left unusable) is reported."""
    try:
        kind.save(kind.prepare(current + 1), target)
    except Exception as exc:  # noqa: BLE001 - reported: the test requires none
        report["errors"].append(f"saving again after the kills: {type(exc).__name__}: {exc}")
        return current
    return current + 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("kinds", nargs="+", choices=sorted(KINDS))
    ap.add_argument("--traced", type=int, default=20, help="kill points per kind drawn from all lines, besides every commit line")
    ap.add_argument("--timed", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    if "artifact_no_exchange" in args.kinds:
        from neurenix_core.io import atomic

        # What renameat2 answers on such a filesystem; every other step is the library's own.
        atomic._exchange = lambda a, b: False  # type: ignore[assignment]
        assert len(args.kinds) == 1, "artifact_no_exchange runs alone (it changes the process)"
    if "checkpoint" in args.kinds:
        nx.distributed.init("cpu")
    for name in args.kinds:
        folder = args.folder / name
        folder.mkdir(parents=True)
        started = time.perf_counter()
        report = run_kind(KINDS[name](), folder, args.traced, args.timed, rng)
        report["seconds"] = round(time.perf_counter() - started, 2)
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
