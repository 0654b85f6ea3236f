"""neurenix_core.plugins.entrypoints reads a group exactly as importlib.metadata does (sys.path order, first wins)."""

from __future__ import annotations

from importlib import metadata

import pytest

from neurenix_core.plugins.entrypoints import entry_points


@pytest.mark.parametrize("group", ["neurenix.backends", "console_scripts", "pytest11"])
def test_same_entry_points_as_importlib_metadata(group):
    ours = sorted((e.name, e.value, e.dist_name) for e in entry_points(group))
    theirs = sorted((e.name, e.value, e.dist.metadata["Name"] if e.dist else None) for e in metadata.entry_points(group=group))
    assert ours == theirs
    assert ours, f"the test environment should have {group} entry points"


def test_first_distribution_on_the_path_wins(tmp_path):
    from distributions import write_distribution

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    write_distribution(first, name="acme", module="acme_new", source="", version="2.0")
    write_distribution(second, name="acme", module="acme_old", source="", version="1.0")
    found = entry_points("neurenix.backends", path=[str(first), str(second)])
    assert [(e.name, e.value, e.dist_version) for e in found] == [("acme", "acme_new", "2.0")]
