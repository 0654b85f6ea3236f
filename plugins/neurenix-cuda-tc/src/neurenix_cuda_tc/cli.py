"""``neurenix validate-tc MODEL``: Tensor Core alignment findings for a model on the command line.

MODEL is ``path/to/file.py[:NAME]`` or ``package.module:NAME``; NAME (default ``model``) is a
model object or a zero-argument callable returning one (a class or a factory). Exit status 0 when
the model is aligned, 1 when there are findings.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from neurenix_core.errors import ConfigurationError

__all__ = ["cmd_validate", "load_model", "register"]


def load_model(spec: str) -> Any:
    """Import the model named by ``spec`` (see module doc); raises ConfigurationError with the remedy."""
    target, _, name = spec.partition(":")
    name = name or "model"
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ConfigurationError(f"validate-tc: no such file {target!r}")
        mod_spec = importlib.util.spec_from_file_location(f"_neurenix_validate_{path.stem}", path)
        assert mod_spec is not None and mod_spec.loader is not None
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    if not hasattr(module, name):
        raise ConfigurationError(f"validate-tc: {target} has no attribute {name!r}; name the model as FILE.py:NAME or module:NAME")
    obj = getattr(module, name)
    # A class or a factory function builds the model; a model instance (it has forward) is used as is.
    return obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "forward")) else obj


def cmd_validate(args: argparse.Namespace) -> int:
    from neurenix_cuda_tc.alignment import validate_model

    findings = validate_model(load_model(args.model), precision=args.precision, batch_size=args.batch_size,
                              memory_format=not args.no_memory_format)
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
        return 1 if findings else 0
    from rich.console import Console

    console = Console(soft_wrap=True)
    if not findings:
        console.print(f"[green]{args.model}: Tensor Core aligned for {args.precision}[/]")
        return 0
    console.print(f"[yellow]{args.model}: {len(findings)} Tensor Core finding(s) for {args.precision}[/]")
    for f in findings:
        console.print(f"  - {f}")
    return 1


def register(subparsers: Any) -> None:
    """Entry point of the ``neurenix.cli`` group: adds the ``validate-tc`` subcommand."""
    p = subparsers.add_parser("validate-tc", help="list layers whose dimensions keep them off Tensor Cores")
    p.add_argument("model", help="FILE.py[:NAME] or package.module:NAME (a model, or a callable returning one)")
    p.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "tf32", "fp32", "int8", "mixed"])
    p.add_argument("--batch-size", type=int, default=None, help="also check the batch size")
    p.add_argument("--no-memory-format", action="store_true", help="do not flag NCHW convolutions")
    p.add_argument("--json", action="store_true", help="print findings as JSON")
    p.set_defaults(func=cmd_validate)
