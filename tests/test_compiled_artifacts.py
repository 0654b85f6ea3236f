"""Compiled artifacts (issue #30): compiled.save(path) on every plugin, nx.load_compiled in a
fresh interpreter with the same results (torch made unimportable for cpu, npu, tpu and edgetpu),
partitioned models with their cpu:0 segments, int8 bit for bit, and the typed errors for
corrupted, incomplete, newer and mismatched artifacts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from artifact_models import (
    DEVICES,
    NO_TORCH,
    as_host,
    cnn,
    image_batch,
    load_fresh,
    partitioned_graph,
    run_fresh,
    vector_batch,
    write_input,
)

import neurenix_core as nx
from neurenix_core.errors import ArtifactFormatError, ArtifactMismatchError, ArtifactUnsupportedError


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per device: a CNN and a partitioned graph compiled, run once, and saved."""
    root = tmp_path_factory.mktemp("artifacts")
    out: dict[str, Any] = {"root": root, "inputs": {"cnn": write_input(root, "cnn", image_batch()), "part": write_input(root, "part", vector_batch())}}
    with nx.fallback_policy("allow"):
        for dev in DEVICES:
            for kind, model, x in (("cnn", cnn(), image_batch()), ("part", partitioned_graph(), vector_batch())):
                compiled = nx.compile(model, device=dev, outputs="host")
                expected = as_host(compiled(x))
                path = compiled.save(root / f"{dev}-{kind}")
                out[(dev, kind)] = {"path": str(path), "expected": expected, "placement": compiled.placement.line(), "compiled": compiled}
    return out


def _jobs(saved: dict[str, Any], devices: tuple[str, ...]) -> list[dict[str, Any]]:
    root = saved["root"]
    return [{"artifact": saved[(d, k)]["path"], "input": saved["inputs"][k], "output": str(root / f"out-{d}-{k}.npy"), "key": [d, k]}
            for d in devices for k in ("cnn", "part")]


def _check(saved: dict[str, Any], jobs: list[dict[str, Any]], result: dict[str, Any]) -> None:
    for job, report in zip(jobs, result["report"]):
        d, k = job["key"]
        got, want = np.load(job["output"]), saved[(d, k)]["expected"]
        # The same native program runs in both processes: results agree to float32 rounding.
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{d} {k}")
        assert report["placement"] == saved[(d, k)]["placement"], (d, k)
        assert report["device"] == f"{d}:0"


def test_every_plugin_loads_in_a_fresh_process_without_torch(saved: dict[str, Any]) -> None:
    jobs = _jobs(saved, NO_TORCH)
    result = load_fresh(jobs, block_torch=True)
    assert result["torch"] is False
    _check(saved, jobs, result)
    summaries = {tuple(j["key"]): r["summary"] for j, r in zip(jobs, result["report"])}
    assert "imported from the compiled blob" in summaries[("npu", "cnn")]
    assert "jax.export module" in summaries[("tpu", "cnn")]
    assert "loaded from edgetpu-cnn" in summaries[("edgetpu", "cnn")]


def test_cuda_artifact_loads_in_a_fresh_process(saved: dict[str, Any]) -> None:
    jobs = _jobs(saved, ("cuda",))
    result = load_fresh(jobs, block_torch=False)
    _check(saved, jobs, result)
    assert "torch.export program" in result["report"][0]["summary"]


@pytest.mark.parametrize("dev", ["npu", "tpu", "edgetpu", "cuda"])
def test_partitioned_artifact_keeps_its_cpu_segment(saved: dict[str, Any], dev: str) -> None:
    manifest = json.loads((Path(saved[(dev, "part")]["path"]) / "artifact.json").read_text())
    assert len(manifest["parts"]) == 2  # the two device segments, in the plugin's format
    assert len(manifest["host_parts"]) == 1  # the cumprod segment on cpu:0, with the runtime that ran it
    assert "cpu:0" in manifest["shapes"][0]["placement"] and "cumprod" in manifest["shapes"][0]["placement"]


