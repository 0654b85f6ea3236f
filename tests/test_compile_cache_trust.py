"""The compile cache loads only an entry written for the key asked for, in this format, by this
plugin at these versions; anything at an entry's path that is not a regular file is skipped
with a reason and never opened (issue #38).

Two layers: the core's ``cached`` with plain bytes (fast, one process), and every device whose
plugin keeps entries (npu, tpu, edgetpu and the OpenVINO cpu:0 host runtime) through
``nx.compile`` in fresh processes, with the real runtimes: one process stores six models of one
architecture, the test tampers with five entries (another model's entry copied over, a changed
plugin version, a truncated file, a FIFO, a folder), a second process must compile those five
again with the same results as the first, and a third must hit all six.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import compile_cache_trust_child as trust
import numpy as np
import pytest

from neurenix_core.graph.compile import cache as cc

#: The entry layout docs/compile-cache.md describes: magic, header length, JSON header, payload.
_MAGIC = b"NXCC\x01"
_LENGTH = struct.Struct("<I")


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("NEURENIX_COMPILE_CACHE", raising=False)
    monkeypatch.delenv("NEURENIX_COMPILE_CACHE_MAX_BYTES", raising=False)
    return str(tmp_path / "state")


def _cached(state: str, key: str, payload: bytes, *, plugin: str = "test", versions: dict[str, str] | None = None,
            built: list[bytes] | None = None) -> cc.CacheResult[bytes]:
    def build() -> bytes:
        if built is not None:
            built.append(payload)
        return payload

    # meta's "versions" are the producing plugin's and its runtime's: stored in the header, checked on load
    meta = {"fingerprint": "f-" + key, "versions": versions or {"neurenix-test": "1.0"}}
    return cc.cached(plugin, key, build=build, dump=bytes, load=bytes, meta=meta, state_dir=state)


def _path(state: str, key: str) -> Path:
    return Path(state) / "compile_cache" / "entries" / f"{key}.nxc"


def _split(path: Path) -> tuple[dict[str, Any], bytes]:
    data = path.read_bytes()
    assert data.startswith(_MAGIC), data[:8]
    (n,) = _LENGTH.unpack_from(data, len(_MAGIC))
    start = len(_MAGIC) + _LENGTH.size
    return json.loads(data[start:start + n]), data[start + n:]


def _join(path: Path, header: dict[str, Any], payload: bytes) -> None:
    head = json.dumps(header).encode()
    path.write_bytes(_MAGIC + _LENGTH.pack(len(head)) + head + payload)


# ---------------------------------------------------------------------------- the core, one process
def test_another_keys_entry_copied_here_is_not_loaded(state: str) -> None:
    _cached(state, "model-a", b"model A compiled")
    _cached(state, "model-b", b"model B compiled")
    shutil.copyfile(_path(state, "model-a"), _path(state, "model-b"))  # a whole, valid entry: of another model
    built: list[bytes] = []
    again = _cached(state, "model-b", b"model B compiled again", built=built)
    assert (again.state, again.value, built) == ("rejected", b"model B compiled again", [b"model B compiled again"])
    assert "names key model-a" in again.reason and "not this key" in again.reason, again.reason
    assert "was not used" in again.line() and "compiled again" in again.line()
    hit = _cached(state, "model-b", b"never built")
    assert (hit.state, hit.value) == ("hit", b"model B compiled again")  # the fresh compile replaced the foreign file
    assert _cached(state, "model-a", b"never built").value == b"model A compiled"


@pytest.mark.parametrize(("format_", "phrase"), [(1, "older format 1"), (999, "newer format 999")])
def test_an_entry_of_another_format_is_a_miss_not_an_error(state: str, format_: int, phrase: str) -> None:
    _cached(state, "k", b"current")
    header, payload = _split(_path(state, "k"))
    header["format"] = format_
    if format_ == 1:  # as format 1 wrote it: the versions lived only inside "meta"
        header.pop("versions", None)
    _join(_path(state, "k"), header, payload)
    again = _cached(state, "k", b"rebuilt")
    assert (again.state, again.value) == ("rejected", b"rebuilt")
    assert phrase in again.reason and f"this neurenix reads format {cc.FORMAT}" in again.reason, again.reason
    assert _cached(state, "k", b"never").state == "hit"


def test_an_entry_of_another_plugin_is_not_loaded(state: str) -> None:
    _cached(state, "k", b"the other plugin's bytes", plugin="other-plugin")
    again = _cached(state, "k", b"mine")
    assert (again.state, again.value) == ("rejected", b"mine")
    assert "written by plugin 'other-plugin', not 'test'" in again.reason, again.reason


def test_an_entry_of_another_plugin_version_is_not_loaded(state: str) -> None:
    before = cc.stats().get("rejected", 0)
    _cached(state, "k", b"made by 1.0", versions={"neurenix-test": "1.0", "runtime": "7"})
    again = _cached(state, "k", b"made by 1.1", versions={"neurenix-test": "1.1", "runtime": "7"})
    assert (again.state, again.value) == ("rejected", b"made by 1.1")
    assert "written with neurenix-test 1.0 (this process: 1.1)" in again.reason and "runtime" not in again.reason, again.reason
    assert cc.stats().get("rejected", 0) == before + 1
    assert _cached(state, "k", b"never", versions={"neurenix-test": "1.1", "runtime": "7"}).value == b"made by 1.1"


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_entry_is_deleted_and_compiled_again(state: str, damage: str) -> None:
    _cached(state, "k", b"the good compiled bytes" * 20)
    path = _path(state, "k")
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "flip": data[:-1] + bytes([data[-1] ^ 0xFF]), "empty": b""}[damage])
    again = _cached(state, "k", b"rebuilt")
    assert (again.state, again.value) == ("corrupt", b"rebuilt")
    assert {"truncate": "truncated", "flip": "checksum mismatch", "empty": "bad magic"}[damage] in again.reason, again.reason
    assert _cached(state, "k", b"never").value == b"rebuilt"


_FIFO_CHILD = """
import json, sys
from neurenix_core.graph.compile import cache as cc

