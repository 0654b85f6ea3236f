"""Control flow: ops whose attributes hold subgraphs (If, Loop, Scan)."""

from __future__ import annotations
