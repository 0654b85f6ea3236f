"""What every benchmark shares: the effective configuration of both sides, the refusal to compare
rows whose configurations differ, interleaved timing, the row schema, tables and JSON.

A benchmark measures neurenix against the native runtime on the same model. A ratio means
something only when both sides ran with the same configuration, so each side's configuration
is read back from its runtime (OpenVINO ``compiled.get_property``, LiteRT's delegate partition,
ORT session options, XLA flags) and printed beside the times; ``row`` refuses to compute a
ratio when the two differ and says which keys differ. Imported by ``benchmarks/*.py`` and by
``neurenix bench``; never by ``import neurenix_core``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

__all__ = [
    "ROW_KEYS",
    "THREAD_VARS",
    "config_diff",
    "config_lines",
    "cpu_model",
    "interleaved",
    "load_script",
    "machine",
    "parser",
    "report",
    "row",
    "run_child",
    "table",
    "write_json",
]

#: The BLAS / OpenMP pool sizes a benchmark child is pinned with (read at library load, so set
#: in the child's environment, never in the running process).
THREAD_VARS: Final = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

#: Keys of every row, in the order tables show them.
ROW_KEYS: Final = ("benchmark", "model", "precision", "batch", "threads", "neurenix_us", "native_us", "ratio", "refused",
                   "neurenix_config", "native_config")


def cpu_model() -> str:
    """The CPU's marketing name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_script(path: str | os.PathLike[str], name: str) -> Any:
    """Another benchmark script as a module, by path: benchmarks/ is not a package, and its folder
    is kept off sys.path (benchmarks/openvino.py would shadow OpenVINO). Registered in
    ``sys.modules`` under ``name`` while it runs, as dataclasses defined in it need."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def machine() -> dict[str, Any]:
    """CPU model, CPU count and load: a table from a shared machine says so."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "cpus": cpus, "load_1min": None if load is None else round(load, 2), "python": platform.python_version()}


def config_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """``key: a != b`` for every key whose value differs (a key missing on one side differs)."""
    return [f"{k}: {a.get(k, '<absent>')!s} != {b.get(k, '<absent>')!s}" for k in sorted(set(a) | set(b)) if str(a.get(k)) != str(b.get(k))]


def row(benchmark: str, model: str, precision: str, batch: int, threads: int, neurenix_s: float, native_s: float,
        neurenix_config: Mapping[str, Any], native_config: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """One comparison; ``ratio`` is None and ``refused`` says why when the configurations differ."""
    diff = config_diff(neurenix_config, native_config)
    return {
        "benchmark": benchmark, "model": model, "precision": precision, "batch": int(batch), "threads": int(threads),
        "neurenix_us": neurenix_s * 1e6, "native_us": native_s * 1e6,
        "ratio": None if diff else neurenix_s / native_s,
        "refused": "; ".join(diff) if diff else None,
        "neurenix_config": {k: _plain(v) for k, v in neurenix_config.items()},
        "native_config": {k: _plain(v) for k, v in native_config.items()},
        **extra,
    }


def _plain(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)


def interleaved(fns: Mapping[str, Callable[[], Any]], *, rounds: int, budget_s: float = 0.002, warmup: int = 3,
                seed: int = 0) -> dict[str, float]:
    """Seconds per call of each fn: the fastest of ``rounds`` rounds.

    The contenders take turns in an order shuffled every round (seeded: the same schedule on
    every run), so every contender runs after each of the others about equally often. A runtime
    whose worker threads keep spinning after a call (XNNPACK's and OpenMP's pools do) slows
    whichever call comes next; a fixed rotation would keep most predecessors the same (with
    three contenders A B C rotated, A follows C in two rounds of three). The fastest round is the
    one least disturbed by other jobs on a shared machine: contention only ever adds time.
    """
    names = list(fns)
    one = {}
    for name in names:
        for _ in range(warmup):
            fns[name]()
        t0 = time.perf_counter()
        fns[name]()
        one[name] = time.perf_counter() - t0
    per_round = max(1, int(budget_s / max(1e-7, max(one.values()))))
    best = {name: float("inf") for name in names}
    for order in schedule(names, rounds, seed):
        for name in order:
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / per_round)
    return best


def schedule(names: Sequence[str], rounds: int, seed: int = 0) -> list[list[str]]:
    """``rounds`` orders of ``names``, each a seeded shuffle (``interleaved``'s turns)."""
    import random  # benchmarks only: never on the import path of neurenix_core

    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        order = list(names)
        rng.shuffle(order)
        out.append(order)
    return out


