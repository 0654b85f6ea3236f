"""The ``neurenix`` command as a user reads it (issue #29): ``--version``, the doctor table at
the terminal's width, ``devices --json`` help, and a bench chart whose labels can be read."""

from __future__ import annotations

import itertools
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from neurenix_core.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        rc = main(list(argv))
    except SystemExit as stop:  # argparse's --version and --help exit
        rc = int(stop.code or 0)
    return rc, capsys.readouterr().out


def test_version_lists_the_core_and_every_installed_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "--version")
    lines = out.splitlines()
    assert rc == 0 and lines[0] == f"neurenix-core {metadata.version('neurenix-core')}"
    for ep in metadata.entry_points(group="neurenix.backends"):
        assert ep.dist is not None
        row = next(line.split() for line in lines[2:] if line.split()[0] == ep.name)
        assert row[1:3] == [ep.dist.metadata["Name"], ep.dist.version]
        # Only plugins from outside this repository carry the label (the onnxruntime example does).
        assert ("(third-party)" in row) == (ep.name not in {"cpu", "cuda", "tpu", "npu", "edgetpu"})


def test_devices_json_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "devices", "--help")
    assert rc == 0 and "--json" in out and "JSON list" in out and '"emulated"' in out


@pytest.mark.parametrize("columns", [80, 100])
def test_doctor_fits_a_narrow_terminal(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    rc, out = _run(capsys, "doctor")
    assert rc == 0
    too_wide = [line for line in out.splitlines() if len(line) > columns]
    assert not too_wide, "\n".join(too_wide)
    assert "reason / install" in out and "default device:" in out
    for ep in metadata.entry_points(group="neurenix.backends"):
        assert f"│ {ep.name}" in out  # every plugin keeps its row


def test_doctor_uses_the_room_of_a_wide_terminal(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    rc, out = _run(capsys, "doctor")
    header = next(line for line in out.splitlines() if "plugin" in line and "status" in line)
    assert rc == 0 and all(col in header for col in ("distribution", "version", "reason", "install"))
    assert max(len(line) for line in out.splitlines()) <= 200


def test_third_party_plugins_are_labelled() -> None:
    from neurenix_core.cli.doctor_table import is_third_party

    assert not is_third_party({"name": "npu-openvino", "distribution": "neurenix_npu_openvino"})
    assert is_third_party({"name": "onnxruntime", "distribution": "neurenix-onnxruntime"})
    assert is_third_party({"name": "cpu", "distribution": "someone-else"})  # discovery refuses these; the label would not lie


# ---------------------------------------------------------------- bench chart


def _rows() -> list[dict[str, Any]]:
    # Two panels; the second as crowded as npu_models.py's (4 models x 2 precisions x 2 batches x 2 threads).
    models = ["resnet18_block", "mobilenet_v2_block", "bert_tiny_layer", "mlp"]
    rows = [{"benchmark": "openvino", "model": "mlp", "precision": "fp32", "batch": 1, "threads": 1,
             "neurenix_us": 120.0, "native_us": 100.0, "ratio": 1.2}]
    for i, (m, p, b, t) in enumerate(itertools.product(models, ["fp32", "int8"], [1, 32], [1, 2])):
        refused = i % 7 == 3
        rows.append({"benchmark": "npu_models", "model": m, "precision": p, "batch": b, "threads": t,
                     "neurenix_us": 50.0 + 10 * i, "native_us": 45.0 + 11 * i, "ratio": None if refused else (50.0 + 10 * i) / (45.0 + 11 * i)})
    return rows


def _texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text") and callable(a.get_text))]


def test_bench_chart_labels_are_readable() -> None:
    pytest.importorskip("matplotlib", reason="neurenix bench needs the bench extra (pip install 'neurenix-core[bench]')")
    from neurenix_core.cli.bench import figure

    fig = figure(_rows(), title="neurenix vs native runtime on a test CPU", emulated=["npu (OpenVINO on the host CPU)"])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = fig.get_axes()
    assert len(axes) == 2
    for ax in axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert labels and {t.get_rotation() for t in labels} == {90.0}
        boxes = [t.get_window_extent(renderer) for t in labels]
        overlaps = [(a.get_text(), b.get_text()) for (a, ba), (b, bb) in itertools.combinations(zip(labels, boxes), 2) if ba.overlaps(bb)]
        assert not overlaps, overlaps
        # Every label lies inside the figure (none cut off by the PNG's edge).
        assert all(0 <= b.x0 and b.x1 <= fig.bbox.width and 0 <= b.y0 for b in boxes)
        assert "neurenix / native" in ax.get_title() and "lower is better" in ax.get_title()
    assert "emulated devices (their runtimes on the host CPU, not the accelerators): npu (OpenVINO on the host CPU)" in fig._suptitle.get_text()
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_bench_chart_says_nothing_of_emulation_on_real_hardware(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="neurenix bench needs the bench extra (pip install 'neurenix-core[bench]')")
    from neurenix_core.cli.bench import chart, figure

    fig = figure(_rows()[:1], title="neurenix vs native runtime on a test CPU")
    assert "emulated" not in " ".join(_texts(fig))
    import matplotlib.pyplot as plt

    plt.close(fig)
    png = chart(_rows(), tmp_path / "bench.png", emulated=["npu (OpenVINO on the host CPU)"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
