"""Seed tensor-cores-backend.md, "Optimizing a Model": the list form of Sequential.

The TensorCoresBackend part needs neurenix-cuda-tc; here the model runs eagerly and through
nx.compile on the default device.
"""
import numpy as np

import neurenix as nx
from neurenix.nn import Linear, ReLU, Sequential

# Create a model
model = Sequential([
    Linear(1024, 1024),
    ReLU(),
    Linear(1024, 1024),
])

x = nx.Tensor(np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32))
compiled = nx.compile(model)
diff = float(np.abs(compiled(x).numpy() - model(x).numpy()).max())
print(f"{compiled.summary}; max |compiled - eager| = {diff:.2e}")
assert diff < 1e-4