def test_manifest_describes_the_model(saved: dict[str, Any]) -> None:
    from neurenix_core.deploy import read_manifest

    manifest = read_manifest(saved[("npu", "cnn")]["path"])
    assert manifest["format_version"] == 2 and manifest["device_type"] == "npu" and manifest["emulated"] is True
    assert manifest["plugin"] == {"name": "npu", "distribution": "neurenix-npu-openvino", "version": manifest["plugin"]["version"]}
    assert manifest["runtime"][0].startswith("openvino ")
    assert manifest["shapes"][0]["shapes"] == [[2, 3, 8, 8]]
    assert manifest["parts"][0]["meta"]["ir"] == "model.xml" and manifest["api_version"] == ".".join(map(str, nx.NEURENIX_API_VERSION))


def test_loaded_model_compiles_new_shapes_like_the_original(saved: dict[str, Any]) -> None:
    loaded = nx.load_compiled(saved[("cpu", "cnn")]["path"])
    x = np.random.default_rng(5).standard_normal((3, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(as_host(loaded(x)), as_host(saved[("cpu", "cnn")]["compiled"](x)), rtol=1e-6, atol=1e-6)
    assert len(loaded.compiled_shapes) == 2


def test_int8_edgetpu_artifact_is_bit_identical(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    calibration = [rng.standard_normal((2, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    compiled = nx.compile(cnn(), device="edgetpu", quantize="int8", calibration=calibration, outputs="host", progress=False)
    x = image_batch()
    expected = as_host(compiled(x))
    compiled.save(tmp_path / "int8")
    manifest = json.loads((tmp_path / "int8" / "artifact.json").read_text())
    assert manifest["precision"] == "int8" and manifest["verification"] == compiled.verification.line()
    assert compiled.verification.line() + " (when saved)" in nx.load_compiled(tmp_path / "int8").summary
    out = tmp_path / "int8.npy"
    result = load_fresh([{"artifact": str(tmp_path / "int8"), "input": write_input(tmp_path, "x", x), "output": str(out)}], block_torch=True)
    assert result["torch"] is False
    np.testing.assert_array_equal(np.load(out), expected)


# ------------------------------------------------------------------------------------ errors
def _copy(saved: dict[str, Any], key: tuple[str, str], tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(saved[key]["path"], target)
    return target


def _edit_manifest(folder: Path, **changes: Any) -> None:
    file = folder / "artifact.json"
    manifest = json.loads(file.read_text())
    for k, v in changes.items():
        manifest[k] = v
    file.write_text(json.dumps(manifest))


def test_corrupted_file_is_a_format_error(saved: dict[str, Any], tmp_path: Path) -> None:
    folder = _copy(saved, ("edgetpu", "cnn"), tmp_path)
    tflite = folder / "parts" / "0" / "model.tflite"
    data = bytearray(tflite.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tflite.write_bytes(bytes(data))
    with pytest.raises(ArtifactFormatError, match=r"parts/0/model.tflite is corrupted.*neurenix export"):
        nx.load_compiled(folder)


def test_corrupted_blob_behind_a_matching_checksum_is_a_format_error(saved: dict[str, Any], tmp_path: Path) -> None:
    from neurenix_core.io.digest import file_sha256

    folder = _copy(saved, ("npu", "cnn"), tmp_path)
    blob = folder / "parts" / "0" / "model.blob"
    blob.write_bytes(b"not an OpenVINO blob" * 10)
    manifest = json.loads((folder / "artifact.json").read_text())
    manifest["checksums"]["parts/0/model.blob"] = file_sha256(blob)
    (folder / "artifact.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactFormatError, match="plugin npu.*cannot import the compiled blob"):
        nx.load_compiled(folder)


def test_missing_file_and_missing_manifest(saved: dict[str, Any], tmp_path: Path) -> None:
    folder = _copy(saved, ("tpu", "cnn"), tmp_path)
    (folder / "parts" / "0" / "weights.arrays").unlink()
    with pytest.raises(ArtifactFormatError, match="weights.arrays of the artifact is missing"):
        nx.load_compiled(folder)
    (folder / "artifact.json").unlink()
    with pytest.raises(ArtifactFormatError, match="is not a compiled artifact"):
        nx.load_compiled(folder)


def test_newer_format_is_refused(saved: dict[str, Any], tmp_path: Path) -> None:
    folder = _copy(saved, ("cpu", "cnn"), tmp_path)
    _edit_manifest(folder, format_version=99)
    with pytest.raises(ArtifactFormatError, match="format 99.*upgrade neurenix-core"):
        nx.load_compiled(folder)


def test_other_plugin_version_is_a_mismatch(saved: dict[str, Any], tmp_path: Path) -> None:
    folder = _copy(saved, ("npu", "cnn"), tmp_path)
    manifest = json.loads((folder / "artifact.json").read_text())
    _edit_manifest(folder, plugin={**manifest["plugin"], "version": "0.0.1"})
    with pytest.raises(ArtifactMismatchError, match=r"plugin npu 0.0.1;.*installed.*neurenix-npu-openvino==0.0.1"):
        nx.load_compiled(folder)


def test_an_artifact_saved_under_the_plugin_s_alias_loads(saved: dict[str, Any], tmp_path: Path) -> None:
    """Releases before one name per plugin (issue #43) wrote the npu plugin's old entry point name,
    now its alias."""
    folder = _copy(saved, ("npu", "cnn"), tmp_path)
    manifest = json.loads((folder / "artifact.json").read_text())
    _edit_manifest(folder, plugin={**manifest["plugin"], "name": "npu-openvino"})
    assert str(nx.load_compiled(folder).device) == "npu:0"


def test_other_device_type_is_a_mismatch(saved: dict[str, Any]) -> None:
    with pytest.raises(ArtifactMismatchError, match=r"compiled for npu:0 \(plugin npu\), not tpu:0"):
        nx.load_compiled(saved[("npu", "cnn")]["path"], device="tpu")


def test_missing_plugin_is_a_mismatch(saved: dict[str, Any]) -> None:
    code = (f"import neurenix_core as nx\ntry:\n    nx.load_compiled({saved[('tpu', 'cnn')]['path']!r})\n"
            "except nx.ArtifactMismatchError as exc:\n    print('refused:', exc)\n")
    proc = run_fresh(code, env={"NEURENIX_BACKENDS": "-tpu"})
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout and "pip install neurenix-tpu==" in proc.stdout


def test_models_that_cannot_be_saved(tmp_path: Path) -> None:
    dynamic = nx.compile(partitioned_graph(), device="cpu")
    dyn_graph = dynamic.graph
    from dataclasses import replace

    spec = replace(dyn_graph.inputs[0], dynamic=(0,))
    unsaved = nx.compile(replace(dyn_graph, inputs=(spec,)), device="cpu")
    with pytest.raises(ArtifactUnsupportedError, match="call the compiled model once with each input shape"):
        unsaved.save(tmp_path / "dyn")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ArtifactUnsupportedError, match="is not a compiled artifact; choose an empty or new folder"):
        dynamic.save(tmp_path / "busy")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_plugin_without_the_hooks_is_named(tmp_path: Path) -> None:
    from neurenix_core.plugins.state import registry

    rec = registry().record_named("ort")
    if rec is None or not rec.usable:
        pytest.skip("the example onnxruntime plugin is not installed in this environment")
    device = rec.manifest.device_types[0]
    compiled = nx.compile(partitioned_graph(), device=device)
    with nx.fallback_policy("allow"), pytest.raises(ArtifactUnsupportedError, match="plugin ort does not implement neurenix_save_compiled"):
        compiled.save(tmp_path / "ort")


def test_int8_partitioned_model_round_trips_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((2, 8)).astype(np.float32) for _ in range(3)]
    with nx.fallback_policy("allow"):
        compiled = nx.compile(partitioned_graph(), device="npu", quantize="int8", calibration=calibration, outputs="host", progress=False)
        expected = compiled(vector_batch())
        compiled.save(tmp_path / "q")
        loaded = nx.load_compiled(tmp_path / "q")
        # Device segments from their saved form, the cpu:0 cumprod on the integer reference with the saved plan.
        np.testing.assert_array_equal(loaded(vector_batch()), expected)
    assert loaded.plan is not None and loaded.placement.line() == compiled.placement.line()


def test_bucketed_model_keeps_its_buckets(tmp_path: Path) -> None:
    from dataclasses import replace

    graph = partitioned_graph()
    graph = replace(graph, inputs=(replace(graph.inputs[0], dynamic=(0,)),))
    x = np.random.default_rng(4).standard_normal((3, 8)).astype(np.float32)
    with nx.fallback_policy("allow"):
        compiled = nx.compile(graph, device="npu", buckets=[2, 4], pad_values={"x": np.float32(0.5)}, outputs="host")
        expected = compiled(x)  # batch 3 padded to the bucket 4
        compiled.save(tmp_path / "b")
        manifest = json.loads((tmp_path / "b" / "artifact.json").read_text())
        assert manifest["inputs"][0]["shape"] == [None, 8] and manifest["buckets"] == [[2, 4], {"$dict": [["x", 0.5]]}]
        loaded = nx.load_compiled(tmp_path / "b")
        np.testing.assert_allclose(loaded(x), expected, rtol=1e-6, atol=1e-6)
    assert loaded.compiled_shapes == [((4, 8),)]
    assert "bucket [(4, 8)]: 1 call(s), 1 padded" in loaded.summary


def test_cpu_segment_on_a_host_runtime_starts_only_that_runtime(tmp_path: Path) -> None:
    # The cos segment of an edgetpu model ran on OpenVINO's CPU device: loading starts that runtime
    # alone, so the fresh process imports no torch even though torch is installed (not blocked here).
    with nx.fallback_policy("allow"):
        compiled = nx.compile(partitioned_graph("cos"), device="edgetpu", outputs="host", runtime="openvino")
        expected = compiled(vector_batch())
        compiled.save(tmp_path / "ov")
    manifest = json.loads((tmp_path / "ov" / "artifact.json").read_text())
    assert list(manifest["host_parts"].values()) == ["openvino"]
    out = tmp_path / "ov.npy"
    result = load_fresh([{"artifact": str(tmp_path / "ov"), "input": write_input(tmp_path, "x", vector_batch()), "output": str(out)}],
                        block_torch=False)
    assert result["torch"] is False
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dev", DEVICES)
def test_loaded_model_saves_again(saved: dict[str, Any], dev: str, tmp_path: Path) -> None:
    loaded = nx.load_compiled(saved[(dev, "cnn")]["path"])
    again = nx.load_compiled(loaded.save(tmp_path / "again"))
    np.testing.assert_allclose(as_host(again(image_batch())), saved[(dev, "cnn")]["expected"], rtol=1e-6, atol=1e-6)


def test_malformed_manifest_and_graph(saved: dict[str, Any], tmp_path: Path) -> None:
    from neurenix_core.io.digest import file_sha256

    folder = _copy(saved, ("cpu", "cnn"), tmp_path)
    manifest = json.loads((folder / "artifact.json").read_text())
    for bad, match in (({"plugin": "npu"}, "field 'plugin'"), ({"shapes": None}, "field 'shapes'"),
                       ({"parts": [{"key": "k", "dir": "../../elsewhere", "meta": {}}]}, "outside the artifact folder")):
        (folder / "artifact.json").write_text(json.dumps({**manifest, **bad}))
        with pytest.raises(ArtifactFormatError, match=match):
            nx.load_compiled(folder)
    (folder / "graph.json").write_text("{not json")
    checksums = {**manifest["checksums"], "graph.json": file_sha256(folder / "graph.json")}
    (folder / "artifact.json").write_text(json.dumps({**manifest, "checksums": checksums}))
    with pytest.raises(ArtifactFormatError, match="graph.json is not readable JSON"):
        nx.load_compiled(folder)


def test_malformed_stored_value_is_a_format_error() -> None:
    from neurenix_core.graph.compile.artifact_codec import decoder

    format1 = decoder({}, "compiled artifact", 1)  # the tags format 1 artifacts wrote
    assert format1.value({"t": [1, {"sym": "d0_0"}]})[0] == 1
    for bad in ({"a": "missing"}, {"zz": 1}, {"t": [], "l": []}):
        with pytest.raises(ArtifactFormatError, match="a stored value is malformed"):
            format1.value(bad)
