"""The edgetpu plugin's piece of the persistent compile cache: a second process loads the written
.tflite instead of lowering and writing it, with bit-identical results."""

from __future__ import annotations

from pathlib import Path

import compile_cache_child as child


def test_second_process_hits_with_identical_results(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "edgetpu:0")
    warm = child.run(tmp_path, "edgetpu:0")
    assert "compile cache: miss" in cold["summary"] and "compile cache: hit" in warm["summary"], (cold["summary"], warm["summary"])
    assert warm["sha256"] == cold["sha256"]
    assert "LiteRT float32 TFLite model" in warm["summary"]  # the loaded bytes run as the written ones did
