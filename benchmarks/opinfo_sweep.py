"""How many of PyTorch's OpInfo ops neurenix imports through torch.export and runs correctly.

Each op of ``torch.testing._internal.common_methods_invocations.op_db`` becomes a one-op
``torch.nn.Module`` (its tensor arguments are the forward's inputs, everything else is baked
in), imported with ``nx.nn.from_torch(module, inputs, static=True)``, compiled for ``--device``
(``nx.compile(model, device=..., precision=...)``, default cpu:0) and run with NumPy inputs; the
results are compared with eager PyTorch. Only neurenix's public API is used, so the same script
measures older and newer versions of the package.

    .venv/bin/python benchmarks/opinfo_sweep.py                            # every op, 3 samples each
    .venv/bin/python benchmarks/opinfo_sweep.py --ops add,mul,nn.functional.relu --samples 1
    .venv/bin/python benchmarks/opinfo_sweep.py --json now.json --diff before.json
    NEURENIX_EMULATE=npu .venv/bin/python benchmarks/opinfo_sweep.py --device npu:0
    NEURENIX_EMULATE=tpu JAX_PLATFORMS=cpu .venv/bin/python benchmarks/opinfo_sweep.py --device tpu:0 --precision fp32

Devices: ``--device`` names where the imported op runs (an emulated plugin device needs
``NEURENIX_EMULATE``, docs/testing.md); ``--precision`` is passed to ``nx.compile`` (tpu:0
multiplies in bfloat16 unless told fp32), else the device's default precision applies. The
tolerance follows ``--precision``: fp32, and no ``--precision`` (the defaults of cpu:0, npu:0,
cuda:0 and edgetpu:0 are fp32; tpu:0's bf16 is swept with ``--precision fp32`` or ``bf16``), rtol
1e-4 / atol 1e-5; tf32 and fp16 rtol 2e-3 / atol 1e-3 (10-bit mantissas); bf16 rtol 1.6e-2 / atol
1e-2 (an 8-bit mantissa: 2**-8 relative rounding per value, a few roundings per op). Where the plugin does not lower an op the partitioner places it on cpu:0 (a
FallbackWarning): a matching result is still ``pass``, and the record's ``placement`` says
``native`` (every node on --device) or ``cpu:0`` (some node on cpu:0 by the partitioner, the
record's ``fallback`` naming the first such node's op and reason), read from ``compiled.placement``.

Samples: float32 (an op whose CPU dtypes lack float32 is counted as ``no float32``), the first
``--samples`` of OpInfo's sample inputs whose tensors are all strided CPU tensors of float32,
int64 or bool (a list of tensors, as ``cat`` takes, gives one input per tensor). A sample eager
PyTorch cannot run, whose outputs are not all float/int/bool tensors, or whose outputs differ
between two eager runs from different RNG states (random ops: dropout with p > 0) is skipped;
an op with no usable sample is counted as ``unsupported sample`` (its error names the first
reason). Samples are seeded (torch and NumPy): two runs give the same samples.

Outcome of an op (its first failing sample decides; ``pass`` when every chosen sample matches):

    pass                every sample imported, ran, and matched eager PyTorch
    eager float32 off   ran; a float result differs from eager PyTorch's float32 one but matches
                        eager PyTorch run in float64 (the sample's float32 tensors upcast, the
                        result rounded to float32), which eager float32 does not: torch's float32
                        kernel is the less exact of the two. Counted apart from pass and wrong.
    wrong               ran, but a result differs (float: rtol 1e-4, atol 1e-5, NaN where torch's
                        NaN is; integer and bool: exact; shape or dtype kind differs)
    run refused         imported, but calling the model raised a NeurenixError (typed refusal)
    import refused      nx.nn.from_torch raised a NeurenixError while torch.export alone succeeds
    export failed       torch.export itself cannot capture the module: not neurenix's doing
    crash               neurenix raised anything else (not a NeurenixError): a bug; or the process
                        died in native code (a runtime's segfault or division trap: the error names
                        the signal). The sweep runs in a child process that logs each op before
                        running it; one killed by a signal has that op recorded as a crash and a new
                        child goes on after it.
    timeout             the op took longer than --timeout seconds (SIGALRM)
    no float32          the OpInfo does not support float32 on CPU
    unsupported sample  no sample fits the rules above

``imported`` in the summary is pass + eager float32 off + wrong + run refused over the ops whose
export succeeded (every op but export failed / no float32 / unsupported sample). ``--json`` writes one record
per op (name, variant, outcome, error: the exception type and first message line), sorted, so
two runs diff cleanly; ``--diff OLD.json`` prints the ops whose outcome changed since OLD.
An ``import refused`` whose message reads "torch.export could not capture" while torch.export
alone succeeds is neurenix's importer wrapping its own error (a ShapeError, an IndexError): read
those as bugs. A full run (702 ops, torch 2.13) takes about 7 to 10 minutes on 2 vCPUs, one
process. torch's testing helpers import ``expecttest``; where it is not installed a stub stands in.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import types
import unittest
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# benchmarks/ holds openvino.py, onnxruntime.py ...: as the script's folder it would shadow the runtimes.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]

import numpy as np

OUTCOMES = ("pass", "eager float32 off", "wrong", "run refused", "import refused", "crash", "timeout", "export failed",
            "no float32", "unsupported sample")
RTOL, ATOL = 1e-4, 1e-5
#: Per precision (the compiled model's ``.precision``): (rtol, atol). fp32 is the sweep's own tolerance.
TOLERANCES: dict[str, tuple[float, float]] = {"fp32": (RTOL, ATOL), "tf32": (2e-3, 1e-3), "fp16": (2e-3, 1e-3),
                                              "bf16": (1.6e-2, 1e-2)}


class Timeout(BaseException):
    """Raised by SIGALRM; a BaseException so no ``except Exception`` in the code under test eats it."""


class SkipSample(Exception):
    """This sample cannot be compared (the reason is the message)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_op_db() -> list[Any]:
    """OpInfo's database. torch's testing helpers import ``expecttest``, a test-only package; a
    stub stands in where it is not installed (only its TestCase base class is touched at import)."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase  # type: ignore[attr-defined]
        stub.ACCEPT = False  # type: ignore[attr-defined]
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


@contextlib.contextmanager
def alarm(seconds: int) -> Iterator[None]:
    if seconds <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(signum: int, frame: Any) -> None:
        raise Timeout(f"over {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class OneOp:
    """A sample as (tensor leaves, a function rebuilding the call from them)."""

    def __init__(self, torch: Any, op: Callable[..., Any], sample: Any) -> None:
        from torch.utils._pytree import tree_flatten, tree_unflatten

        leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
        self.slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        self.tensors = [leaves[i] for i in self.slots]
        ok = {torch.float32, torch.int64, torch.bool}
        for t in self.tensors:
            if t.dtype not in ok or t.device.type != "cpu" or t.layout != torch.strided or t.requires_grad:
                raise SkipSample(f"input tensor {t.dtype} {t.layout} on {t.device}")
        if not self.tensors:
            raise SkipSample("no tensor inputs")
        baked, slots = list(leaves), self.slots

        class Op(torch.nn.Module):
            def forward(self, *xs: Any) -> Any:
                call = list(baked)
                for slot, x in zip(slots, xs):
                    call[slot] = x
                inp, args, kwargs = tree_unflatten(call, spec)
                return op(inp, *args, **kwargs)

        self.module = Op().eval()


def eager(torch: Any, one: OneOp, seed: int, reseeding: bool = True) -> list[np.ndarray]:
    """Eager PyTorch's outputs from RNG state ``seed``. ``reseeding=False`` makes ``torch.manual_seed``
    a no-op meanwhile: OpInfo wraps random ops (dropout ...) in ``wrapper_set_seed``, which seeds
    42 on every call, and a random op would otherwise look deterministic."""
    from torch.utils._pytree import tree_flatten

    torch.manual_seed(seed)
    manual_seed = torch.manual_seed
    if not reseeding:
        torch.manual_seed = lambda *_: torch.random.default_generator
    try:
        with torch.no_grad():
            out = one.module(*[t.clone() for t in one.tensors])
    finally:
        torch.manual_seed = manual_seed
    leaves, _ = tree_flatten(out)
    if not leaves:
        raise SkipSample("no outputs")
    arrays = []
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise SkipSample(f"non-tensor output {type(leaf).__name__}")
        if leaf.dtype.is_complex or leaf.layout != torch.strided or leaf.dtype in (torch.bfloat16,):
            raise SkipSample(f"output {leaf.dtype} {leaf.layout}")
        arrays.append(leaf.detach().cpu().resolve_conj().resolve_neg().numpy().copy())
    return arrays


def same(a: np.ndarray, b: np.ndarray, exact: bool = False, tol: tuple[float, float] = (RTOL, ATOL)) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        if exact:
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.all(np.isclose(b.astype(np.float64), a.astype(np.float64), rtol=tol[0], atol=tol[1], equal_nan=True)))
    return bool(np.array_equal(a, b))


def mismatch(expected: list[np.ndarray], got: list[np.ndarray], tol: tuple[float, float] = (RTOL, ATOL)) -> str:
    """'' when ``got`` matches ``expected`` within ``tol`` (rtol, atol), else what differs."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, torch gives {len(expected)}"
    for i, (want, have) in enumerate(zip(expected, got)):
        if have.shape != want.shape:
            return f"output {i}: shape {have.shape}, torch {want.shape}"
        kinds = {k: "int" for k in "iu"}
        if kinds.get(have.dtype.kind, have.dtype.kind) != kinds.get(want.dtype.kind, want.dtype.kind):
            return f"output {i}: dtype {have.dtype}, torch {want.dtype}"
        if not same(want, have, tol=tol):
            if want.dtype.kind == "f":
                w, h = want.astype(np.float64), have.astype(np.float64)
                nan = np.isnan(w) != np.isnan(h)
                if nan.any():
                    return f"output {i}: NaN at {int(nan.sum())} places where torch has none or vice versa"
                with np.errstate(invalid="ignore"):
                    err = np.nanmax(np.abs(np.where(np.isfinite(w) & np.isfinite(h), w - h, 0.0)))
                return f"output {i}: max abs error {err:.3g} ({int((~np.isclose(h, w, tol[0], tol[1], True)).sum())}/{w.size} off)"
            return f"output {i}: {int((want != have).sum())}/{want.size} elements differ"
    return ""


