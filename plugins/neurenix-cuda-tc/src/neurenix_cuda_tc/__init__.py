"""neurenix-cuda-tc: NVIDIA GPUs through PyTorch, with Tensor Core tools.

Importing this package imports nothing heavy; PyTorch loads when the backend starts
(``neurenix_cuda_tc.backend``) or when a tool that needs it runs.
"""

from __future__ import annotations

__version__ = "0.1.0"
