"""Every ```python block of README.md, docs/*.md and the plugin READMEs runs (issue #29).

One fresh interpreter per page, in a temporary working directory, with every plugin emulated:
the blocks of a page run in order and share one namespace (tests/support/doc_snippets.py,
CONTRIBUTING.md "Code in the docs"). Pages are discovered, so a new page is tested as soon as it
exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_snippets import ROOT, blocks, pages

RUNNER = ROOT / "tests" / "support" / "doc_snippets.py"
EMULATION = {
    "NEURENIX_EMULATE": "cuda,tpu,npu,edgetpu",
    "JAX_PLATFORMS": "cpu",
    "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
}
PAGES_WITH_CODE = [p for p in pages() if blocks(p.read_text(encoding="utf-8"))]


def _env() -> dict[str, str]:
    # The reader's environment is the documented one: no NEURENIX_* settings of the test run leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(EMULATION)
    return env


@pytest.mark.slow  # 1-15 s of CPU per page (torch.export of a tiny BERT, JAX and OpenVINO compiles)
@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_of_the_page_run(page: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(page)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # files a snippet writes (model.onnx, weights) land here, not in the repository
        env=_env(),
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, f"{page.relative_to(ROOT)}: a python block failed\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    expected = len(blocks(page.read_text(encoding="utf-8")))
    assert f"doc-snippets: {expected} python blocks ran" in proc.stdout


def test_every_documented_page_is_discovered() -> None:
    found = {str(p.relative_to(ROOT)) for p in pages()}
    assert {"README.md", "docs/vendors.md", "docs/models.md", "plugins/neurenix-tpu/README.md"} <= found
    assert "examples/neurenix-onnxruntime/README.md" in found


def test_blocks_keep_page_lines_and_ignore_other_languages() -> None:
    text = "# t\n\n```bash\necho no\n```\n\n```python\nx = 1\n```\n\n```python title\ny = x + 1\n```\n"
    found = blocks(text)
    assert [b.code for b in found] == ["x = 1\n", "y = x + 1\n"]
    assert [b.line for b in found] == [8, 12]
    assert [b.code for b in blocks(text, "bash")] == ["echo no\n"]


def test_a_failing_block_names_the_page_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n\n```python\nfirst = 1\n```\n\ntext\n\n```python\nassert first == 2, 'wrong'\n```\n")
    proc = subprocess.run([sys.executable, str(RUNNER), str(page)], capture_output=True, text=True, env=_env(), timeout=60, check=False)
    assert proc.returncode != 0
    assert f'File "{page}", line 10' in proc.stderr and "AssertionError: wrong" in proc.stderr
