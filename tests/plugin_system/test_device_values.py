"""Device and DeviceType are small hashable values; DeviceType is open to plugin types."""

from __future__ import annotations

import pytest

import neurenix_core as nx
from neurenix_core.device import Device, DeviceType


def test_three_spellings_are_equal_and_hash_alike():
    a, b, c = Device("npu:0"), Device("npu", 0), Device(DeviceType.NPU, 0)
    assert a == b == c
    assert len({a, b, c}) == 1
    assert Device("npu:1") != a
    assert Device("npu") == a


def test_repr_evaluates_back():
    d = Device("edgetpu:2")
    assert eval(repr(d), {"Device": Device}) == d
    assert str(d) == "edgetpu:2"


def test_device_type_is_open_and_interned():
    t = DeviceType("vendorx")
    assert t is DeviceType("VendorX")
    assert DeviceType.VENDORX is t
    assert Device("vendorx:3").type is t
    with pytest.raises(AttributeError, match="known types"):
        DeviceType.NOT_A_TYPE_YET  # noqa: B018


@pytest.mark.parametrize("bad", ["npu:x", "npu:-1", ":0", "np u:0", "npu:0:1"])
def test_malformed_strings_raise_invalid_device(bad):
    with pytest.raises(nx.InvalidDeviceError):
        Device(bad)


def test_negative_or_conflicting_index():
    with pytest.raises(nx.InvalidDeviceError):
        Device("npu", -1)
    with pytest.raises(nx.InvalidDeviceError):
        Device("npu:0", 1)


def test_is_available_reflects_the_registry():
    assert Device("cpu:0").is_available()
    assert not Device("cpu:5").is_available()
    assert not Device("nosuchthing:0").is_available()
