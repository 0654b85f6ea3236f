"""Optimizers and learning-rate schedulers over Tensors that require grad."""

from neurenix_core.optim.adam import Adam, AdamW
from neurenix_core.optim.lr_scheduler import CosineAnnealingLR, LRScheduler, StepLR
from neurenix_core.optim.optimizer import Optimizer
from neurenix_core.optim.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "CosineAnnealingLR", "LRScheduler", "Optimizer", "StepLR"]
