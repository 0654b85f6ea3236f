"""Models as graphs: ``graph_module`` (``GraphModule``, an imported graph as an ``nn`` Module that
compiles on call), ``importing`` (``nx.nn.from_torch_export`` / ``from_onnx``) and ``model_file``
(``nx.nn.save`` / ``load``). Above ``compile``: calling a GraphModule compiles it. Empty on
purpose."""