def eager_float64(torch: Any, one: OneOp) -> list[np.ndarray]:
    """Eager PyTorch's outputs with the sample's float32 tensors upcast to float64, rounded to float32."""
    wide = [t.double() if t.dtype == torch.float32 else t.clone() for t in one.tensors]
    with torch.no_grad():
        out = one.module(*wide)
    from torch.utils._pytree import tree_flatten

    leaves, _ = tree_flatten(out)
    return [leaf.detach().resolve_conj().resolve_neg().numpy().astype(np.float32) if leaf.is_floating_point()
            else leaf.detach().numpy() for leaf in leaves]


def eager_float32_off(torch: Any, one: OneOp, want: list[np.ndarray], got: list[np.ndarray],
                      tol: tuple[float, float] = (RTOL, ATOL)) -> bool:
    """Whether neurenix's ``got`` matches eager float64 where eager float32 (``want``) does not."""
    try:
        exact = eager_float64(torch, one)
    except Exception:  # noqa: BLE001 - an op without float64 support: no arbiter, the mismatch stands
        return False
    return not mismatch(exact, got, tol) and bool(mismatch(exact, want, tol))


def torch_export_error(torch: Any, one: OneOp) -> str:
    """'' when torch.export (and its decompositions) captures the module alone, else the error."""
    try:
        torch.export.export(one.module, tuple(one.tensors)).run_decompositions({})
    except Exception as exc:  # noqa: BLE001 - any failure of torch.export is torch's
        return first_line(exc)
    return ""


