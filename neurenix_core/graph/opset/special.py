"""Special functions: gamma and its logarithmic derivatives, error-function inverses, Bessel
functions, orthogonal polynomials (what ``torch.special`` and SciPy's ``special`` offer).

No ONNX family holds these; the importers map ``torch.special`` / ATen ops onto them.
"""

from __future__ import annotations

__all__: list[str] = []