def table(rows: Sequence[Mapping[str, Any]], extra_columns: Sequence[tuple[str, str, str]] = ()) -> str:
    """A markdown table of ``rows``; ``extra_columns`` are (key, header, format) triples."""
    head = ["model", "precision", "batch", "threads", "neurenix µs", "native µs", "neurenix / native", *(h for _, h, _ in extra_columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r.get("ratio") is not None else "REFUSED (configurations differ)"
        cells = [str(r["model"]), str(r["precision"]), str(r["batch"]), str(r["threads"]), f"{r['neurenix_us']:.1f}", f"{r['native_us']:.1f}", ratio]
        cells += ["-" if r.get(k) is None else format(r[k], fmt) for k, _, fmt in extra_columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def config_lines(rows: Sequence[Mapping[str, Any]]) -> str:
    """The configurations behind the table: each distinct one once, with the rows that used it."""
    groups: dict[str, list[str]] = {}
    refused: list[str] = []
    for r in rows:
        tag = f"{r['model']} {r['precision']} b{r['batch']} t{r['threads']}"
        sides = ("both",) if r.get("refused") is None else ("neurenix", "native")
        for side in sides:
            cfg = r["neurenix_config"] if side in ("both", "neurenix") else r["native_config"]
            groups.setdefault(f"{side}: " + ", ".join(f"{k}={v}" for k, v in cfg.items()), []).append(tag)
        if r.get("refused") is not None:
            refused.append(f"- REFUSED {tag}: {r['refused']}")
    return "\n".join([f"- {text}  [{'; '.join(tags)}]" for text, tags in groups.items()] + refused)


def write_json(path: str | os.PathLike[str], benchmark: str, rows: Sequence[Mapping[str, Any]], /, **meta: Any) -> Path:
    target = Path(path)
    target.write_text(json.dumps({"benchmark": benchmark, "machine": machine(), **meta, "rows": list(rows)}, indent=1), encoding="utf-8")
    return target


def parser(doc: str, *, threads: Sequence[int] = (1, 2), batches: Sequence[int] = (1, 32), models: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The options every benchmark takes (``neurenix bench`` passes them through)."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few repetitions: checks the benchmark runs, the numbers are rough")
    p.add_argument("--threads", type=int, nargs="+", default=list(threads))
    p.add_argument("--batches", type=int, nargs="+", default=list(batches))
    if models:
        p.add_argument("--models", nargs="+", choices=list(models), default=list(models))
    p.add_argument("--json", help="also write {benchmark, machine, rows} to this file")
    return p


#: ``bench(model, batches, threads, rounds, advance)``: one model's rows, calling ``advance`` after
#: each (threads, batch) setting.
ModelBench = Callable[[str, list[int], list[int], int, Callable[[], None]], list[dict[str, Any]]]


def run_models(benchmark: str, args: argparse.Namespace, bench: ModelBench, rounds: int) -> list[dict[str, Any]]:
    """Every model of ``args`` through ``bench`` under one progress bar (``rounds``, or 3 with
    ``--quick``); the rows in order."""
    from rich.console import Console
    from rich.progress import Progress

    rows: list[dict[str, Any]] = []
    with Progress(transient=True, console=Console(stderr=True)) as bar:  # stdout holds the table only
        task = bar.add_task(benchmark, total=len(args.models) * len(args.threads) * len(args.batches))
        for name in args.models:
            rows += bench(name, args.batches, args.threads, 3 if args.quick else rounds, lambda: bar.advance(task))
    return rows


def report(benchmark: str, rows: Sequence[Mapping[str, Any]], args: argparse.Namespace, extra_columns: Sequence[tuple[str, str, str]] = (), /, **meta: Any) -> None:
    """Print the machine, the table and the configurations; write JSON when asked."""
    m = machine()
    print(f"{benchmark}: CPU {m['cpu']} ({m['cpus']} CPUs available, 1-min load {m['load_1min']})" + (" -- quick run, rough numbers" if args.quick else ""))
    print(table(rows, extra_columns))
    print("configurations (read back from the runtimes):")
    print(config_lines(rows))
    refused = [r for r in rows if r.get("refused")]
    if refused:
        print(f"{len(refused)} row(s) refused: the two sides ran with different configurations")
    if args.json:
        write_json(args.json, benchmark, rows, quick=bool(args.quick), **meta)


def run_child(script: str, threads: int, quick: bool, *, env: Mapping[str, str] | None = None, prefix: Sequence[str] = (),
              timeout: float = 900, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Run ``script --child THREADS [--quick] *extra`` in a fresh interpreter with every pool pinned
    to ``threads`` (plus ``env``), and return the JSON rows its last stdout line holds."""
    import subprocess
    import sys

    full_env = {**os.environ, **{v: str(threads) for v in THREAD_VARS}, **(env or {})}
    cmd = [*prefix, sys.executable, script, "--child", str(threads), *(["--quick"] if quick else []), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, check=False, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child ({threads} threads) failed:\n{proc.stderr[-3000:]}")
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))