def usable_samples(torch: Any, info: Any, count: int, dtype: Any, skipped: list[str]) -> Iterator[tuple[OneOp, list[np.ndarray]]]:
    """The first ``count`` usable samples with eager PyTorch's outputs; why others were skipped
    goes to ``skipped``. At most 100 samples are looked at."""
    for seen, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
        if seen >= 100:
            return
        try:
            one = OneOp(torch, info.op, sample)
            want = eager(torch, one, 0)
            again = eager(torch, one, 1, reseeding=False)
        except SkipSample as exc:
            skipped.append(str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - eager PyTorch refuses the sample: not ours to judge
            skipped.append(f"eager torch raised {first_line(exc)}")
            continue
        if len(want) != len(again) or not all(same(a, b, exact=True) for a, b in zip(want, again)):
            skipped.append("random outputs (two eager runs differ)")
            continue
        yield one, want
        count -= 1
        if count <= 0:
            return


class Where:
    """Where an op's samples ran: ``native`` until a compiled sample put a node on cpu:0, then
    ``cpu:0`` with that sample's first off-device node (op and the partitioner's reason)."""

    def __init__(self) -> None:
        self.placement = ""
        self.fallback = ""

    def note(self, compiled: Any) -> None:
        """Read ``compiled.placement`` (public: ``Placement.off_device``) after a call."""
        off = compiled.placement.off_device
        if off and self.placement != "cpu:0":
            self.placement, self.fallback = "cpu:0", f"{off[0].op}: {off[0].reason}"[:300]
        elif not self.placement:
            self.placement = "native"


def compile_for(nx: Any, model: Any, device: str, precision: str) -> Any:
    """``model`` compiled for ``device``: ``precision`` by name, else the device's default (as
    ``model.to(device)`` would run it; nx.compile is used so ``.placement`` can be read)."""
    return nx.compile(model, device=device, precision=precision or None, progress=False)


def host_arrays(out: Any) -> list[np.ndarray]:
    """The compiled model's outputs (device Tensors or arrays) as host NumPy arrays."""
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o.numpy() if hasattr(o, "numpy") else o) for o in outs]


