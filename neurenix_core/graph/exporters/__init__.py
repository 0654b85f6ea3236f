"""Graph exporters: the core's op-level graph written in other frameworks' formats.

``onnx_export`` writes standard ONNX (``GraphModule.to_onnx``, ``nx.nn.export_onnx``); it imports
the ``onnx`` package at module level, so nothing here imports it: callers import the module on use.
"""
