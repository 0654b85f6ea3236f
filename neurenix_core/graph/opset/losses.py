"""Training losses (ONNX's NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss)."""

from __future__ import annotations
