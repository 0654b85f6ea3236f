"""``neurenix bench``: the benchmark set for the installed plugins, one JSON file and one chart.

Each plugin's benchmark (``benchmarks/<name>.py`` in a source checkout) runs in its own process
(runtimes read their thread settings once at start) with the same options; every one of them
reports rows through ``neurenix_core.benchkit``: neurenix and the native runtime on the
same model, both configurations read back, rows with differing configurations refused. This
command shows a progress bar, merges the rows into ``<out>/bench.json`` and draws
``<out>/bench.png``: neurenix vs native time per model, precision, batch and thread count.
matplotlib comes with the ``bench`` extra (``pip install neurenix-core[bench]``).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from neurenix_core import benchkit
from neurenix_core.errors import ConfigurationError

__all__ = ["BENCHMARKS", "chart", "figure", "register", "run"]

#: Plugin name (its entry point name) -> its benchmark scripts (in the benchmarks folder of a checkout):
#: the seed models, then the model zoo's ResNet/MobileNet blocks where the plugin has them.
#: ``cpu`` (the core's own entry point, always installed): cpu:0 on the runtime neurenix chooses
#: against every installed CPU runtime used directly (issue #31).
BENCHMARKS: Final[Mapping[str, tuple[str, ...]]] = {
    "cpu": ("cpu.py",),
    "cuda": ("tensor_cores.py",),
    "edgetpu": ("edgetpu.py",),
    "npu": ("openvino.py", "npu_models.py"),
    "tpu": ("tpu.py", "tpu_models.py"),
    "ort": ("onnxruntime.py",),
}


def register(sub: Any) -> None:
    """The ``neurenix.cli`` entry point: adds ``bench`` to the ``neurenix`` command."""
    p = sub.add_parser("bench", help="benchmark neurenix against each installed plugin's native runtime (JSON + PNG chart)")
    p.add_argument("--quick", action="store_true", help="few repetitions: checks everything runs, numbers are rough")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="thread counts to run each benchmark at, both sides pinned to the same count (default: 1 2)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 32], help="batch sizes of the image and text models (default: 1 32)")
    p.add_argument("--models", nargs="+", help="only these models (names as the benchmark scripts know them)")
    p.add_argument("--only", nargs="+", metavar="PLUGIN",
                   help=f"only these plugins' benchmarks: {', '.join(sorted(BENCHMARKS))} (or an alias: {_alias_list()})")
    p.add_argument("--out", default="neurenix-bench", help="folder for bench.json, bench.png and each benchmark's log")
    p.add_argument("--benchmarks", help="folder holding the benchmark scripts (default: benchmarks/ of this checkout)")
    p.set_defaults(func=cmd_bench)


def installed_plugins() -> list[str]:
    """Entry point names in ``neurenix.backends`` (read from metadata; nothing is imported)."""
    from importlib import metadata

    return sorted({ep.name for ep in metadata.entry_points(group="neurenix.backends")})


def plugin_aliases() -> dict[str, str]:
    """Alias -> plugin name (names.alias_of: ``npu-openvino`` -> ``npu``): this repository's own
    plugins whether installed or not, and every installed one (read from metadata, nothing imported)."""
    from importlib import metadata

    from neurenix_core.plugins.names import RESERVED, alias_of

    pairs: list[tuple[str, str | None]] = [(name, dist) for name, (dist, _) in RESERVED.items()]
    pairs += [(ep.name, ep.dist.name if ep.dist is not None else None) for ep in metadata.entry_points(group="neurenix.backends")]
    return {alias: name for name, dist in pairs if (alias := alias_of(name, dist)) is not None and alias not in BENCHMARKS}


def _alias_list() -> str:
    return ", ".join(f"{alias} for {name}" for alias, name in sorted(plugin_aliases().items()))


def chosen_plugins(only: Sequence[str] | None) -> list[str]:
    """The plugin names ``--only`` asks for (aliases resolved), or every benchmarked plugin; a name
    that is neither a plugin with benchmarks nor an alias of one is a ConfigurationError."""
    if not only:
        return sorted(BENCHMARKS)
    aliases = plugin_aliases()
    unknown = [name for name in only if name not in BENCHMARKS and aliases.get(name) not in BENCHMARKS]
    if unknown:
        raise ConfigurationError(f"neurenix bench: --only {' '.join(unknown)}: no benchmarks for plugin(s) {', '.join(map(repr, unknown))}; "
                                 f"valid names: {', '.join(sorted(BENCHMARKS))} (aliases: {_alias_list()})")
    return list(dict.fromkeys(aliases.get(name, name) for name in only))


def _benchmarks_dir(given: str | None) -> Path:
    folder = Path(given) if given else Path(__file__).resolve().parents[2] / "benchmarks"
    if not (folder / "edgetpu.py").is_file():
        raise ConfigurationError(
            f"neurenix bench: no benchmark scripts in {folder}; they ship with the source checkout "
            "(git clone ...), point --benchmarks at its benchmarks/ folder"
        )
    return folder


def cmd_bench(args: argparse.Namespace) -> int:
    folder = _benchmarks_dir(args.benchmarks)
    have = installed_plugins()
    chosen = chosen_plugins(args.only)
    missing = [name for name in chosen if name not in have]
    if args.only and missing:
        raise ConfigurationError(f"neurenix bench: plugin(s) {', '.join(missing)} not installed; install them or drop them from --only")
    todo = [script for name in chosen if name in have for script in BENCHMARKS[name]]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run(folder, todo, args, out)
    print_table(result["rows"])
    print(f"wrote {out / 'bench.json'} and {out / 'bench.png'} ({len(result['rows'])} rows)")
    for name, failure in result["failures"].items():
        print(f"benchmark {name} failed: {failure}", file=sys.stderr)
    return 1 if result["failures"] else 0


def print_table(rows: Sequence[Mapping[str, Any]]) -> None:
    """The rows as a table on stdout: what the chart shows, readable in a terminal or a CI log."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="neurenix / native runtime (lower is better; 1.00 = same speed)")
    for col in ("benchmark", "model", "precision", "batch", "threads", "neurenix µs", "native µs", "ratio"):
        table.add_column(col, justify="right" if col in ("batch", "threads", "neurenix µs", "native µs", "ratio") else "left")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else "refused"
        table.add_row(str(r["benchmark"]), str(r["model"]), str(r["precision"]), str(r["batch"]), str(r["threads"]),
                      f"{r['neurenix_us']:,.1f}", f"{r['native_us']:,.1f}", ratio)
    Console(soft_wrap=False, width=160).print(table)


