"""Check built wheels and sdists for what a packager relies on (issue #29).

    python scripts/check_dists.py DIST_FOLDER

Every wheel must carry the repository's LICENSE (byte for byte) under ``.dist-info/licenses/``,
a ``py.typed`` in each of its packages, and metadata 2.4 with ``License-Expression: Apache-2.0``,
``License-File: LICENSE``, the authors and classifiers (``Typing :: Typed`` among them; no
Project-URL yet: the project has no public home to point at, and a made-up address would send
users to someone else's page); a plugin must require ``neurenix-core`` below the next major version. Every sdist
must carry LICENSE and the same ``py.typed`` files. Prints one line per distribution and exits 1
naming every problem found.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = "neurenix-core"
CORE_PIN = "neurenix-core<1,>=0.1"


def packages(names: list[str]) -> set[str]:
    """Top-level package folders in a wheel's (or an unpacked sdist's ``src/``-relative) file list."""
    return {n.split("/")[0] for n in names if n.count("/") == 1 and n.endswith("/__init__.py")}


def metadata_problems(meta: Message) -> list[str]:
    problems = []
    expected = {"License-Expression": "Apache-2.0", "License-File": "LICENSE", "Author": "neurenix developers"}
    for key, value in expected.items():
        if meta.get(key) != value:
            problems.append(f"{key} is {meta.get(key)!r}, expected {value!r}")
    if tuple(int(p) for p in str(meta.get("Metadata-Version", "0")).split(".")) < (2, 4):
        problems.append(f"Metadata-Version {meta.get('Metadata-Version')} (PEP 639 license fields need 2.4)")
    classifiers = meta.get_all("Classifier") or []
    if "Typing :: Typed" not in classifiers:
        problems.append(f"no 'Typing :: Typed' classifier (classifiers: {classifiers})")
    if any(c.startswith("License ::") for c in classifiers):
        problems.append("a License :: classifier beside License-Expression (PEP 639 forbids both)")
    for url in meta.get_all("Project-URL") or []:
        if not url.partition(",")[2].strip().startswith("https://"):
            problems.append(f"Project-URL {url!r} is not an https address")
    if meta["Name"] != CORE:
        requires = [r.replace(" ", "") for r in meta.get_all("Requires-Dist") or []]
        if CORE_PIN not in requires:
            problems.append(f"does not pin the core's major version ({CORE_PIN!r} not in {requires})")
    return problems


def check_wheel(path: Path, license_text: bytes) -> list[str]:
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        problems = metadata_problems(HeaderParser().parsestr(wheel.read(f"{info}/METADATA").decode("utf-8")))
        if f"{info}/licenses/LICENSE" not in names:
            problems.append(f"no {info}/licenses/LICENSE")
        elif wheel.read(f"{info}/licenses/LICENSE") != license_text:
            problems.append("its LICENSE differs from the repository's")
        found = packages(names)
        problems += [f"package {p} has no py.typed" for p in sorted(found) if f"{p}/py.typed" not in names]
        if not found:
            problems.append("no package in the wheel")
    return problems


def check_sdist(path: Path, license_text: bytes) -> list[str]:
    with tarfile.open(path) as sdist:
        names = sdist.getnames()
        top = names[0].split("/")[0]
        problems = []
        member = sdist.extractfile(f"{top}/LICENSE") if f"{top}/LICENSE" in names else None
        if member is None:
            problems.append("no LICENSE at the sdist's top")
        elif member.read() != license_text:
            problems.append("its LICENSE differs from the repository's")
        inner = [n[len(top) + 1:] for n in names if n.startswith(top + "/")]
        inner = [n.removeprefix("src/") for n in inner]
        found = packages(inner) - {"tests", "examples", "benchmarks"}
        problems += [f"package {p} has no py.typed" for p in sorted(found) if f"{p}/py.typed" not in inner]
        pkg_info = sdist.extractfile(f"{top}/PKG-INFO")
        if pkg_info is None:
            problems.append("no PKG-INFO")
        else:
            problems += metadata_problems(HeaderParser().parsestr(pkg_info.read().decode("utf-8")))
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__, file=sys.stderr)
        return 2
    folder, license_text = Path(argv[0]), (ROOT / "LICENSE").read_bytes()
    dists = sorted(folder.glob("*.whl")) + sorted(folder.glob("*.tar.gz"))
    failed = not dists
    for path in dists:
        problems = check_wheel(path, license_text) if path.suffix == ".whl" else check_sdist(path, license_text)
        print(f"{path.name}: {'ok (LICENSE, py.typed, metadata)' if not problems else 'FAILED'}")
        for p in problems:
            print(f"  {p}")
        failed = failed or bool(problems)
    if not dists:
        print(f"no wheel or sdist in {folder}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
