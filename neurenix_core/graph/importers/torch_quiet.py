"""torch.export's messages that are PyTorch's internals or that neurenix says better, kept off users' screens.

Two leak to a user of ``nx.nn.from_torch`` (issue #29):

- ``W... non_strict_utils.py] dimension inputs['x'].shape[0] 0/1 specialized; Dim.AUTO was
  specified ...``: logged by torch at WARNING through a handler torch installs. neurenix's own
  ``NeurenixWarning`` (``torch_axes.warn_fixed``) names the same axis with the reason and the
  remedy, so the torch record is routed to the ``neurenix_core.importers.torch`` logger at DEBUG.
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
LOGGER: Final = "neurenix_core.importers.torch"
_TORCH_LOGGER: Final = "torch._export.non_strict_utils"
_SPECIALIZED: Final = "0/1 specialized; Dim.AUTO"
_TREESPEC: Final = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _Reroute(logging.Filter):
    """Drops torch's 0/1-specialisation record from torch's handlers and logs it under neurenix's logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _SPECIALIZED not in message:
            return True
        logging.getLogger(LOGGER).debug("torch.export: %s", message)
        return False


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """Around one ``torch.export.export`` (and its decompositions): the two messages above rerouted."""
    logger, reroute = logging.getLogger(_TORCH_LOGGER), _Reroute()
    logger.addFilter(reroute)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_TREESPEC, category=FutureWarning)
            yield
    finally:
        logger.removeFilter(reroute)
