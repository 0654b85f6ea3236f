"""The one sanitiser for plugin text, and the crash journal's file protocol, in this process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neurenix_core.plugins import journal
from neurenix_core.plugins.manifest import Capabilities, Manifest, PriorityBand, ProbeResult
from neurenix_core.plugins.records import Failure
from neurenix_core.plugins.sanitize import CAUSE_LIMIT, clean, clean_manifest, clean_probe, describe


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("no /dev/acme0: install the driver", "no /dev/acme0: install the driver"),
        ("\x1b[2J\x1b[1;31mred\x1b[0m text", "red text"),
        ("see \x1b]8;;http://evil.example\x07the docs\x1b]8;;\x1b\\ now", "see the docs now"),
        ("line one\nline two\ttab\r\x00nul", "line one line two tab nul"),
        ("abc \u202edcba\u200b", "abc dcba"),
        ("\x9b31mC1 csi", "C1 csi"),
        ("é ü 中文 🙂", "é ü 中文 🙂"),
    ],
)
def test_clean_removes_escapes_and_controls(raw, expected):
    assert clean(raw) == expected


def test_clean_bounds_length_and_says_so():
    out = clean("x" * 10_000_000, 500)
    assert out.startswith("x" * 500) and out.endswith("... [truncated: 10000000 characters]")
    assert len(out) < 560
    assert clean("y" * 600, 500).endswith("[truncated: 600 characters]")


def test_clean_survives_a_hostile_str():
    class Nasty(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe(Nasty()) == "Nasty: <unprintable Nasty: str() raised RuntimeError>"
    assert clean(Nasty("x")).startswith("<unprintable Nasty")


def test_failure_causes_are_always_clean():
    failure = Failure("probe", "boom\x1b[2J" + "z" * 5000)
    assert "\x1b" not in failure.cause and len(failure.cause) < CAUSE_LIMIT + 50


def test_manifest_and_probe_text_are_cleaned_and_clean_ones_are_kept():
    m = Manifest(
        name="acme", distribution="neurenix-acme\x1b[31m", version="1.0", api=">=1.0,<2", device_types=("acme",),
        band=PriorityBand.ACCELERATOR, install_hint="pip install\nacme", description="d" * 10_000,
        capabilities=Capabilities(dtypes=("float32\x07",), extra={"note\x1b[0m": ["a\tb", 3]}),
    )
    c = clean_manifest(m)
    assert c.distribution == "neurenix-acme" and c.install_hint == "pip install acme"
    assert len(c.description) < 600 and c.capabilities.dtypes == ("float32",)
    assert c.capabilities.extra == {"note": ["a b", 3]}
    plain = m.replace(distribution="neurenix-acme", install_hint="x", description="", capabilities=Capabilities())
    assert clean_manifest(plain) is plain
    probe = ProbeResult.missing("\x1b[2Jgone")
    assert clean_probe(probe).reason == "gone" and clean_probe(ProbeResult.found(1)) == ProbeResult.found(1)


def test_a_dead_process_journal_becomes_a_quarantine_entry(tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "journal-999999-0.log").write_text(
        "neurenix-journal 1 999999 2026-01-02T03:04:05Z\n"
        "+good\tneurenix-good\t1.0\timport\n-good\n"
        "+slow\tneurenix-slow\t2.0\tprobe\n~slow\n"
        "+acme\tneurenix-acme\t1.2.3\tprobe\n"
    )
    entries = journal.read_quarantine(str(state))
    assert set(entries) == {"acme"}  # running, not the abandoned one, not the finished one
    entry = entries["acme"]
    assert (entry.phase, entry.at, entry.distribution, entry.version) == ("probe", "2026-01-02T03:04:05Z", "neurenix-acme", "1.2.3")
    assert entry.matches("neurenix-acme", "1.2.3") and not entry.matches("neurenix-acme", "1.2.4")
    assert "killed the process during its probe at 2026-01-02T03:04:05Z" in journal.quarantine_cause(entry)
    assert not list(state.glob("journal-*"))
    assert journal.lift(str(state), "acme") is not None and journal.read_quarantine(str(state)) == {}


def test_a_live_journal_is_left_alone(tmp_path: Path):
    state = tmp_path / "state"
    live = journal.open_journal(str(state))
    assert isinstance(live, journal.Journal)
    live.enter("acme", "neurenix-acme", "1.0", "probe")
    try:
        assert journal.read_quarantine(str(state)) == {}  # locked by its (living) owner
        assert os.path.exists(live.path)
    finally:
        live.leave("acme")
        live.finish()
    assert not os.path.exists(live.path)
