"""The entry point cache answers like a fresh scan, and any install, removal or edit is seen.

Distributions are real ``*.dist-info`` folders in temporary site folders; their timestamps are set
into the past where a test needs the cache to be written (a result depending on anything changed
in the last two seconds is never cached).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributions import write_distribution

from neurenix_core.plugins import ep_cache
from neurenix_core.plugins.entrypoints import entry_points

GROUP = "neurenix.backends"


def _age(*roots: Path) -> None:
    """Every file and folder under ``roots`` modified a minute ago."""
    past = time.time() - 60
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                os.utime(os.path.join(folder, name), (past, past))
        os.utime(root, (past, past))


def _view(eps: list) -> list[tuple]:
    return [(e.name, e.value, e.dist_name, e.dist_version, e.folder) for e in eps]


@pytest.fixture
def sites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    first, second, state = tmp_path / "first", tmp_path / "second", tmp_path / "state"
    first.mkdir()
    second.mkdir()
    write_distribution(first, name="acme", module="acme_mod", source="")
    write_distribution(second, name="zeta", module="zeta_mod", source="", version="2.0")
    write_distribution(second, name="acme", module="acme_shadowed", source="")  # first on the path wins
    _age(first, second)
    monkeypatch.setattr(sys, "path", [str(first), str(second)])
    return first, second, state


def _cached(state: Path) -> list[tuple]:
    return _view(ep_cache.cached_entry_points(GROUP, str(state)))


def test_a_valid_cache_answers_without_reading_any_distribution(sites, monkeypatch: pytest.MonkeyPatch) -> None:
    _first, _second, state = sites
    scanned = _view(entry_points(GROUP))
    assert [e[:2] for e in scanned] == [("acme", "acme_mod"), ("zeta", "zeta_mod")]
    assert _cached(state) == scanned
    assert (state / ep_cache.CACHE_FILE).is_file()

    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache was valid: nothing should have been scanned")

    monkeypatch.setattr(ep_cache, "folder_entry_points", no_scan)
    assert _cached(state) == scanned


def test_an_installed_distribution_is_seen(sites) -> None:
    _first, second, state = sites
    _cached(state)
    write_distribution(second, name="newcomer", module="newcomer_mod", source="")
    assert ("newcomer", "newcomer_mod") in [e[:2] for e in _cached(state)]
    assert _cached(state) == _view(entry_points(GROUP))


def test_a_removed_distribution_is_seen(sites) -> None:
    _first, second, state = sites
    _cached(state)
    shutil.rmtree(next(second.glob("neurenix_zeta-*.dist-info")))
    assert [e[:2] for e in _cached(state)] == [("acme", "acme_mod")]


def test_a_shadowing_distribution_removed_brings_back_the_next_one(sites) -> None:
    first, _second, state = sites
    _cached(state)
    shutil.rmtree(next(first.glob("neurenix_acme-*.dist-info")))
    assert [e[:2] for e in _cached(state)] == [("acme", "acme_shadowed"), ("zeta", "zeta_mod")]


def test_an_edited_entry_points_file_is_seen(sites) -> None:
    first, _second, state = sites
    _cached(state)
    info = next(first.glob("neurenix_acme-*.dist-info"))
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nacme = acme_other\n")  # in place: the folder is unchanged
    assert ("acme", "acme_other") in [e[:2] for e in _cached(state)]


def test_a_new_sys_path_folder_is_scanned_alone(sites, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records are per folder: a new working folder (or environment) reuses the others' records."""
    first, second, state = sites
    both = _cached(state)
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    scanned: list[str] = []
    real = ep_cache.folder_entry_points

    def spy(folder: str, group: str) -> list:
        scanned.append(folder)
        return real(folder, group)

    monkeypatch.setattr(ep_cache, "folder_entry_points", spy)
    monkeypatch.setattr(sys, "path", [str(workdir), str(first), str(second)])
    assert _cached(state) == both
    assert scanned == [str(workdir)]
    monkeypatch.setattr(sys, "path", [str(second)])  # another order: the winners change, nothing is scanned
    assert [e[:2] for e in _cached(state)] == [("acme", "acme_shadowed"), ("zeta", "zeta_mod")]
    assert scanned == [str(workdir)]


def test_a_changing_folder_without_distributions_keeps_the_cache(sites, monkeypatch: pytest.MonkeyPatch) -> None:
    """The current folder of ``python -c`` changes all the time; only its distributions matter."""
    first, _second, state = sites
    scanned = _cached(state)
    (first / "notes.txt").write_text("a file, not a distribution")  # first's stamp changes now

    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("the distributions did not change: nothing should have been scanned")

    monkeypatch.setattr(ep_cache, "folder_entry_points", no_scan)
    assert _cached(state) == scanned


