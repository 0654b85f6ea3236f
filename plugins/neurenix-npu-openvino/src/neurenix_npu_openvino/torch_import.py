"""PyTorch modules -> ``openvino.Model`` through ``openvino.convert_model`` (optional: needs torch).

A layer OpenVINO's PyTorch frontend cannot convert becomes an UnsupportedOperationError that
names the operator OpenVINO reported, with OpenVINO's error kept as the cause.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import numpy as np

from neurenix_core.contract import Device
from neurenix_core.errors import BackendUnavailableError, ShapeError, UnsupportedOperationError
from neurenix_npu_openvino.telemetry import keep_telemetry_out

__all__ = ["convert_torch"]

_NO_RULE = re.compile(r"No conversion rule found for operations:\s*([^\n]+)")
_OP_NAME = re.compile(r"aten::[A-Za-z0-9_.]+")


def convert_torch(module: Any, example_input: Any, device: Device) -> Any:
    if importlib.util.find_spec("torch") is None:
        raise BackendUnavailableError(f"{device}: converting a PyTorch module needs torch: pip install 'neurenix-npu-openvino[torch]'")
    if example_input is None:
        raise ShapeError(f"{device}: a PyTorch module needs example_input (a tensor of the real input shape) to be compiled with static shapes")
    keep_telemetry_out()  # this may be the process's first OpenVINO import (see telemetry.py)
    import openvino as ov
    import torch

    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    tensors = tuple(torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x for x in inputs)
    module.eval()
    try:
        model = ov.convert_model(module, example_input=tensors if len(tensors) > 1 else tensors[0])
    except Exception as exc:  # OpenVINO raises OpConversionFailure (not exported) or RuntimeError
        what = _failed_ops(exc)
        raise UnsupportedOperationError(
            f"{device}: OpenVINO cannot convert {type(module).__name__} ({what}); replace that layer, "
            "run the module with PyTorch, or build the model with neurenix nn"
        ) from exc
    for param, tensor in zip(model.get_parameters(), tensors):
        param.set_partial_shape(ov.PartialShape(list(tensor.shape)))
    model.validate_nodes_and_infer_types()
    return model


def _failed_ops(exc: BaseException) -> str:
    """The operators OpenVINO's report names ("No conversion rule found for operations: aten::histc")."""
    text = str(exc)
    rule = _NO_RULE.search(text)
    if rule:
        return f"no conversion rule for {rule.group(1).strip()}"
    ops = sorted(set(_OP_NAME.findall(text)))
    if ops:
        return f"failed operators: {', '.join(ops)}"
    lines = text.strip().splitlines()
    return lines[-1] if lines else type(exc).__name__
