"""torch.export's messages that are PyTorch's internals or that neurenix says better, kept off users' screens.

These leak to a user of ``nx.nn.from_torch`` (issue #29):

- ``W... non_strict_utils.py] dimension inputs['x'].shape[0] 0/1 specialized; Dim.AUTO was
  specified ...``: logged by torch at WARNING through a handler torch installs. neurenix's own
  ``NeurenixWarning`` (``torch_axes.warn_fixed``) names the same axis with the reason and the
  remedy, so the torch record is routed to the ``neurenix.importers.torch`` logger at DEBUG.
- ``W... _registration.py] torchvision is not installed. Skipping torchvision::nms`` (four lines):
  ``torch.onnx.export`` (the PT2E path) saying it will not convert torchvision ops, which a
  neurenix import never needs; routed to the same logger at DEBUG.
- ``copyreg.py: FutureWarning: `isinstance(treespec, LeafSpec)` is deprecated``: PyTorch warning
  about its own pytree internals, which the user cannot act on; dropped (that message only).

Everything else torch logs or warns passes through unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Final

__all__ = ["LOGGER", "quiet_export"]

#: Where the routed torch records go (DEBUG): ``logging.getLogger(LOGGER).setLevel(logging.DEBUG)`` shows them.
LOGGER: Final = "neurenix.importers.torch"  # under neurenix's one logger (neurenix_core/_log.py)
#: torch's logger -> the message (a substring) rerouted from it.
_ROUTED: Final = {
    "torch._export.non_strict_utils": "0/1 specialized; Dim.AUTO",
    "torch.onnx._internal.exporter._registration": "torchvision is not installed",
}
_TREESPEC: Final = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _Reroute(logging.Filter):
    """Drops one kind of torch record from torch's handlers and logs it under neurenix's logger."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.text not in message:
            return True
        logging.getLogger(LOGGER).debug("torch: %s", message)
        return False


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """Around one ``torch.export.export`` or ``torch.onnx.export``: the messages above rerouted."""
    filters = [(logging.getLogger(name), _Reroute(text)) for name, text in _ROUTED.items()]
    for logger, reroute in filters:
        logger.addFilter(reroute)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_TREESPEC, category=FutureWarning)
            yield
    finally:
        for logger, reroute in filters:
            logger.removeFilter(reroute)
