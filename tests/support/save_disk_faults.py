"""Child of tests/test_save_faults.py: every save path onto a full disk, a read-only filesystem and
a folder it may not write to, each a real one (the test starts this process in its own mount
namespace with a small tmpfs, or without the right to override permissions).

``python save_disk_faults.py FOLDER PHASE [PHASE ...]``, phases run in order on FOLDER:

* ``first``: version 1 of every kind saved (small), and ``neurenix export`` of a small model;
* ``full``: a version too large for the filesystem saved over each (and exported);
* ``readonly``: FOLDER remounted read-only, version 2 saved over each (and exported);
* ``denied``: FOLDER's kind folders made 0o555 (the process has no CAP_DAC_OVERRIDE), version 2
  saved over each (and exported).

Every failing save must raise SaveError (a NeurenixError and an OSError, with the expected errno)
naming the target and the remedy, with the original error as ``__cause__``; the previous version
must load with its exact values and the folder must hold exactly what it held before. Prints one
JSON line per phase: {"phase", "checks": {kind: {...}}, "problems": [...]}.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core.errors import NeurenixError, SaveError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.models.graph_module import GraphModule
from neurenix_core.optim import Adam

X = np.linspace(-1, 1, 2 * 64, dtype=np.float32).reshape(2, 64)
#: Rows of the linear layer: 8 is a few KB; BIG (2 MiB of weights) does not fit the 1 MiB tmpfs.
SMALL, BIG = 8, 8192
#: The words each errno's remedy must hold.
REMEDY = {errno.ENOSPC: "free space", errno.EROFS: "read-only", errno.EACCES: "permission"}


def _weights(v: int, rows: int) -> dict[str, np.ndarray]:
    return {"weight": np.full((rows, 64), v, np.float32) + np.arange(64, dtype=np.float32) / 128,
            "bias": np.full(rows, -v, np.float32)}


def _module(v: int, rows: int) -> nx.nn.Module:
    model = nx.nn.Linear(64, rows)
    model.load_state_dict(_weights(v, rows))
    return model


def _graph_module(v: int, rows: int) -> GraphModule:
    nodes = (Node("fc", "linear", ("x",), "y", {}, _weights(v, rows)),)
    return GraphModule(Graph((TensorSpec("x", (2, 64), "float32"),), nodes, ("y",)), "disk")


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


def _checkpoint(path: Path, v: int, rows: int) -> None:
    model = _module(v, rows)
    nx.distributed.save_checkpoint(path, model, Adam(model.parameters(), lr=0.5), step=v)


def _checkpoint_version(path: Path) -> tuple[int, bool]:
    model = nx.nn.Linear(64, SMALL)
    step = nx.distributed.load_checkpoint(path, model, Adam(model.parameters(), lr=0.1))
    return step, _same(model.state_dict(), _weights(step, SMALL))


#: What each artifact computed when it was saved (or first loaded): the exact values to keep.
_OUTPUTS: dict[Path, np.ndarray] = {}


def _artifact(path: Path, v: int, rows: int) -> None:
    compiled = nx.compile(_module(v, rows), device="cpu", outputs="host")
    out = np.asarray(compiled(X))
    compiled.save(path)
    _OUTPUTS[path] = out


def _artifact_version(path: Path) -> tuple[int, bool]:
    """(the version the artifact computes, whether its result is exactly the one recorded)."""
    out = np.asarray(nx.load_compiled(path)(X))
    _OUTPUTS.setdefault(path, out)
    for v in (1, 2, 3):
        w = _weights(v, SMALL)
        if np.allclose(out, X @ w["weight"].T + w["bias"], rtol=1e-5, atol=1e-4):
            return v, bool(np.array_equal(out, _OUTPUTS[path]))
    return -1, False


def _file_version(load: Callable[[Path], dict[str, np.ndarray]]) -> Callable[[Path], tuple[int, bool]]:
    def version(path: Path) -> tuple[int, bool]:
        state = load(path)
        v = int(-state["bias"][0])
        return v, _same(state, _weights(v, SMALL))
    return version


def _nxm_state(path: Path) -> dict[str, np.ndarray]:
    return {k.split(".")[-1]: p.numpy() for k, p in nx.nn.load(path).named_parameters()}


#: kind -> (target name, save(path, version, rows), version(path) -> (version, exact))
KINDS: dict[str, tuple[str, Callable[[Path, int, int], Any], Callable[[Path], tuple[int, bool]]]] = {
    "model.save (.npz)": ("w.npz", lambda p, v, r: _module(v, r).save(p), _file_version(nx.nn.load_state)),
    "nx.nn.save (.safetensors)": ("w.safetensors", lambda p, v, r: nx.nn.save(_weights(v, r), p), _file_version(nx.nn.load_state)),
    "nx.nn.save (.nxm)": ("m.nxm", lambda p, v, r: nx.nn.save(_graph_module(v, r), p), _file_version(_nxm_state)),
    "save_state": ("s.npz", lambda p, v, r: nx.nn.save_state(_weights(v, r), p), _file_version(nx.nn.load_state)),
    "compiled.save": ("art", _artifact, _artifact_version),
    "save_checkpoint": ("ckpt", _checkpoint, _checkpoint_version),
}


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _expect_refused(folder: Path, save: Callable[[], Any], target: Path, code: int, version: Callable[[Path], tuple[int, bool]],
                    previous: int) -> dict[str, Any]:
    """``save`` must raise SaveError(code) and leave ``folder`` as it was, ``previous`` loading."""
    before = _listing(folder)
    check: dict[str, Any] = {}
    try:
        save()
        check["raised"] = None
    except Exception as exc:  # noqa: BLE001 - its type is what is checked
        check["raised"] = type(exc).__name__
        check["message"] = str(exc)
        check["typed"] = isinstance(exc, SaveError) and isinstance(exc, NeurenixError) and isinstance(exc, OSError)
        check["errno"] = getattr(exc, "errno", None)
        check["cause"] = type(exc.__cause__).__name__ if exc.__cause__ is not None else None
        check["names_path"] = str(target) in str(exc)
        check["remedy"] = REMEDY[code] in str(exc)
        check["one_line"] = "\n" not in str(exc)
    check["expected_errno"] = code
    check["unchanged"] = _listing(folder) == before
    check["previous"] = list(version(target))
    check["previous_expected"] = previous
    return check


def _export(model: Path, out: Path) -> tuple[int, str]:
    """``neurenix export`` in this process (its exit status and stderr, as the command returns them)."""
    from neurenix_core.cli.main import main

    err = StringIO()
    with redirect_stderr(err), redirect_stdout(StringIO()):
        status = main(["export", str(model), "--device", "npu", "--out", str(out), "--outputs", "host"])
    return status, err.getvalue()


def _export_subprocess(model: Path, out: Path) -> tuple[int, str]:
    """``neurenix export`` as the user runs it: the console script, a fresh process."""
    proc = subprocess.run([str(Path(sys.executable).with_name("neurenix")), "export", str(model), "--device", "npu", "--out", str(out),
                           "--outputs", "host"], capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stderr


def _export_check(folder: Path, status: int, stderr: str, code: int, out: Path) -> dict[str, Any]:
    lines = stderr.strip().splitlines()
    return {"status": status, "lines": lines, "one_line": len(lines) == 1, "names_path": str(out) in stderr,
            "remedy": REMEDY[code] in stderr, "typed": bool(lines) and lines[-1].startswith("neurenix: error: cannot save"),
            "previous": list(_artifact_version(out)) if out.exists() else None}


def run(folder: Path, phase: str, models: Path) -> dict[str, Any]:
    checks: dict[str, Any] = {}
    code = {"full": errno.ENOSPC, "readonly": errno.EROFS, "denied": errno.EACCES}.get(phase)
    if phase == "first":
        for i, (kind, (name, save, version)) in enumerate(KINDS.items()):
            (folder / str(i)).mkdir()
            save(folder / str(i) / name, 1, SMALL)
            checks[kind] = list(version(folder / str(i) / name))
        (folder / "export").mkdir()
        status, stderr = _export(models / "small.nxm", folder / "export" / "out")
        checks["neurenix export"] = [status, stderr, *_artifact_version(folder / "export" / "out")]
        return {"phase": phase, "checks": checks}
    assert code is not None, phase
    if phase == "readonly":
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    if phase == "denied":
        for sub in folder.iterdir():
            sub.chmod(0o555)
    rows = BIG if phase == "full" else SMALL
    for i, (kind, (name, save, version)) in enumerate(KINDS.items()):
        target = folder / str(i) / name
        checks[kind] = _expect_refused(folder, lambda save=save, target=target: save(target, 2, rows), target, code, version, 1)
    model = models / ("big.nxm" if phase == "full" else "small2.nxm")
    out = folder / "export" / "out"
    before = _listing(folder)
    status, stderr = (_export_subprocess if phase == "full" else _export)(model, out)
    checks["neurenix export"] = {**_export_check(folder, status, stderr, code, out), "unchanged": _listing(folder) == before}
    return {"phase": phase, "checks": checks}


def main() -> None:
    folder, models, phases = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    nx.distributed.init("cpu")
    for v, name in ((1, "small.nxm"), (2, "small2.nxm"), (3, "big.nxm")):
        nx.nn.save(_graph_module(v, BIG if name == "big.nxm" else SMALL), models / name)
    for phase in phases:
        print(json.dumps(run(folder, phase, models)), flush=True)
    if "denied" in phases:
        for sub in folder.iterdir():
            sub.chmod(0o755)
    os.sync()


if __name__ == "__main__":
    main()
