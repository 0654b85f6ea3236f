"""Bugs the differential layer found that are not fixed yet, each reviewed like code.

Each entry names the cases it shows in (a case-id pattern: ``<target>-<mode>-<backend>[.<runtime>]``,
``*`` any run of characters), the failure's kind and a regex its message matches, why it is wrong
and where the fix belongs. A sampled case failing exactly that way is reported as xfailed with the
reason; any other failure of the same case still fails. Each entry needs a deterministic strict-xfail
reproduction (a test_known_bugs.py beside this file), which turns XPASS (a failure of the run) once the bug is
fixed, until its entry is removed here. No entry may cover a whole device or mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KNOWN_BUGS", "KnownBug", "known_bug"]


@dataclass(frozen=True)
class KnownBug:
    key: str
    cases: str
    kind: str
    message: str
    reason: str


#: Empty: the two bugs listed here (from_dlpack's device, a compiled output aliasing its input) are
#: fixed and pinned in test_fixed_bugs.py.
KNOWN_BUGS: tuple[KnownBug, ...] = ()


def _regex(pattern: str) -> str:
    return "".join(".*" if c == "*" else re.escape(c) for c in pattern)


def known_bug(case_id: str, kind: str, message: str) -> KnownBug | None:
    """The known bug this failure of ``case_id`` is, or None (a new failure)."""
    for bug in KNOWN_BUGS:
        if bug.kind == kind and re.fullmatch(_regex(bug.cases), case_id) and re.search(bug.message, message):
            return bug
    return None
