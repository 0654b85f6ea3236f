"""ONNX models as ONNX defines them: the node tests of some ops on one device, and two models that
used to be refused or answered wrongly (a Reshape whose shape is a graph input, a float16 model).

    python examples/onnx_conformance.py                       # the best device, a few common ops
    python examples/onnx_conformance.py --device npu:0 --ops Resize,TopK,LayerNormalization

The node tests come with the onnx package (``onnx.backend.test``); the same harness runs all of
them on every device in tests/test_onnx_node_suite.py and scripts/onnx_conformance.py.
"""

from __future__ import annotations

import argparse
import collections
import warnings

import numpy as np
from onnx import TensorProto, helper

import neurenix_core as nx
from neurenix_core.testing.onnx_suite import NeurenixBackend, load_cases, run_case

COMMON = "Conv,MaxPool,Resize,LayerNormalization,TopK,CumSum,Einsum,ReduceMean,Slice"


def node_tests(device: str, ops: set[str]) -> None:
    """Every node test of ``ops`` on ``device``: pass, or a typed refusal with its reason."""
    counts: collections.Counter[str] = collections.Counter()
    for case in load_cases(lambda c: c.op in ops):
        outcome = run_case(case, device)
        counts[outcome.status] += 1
        if outcome.status != "pass":
            print(f"  {case.name}: {outcome.status}: {outcome.detail[:160]}")
    print(f"node tests of {', '.join(sorted(ops))} on {device}: {dict(counts)}")


def value_input(device: str) -> None:
    """A Reshape whose target shape is a graph input: built and compiled once per value."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    graph = helper.make_graph([node], "reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                                                  helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = nx.nn.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    compiled = nx.compile(model, device=device, outputs="host")
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, -1]):
        print(f"reshape to {shape} (value input {model.value_inputs[0]!r}): {compiled(x, np.array(shape)).shape}")


def float16_model(device: str) -> None:
    """A float16 Softmax through ONNX's own Backend interface: float16 in, float16 out."""
    node = helper.make_node("Softmax", ["x"], ["y"])
    graph = helper.make_graph([node], "softmax16", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)])
    rep = NeurenixBackend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), device)
    (y,) = rep.run([np.array([[1, 2, 3], [0, 0, 0]], np.float16)])
    print(f"float16 softmax on {device}: dtype {y.dtype}, rows sum to {y.astype(np.float32).sum(axis=1)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="a neurenix device (default: the best one here)")
    parser.add_argument("--ops", default=COMMON, help="ONNX op types, comma-separated")
    args = parser.parse_args()
    device = str(args.device or nx.default_device())
    warnings.simplefilter("ignore")  # placement lines: run_case records them in its outcome
    node_tests(device, set(args.ops.split(",")))
    value_input(device)
    float16_model(device)


if __name__ == "__main__":
    main()
