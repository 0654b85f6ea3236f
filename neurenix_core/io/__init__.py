"""The core's file formats shared by model files and compiled artifacts: ``array_file`` (named
arrays in the safetensors layout, memory-mapped on read) and ``graph_json`` (graphs, quantization
plans and attribute values as JSON whose arrays live in an array file). NumPy only, no pickle."""
