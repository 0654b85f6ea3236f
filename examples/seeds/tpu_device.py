"""Seed tpu-backend.md, "Creating a TPU Device": runs with the core alone (prints not available)."""
# Python
from neurenix.device import Device, DeviceType

# Create a TPU device
tpu_device = Device(DeviceType.TPU, 0)

# Check if the device is available
if tpu_device.is_available():
    print("TPU device is available")
else:
    print("TPU device is not available")
