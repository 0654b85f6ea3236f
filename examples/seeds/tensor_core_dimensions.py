"""Seed tensor-core-dimension-tutorial.rst: rounding layer sizes to multiples of 8, capped at 1.2x.

The seed builds ``pr.nn.SKLinear`` layers (a sketched linear layer from another library); the
core has ``nn.Linear``, used here with the same optimised sizes. A user Module with its own
forward is walked into a graph by nx.compile like a Sequential.
"""
import numpy as np

import neurenix as nx
from neurenix import nn


def optimize_for_tensor_cores(in_features, out_features, num_terms, low_rank):
    """Optimize dimensions for Tensor Core usage."""

    # Round dimensions to multiples of 8 for FP16 Tensor Cores
    def round_to_multiple(x, multiple=8):
        return ((x + multiple - 1) // multiple) * multiple

    optimized_in = round_to_multiple(in_features)
    optimized_out = round_to_multiple(out_features)
    optimized_rank = round_to_multiple(low_rank)

    # Ensure we don't exceed original dimensions significantly
    if optimized_in > in_features * 1.2:
        optimized_in = in_features
    if optimized_out > out_features * 1.2:
        optimized_out = out_features

    return optimized_in, optimized_out, num_terms, optimized_rank


# Example: Create Tensor Core optimized layers
class TensorCoreOptimizedModel(nn.Module):
    def __init__(self, layer_configs):
        super().__init__()

        layers = []
        previous = None
        for config in layer_configs:
            in_feat, out_feat, _terms, _rank = optimize_for_tensor_cores(
                config['in_features'], config['out_features'],
                config['num_terms'], config['low_rank']
            )
            # Rounding can change a layer's input size: chain from the previous layer's output.
            in_feat = in_feat if previous is None else previous
            layer = nn.Linear(in_feat, out_feat)
            layers.extend([layer, nn.ReLU()])
            previous = out_feat

        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


# Create optimized model
configs = [
    {'in_features': 1000, 'out_features': 500, 'num_terms': 8, 'low_rank': 64},
    {'in_features': 500, 'out_features': 250, 'num_terms': 6, 'low_rank': 48},
    {'in_features': 250, 'out_features': 10, 'num_terms': 4, 'low_rank': 32}
]

device = nx.default_device()
optimized_model = TensorCoreOptimizedModel(configs).to(device)
print([tuple(p.shape) for p in optimized_model.parameters()][::2])
assert optimize_for_tensor_cores(1000, 500, 8, 64) == (1000, 504, 8, 64)

x = np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32)
out = nx.compile(optimized_model)(x)
print(f"output {out.shape} on {out.device}")
assert out.shape == (2, 10)