state, key = sys.argv[1], sys.argv[2]
listed = [e.key for e in cc.entries(cc.cache_root(state))]  # `neurenix cache list` reads every entry too
r = cc.cached("test", key, build=lambda: b"fresh", dump=bytes, load=bytes, meta={"versions": {"neurenix-test": "1.0"}},
              state_dir=state)
print(json.dumps([listed, r.state, r.reason, r.value.decode(), r.line()]))
"""


def _child(code: str, *args: str, timeout: float = 60.0) -> Any:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}, "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_fifo_at_an_entry_path_is_skipped_not_waited_on(state: str) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the cache must never open one.
    In a child process under a timeout, so that a regression fails instead of hanging the suite."""
    _cached(state, "other", b"another entry, listed")
    path = _path(state, "k")
    os.mkfifo(path)
    listed, st, reason, value, line = _child(_FIFO_CHILD, state, "k")
    assert listed == ["other"]
    assert (st, value) == ("skipped", "fresh") and "a FIFO, not a regular file" in reason, reason
    assert "was skipped (a FIFO" in line and "compiled again and stored" in line, line
    assert path.is_file() and not path.is_symlink()  # the fresh entry took the FIFO's name
    assert _cached(state, "k", b"never").value == b"fresh"


def test_a_symbolic_link_at_an_entry_path_is_not_followed(state: str, tmp_path: Path) -> None:
    """The cache writes regular files only; a link could lead anywhere (a FIFO, /dev/zero, a file
    of someone else's). Even a link to a valid entry of this very key is skipped, and the store
    replaces the link, never its target."""
    _cached(state, "k", b"the real entry")
    target = tmp_path / "elsewhere.nxc"
    shutil.move(_path(state, "k"), target)
    kept = target.read_bytes()
    _path(state, "k").symlink_to(target)
    again = _cached(state, "k", b"compiled again")
    assert (again.state, again.value) == ("skipped", b"compiled again")
    assert "a symbolic link, not a regular file" in again.reason, again.reason
    assert not _path(state, "k").is_symlink() and target.read_bytes() == kept
    assert _cached(state, "k", b"never").value == b"compiled again"


def test_an_empty_folder_at_an_entry_path_is_removed_and_the_entry_stored(state: str) -> None:
    _cached(state, "k", b"first")
    path = _path(state, "k")
    path.unlink()
    path.mkdir()
    again = _cached(state, "k", b"second")
    assert (again.state, again.value) == ("skipped", b"second") and again.nbytes == len(b"second")
    assert "a directory, not a regular file; it was empty and is removed" in again.reason, again.reason
    assert path.is_file() and _cached(state, "k", b"never").state == "hit"


def test_a_folder_with_files_at_an_entry_path_is_moved_aside_not_deleted(state: str) -> None:
    _cached(state, "k", b"first")
    path = _path(state, "k")
    path.unlink()
    path.mkdir()
    (path / "notes.txt").write_text("someone's notes")
    again = _cached(state, "k", b"second")
    assert (again.state, again.value) == ("skipped", b"second")
    [moved] = (Path(state) / "compile_cache" / "displaced").iterdir()
    assert f"moved to {moved}" in again.reason, again.reason
    assert (moved / "notes.txt").read_text() == "someone's notes"
    assert _cached(state, "k", b"never").value == b"second"
    root = cc.cache_root(state)
    assert root is not None
    assert cc.evict(root, limit=0) and (moved / "notes.txt").exists()  # eviction and clear leave it alone
    cc.clear(root)
    assert (moved / "notes.txt").exists() and cc.displaced(root) == [moved]


def test_when_the_store_fails_the_line_says_why(state: str) -> None:
    """A folder with files at the entry's path, and no way to move it aside (a file named
    ``displaced`` where the folder would go): the process keeps its model and says why nothing
    was stored. The folder is left as it was."""
    _cached(state, "k", b"first")
    path = _path(state, "k")
    path.unlink()
    path.mkdir()
    (path / "keep").write_text("x")
    (Path(state) / "compile_cache" / "displaced").write_text("in the way")
    again = _cached(state, "k", b"second")
    assert (again.state, again.value, again.nbytes) == ("skipped", b"second", 0)
    assert "compiled again, not stored (FileExistsError" in again.line(), again.line()
    assert (path / "keep").read_text() == "x"


