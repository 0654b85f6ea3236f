"""Importers from other frameworks into the core's Graph (torch.export, ONNX)."""
