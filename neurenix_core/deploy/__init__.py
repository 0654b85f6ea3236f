"""Compiled artifacts: ``compiled.save(path)`` and ``nx.load_compiled(path)`` (docs/deploy.md).

``artifact`` writes the folder and checks its manifest, ``load`` rebuilds the compiled model, ``codec`` the model graph and quantization plan in it
(JSON + a raw array file, nothing unpickled), ``arrays`` that array file.
"""

from __future__ import annotations

from neurenix_core.graph.compile.artifact import FORMAT_VERSION, MANIFEST_NAME, member, read_manifest, save_compiled

__all__ = ["FORMAT_VERSION", "MANIFEST_NAME", "member", "read_manifest", "save_compiled"]
