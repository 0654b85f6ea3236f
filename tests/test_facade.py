"""The seed facade: neurenix.device / nn / hardware, names resolved through Manifest.exports."""

from __future__ import annotations

EXPORTING = '''
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult, ArrayNamespaceBackend

class B(ArrayNamespaceBackend):
    def __init__(self):
        super().__init__(np, device_type="npu", device_count=1)
    def _native_device(self, index):
        return "cpu"

def is_npu_available():
    return True

class NPUBackend:
    vendor = "acme"

@hookimpl
def neurenix_manifest():
    return Manifest(name="acme-npu", distribution="neurenix-acme-npu", version="1.0", api=">=1.0,<2", device_types=("npu",),
                    band=PriorityBand.NPU, exports={"neurenix.hardware.npu": "nx_plugin_acme_npu"})

@hookimpl
def neurenix_probe(context):
    return ProbeResult.found(1)

@hookimpl
def neurenix_backend(manifest, probe):
    return B()
'''


def test_no_plugin_answers_false_and_names_package(run_neurenix) -> None:
    out = run_neurenix(
        """
        import json, sys
        import neurenix as nx
        from neurenix.hardware import is_tensor_cores_available
        from neurenix.hardware.tpu import is_tpu_available
        from neurenix.hardware.npu import is_npu_available
        from neurenix.hardware.edgetpu import is_edgetpu_available
        res = {"avail": [is_tensor_cores_available(), is_tpu_available(), is_npu_available(), is_edgetpu_available()]}
        errors = []
        for mod, name in [("neurenix.hardware", "TensorCoresBackend"), ("neurenix.hardware.tpu", "TPUBackend"),
                          ("neurenix.hardware.npu", "NPUBackend"), ("neurenix.hardware.edgetpu", "EdgeTPUBackend")]:
            try:
                exec(f"from {mod} import {name}")
            except ImportError as e:
                errors.append(str(e))
        res["errors"] = errors
        res["heavy"] = [m for m in ("torch", "jax", "openvino", "ai_edge_litert", "tflite_runtime", "onnxruntime") if m in sys.modules]
        res["core"] = [nx.matmul is not None, nx.Tensor([1.0]).shape == (1,), callable(nx.compile)]
        from neurenix.device import Device, DeviceType
        with nx.device("cpu"):
            res["ctx"] = str(nx.zeros(1).device)
        res["dev"] = Device(DeviceType.TPU, 0).is_available()
        from neurenix.nn import Sequential, Linear
        res["nn"] = Sequential([Linear(2, 2)])(nx.Tensor([[1.0, 2.0]])).shape == (1, 2)
        print(json.dumps(res))
        """,
        env={"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert out["avail"] == [False, False, False, False]
    packages = ["neurenix-cuda-tc", "neurenix-tpu", "neurenix-npu-openvino", "neurenix-edgetpu"]
    assert len(out["errors"]) == 4
    for message, package in zip(out["errors"], packages):
        assert f"pip install {package}" in message
    assert out["heavy"] == []
    assert out["core"] == [True, True, True] and out["ctx"] == "cpu:0" and out["dev"] is False and out["nn"] is True


def test_plugin_exports_resolve(plugin_site, run_neurenix) -> None:
    site = plugin_site("acme-npu", EXPORTING, module="nx_plugin_acme_npu")
    out = run_neurenix(
        """
        import json
        from neurenix.hardware.npu import is_npu_available, NPUBackend
        import neurenix.hardware.npu as npu
        print(json.dumps({"avail": is_npu_available(), "vendor": NPUBackend.vendor, "dir": "NPUBackend" in dir(npu)}))
        """,
        site=site,
    )
    assert out == {"avail": True, "vendor": "acme", "dir": True}
