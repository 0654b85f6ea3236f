"""Seed tpu-backend.md, "Optimizing a Model for TPU", on the device the user has.

As written the seed needs a TPU (or NEURENIX_EMULATE=tpu with neurenix-tpu installed); this
script runs it on TPU when one is available and on the CPU otherwise, which is the only change.
"""
import neurenix as nx
from neurenix.device import Device, DeviceType
from neurenix.nn import Linear, ReLU, Sequential

device = Device(DeviceType.TPU, 0) if Device(DeviceType.TPU, 0).is_available() else Device(DeviceType.CPU, 0)

# Create a model
model = Sequential(
    Linear(10, 20),
    ReLU(),
    Linear(20, 5)
)

# Move the model to TPU
model.to(device)

# Run inference on TPU
input_tensor = nx.Tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]], device=device)
output = model(input_tensor)
print(f"output on {output.device}: shape {output.shape}")
assert output.shape == (1, 5)
