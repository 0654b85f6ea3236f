"""The set-based fast paths that spare compiling regexes at import agree with the regexes.

Plugin names, device type names, api range clauses and distribution names are checked at every
``import neurenix_core``; the checks accept the common text without ``re`` and hand everything else
to the original pattern. Random text over an alphabet of the characters that matter (separators,
upper case, a non-ASCII digit, a newline for ``$``) must get the same answer both ways.
"""

from __future__ import annotations

import random
import re

from neurenix_core.device import _TYPE_NAME, valid_type_name
from neurenix_core.plugins.entrypoints import _normalize
from neurenix_core.plugins.manifest import _CLAUSE, _NAME, _clause, _valid_name

ALPHABET = "az09-_.<>= \nA\u0663"


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    fixed = ["", "cpu", "npu-openvino", "edge_tpu", ">=1.0", "<2", "==1", ">= 1.0", ">=1.", ">=1.0\n", "cpu\n", "<\u0663"]
    return fixed + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 7))) for _ in range(n)]


def test_name_checks_agree_with_their_regexes() -> None:
    for text in _texts(20000, seed=1):
        assert _valid_name(text) == (re.match(_NAME, text) is not None), repr(text)
        assert valid_type_name(text) == (re.match(_TYPE_NAME, text) is not None), repr(text)


def test_api_clause_parser_agrees_with_its_regex() -> None:
    for text in _texts(20000, seed=2):
        m = re.match(_CLAUSE, text)
        want = None if m is None else (m.group(1), int(m.group(2)), int(m.group(3) or 0))
        assert _clause(text) == want, repr(text)


def test_distribution_name_normalization_agrees_with_pep_503() -> None:
    for text in _texts(20000, seed=3):
        assert _normalize(text) == re.sub(r"[-_.]+", "_", text).lower(), repr(text)
