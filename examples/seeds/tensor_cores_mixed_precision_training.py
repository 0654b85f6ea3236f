"""Seed tensor-cores-backend.md, Best Practices, "Mixed Precision Training": the snippet as written.

optimize_model(precision="mixed") returns a PyTorch module (float32 weights, forward under
float16 autocast); neurenix's Adam updates its parameters in place on cuda, torch's autograd
computes their gradients, and nx.GradScaler keeps float16 gradients from underflowing.
Needs neurenix-cuda-tc; without an NVIDIA GPU it runs emulated (NEURENIX_EMULATE=cuda).
"""
# env: NEURENIX_EMULATE=cuda
import numpy as np

import neurenix as nx
from neurenix.hardware import TensorCoresBackend
from neurenix.nn import Linear, ReLU, Sequential
from neurenix.nn import functional as F
from neurenix.optim import Adam

tensor_cores = TensorCoresBackend()
tensor_cores.initialize()

# Create a model
model = Sequential([
    Linear(1024, 1024),
    ReLU(),
    Linear(1024, 1024),
])

# Optimize model for mixed precision
optimized_model = tensor_cores.optimize_model(model, precision="mixed")

# Create optimizer
optimizer = Adam(optimized_model.parameters(), lr=0.001)

# Train: learn y = x / 2 (a linear map the model can represent)
rng = np.random.default_rng(0)
x = nx.asarray(rng.standard_normal((32, 1024)).astype(np.float32), device="cuda:0")
y = x * 0.5
scaler = nx.GradScaler()
losses = []
for step in range(25):
    optimizer.zero_grad()
    loss = F.mse_loss(optimized_model(x), y)   # fp16 matmuls, fp32 loss
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    losses.append(float(loss))
print(f"mixed precision on {x.device}: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} steps, "
      f"loss scale {scaler.get_scale():.0f}, {scaler.skipped_steps} step(s) skipped")
assert losses[-1] < 0.5 * losses[0]
