"""Every Python example in README.md and docs/*.md runs (issue 29, item 10): a page's ```python blocks are
executed in order in one namespace, in a temporary directory, as a reader pasting them one after the other
would. A block preceded by ``<!-- no-test -->`` is skipped (only for what cannot run here, e.g. a GPU).

Examples use tiny batches and few steps so that the whole file stays cheap; each page is one test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NO_TEST = "<!-- no-test -->"
# A fenced block: optional marker line, the fence with its language, the body, the closing fence.
FENCE = re.compile(r"^(?P<marker><!-- no-test -->\n)?```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
                   re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, source) of each ```python block to run, in page order."""
    return [(text[:m.start("body")].count("\n") + 1, m["body"]) for m in FENCE.finditer(text)
            if m["lang"] == "python" and not m["marker"]]


def skipped_blocks(text: str) -> int:
    return sum(1 for m in FENCE.finditer(text) if m["lang"] == "python" and m["marker"])


def test_block_extraction():
    text = ("a\n```python\nx = 1\n```\n<!-- no-test -->\n```python\ngpu()\n```\n"
            "```bash\nls\n```\n```python\ny = x\n```\n")
    assert python_blocks(text) == [(3, "x = 1\n"), (13, "y = x\n")]
    assert skipped_blocks(text) == 1


def test_readme_has_examples_and_few_skips():
    pages = {p.name: p.read_text() for p in PAGES}
    assert len(python_blocks(pages["README.md"])) >= 5
    assert sum(skipped_blocks(t) for t in pages.values()) <= 3  # the marker is for the truly impossible only


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p.read_text())], ids=lambda p: p.name)
def test_page_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace = {"__name__": f"docs_{page.stem}"}
    for line, source in python_blocks(page.read_text()):
        code = compile(source, f"{page.relative_to(ROOT)}:{line}", "exec")
        try:
            exec(code, namespace)
        except Exception as e:  # name the block, keep the original traceback
            raise AssertionError(f"{page.name}: the Python block at line {line} failed: {e!r}") from e
