"""Seed npu-backend.md, "Optimizing a Model for NPU": the model, corrected.

The seed puts ``Linear(64 * 8 * 8, 10)`` straight after a convolution; a Linear needs a
flattened input, so a ``Flatten()`` is added (for 32x32 images the last conv gives 64x8x8).
The NPUBackend part needs neurenix-npu-openvino; here the model runs on the core's CPU backend,
eagerly and compiled with int8 quantization (NumPy integer kernels).
"""
import numpy as np

import neurenix as nx
from neurenix.nn import Conv2d, Flatten, Linear, ReLU, Sequential

# Create a model
model = Sequential(
    Conv2d(3, 16, kernel_size=3, stride=1, padding=1),
    ReLU(),
    Conv2d(16, 32, kernel_size=3, stride=2, padding=1),
    ReLU(),
    Conv2d(32, 64, kernel_size=3, stride=2, padding=1),
    ReLU(),
    Flatten(),
    Linear(64 * 8 * 8, 10)
)

images = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
eager = model(nx.Tensor(images))

calibration = [np.random.default_rng(i).standard_normal((4, 3, 32, 32)).astype(np.float32) for i in range(4)]
optimized_model = nx.compile(model, quantize=True, precision="int8", calibration=calibration, progress=False)
quantized = optimized_model(images)
error = float(np.abs(quantized.numpy() - eager.numpy()).max() / np.abs(eager.numpy()).max())
print(f"Model optimized: {optimized_model.summary}; int8 error {error:.4f} of max |output|")
assert error < 0.05