def script_models(script: Path) -> tuple[str, ...] | None:
    """The script's top-level ``MODELS`` tuple, read without importing it (None: it names none)."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MODELS" for t in node.targets):
            try:
                return tuple(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


def _command(folder: Path, script: str, args: argparse.Namespace, json_path: Path) -> list[str] | None:
    """The script's command line; None when ``--models`` names none of its models."""
    cmd = [sys.executable, str(folder / script), "--json", str(json_path),
           "--threads", *map(str, args.threads), "--batches", *map(str, args.batches)]
    if args.quick:
        cmd.append("--quick")
    if args.models:
        known = script_models(folder / script)
        if known is not None:
            mine = [m for m in args.models if m in known]
            if not mine:
                return None
            cmd += ["--models", *mine]
    return cmd


def run(folder: Path, scripts: Sequence[str], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run each benchmark script with a progress bar; merge their rows; write bench.json and bench.png."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    names: list[str] = []  # the scripts that ran (``--models`` may leave some with nothing to do)
    with tempfile.TemporaryDirectory(prefix="neurenix-bench-") as tmp, Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
        console=Console(stderr=True),  # the bar on stderr: stdout holds the table only (``neurenix bench > table.txt``)
    ) as bar:
        task = bar.add_task("benchmarks", total=len(scripts))
        for script in scripts:
            name = Path(script).stem
            bar.update(task, description=f"benchmark {name}")
            json_path = Path(tmp, f"{name}.json")
            cmd = _command(folder, script, args, json_path)
            if cmd is None:
                bar.advance(task)
                continue
            names.append(name)
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=dict(os.environ))
            (out / f"{name}.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
            if proc.returncode != 0 or not json_path.is_file():
                failures[name] = f"exit {proc.returncode}; last output: {(proc.stderr or proc.stdout).strip()[-800:]}"
            else:
                rows += json.loads(json_path.read_text(encoding="utf-8"))["rows"]
            bar.advance(task)
    result = {"machine": benchkit.machine(), "quick": bool(args.quick), "threads": args.threads, "batches": args.batches,
              "benchmarks": list(names), "failures": failures, "rows": rows}
    (out / "bench.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    chart(rows, out / "bench.png", title=f"neurenix vs native runtime on {result['machine']['cpu']}", emulated=_emulated())
    return result


def _emulated() -> list[str]:
    """The plugins whose devices are emulated in this environment (NEURENIX_EMULATE), which the
    benchmark processes inherit, each with what runs it: "npu (OpenVINO on the host CPU)"."""
    from neurenix_core.plugins.report import backends

    return sorted(f"{b.name} ({b.emulation.removeprefix('emulated: ')})" for b in backends() if b.emulated)


def chart(rows: Sequence[Mapping[str, Any]], path: Path, *, title: str = "neurenix vs native", emulated: Sequence[str] = ()) -> Path:
    """Grouped bars, one panel per benchmark: neurenix and native µs per model/precision/batch/threads,
    with the ratio neurenix / native above each pair ("refused" where the configurations differed).
    ``emulated``: plugins whose devices ran emulated (their runtimes on the host CPU), named in the title
    ("npu (OpenVINO on the host CPU)")."""
    fig = figure(rows, title=title, emulated=emulated)
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


#: The PNG's resolution; :func:`figure`'s layout (label spacing) is measured at it.
DPI: Final = 90


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigurationError("neurenix bench draws its chart with matplotlib: pip install 'neurenix-core[bench]'") from exc
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def figure(rows: Sequence[Mapping[str, Any]], *, title: str = "neurenix vs native", emulated: Sequence[str] = ()) -> Any:
    """The chart as a matplotlib Figure (``chart`` saves it): x labels one line each, turned
    vertical so that dozens of rows per panel stay readable side by side."""
    plt = _pyplot()
    names = list(dict.fromkeys(r["benchmark"] for r in rows)) or ["(no rows)"]
    widest = max((sum(r["benchmark"] == n for r in rows) for n in names), default=1)
    fig, axes = plt.subplots(len(names), 1, figsize=(max(8.0, 0.45 * widest + 3), 4.2 * len(names)), squeeze=False, dpi=DPI)
    for ax, name in zip(axes[:, 0], names):
        _panel(ax, name, [r for r in rows if r["benchmark"] == name])
    if emulated:
        # Emulated devices run the plugin's runtime on this CPU: the numbers say nothing of the accelerator.
        title = f"{title}\nemulated devices (their runtimes on the host CPU, not the accelerators): {', '.join(emulated)}"
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def _panel(ax: Any, name: str, sub: Sequence[Mapping[str, Any]]) -> None:
    labels = [f"{r['model']} {r['precision']} b{r['batch']} t{r['threads']}" for r in sub]
    xs = range(len(sub))
    ax.bar([x - 0.2 for x in xs], [r["neurenix_us"] for r in sub], width=0.4, label="neurenix")
    ax.bar([x + 0.2 for x in xs], [r["native_us"] for r in sub], width=0.4, label="native runtime")
    for x, r in zip(xs, sub):
        text = f"{r['ratio']:.2f}" if r.get("ratio") is not None else "refused"
        ax.annotate(text, (x, max(r["neurenix_us"], r["native_us"])), ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(list(xs), labels, fontsize=7, rotation=90)
    ax.set_yscale("log")
    if sub:  # room above the tallest bar for its vertical ratio, and bars no wider than in a crowded panel
        ax.set_ylim(top=4 * max(max(r["neurenix_us"], r["native_us"]) for r in sub))
        ax.set_xlim(-0.7, max(len(sub), 8) - 0.3)
    ax.set_ylabel("µs per call (log)")
    ax.set_title(f"{name}: numbers above the bars are neurenix / native time, lower is better (1.00 = same speed)", fontsize=9)
    ax.legend(fontsize=7)
