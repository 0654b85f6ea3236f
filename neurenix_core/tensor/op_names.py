"""The names ``neurenix_core.tensor.ops`` exports, known without loading it.

``import neurenix_core`` loads the tensor layer on first use, yet ``nx.__all__`` (and so the
``import neurenix`` facade) lists every array API function: their names come from the table of
``ARRAY_API_FUNCTIONS`` (``plugins/opnames.py``, data). tests/architecture/test_import_cost.py
checks that this list is ops' ``__all__``.
"""

from __future__ import annotations

from typing import Final

from neurenix_core.plugins.opnames import ARRAY_API_FUNCTIONS

__all__ = ["SPECIAL", "WRITTEN_OUT", "ops_names"]

#: The functions ops.py writes out itself (need more than pass-through), in its ``__all__`` order.
WRITTEN_OUT: Final = ("astype", "broadcast_arrays", "concat", "meshgrid", "stack")
#: Array API functions ops.py does not take from the generated module: the creation functions
#: (creation.py; ``from_dlpack`` is tensor.py's) and those it writes out.
SPECIAL: Final = frozenset({
    "arange", "asarray", "empty", "empty_like", "eye", "full", "full_like", "linspace",
    "ones", "ones_like", "zeros", "zeros_like", "from_dlpack", *WRITTEN_OUT,
})


def ops_names() -> list[str]:
    """``neurenix_core.tensor.ops.__all__``, in its order."""
    return [name for name in ARRAY_API_FUNCTIONS if name not in SPECIAL] + list(WRITTEN_OUT)