def run_op(torch: Any, nx: Any, errors: Any, info: Any, samples: int, device: str = "cpu:0", precision: str = "",
           where: Where | None = None) -> tuple[str, str]:
    """(outcome, error) of one OpInfo on ``device``; ``where`` collects where its nodes ran."""
    if torch.float32 not in info.supported_dtypes("cpu"):
        return "no float32", ""
    where = where if where is not None else Where()
    tried = 0
    skipped: list[str] = []
    off = ""  # the first sample where eager float32 is the less exact result
    for one, want in usable_samples(torch, info, samples, torch.float32, skipped):
        tried += 1
        try:
            model = nx.nn.from_torch(one.module, tuple(one.tensors), static=True)
        except Exception as exc:  # noqa: BLE001 - sorted below
            export = torch_export_error(torch, one)
            if export:
                return "export failed", export
            return ("import refused" if isinstance(exc, errors.NeurenixError) else "crash"), first_line(exc)
        try:
            compiled = compile_for(nx, model, device, precision)
            got = host_arrays(compiled(*[t.numpy() for t in one.tensors]))
            where.note(compiled)
        except errors.NeurenixError as exc:
            return "run refused", first_line(exc)
        except Exception as exc:  # noqa: BLE001 - anything untyped is a bug
            return "crash", first_line(exc)
        tol = TOLERANCES.get(precision or "fp32", (RTOL, ATOL))
        diff = mismatch(want, got, tol)
        if diff and eager_float32_off(torch, one, want, got, tol):
            off = off or f"{diff}; eager float64 agrees with neurenix, eager float32 does not"
        elif diff:
            return "wrong", diff
    if tried:
        return ("eager float32 off", off) if off else ("pass", "")
    return "unsupported sample", f"{skipped[0]} ({len(skipped)} samples skipped)" if skipped else "no samples"


