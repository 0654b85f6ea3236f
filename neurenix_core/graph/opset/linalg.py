"""Linear algebra: factorizations, solves, inverses, decompositions (``torch.linalg``'s family).

No ONNX family holds these (ONNX has only Det); the importers map ``torch.linalg`` / ATen ops onto them.
"""

from __future__ import annotations

__all__: list[str] = []
