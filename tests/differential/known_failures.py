"""Bugs the differential layer found that are not fixed yet, each reviewed like code.

Each entry names the cases it shows in (a case-id pattern: ``<target>-<mode>-<backend>[.<runtime>]``,
``*`` any run of characters), the failure's kind and a regex its message matches, why it is wrong
and where the fix belongs. A sampled case failing exactly that way is reported as xfailed with the
reason; any other failure of the same case still fails. Each entry has a deterministic strict-xfail
reproduction in test_known_bugs.py, which turns XPASS (a failure of the run) once the bug is
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


KNOWN_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        key="from_dlpack-device",
        cases="from_dlpack-*",
        kind="device",
        message=r"result on cpu:0, not on the device under test",
        reason="nx.from_dlpack(x) for a Tensor x off cpu:0 returns a cpu:0 tensor: the standard says device=None keeps x's "
               "device (tensor/tensor.py from_dlpack: placement_for(None) is the default device)",
    ),
    KnownBug(
        key="compiled-output-aliases-input",
        cases="*-compiled-*",
        kind="memory",
        message=r"output for a device tensor: a view of an operand's buffer is charged \d+ bytes, not 0",
        reason="a compiled model whose output is its input or a view of it (Identity; Flatten/Dropout through torch.fx on "
               "cuda:0) wraps it as a fresh buffer: the device is charged twice for one buffer and the output does not keep "
               "the input alive as its _base (graph/compiler.py Compiled.__call__ / tensor.wrap_results)",
    ),
)


def _regex(pattern: str) -> str:
    return "".join(".*" if c == "*" else re.escape(c) for c in pattern)


def known_bug(case_id: str, kind: str, message: str) -> KnownBug | None:
    """The known bug this failure of ``case_id`` is, or None (a new failure)."""
    for bug in KNOWN_BUGS:
        if bug.kind == kind and re.fullmatch(_regex(bug.cases), case_id) and re.search(bug.message, message):
            return bug
    return None
