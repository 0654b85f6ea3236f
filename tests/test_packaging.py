"""Packaging (issue #29): LICENSE, py.typed and PEP 639 metadata in every distribution of this
repository, plugins pinned to the core's major version, and the dist checker that CI runs
(scripts/check_dists.py, from scripts/check_wheels.sh) catching what it is there to catch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from email.message import Message
from pathlib import Path
from types import ModuleType

import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+ (tomllib)")

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = [ROOT, *sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml")), ROOT / "examples" / "neurenix-onnxruntime"]


def _check_dists() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_dists", ROOT / "scripts" / "check_dists.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pyproject(project: Path) -> dict[str, object]:
    return tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_project_declares_license_authors_and_pins(project: Path) -> None:
    data = _pyproject(project)
    meta = data["project"]
    assert isinstance(meta, dict)
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]
    assert (project / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    assert meta["authors"] == [{"name": "neurenix developers"}]
    assert "Typing :: Typed" in meta["classifiers"] and not [c for c in meta["classifiers"] if c.startswith("License ::")]
    assert "urls" not in meta  # none until the project has a public home (scripts/check_dists.py)
    build = data["build-system"]
    assert isinstance(build, dict) and "setuptools>=77" in build["requires"]  # PEP 639 fields
    if meta["name"] != "neurenix-core":
        assert "neurenix-core>=0.1,<1" in meta["dependencies"]


def test_the_license_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 150


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name)
def test_every_package_is_marked_typed(project: Path) -> None:
    base = project / "src" if (project / "src").is_dir() else project
    packages = [p.parent for p in base.glob("*/__init__.py") if p.parent.name not in {"tests", "examples", "benchmarks", "build"}]
    assert packages
    assert [p.name for p in packages if not (p / "py.typed").is_file()] == []


def _metadata(**fields: str | list[str]) -> Message:
    meta = Message()
    for key, value in fields.items():
        for v in value if isinstance(value, list) else [value]:
            meta[key.replace("_", "-")] = v
    return meta


GOOD: dict[str, str | list[str]] = {
    "Metadata_Version": "2.4", "Name": "neurenix-tpu", "License_Expression": "Apache-2.0", "License_File": "LICENSE",
    "Author": "neurenix developers", "Classifier": ["Typing :: Typed"], "Project_URL": "Homepage, https://example.org",
    "Requires_Dist": ["neurenix-core<1,>=0.1", "jax>=0.4.30"],
}


def test_dist_checker_accepts_good_metadata_and_names_each_problem() -> None:
    check = _check_dists()
    assert check.metadata_problems(_metadata(**GOOD)) == []
    bad: dict[str, str | list[str]] = dict(GOOD, Metadata_Version="2.2", License_Expression="MIT", Classifier=["License :: OSI Approved"], Requires_Dist=["neurenix-core>=0.1"])
    bad["Project_URL"] = "Homepage, http://example.org"
    problems = " | ".join(check.metadata_problems(_metadata(**bad)))
    for expected in ("License-Expression is 'MIT'", "Metadata-Version 2.2", "Typing :: Typed", "License :: classifier",
                     "is not an https address", "does not pin the core's major version"):
        assert expected in problems, problems


def test_dist_checker_finds_a_wheel_without_license_or_py_typed(tmp_path: Path) -> None:
    import zipfile

    check = _check_dists()
    meta = "".join(f"{k.replace('_', '-')}: {v}\n" for k, vs in GOOD.items() for v in (vs if isinstance(vs, list) else [vs]))
    whl = tmp_path / "neurenix_tpu-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("neurenix_tpu/__init__.py", "")
        z.writestr("neurenix_tpu-0.1.0.dist-info/METADATA", meta)
    problems = check.check_wheel(whl, (ROOT / "LICENSE").read_bytes())
    assert problems == ["no neurenix_tpu-0.1.0.dist-info/licenses/LICENSE", "package neurenix_tpu has no py.typed"]


@pytest.mark.slow
def test_the_core_wheel_and_sdist_build_and_pass_the_checker(tmp_path: Path) -> None:
    """The real thing for the core (~5 s); scripts/check_wheels.sh does every distribution and installs them."""
    pytest.importorskip("build", reason="the test extra installs build (pip install -c constraints.txt -e '.[test]')")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_dists.py"), str(tmp_path)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": ok (LICENSE, py.typed, metadata)") == 2
