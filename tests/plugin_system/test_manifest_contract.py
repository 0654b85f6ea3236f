"""Manifest validation and API ranges, the static half of the contract."""

from __future__ import annotations

import pytest

from neurenix_core.plugins.manifest import Capabilities, Manifest, PriorityBand, api_compatible, validate_manifest

GOOD = {"name": "acme", "distribution": "neurenix-acme", "version": "1.0", "api": ">=1.0,<2", "device_types": ("acme",), "band": PriorityBand.NPU}


def test_dict_manifest_is_accepted():
    m = validate_manifest({**GOOD, "band": "npu", "device_types": ["acme"], "capabilities": {"dtypes": ("float32",)}})
    assert m.band is PriorityBand.NPU and m.capabilities == Capabilities(dtypes=("float32",))


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"priority": 100}, "priority"),
        ({"name": "Bad Name"}, "name"),
        ({"device_types": ()}, "device_types"),
        ({"api": "one point oh"}, "malformed api range"),
        ({"band": 7}, "band"),
    ],
)
def test_bad_fields_are_named(change, needle):
    with pytest.raises(ValueError, match=needle):
        validate_manifest(Manifest(**{**GOOD, **change}))


def test_unknown_dict_field_is_named():
    with pytest.raises(ValueError, match="unknown manifest field"):
        validate_manifest({**GOOD, "top_priority": True})


@pytest.mark.parametrize(
    ("spec", "ok"),
    [(">=1.0,<2", True), (">=1", True), ("==1.0", True), (">=1.1", False), ("<1.0", False), (">=2.0,<3", False)],
)
def test_api_ranges(spec, ok):
    assert api_compatible(spec, (1, 0)) is ok
