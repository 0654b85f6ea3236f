"""``torch.compile(model, backend="neurenix")``: PyTorch code compiled for any neurenix device.

``backend`` is the entry point PyTorch discovers (``torch_dynamo_backends``); ``Backend`` binds
options and keeps what it compiled; ``pieces()`` lists what the string form compiled. PyTorch is
imported when dynamo calls the backend, never by importing this package. docs/torch-compile.md.
"""

from neurenix_core.torch_compile.backend import Backend, backend, pieces
from neurenix_core.torch_compile.piece import Piece
from neurenix_core.torch_compile.training import AtenPiece

#: ``nx.torch_backend(device="npu:0", precision="fp16")``: the backend with its options bound
torch_backend = Backend

__all__ = ["AtenPiece", "Backend", "Piece", "backend", "pieces", "torch_backend"]
