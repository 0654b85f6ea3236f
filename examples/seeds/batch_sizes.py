"""Seeds tpu-backend.md / npu-backend.md, "Batch Size Selection": batch sizes through one compiled model.

A compiled model compiles once per input shape; ``compiled_shapes`` shows each batch size.
"""
import numpy as np

import neurenix as nx
from neurenix.nn import Linear, ReLU, Sequential

model = Sequential(Linear(16, 32), ReLU(), Linear(32, 4))
compiled = nx.compile(model)

# For Cloud TPUs, use larger batch sizes
batch_size = 1024
compiled(np.zeros((batch_size, 16), np.float32))

# For Edge TPUs, use smaller batch sizes
batch_size = 1
compiled(np.zeros((batch_size, 16), np.float32))

print(compiled.compiled_shapes)
assert compiled.compiled_shapes == [((1024, 16),), ((1, 16),)]
