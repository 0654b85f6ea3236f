"""ONNX's own backend node tests as neurenix's conformance suite, on every device.

Each of the node tests that ship with the ``onnx`` package runs through ``nx.nn.from_onnx`` and
``nx.compile(..., precision="fp32")`` on each discovered device (plugins emulated on the host CPU
through their real runtimes, as ``scripts/test.sh`` sets it up), like onnxruntime's
``onnx_backend_test_series``. A device may refuse a case only where its reviewed list
``tests/onnx_node_expected/<device>.txt`` says so, with the reason; a wrong answer or an untyped
exception fails whatever the list says, and a listed case that passes fails too (remove it: the
lists only shrink). ``scripts/onnx_conformance.py`` prints the same run as a table beside ONNX
Runtime.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("onnx")

import neurenix_core as nx
from neurenix_core.testing import onnx_suite
from neurenix_core.testing.onnx_expected import read_expected

EXPECTED = Path(__file__).parent / "onnx_node_expected"
DEVICES = ("cpu", "cuda", "tpu", "npu", "edgetpu")
AVAILABLE = {d.type for d in nx.devices()}


@pytest.fixture(scope="module")
def cases() -> list[onnx_suite.Case]:
    return onnx_suite.load_cases()


def _lines(title: str, items: list[str]) -> str:
    return f"{title} ({len(items)}):\n  " + "\n  ".join(items[:40]) + ("\n  ..." if len(items) > 40 else "") if items else ""


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_onnx_node_suite(device: str, cases: list[onnx_suite.Case]) -> None:
    if device not in AVAILABLE:
        pytest.skip(f"{device}: no such device here (the suite runs plugins emulated: NEURENIX_EMULATE={device})")
    expected = read_expected(EXPECTED / f"{device}.txt")
    results = {c.name: onnx_suite.run_case(c, device) for c in cases}
    wrong = [f"{n}: {o.detail}" for n, o in results.items() if o.status == "wrong"]
    crash = [f"{n}: {o.detail}" for n, o in results.items() if o.status == "crash"]
    unlisted = [f"{n}: {o.detail[:200]}" for n, o in results.items() if o.status == "refused" and n not in expected]
    passing = [n for n, o in results.items() if o.status == "pass" and n in expected]
    stale = [n for n in expected if n not in results]
    report = "\n".join(filter(None, (
        _lines("silently wrong answers", wrong),
        _lines("untyped exceptions", crash),
        _lines("refusals not on the reviewed list (fix them, or list them with a reason)", unlisted),
        _lines("listed cases that now pass (remove them from the list)", passing),
        _lines("listed cases that no longer exist", stale),
    )))
    assert not report, f"{device}:0, ONNX node suite:\n{report}"
