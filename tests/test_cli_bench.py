"""``neurenix bench`` and the shared benchmark kit: rows, refusal, JSON and the PNG chart.
No timing is asserted (the machine may be shared); only what the files say."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from neurenix_core import benchkit


def test_rows_with_different_configurations_are_refused() -> None:
    same = benchkit.row("x", "m", "fp32", 1, 2, 2e-6, 1e-6, {"threads": 2, "precision": "f32"}, {"threads": 2, "precision": "f32"})
    assert same["ratio"] == pytest.approx(2.0) and same["refused"] is None
    differ = benchkit.row("x", "m", "fp32", 1, 2, 2e-6, 1e-6, {"threads": 2, "precision": "f32"}, {"threads": 1, "hint": "LATENCY"})
    assert differ["ratio"] is None
    assert "threads: 2 != 1" in differ["refused"] and "hint: <absent> != LATENCY" in differ["refused"]
    text = benchkit.table([same, differ])
    assert "2.000" in text and "REFUSED" in text
    assert "REFUSED m fp32 b1 t2: hint" in benchkit.config_lines([same, differ])


def test_interleaved_times_every_contender() -> None:
    calls = {"a": 0, "b": 0}

    def bump(k: str) -> None:
        calls[k] += 1

    t = benchkit.interleaved({"a": lambda: bump("a"), "b": lambda: bump("b")}, rounds=4, budget_s=0.0001)
    assert set(t) == {"a", "b"} and all(v > 0 for v in t.values())
    assert calls["a"] >= 4 + 3 and calls["b"] >= 4 + 3  # warm-up plus one batch per round at least


def test_interleaved_schedule_varies_who_runs_after_whom() -> None:
    """Every contender follows each of the others (a fixed rotation of three keeps most
    predecessors the same), and the schedule is the same on every run."""
    names = ["neurenix", "native", "control"]
    orders = benchkit.schedule(names, 200)
    assert orders == benchkit.schedule(names, 200) and all(sorted(o) == sorted(names) for o in orders)
    flat = [n for o in orders for n in o]
    after = set(itertools.pairwise(flat))
    assert {(a, b) for a in names for b in names if a != b} <= after
    counts = {pair: sum(1 for p in itertools.pairwise(flat) if p == pair) for pair in after if pair[0] != pair[1]}
    assert max(counts.values()) < 2 * min(counts.values())  # about equally often


def test_neurenix_bench_writes_json_and_a_png_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("neurenix_edgetpu", reason="neurenix-edgetpu is not installed (pip install -e plugins/neurenix-edgetpu)")
    pytest.importorskip("matplotlib", reason="neurenix bench needs the bench extra (pip install 'neurenix-core[bench]')")
    from neurenix_core.cli.main import main

    rc = main(["bench", "--quick", "--only", "edgetpu", "--threads", "1", "--batches", "1", "--models", "mlp", "--out", str(tmp_path)])
    assert rc == 0, (tmp_path / "edgetpu.log").read_text()
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["benchmarks"] == ["edgetpu"] and data["failures"] == {} and data["machine"]["cpu"]
    rows = data["rows"]
    printed = capsys.readouterr().out  # the table is printed too, one line per row with its ratio
    for r in rows:
        assert any(f"{r['ratio']:.2f}" in line and r["precision"] in line and "mlp" in line for line in printed.splitlines()), printed
    assert {(r["benchmark"], r["model"], r["precision"], r["batch"], r["threads"]) for r in rows} == {
        ("edgetpu", "mlp", "fp32", 1, 1), ("edgetpu", "mlp", "int8", 1, 1)}
    for r in rows:
        assert set(benchkit.ROW_KEYS) <= set(r)
        assert r["neurenix_config"] == r["native_config"] and r["ratio"] == pytest.approx(r["neurenix_us"] / r["native_us"])
    png = tmp_path / "bench.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(png)
    assert image.ndim == 3 and image.shape[0] >= 100 and image.shape[1] >= 300
    assert float(image[..., :3].std()) > 0.01  # bars and text, not a blank canvas


def test_neurenix_bench_rejects_a_plugin_that_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neurenix_core.cli import bench
    from neurenix_core.errors import ConfigurationError

    monkeypatch.setattr(bench, "installed_plugins", lambda: ["cpu"])
    import argparse

    args = argparse.Namespace(benchmarks=None, only=["edgetpu"], out=str(tmp_path), quick=True, threads=[1], batches=[1], models=None)
    with pytest.raises(ConfigurationError, match="edgetpu not installed"):
        bench.cmd_bench(args)


def test_neurenix_bench_runs_every_script_of_a_plugin_and_filters_models_per_script(tmp_path: Path) -> None:
    """npu and tpu each have the seed-model benchmark and the model-zoo one; ``--models`` goes to
    the scripts that know the names (read from their MODELS literal, nothing imported)."""
    import argparse

    from neurenix_core.cli import bench

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    assert bench.BENCHMARKS["npu"] == ("openvino.py", "npu_models.py")
    assert bench.BENCHMARKS["tpu"] == ("tpu.py", "tpu_models.py")
    assert bench.BENCHMARKS["cuda"] == ("tensor_cores.py",)
    for scripts in bench.BENCHMARKS.values():
        assert all((folder / s).is_file() for s in scripts)
    assert bench.script_models(folder / "npu_models.py") == ("resnet_block", "mobilenetv3_block")
    assert "tc-bf16" in (bench.script_models(folder / "tensor_cores.py") or ())
    args = argparse.Namespace(threads=[1], batches=[1], quick=True, models=["resnet_block", "mlp"])
    zoo = bench._command(folder, "tpu_models.py", args, tmp_path / "t.json")
    assert zoo is not None and zoo[zoo.index("--models") + 1:] == ["resnet_block"]
    seed = bench._command(folder, "tpu.py", args, tmp_path / "t.json")
    assert seed is not None and seed[seed.index("--models") + 1:] == ["mlp"]
    assert bench._command(folder, "openvino.py", args, tmp_path / "t.json") is None  # neither name is an openvino.py model


def test_a_benchmark_script_loads_by_path_with_its_dataclasses(tmp_path: Path) -> None:
    """``benchkit.load_script``: benchmarks/ is no package; a script defining a dataclass needs
    its module registered while it runs (the one copy of what five scripts wrote out)."""
    script = tmp_path / "sibling.py"
    script.write_text("from dataclasses import dataclass\n\n@dataclass\nclass Case:\n    name: str\n\nCASE = Case('resnet')\n")
    module = benchkit.load_script(script, "neurenix_test_sibling")
    assert module.CASE.name == "resnet"
    with pytest.raises(ImportError, match="cannot load"):
        benchkit.load_script(tmp_path / "missing.txt", "neurenix_test_missing")
