"""The persistent compile cache (neurenix_core.graph.compile.cache): hits across processes, the
key, LRU eviction by bytes, NEURENIX_COMPILE_CACHE=0, corrupt entries, concurrent builders, and
``neurenix cache``. The plugins' pieces are tested in each plugin's test_*_compile_cache.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neurenix_core.config import compile_cache_enabled, compile_cache_limit
from neurenix_core.errors import ConfigurationError
from neurenix_core.graph.compile import cache as cc


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("NEURENIX_COMPILE_CACHE", raising=False)
    monkeypatch.delenv("NEURENIX_COMPILE_CACHE_MAX_BYTES", raising=False)
    return str(tmp_path / "state")


def _store(state: str, key: str, payload: bytes, built: list[bytes] | None = None) -> cc.CacheResult[bytes]:
    def build() -> bytes:
        if built is not None:
            built.append(payload)
        return payload

    return cc.cached("test", key, build=build, dump=bytes, load=bytes, meta={"fingerprint": "f" + key[:6]}, state_dir=state)


def test_miss_then_hit_gives_the_stored_bytes(state: str) -> None:
    built: list[bytes] = []
    before = cc.stats()
    first = _store(state, "k1", b"compiled model", built)
    second = _store(state, "k1", b"never built", built)
    assert (first.state, second.state) == ("miss", "hit")
    after = cc.stats()
    assert (after["miss"] - before["miss"], after["hit"] - before["hit"]) == (1, 1)
    assert second.value == b"compiled model" and built == [b"compiled model"]
    assert "hit" in second.line() and "k1" in second.line()
    [entry] = cc.entries(cc.cache_root(state))
    assert (entry.plugin, entry.fingerprint, entry.nbytes) == ("test", "fk1", len(b"compiled model"))


def test_key_changes_with_each_part_and_is_stable() -> None:
    base = cc.cache_key("tpu", "abc", {"precision": "bf16", "shapes": [[1, 3]]}, {"jax": "0.10.2"})
    assert base == cc.cache_key("tpu", "abc", {"shapes": [[1, 3]], "precision": "bf16"}, {"jax": "0.10.2"})  # order-free
    variants = [
        cc.cache_key("npu-openvino", "abc", {"precision": "bf16", "shapes": [[1, 3]]}, {"jax": "0.10.2"}),
        cc.cache_key("tpu", "abd", {"precision": "bf16", "shapes": [[1, 3]]}, {"jax": "0.10.2"}),
        cc.cache_key("tpu", "abc", {"precision": "fp32", "shapes": [[1, 3]]}, {"jax": "0.10.2"}),
        cc.cache_key("tpu", "abc", {"precision": "bf16", "shapes": [[2, 3]]}, {"jax": "0.10.2"}),
        cc.cache_key("tpu", "abc", {"precision": "bf16", "shapes": [[1, 3]]}, {"jax": "0.10.3"}),
    ]
    assert len({base, *variants}) == 6


def test_key_names_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    before = cc.cache_key("tpu", "abc", {}, {})
    monkeypatch.setattr(cc, "cpu_identity", lambda: "Another CPU x8 flags:000000000000")
    assert cc.cache_key("tpu", "abc", {}, {}) != before


def test_plan_fingerprint_follows_the_scales() -> None:
    import numpy as np

    from neurenix_core.graph.ir import QuantizationPlan, QuantParams

    def plan(scale: float) -> QuantizationPlan:
        q = QuantParams(scale=np.array([scale]), zero_point=np.array([0]), bits=8, qmin=-128, qmax=127, axis=None)
        return QuantizationPlan(bits=8, activations={"x": q}, weights={})

    assert cc.plan_fingerprint(None) == "-"
    assert cc.plan_fingerprint(plan(0.5)) == cc.plan_fingerprint(plan(0.5)) != cc.plan_fingerprint(plan(0.25))


def test_off_with_one_variable(state: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURENIX_COMPILE_CACHE", "0")
    built: list[bytes] = []
    a, b = _store(state, "k", b"x", built), _store(state, "k", b"x", built)
    assert (a.state, b.state) == ("off", "off") and len(built) == 2
    assert "NEURENIX_COMPILE_CACHE=0" in a.line()
    assert not Path(state).exists() and cc.cache_root(state) is None and cc.runtime_folder("jax", state) is None


def test_configuration_values(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compile_cache_enabled({}) and not compile_cache_enabled({"NEURENIX_COMPILE_CACHE": "off"})
    assert compile_cache_limit({}) == 2 << 30
    assert compile_cache_limit({"NEURENIX_COMPILE_CACHE_MAX_BYTES": "512M"}) == 512 << 20
    assert compile_cache_limit({"NEURENIX_COMPILE_CACHE_MAX_BYTES": "3GiB"}) == 3 << 30
    assert compile_cache_limit({"NEURENIX_COMPILE_CACHE_MAX_BYTES": "2000000"}) == 2_000_000
    for bad in ("lots", "-5M", "1.5G", "10K"):
        with pytest.raises(ConfigurationError, match="NEURENIX_COMPILE_CACHE_MAX_BYTES"):
            compile_cache_limit({"NEURENIX_COMPILE_CACHE_MAX_BYTES": bad})
    with pytest.raises(ConfigurationError, match="NEURENIX_COMPILE_CACHE='maybe'"):
        compile_cache_enabled({"NEURENIX_COMPILE_CACHE": "maybe"})


def test_lru_eviction_by_total_bytes(state: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURENIX_COMPILE_CACHE_MAX_BYTES", "1M")
    chunk = 400 * 1024
    root = cc.cache_root(state)
    assert root is not None
    _store(state, "a", b"a" * chunk)
    _store(state, "b", b"b" * chunk)
    os.utime(root / "entries" / "a.nxc", (1000.0, 1000.0))  # a is the oldest entry ...
    os.utime(root / "entries" / "b.nxc", (2000.0, 2000.0))
    assert _store(state, "a", b"").state == "hit"  # ... until a hit touches it: b is now the least recently used
    _store(state, "c", b"c" * chunk)  # 3 x 400 KiB > 1 MiB: one entry must go
    assert sorted(e.key for e in cc.entries(root)) == ["a", "c"]
    assert cc.total_bytes(root) <= 1 << 20
    assert cc.evict(root, limit=0) and cc.entries(root) == []


def test_runtime_folders_count_against_the_limit(state: str) -> None:
    folder = cc.runtime_folder("jax", state)
    assert folder is not None
    (folder / "program-cache").write_bytes(b"x" * 5000)
    _store(state, "k", b"y" * 100)
    root = cc.cache_root(state)
    assert cc.total_bytes(root) >= 5100
    cc.evict(root, limit=cc.total_bytes(root) - 1)
    assert not (folder / "program-cache").exists()  # the older file went first
    assert cc.clear(root) > 0 and cc.total_bytes(root) == 0


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_corrupt_entry_is_deleted_and_built_again(state: str, damage: str) -> None:
    _store(state, "k", b"the good compiled bytes" * 10)
    root = cc.cache_root(state)
    assert root is not None
    path = root / "entries" / "k.nxc"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0xFF
    elif damage == "truncate":
        data = data[:-7]
    else:
        data = bytearray(b"not an entry at all")
    path.write_bytes(bytes(data))
    built: list[bytes] = []
    again = _store(state, "k", b"rebuilt", built)
    assert again.state == "corrupt" and built == [b"rebuilt"] and again.value == b"rebuilt"
    assert {"flip": "checksum", "truncate": "truncated", "garbage": "bad magic"}[damage] in again.reason
    assert _store(state, "k", b"never").value == b"rebuilt"  # the rewritten entry is whole again


def test_an_unusable_state_folder_only_loses_the_entry(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    state = str(blocker / "state")  # nothing can be created under a file
    result = _store(state, "k", b"compiled")
    assert (result.state, result.value, result.nbytes) == ("miss", b"compiled", 0)
    assert _store(state, "k", b"again").value == b"again"  # compiled again: nothing was stored


def test_a_load_that_raises_is_a_corrupt_entry(state: str) -> None:
    _store(state, "k", b"bytes the runtime refuses")

    def refuse(payload: bytes) -> bytes:
        raise RuntimeError("runtime cannot import this blob")

    result = cc.cached("test", "k", build=lambda: b"fresh", dump=bytes, load=refuse, meta={}, state_dir=state)
    assert (result.state, result.value) == ("corrupt", b"fresh")
    assert "runtime cannot import this blob" in result.reason


def test_pack_roundtrip_keeps_bytes_and_array_dtypes() -> None:
    import ml_dtypes
    import numpy as np

    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1.5, -2], dtype=ml_dtypes.bfloat16)}
    parts, back = cc.unpack(cc.pack({"module": b"\x00\x01stablehlo"}, arrays))
    assert parts == {"module": b"\x00\x01stablehlo"}
    for name, arr in arrays.items():
        assert back[name].dtype == arr.dtype and np.array_equal(back[name], arr)


_CONCURRENT = """
import json, sys, time
from neurenix_core.graph.compile import cache as cc

