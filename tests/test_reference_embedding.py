"""The float64 reference looks an embedding's rows up in the table's own dtype and casts the rows:
the same numbers as casting the table first, without a float64 copy of the whole table per call
(BERT-tiny's integer reference spent a sixth of its time converting its 30,522-word table)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import eval_node, run_graph


def test_an_embedding_is_looked_up_without_converting_its_table() -> None:
    table = np.random.default_rng(0).standard_normal((8192, 128)).astype(np.float32)  # 4 MB; 8 MB as float64
    node = Node("e", "embedding", ("ids",), "h", {}, {"weight": table})
    ids = np.array([[3, 8191, 0]], np.int64)
    eval_node(node, [ids])  # warm: imports and the op table
    tracemalloc.start()
    try:
        got = eval_node(node, [ids])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, table.astype(np.float64)[ids])
    assert peak < table.nbytes // 8, f"{peak} bytes traced: the table was converted"
    graph = Graph((TensorSpec("ids", (1, 3), "int64"),), (node,), ("h",))
    np.testing.assert_array_equal(run_graph(graph, ids), table.astype(np.float64)[ids])
