"""``neurenix export MODEL --device npu --out DIR``: compile a model file for one device and
save the compiled artifact (docs/deploy.md); registered through the ``neurenix.cli`` entry point.

MODEL is an ONNX file (``nx.nn.from_onnx``) or a neurenix model file (``.nxm``, ``nx.nn.load``).
The options are nx.compile's: precision, quantization with calibration batches, shape buckets;
``--shape`` compiles the input shapes to deploy (once each) before saving.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.errors import ConfigurationError, ModelFormatError

__all__ = ["cmd_export", "parse_shape", "register"]

_QUANTIZE = ("int8", "int16", "dynamic")


def register(sub: Any) -> None:
    """The ``neurenix.cli`` entry point: adds ``export`` to the ``neurenix`` command."""
    p = sub.add_parser("export", help="compile a model file (.onnx, .nxm) for a device and save the compiled artifact")
    p.add_argument("model", help="an ONNX file or a neurenix model file (.nxm)")
    p.add_argument("--device", required=True, help="the device to compile for: npu, tpu, edgetpu, cuda, cpu (index optional: npu:0)")
    p.add_argument("--out", required=True, help="folder for the artifact (created; replaced when it holds an artifact)")
    p.add_argument("--precision", help="fp32, fp16, bf16, tf32, int8, int16 (default: the plugin's, stated in the summary)")
    p.add_argument("--quantize", choices=_QUANTIZE, help="int8 / int16 (needs --calibration) or dynamic")
    p.add_argument("--calibration", help=".npz of calibration batches: one array per batch (single-input models)")
    p.add_argument("--shape", action="append", default=[], metavar="SHAPES",
                   help="input shape(s) to compile before saving, repeatable: 1x3x224x224, or name=1x16,mask=1x16 for several inputs")
    p.add_argument("--buckets", help="shape buckets: pow2, or batch sizes 1,8,32 (docs/shape-buckets.md)")
    p.add_argument("--outputs", choices=("device", "host"), default="device", help="what the loaded model returns (default: device tensors)")
    p.set_defaults(func=cmd_export)


def parse_shape(text: str, names: list[str]) -> tuple[tuple[int, ...], ...]:
    """``1x3x8x8`` (a one-input model) or ``a=1x16,b=1x16`` as one shape per input, in input order."""
    def dims(value: str) -> tuple[int, ...]:
        try:
            out = tuple(int(d) for d in value.lower().split("x"))
        except ValueError:
            raise ConfigurationError(f"neurenix export: --shape {text!r}: {value!r} is not sizes joined by 'x' (1x3x224x224)") from None
        if not out or any(d < 1 for d in out):
            raise ConfigurationError(f"neurenix export: --shape {text!r}: sizes must be positive")
        return out

    if "=" not in text:
        if len(names) != 1:
            raise ConfigurationError(f"neurenix export: the model has inputs {names}; give --shape as {'=...,'.join(names)}=...")
        return (dims(text),)
    given = dict(part.split("=", 1) for part in text.split(",") if part)
    if sorted(given) != sorted(names):
        raise ConfigurationError(f"neurenix export: --shape {text!r} names {sorted(given)}, the model's inputs are {names}")
    return tuple(dims(given[n]) for n in names)


def _load_model(path: Path) -> Any:
    from neurenix_core import nn

    if not path.is_file():
        raise ModelFormatError(f"neurenix export: {path} does not exist")
    if path.suffix == ".onnx":
        return nn.from_onnx(str(path))
    if path.suffix == ".nxm":
        return nn.load(path)
    raise ModelFormatError(f"neurenix export: {path} is neither an ONNX file (.onnx) nor a neurenix model file (.nxm); "
                           "save a model with nx.nn.save(model, 'model.nxm') or export it to ONNX")


def _calibration(path: str | None) -> list[np.ndarray] | None:
    if path is None:
        return None
    with np.load(path, allow_pickle=False) as data:
        return [np.asarray(data[k]) for k in data.files]


def _buckets(text: str | None) -> Any:
    if text is None or text == "pow2":
        return text
    try:
        return [int(b) for b in text.split(",")]
    except ValueError:
        raise ConfigurationError(f"neurenix export: --buckets {text!r}: use pow2 or batch sizes such as 1,8,32") from None


def cmd_export(args: argparse.Namespace) -> int:
    import neurenix_core as nx

    model = _load_model(Path(args.model))
    compiled = nx.compile(model, device=args.device, precision=args.precision, quantize=args.quantize,
                          calibration=_calibration(args.calibration), buckets=_buckets(args.buckets), outputs=args.outputs, progress=False)
    names = [s.name for s in compiled.graph.inputs]
    for text in args.shape:
        shapes = parse_shape(text, names)
        compiled(*(np.zeros(shape, np.dtype(spec.dtype)) for shape, spec in zip(shapes, compiled.graph.inputs)))
    folder = compiled.save(args.out)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    print(f"exported {args.model} for {compiled.device} to {folder} ({size:,} bytes)")
    for shapes in compiled.compiled_shapes:
        print(f"  {list(shapes)}: {compiled._summaries.get(shapes, '')}")
    print(f"load it with nx.load_compiled({str(folder)!r})")
    return 0