def build():
    with open(sys.argv[2], "a") as fh:
        fh.write("built\\n")
    time.sleep(1.0)  # a slow compile: the other process arrives while this one builds
    return b"compiled once"

r = cc.cached("test", "shared", build=build, dump=bytes, load=bytes, meta={}, state_dir=sys.argv[1])
print(json.dumps([r.state, r.value.decode()]))
"""


def test_two_processes_compiling_at_once_build_once(state: str, tmp_path: Path) -> None:
    log = tmp_path / "builds.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_CONCURRENT), state, str(log)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r[0] for r in results) == ["hit", "miss"] and {r[1] for r in results} == {"compiled once"}
    assert log.read_text().count("built") == 1


def _cli(state: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}, "NEURENIX_STATE_DIR": state,
           "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "neurenix_core.cli.main", "cache", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_cli_list_info_clear(state: str) -> None:
    _store(state, "k1", b"x" * 100)
    _store(state, "k2", b"y" * 50)
    listed = json.loads(_cli(state, "list", "--json").stdout)
    assert {(e["key"], e["plugin"], e["bytes"]) for e in listed} == {("k1", "test", 100), ("k2", "test", 50)}
    info = json.loads(_cli(state, "info", "--json").stdout)
    assert info["enabled"] and info["entries"] == 2 and info["limit_bytes"] == 2 << 30
    assert info["folder"] == str(Path(state) / "compile_cache") and info["used_bytes"] >= 150
    assert "k1" in _cli(state, "list").stdout
    assert "0 tpu entries removed" in _cli(state, "clear", "--plugin", "tpu").stdout
    cleared = _cli(state, "clear")
    assert cleared.returncode == 0 and "cleared" in cleared.stdout
    assert json.loads(_cli(state, "list", "--json").stdout) == []