def test_cli_names_what_it_skipped(state: str) -> None:
    _cached(state, "good", b"x" * 10)
    _cached(state, "copied-onto", b"y" * 10)
    shutil.copyfile(_path(state, "good"), _path(state, "copied-onto"))
    os.mkfifo(_path(state, "fifo"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}, "NEURENIX_STATE_DIR": state,
           "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "neurenix_core.cli.main", "cache", *args], capture_output=True, text=True,
                              env=env, timeout=60, check=False)

    listed = json.loads(cli("list", "--json").stdout)
    assert [e["key"] for e in listed] == ["good"]
    info = json.loads(cli("info", "--json").stdout)
    assert info["entries"] == 1
    reasons = {Path(u["path"]).name: u["reason"] for u in info["unusable"]}
    assert set(reasons) == {"copied-onto.nxc", "fifo.nxc"}
    assert "names key good" in reasons["copied-onto.nxc"] and "a FIFO" in reasons["fifo.nxc"], reasons
    text = cli("info").stdout
    assert "unusable entries: 2" in text and "fifo.nxc: a FIFO, not a regular file" in text, text


# ---------------------------------------------------------------------------- every device that keeps entries
#: (device, extra environment) for each runtime whose plugin stores entries in neurenix's cache.
DEVICES: dict[str, tuple[str, dict[str, str]]] = {
    "npu": ("npu:0", {}),
    "tpu": ("tpu:0", {}),
    "edgetpu": ("edgetpu:0", {}),
    "cpu-openvino": ("cpu:0", {"NEURENIX_CPU_RUNTIME": "openvino"}),
}
_STORED = re.compile(r"compile cache(?: \(lowering\))?: miss, compiled in \d+ ms and stored as entry ([0-9a-f]{12})")
_HIT = re.compile(r"compile cache(?: \(lowering\))?: hit, entry")
SEEDS = [0, 1, 2, 3, 4, 5]  # 0: the source of the foreign copy; 1-5: tampered with as below


def _entry_of(state: Path, summary: str) -> Path:
    match = _STORED.search(summary)
    assert match, summary
    [path] = (state / "compile_cache" / "entries").glob(f"{match.group(1)}*.nxc")
    return path


def _other_plugin_version(path: Path) -> None:
    """The entry as the same plugin at another version would have written it under this key."""
    header, payload = _split(path)
    changed = 0
    for versions in (header.get("versions"), header.get("meta", {}).get("versions")):
        if not isinstance(versions, dict):
            continue
        for name in list(versions):
            if name.startswith("neurenix-"):
                versions[name] = "0.0.1+another"
                changed += 1
    assert changed, header
    _join(path, header, payload)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DEVICES))
def test_tampered_entries_are_never_loaded_on_each_device(tmp_path: Path, name: str) -> None:
    device, extra = DEVICES[name]
    cold = trust.run(tmp_path, device, SEEDS, extra=extra)
    values = {s: np.asarray(cold[s]["values"]) for s in SEEDS}
    assert np.max(np.abs(values[0] - values[1])) > 1e-2  # model 0's entry loaded for model 1 would show
    paths = {s: _entry_of(tmp_path, cold[s]["summary"]) for s in SEEDS}
    assert len(set(paths.values())) == len(SEEDS)

    shutil.copyfile(paths[0], paths[1])  # another model's whole, valid entry, copied onto this key
    _other_plugin_version(paths[2])
    paths[3].write_bytes(paths[3].read_bytes()[:-100])  # truncated
    paths[4].unlink()
    os.mkfifo(paths[4])
    paths[5].unlink()
    paths[5].mkdir()
    (paths[5] / "notes.txt").write_text("not the cache's")

    again = trust.run(tmp_path, device, SEEDS[1:], extra=extra, timeout=180)  # a FIFO once hung here forever
    expected = {1: "was not used (its header names key", 2: "was not used (written with neurenix-",
                3: "was unusable (ValueError: truncated", 4: "was skipped (a FIFO, not a regular file",
                5: "was skipped (a directory, not a regular file; moved to"}
    for seed, phrase in expected.items():
        summary = again[seed]["summary"]
        # (tpu's XLA program may hit JAX's own cache: the weights are its argument, not part of it)
        assert phrase in summary and not _HIT.search(summary), (seed, summary)
        assert again[seed]["sha256"] == cold[seed]["sha256"], (seed, summary)
        assert paths[seed].is_file() and not paths[seed].is_symlink()
    assert list((tmp_path / "compile_cache" / "displaced").glob("*/notes.txt"))

    warm = trust.run(tmp_path, device, SEEDS, extra=extra)  # every entry whole and its own again: all hit
    for seed in SEEDS:
        assert _HIT.search(warm[seed]["summary"]), (seed, warm[seed]["summary"])
        assert warm[seed]["sha256"] == cold[seed]["sha256"]
