"""The compile cache's key holds the producing plugin's source digest (``cache.plugin_code``): a
plugin whose lowering changed without a version bump compiles again instead of loading what its
old code made."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from neurenix_core.graph.compile import cache as C


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    """A throwaway package ``nxcodepkg`` on sys.path, its digest cache cleared around the test."""
    root = tmp_path / "nxcodepkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "lowering.py").write_text("OP = 'add'\n")
    sys.path.insert(0, str(tmp_path))
    C._code_digest.cache_clear()
    yield root
    sys.path.remove(str(tmp_path))
    sys.modules.pop("nxcodepkg", None)
    C._code_digest.cache_clear()


def _fresh(name: str) -> str:
    C._code_digest.cache_clear()
    return C._code_digest(name)


def test_the_digest_follows_every_source_file_and_nothing_else(package: Path) -> None:
    first = _fresh("nxcodepkg")
    assert first != "-" and _fresh("nxcodepkg") == first
    (package / "sub" / "lowering.py").write_text("OP = 'sub'\n")
    edited = _fresh("nxcodepkg")
    assert edited != first
    (package / "notes.txt").write_text("not code")
    assert _fresh("nxcodepkg") == edited
    (package / "extra.py").write_text("")
    assert _fresh("nxcodepkg") != edited
    assert _fresh("nxcodepkg_that_is_not_installed") == "-"


def test_every_registered_plugin_has_a_digest_and_the_key_depends_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert C.plugin_code("cpu") != "-" and C.plugin_code("no-such-plugin") == "-"
    key = C.cache_key("cpu", "graph", {"shapes": [1]}, {"neurenix-core": "1"})
    monkeypatch.setattr(C, "plugin_code", lambda plugin: "edited")
    assert C.cache_key("cpu", "graph", {"shapes": [1]}, {"neurenix-core": "1"}) != key


def test_an_entry_from_other_plugin_code_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[str] = []

    def compiled(code: str) -> C.CacheResult[bytes]:
        monkeypatch.setattr(C, "plugin_code", lambda plugin: code)
        key = C.cache_key("cpu", "graph", {}, {})

        def build() -> bytes:
            builds.append(code)
            return f"compiled by {code}".encode()

        return C.cached("cpu", key, build=build, dump=lambda b: b, load=bytes, meta={}, state_dir=str(tmp_path))

    assert compiled("old").state == "miss" and compiled("old").state == "hit"
    edited = compiled("new")
    assert edited.state == "miss" and edited.value == b"compiled by new" and builds == ["old", "new"]


def test_the_host_runtime_choice_is_measured_again_after_a_runtime_plugin_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu:0's cached runtime choice (host_select) is not checked against the reference when
    loaded, so its key holds each host-runtime plugin's source digest too."""
    import neurenix_core as nx
    from neurenix_core.graph.compile import host_select

    graph = nx.nn.Sequential(nx.nn.Linear(8, 8)).to_graph()
    monkeypatch.setattr(host_select, "_installed", None)
    before = host_select._cache_key(graph, 1)
    monkeypatch.setattr(host_select, "_installed", None)
    monkeypatch.setattr(C, "plugin_code", lambda plugin: "edited")
    if not host_select._installed_runtimes():
        pytest.skip("no host-runtime plugin is installed")
    assert host_select._cache_key(graph, 1) != before
