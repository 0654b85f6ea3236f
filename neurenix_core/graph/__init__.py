"""The model path, one subpackage per stage (docs/architecture.md), each importing only the ones
before it:

* ``opset``: the op table (attributes, params, shape/dtype rules, reference semantics);
* ``ir``: the graph, its value specs and quantization plan, shape inference, symbolic dims,
  graph rewrites, the integer arithmetic, the JSON form, and the host-runtime contract;
* ``reference``: the float64 and integer reference interpreters and the NumPy graph interpreter;
* ``quantization``: calibration and int8 verification on top of the references;
* ``importers`` / ``exporters``: ONNX and PyTorch to a graph, a graph to ONNX;
* ``compile``: ``nx.compile`` (placement, host runtimes, per-shape compilation, buckets, the
  compile cache and compiled artifacts);
* ``models``: ``GraphModule``, what importing a model or loading a model file gives back.

Empty on purpose: import the module you need.
"""
