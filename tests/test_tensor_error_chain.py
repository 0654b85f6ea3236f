"""A NeurenixError raised inside a backend op reaches the user unchanged, never chained to itself."""

from __future__ import annotations

import pytest

import neurenix_core as nx


def test_neurenix_error_from_an_op_is_not_its_own_cause(monkeypatch):
    a = nx.asarray([1.0, 2.0])
    backend = nx.backend("cpu")

    def refusing(x1, x2):
        raise nx.FallbackError("add refused by the op itself (policy 'error')")

    monkeypatch.setitem(backend.ops, "subtract", refusing)
    with pytest.raises(nx.FallbackError) as info:
        nx.subtract(a, a)
    seen, cause = set(), info.value
    while cause is not None:  # would never end if the error were chained to itself
        assert id(cause) not in seen
        seen.add(id(cause))
        cause = cause.__cause__


def test_native_error_is_translated_and_keeps_its_cause():
    with pytest.raises(nx.ShapeError) as info:
        nx.zeros(3) + nx.zeros(4)
    assert isinstance(info.value.__cause__, ValueError)
    assert "cpu:0" in str(info.value)
