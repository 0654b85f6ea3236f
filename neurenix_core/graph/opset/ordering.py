"""Order statistics and ordered scans: cumulative extrema, medians and modes, sorted search, histograms.
"""

from __future__ import annotations

__all__: list[str] = []
