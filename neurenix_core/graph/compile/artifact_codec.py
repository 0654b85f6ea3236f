"""The model graph, quantization plan and options of a compiled artifact as JSON plus one array
file: the core's one codec (:mod:`neurenix_core.graph.ir.serialize`) with the artifacts' error classes
and remedy. Format 2 artifacts write the tags model files write; format 1 artifacts (their own
tags, ``a``, ``t``, ``l`` ...) still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from neurenix_core.errors import ArtifactFormatError, ArtifactUnsupportedError
from neurenix_core.graph.compile.artifact_arrays import REMEDY
from neurenix_core.graph.ir import Graph, QuantizationPlan
from neurenix_core.graph.ir.serialize import ARTIFACT_V1_TAGS, TAGS, Decoder, Encoder, graph_from_json, plan_from_json
from neurenix_core.graph.ir.symbolic import NotSymbolicError

__all__ = ["decoder", "encoder", "read_graph"]


def encoder() -> Encoder:
    """The encoder of a new artifact; a value no file can hold is an ArtifactUnsupportedError."""
    return Encoder(ArtifactUnsupportedError, "a compiled artifact holds graphs of data only")


def decoder(arrays: Mapping[str, np.ndarray], where: str, format_version: int) -> Decoder:
    """The decoder of an artifact of ``format_version``: its tags, ArtifactFormatError, the remedy."""
    return Decoder(arrays, where, error=ArtifactFormatError, remedy=REMEDY, tags=ARTIFACT_V1_TAGS if format_version < 2 else TAGS)


def read_graph(stored: Mapping[str, Any], dec: Decoder) -> tuple[Graph, QuantizationPlan | None]:
    """The graph and plan of ``graph.json``; anything malformed is an ArtifactFormatError."""
    try:
        return graph_from_json(stored["graph"], dec), plan_from_json(stored.get("plan"), dec)
    except ArtifactFormatError:
        raise
    except (KeyError, TypeError, ValueError, NotSymbolicError) as exc:
        raise ArtifactFormatError(f"{dec.where}: the model graph is malformed ({type(exc).__name__}: {exc}); {REMEDY}") from exc