def test_a_reinstalled_distribution_of_the_same_name_is_seen(sites) -> None:
    """Same folder name (same version), new folder: a reinstall that adds the entry point."""
    _first, second, state = sites
    _cached(state)
    info = next(second.glob("neurenix_zeta-*.dist-info"))
    shutil.rmtree(info)
    write_distribution(second, name="zeta", module="zeta_rebuilt", source="", version="2.0")
    assert ("zeta", "zeta_rebuilt") in [e[:2] for e in _cached(state)]


def test_recent_changes_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site, state = tmp_path / "site", tmp_path / "state"
    site.mkdir()
    write_distribution(site, name="fresh", module="fresh_mod", source="")  # modified just now
    monkeypatch.setattr(sys, "path", [str(site)])
    assert [e[:2] for e in _cached(state)] == [("fresh", "fresh_mod")]
    assert not (state / ep_cache.CACHE_FILE).exists()  # nothing cacheable: nothing written


@pytest.mark.parametrize(
    "content",
    ["garbage\n", f"{ep_cache._HEADER}\nfolder\tonly-two-fields\nend\n", f"{ep_cache._HEADER}\nend\n", "\udcff"],
)
def test_a_malformed_cache_is_ignored_and_replaced(sites, content: str) -> None:
    _first, _second, state = sites
    state.mkdir()
    (state / ep_cache.CACHE_FILE).write_text(content, errors="surrogateescape")
    assert _cached(state) == _view(entry_points(GROUP))
    assert (state / ep_cache.CACHE_FILE).read_text().startswith(ep_cache._HEADER + "\n")


def test_an_unwritable_state_folder_still_answers(sites) -> None:
    _first, _second, state = sites
    state.write_text("a file where the folder should be")
    assert _cached(state) == _view(entry_points(GROUP))


def test_a_new_plugin_is_discovered_by_the_next_import(tmp_path: Path) -> None:
    """End to end: a warm cache, then ``pip install`` of a plugin (a new dist-info folder)."""
    from distributions import healthy_source

    site, state = tmp_path / "site", tmp_path / "state"
    site.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(NEURENIX_STATE_DIR=str(state), PYTHONPATH=os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")])))
    code = "import neurenix_core as nx; print(sorted(b.name for b in nx.backends()))"

    def names() -> str:
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    _age(tmp_path)
    before = names()
    assert (state / ep_cache.CACHE_FILE).is_file() and "'acme'" not in before
    write_distribution(site, name="acme", module="nx_plugin_acme", source=healthy_source(name="acme"))
    assert "'acme'" in names()


def _forged(state: Path, sites: tuple[Path, Path, Path]) -> str:
    """A valid cache whose only entry point was changed to a module the user never installed."""
    _cached(state)
    text = (state / ep_cache.CACHE_FILE).read_text()
    assert "\tacme_mod\t" in text
    return text.replace("\tacme_mod\t", "\tplanted_module\t")


def test_a_cache_others_may_write_is_not_believed(sites) -> None:
    _first, _second, state = sites
    forged = _forged(state, sites)
    path = state / ep_cache.CACHE_FILE
    path.write_text(forged)
    path.chmod(0o666)  # e.g. NEURENIX_STATE_DIR naming a shared folder
    assert ("acme", "acme_mod") in [e[:2] for e in _cached(state)]
    path.chmod(0o600)
    path.write_text(forged)  # the same text, private: believed (the test of the check above)
    assert ("acme", "planted_module") in [e[:2] for e in _cached(state)]


def test_a_symlinked_cache_is_not_believed(sites, tmp_path: Path) -> None:
    _first, _second, state = sites
    forged = tmp_path / "elsewhere"
    forged.write_text(_forged(state, sites))
    forged.chmod(0o600)
    (state / ep_cache.CACHE_FILE).unlink()
    (state / ep_cache.CACHE_FILE).symlink_to(forged)
    assert ("acme", "acme_mod") in [e[:2] for e in _cached(state)]


def test_this_environment_answers_like_a_scan(tmp_path: Path) -> None:
    state = tmp_path / "state"
    want = [(e.name, e.value, e.dist_name, e.dist_version) for e in entry_points(GROUP)]
    for _ in range(2):  # the scan that writes the cache, then the cache
        got = [(e.name, e.value, e.dist_name, e.dist_version) for e in ep_cache.cached_entry_points(GROUP, str(state))]
        assert got == want
    assert ("cpu", "neurenix_core.backends.cpu") in [w[:2] for w in want]
