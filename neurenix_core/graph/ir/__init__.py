"""The graph IR, the layer the plugin contract is written against: :class:`Graph`, :class:`Node`,
:class:`TensorSpec`, :class:`QuantizationPlan`, :class:`QuantParams`, :class:`CompileOptions`
(defined in :mod:`.core`), with shape inference (``shapes``), symbolic dimensions (``symbolic``),
graph rewrites (``decompose``, ``specialize``), the integer arithmetic of quantized values
(``qmath``), the JSON form (``serialize``) and the host-runtime contract (``host``).

This module re-exports the core types only, so ``from neurenix_core.graph.ir import Graph`` loads
nothing else.
"""

from neurenix_core.graph.ir.core import *
from neurenix_core.graph.ir.core import __all__ as _core_all

__all__ = list(_core_all)