def quiet() -> None:
    warnings.simplefilter("ignore")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    for name in ("torch", "torch._dynamo", "torch._export", "torch.export", "torch.fx", "torch._inductor", "neurenix_core", "jax"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.disable(logging.ERROR)


def summary(records: list[dict[str, str]]) -> str:
    counts = Counter(r["outcome"] for r in records)
    total = len(records) or 1
    lines = [f"{'outcome':<20}{'ops':>6}{'%':>8}"]
    for outcome in OUTCOMES:
        lines.append(f"{outcome:<20}{counts[outcome]:>6}{100 * counts[outcome] / total:>7.1f}%")
    lines.append(f"{'total':<20}{len(records):>6}")
    exported = [r for r in records if r["outcome"] not in ("export failed", "no float32", "unsupported sample")]
    imported = sum(r["outcome"] in ("pass", "eager float32 off", "wrong", "run refused") for r in records)
    if exported:
        lines.append(f"imported: {imported}/{len(exported)} ops whose export succeeded "
                     f"({100 * imported / len(exported):.1f}%); pass {counts['pass']}/{len(exported)} "
                     f"({100 * counts['pass'] / len(exported):.1f}%)")
    passed = Counter(r.get("placement", "") for r in records if r["outcome"] in ("pass", "eager float32 off"))
    lines.append(f"pass or eager float32 off: {passed['native']} native, {passed['cpu:0']} with nodes on cpu:0 "
                 "by the partitioner (FallbackWarning)")
    return "\n".join(lines)


def key(r: dict[str, str]) -> str:
    return f"{r['name']}.{r['variant']}" if r["variant"] else r["name"]


def diff(old_path: str, records: list[dict[str, str]]) -> str:
    """The ops of both runs whose outcome changed (ops in only one run are counted, not listed:
    a run filtered with --ops or --limit compares with a full one)."""
    old = {key(r): r for r in json.loads(Path(old_path).read_text())["ops"]}
    new = {key(r): r for r in records}
    lines = []
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name]["outcome"], new[name]["outcome"]
        if before != after:
            lines.append(f"  {name:<45} {before:>18} -> {after:<18} {new[name]['error']}".rstrip())
    head = (f"{len(lines)} of {len(old.keys() & new.keys())} ops changed since {old_path} "
            f"({len(old.keys() - new.keys())} only there, {len(new.keys() - old.keys())} only here)")
    return "\n".join([head, *lines])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu:0", help="where the imported op runs (default cpu:0; npu:0 with NEURENIX_EMULATE=npu)")
    parser.add_argument("--precision", default="", help="nx.compile(precision=...) (fp32 on tpu:0, whose default is bf16); "
                        "default: the device's default precision")
    parser.add_argument("--ops", default="", help="comma-separated substrings; an op is swept if its name contains one "
                        "(=NAME: is NAME, as in --ops =add,=mul)")
    parser.add_argument("--limit", type=int, default=0, help="sweep at most N ops (after --ops)")
    parser.add_argument("--samples", type=int, default=3, help="sample inputs per op (default 3)")
    parser.add_argument("--timeout", type=int, default=20, help="seconds per op (0: none; default 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="write the per-op records here")
    parser.add_argument("--diff", metavar="OLD.json", help="print the ops whose outcome changed since this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each op's outcome to stderr")
    parser.add_argument("--worker", metavar="PROGRESS", help=argparse.SUPPRESS)  # the sweeping child process (main)
    args = parser.parse_args(argv)
    if args.diff and not Path(args.diff).is_file():
        parser.error(f"--diff {args.diff}: no such file")
    return args


def read_progress(path: Path) -> tuple[dict[str, Any], list[dict[str, str]], dict[str, str]]:
    """A worker's progress file: (its meta, the finished records, the op it was running when it
    stopped as {name, variant}, {} when none was unfinished)."""
    meta: dict[str, Any] = {}
    records: list[dict[str, str]] = []
    running: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        entry = json.loads(line)
        if "meta" in entry:
            meta = entry["meta"]
        elif "running" in entry:
            running = entry["running"]
        else:
            records.append(entry)
            running = {}
    return meta, records, running


def sweep(args: argparse.Namespace, progress: Path) -> int:
    """The worker: sweep the chosen ops not yet in ``progress``, appending a line before each op
    (its name) and after it (its record), so a native crash names the op that died."""
    quiet()
    import torch

    import neurenix_core as nx
    from neurenix_core import errors

    infos = load_op_db()
    wanted = [s.strip() for s in args.ops.split(",") if s.strip()]
    if wanted:
        infos = [i for i in infos if any(i.name == w[1:] if w.startswith("=") else w in i.name for w in wanted)]
    infos.sort(key=lambda i: (i.name, i.variant_test_name))
    if args.limit:
        infos = infos[: args.limit]
    _, records, _ = read_progress(progress)
    done = {key(r) for r in records}
    version = getattr(nx, "__version__", "?")
    log = progress.open("a")
    if not done:
        print(f"OpInfo sweep: torch {torch.__version__}, neurenix {version}, numpy {np.__version__}, "
              f"python {platform.python_version()}")
        print(f"cpu: {cpu_model()} ({os.cpu_count()} cpus), torch threads {torch.get_num_threads()}")
        rtol, atol = TOLERANCES.get(args.precision or "fp32", (RTOL, ATOL))
        print(f"{len(infos)} ops on {args.device}{f' precision {args.precision}' if args.precision else ''}, float32 inputs, "
              f"{args.samples} samples each, timeout {args.timeout} s, seed {args.seed}, rtol {rtol} atol {atol}", flush=True)
        meta = {"torch": torch.__version__, "neurenix": version, "cpu": cpu_model(), "samples": args.samples,
                "seed": args.seed, "ops_filter": args.ops, "limit": args.limit, "device": args.device,
                "precision": args.precision, "ops_chosen": len(infos)}
        log.write(json.dumps({"meta": meta}) + "\n")
    sink = io.StringIO()
    swept = time.perf_counter()
    for info in infos:
        name = f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name
        if name in done:
            continue
        log.write(json.dumps({"running": {"name": info.name, "variant": info.variant_test_name}}) + "\n")
        log.flush()
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        t0 = time.perf_counter()
        where = Where()
        try:
            with alarm(args.timeout), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcome, error = run_op(torch, nx, errors, info, args.samples, args.device, args.precision, where)
        except Timeout as exc:
            outcome, error = "timeout", str(exc)
        except Exception as exc:  # noqa: BLE001 - OpInfo's own sample generation failed
            outcome, error = "unsupported sample", f"sample_inputs: {first_line(exc)}"
        sink.seek(0)
        sink.truncate()
        records.append({"name": info.name, "variant": info.variant_test_name, "outcome": outcome, "error": error,
                        "placement": where.placement, "fallback": where.fallback})
        log.write(json.dumps(records[-1]) + "\n")
        log.flush()
        if args.verbose:
            print(f"  {name:<45} {outcome:<18} {where.placement:<7} {time.perf_counter() - t0:5.1f}s {error}", file=sys.stderr)
        if len(records) % 50 == 0 or len(records) == len(infos):
            counts = Counter(r["outcome"] for r in records)
            print(f"[{len(records)}/{len(infos)}] {time.perf_counter() - swept:.0f}s pass {counts['pass']} "
                  f"wrong {counts['wrong']} crash {counts['crash']}", file=sys.stderr, flush=True)
    log.close()
    return 0


def supervise(argv: list[str], progress: Path) -> int:
    """Run the worker until it finishes. A worker killed by a signal (a segfault or division trap
    inside a runtime's native code) has its running op recorded as a crash naming the signal, and
    a new worker goes on after it. Returns the last worker's exit status."""
    while True:
        rc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv, "--worker", str(progress)], check=False).returncode
        _, _, running = read_progress(progress)
        if rc == 0 or rc > 0 or not running:
            return rc
        died = signal.Signals(-rc).name if -rc in {s.value for s in signal.Signals} else f"signal {-rc}"
        record = {**running, "outcome": "crash", "placement": "", "fallback": "",
                  "error": f"{died}: the sweep's process died in native code (a runtime's crash)"}
        print(f"  {key(record):<45} crash (the process died: {died})", file=sys.stderr, flush=True)
        with progress.open("a") as log:
            log.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.worker:
        return sweep(args, Path(args.worker))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="opinfo_sweep") as folder:
        progress = Path(folder) / "progress.jsonl"
        rc = supervise(argv, progress)
        meta, records, _ = read_progress(progress)
    if rc:
        print(f"the sweep's worker exited with status {rc}", file=sys.stderr)
        return rc
    records.sort(key=lambda r: (r["name"], r["variant"]))
    print()
    print(summary(records))
    print(f"wall time {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "ops": records}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    if args.diff:
        print(diff(args.diff, records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
