"""Seeds tpu-backend.md / npu-backend.md / tensor-cores-backend.md, "Checking for ... Availability".

With no plugin installed each check answers False (never raises); with the plugin installed the
plugin answers.
"""
from neurenix.hardware import is_tensor_cores_available
from neurenix.hardware.npu import is_npu_available
from neurenix.hardware.tpu import is_tpu_available

if is_tpu_available():
    print("TPU is available")
else:
    print("TPU is not available")

if is_npu_available():
    print("NPU is available")
else:
    print("NPU is not available")

if is_tensor_cores_available():
    print("Tensor Cores are available")
else:
    print("Tensor Cores are not available")
