"""Run the ```python blocks of a Markdown page the way a reader would: in order, in one namespace.

The contract (CONTRIBUTING.md, "Code in the docs"): every ```python block of README.md, docs/*.md,
plugins/*/README.md and examples/*/README.md is executed by tests/test_docs_snippets.py. The
blocks of one page run top to bottom in one fresh interpreter and share their names, like the
cells of a notebook, so a later block may use what an earlier block of the *same page* defined;
nothing is shared between pages. Anything that is not runnable Python (shell, output, TOML,
code that needs real hardware) goes in a ```text / ```console / ```bash / ```toml block.

Run one page by hand (the test sets the emulation environment for you):

    NEURENIX_EMULATE=cuda,tpu,npu,edgetpu JAX_PLATFORMS=cpu python tests/support/doc_snippets.py docs/tpu.md
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fence opens at the start of a line with ``` and a language word, and closes at the next
# line that is only ```; the body keeps its own indentation.
_FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, its code and the page line its code starts on."""

    lang: str
    code: str
    line: int


def blocks(text: str, lang: str = "python") -> list[Block]:
    """The fenced blocks of ``text`` in language ``lang``, in page order."""
    found = []
    for match in _FENCE.finditer(text):
        if match.group(1) == lang:
            found.append(Block(lang, match.group(2), text.count("\n", 0, match.start(2)) + 1))
    return found


def pages() -> list[Path]:
    """Every page whose python blocks the snippet test runs (discovered, so new pages join)."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found += sorted(ROOT.glob("plugins/*/README.md")) + sorted(ROOT.glob("examples/*/README.md"))
    return [p for p in found if p.is_file()]


def run_page(page: Path) -> int:
    """Execute the page's python blocks in one namespace; return how many ran.

    Each block is compiled under the page's path with its real line numbers, so a traceback
    points at the line of the page to fix.
    """
    namespace: dict[str, object] = {"__name__": "__main__"}
    code_blocks = blocks(page.read_text(encoding="utf-8"))
    for block in code_blocks:
        source = "\n" * (block.line - 1) + block.code
        exec(compile(source, str(page), "exec"), namespace)  # noqa: S102 - the page's own examples
    return len(code_blocks)


if __name__ == "__main__":
    import os
    import tempfile

    target = Path(sys.argv[1]).resolve()
    # In a temporary folder, as tests/test_docs_snippets.py runs it: files a snippet writes
    # (model.onnx, model_int8.onnx) do not land in the repository.
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        ran = run_page(target)
    print(f"doc-snippets: {ran} python blocks ran")
