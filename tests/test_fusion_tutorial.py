"""``docs/fusion-tutorial.md`` is a test: its plugin is ``examples/plugins/conv_relu.py`` verbatim,
and its Python blocks run (each in a fresh process, from the repository root, so a plugin's
registrations never reach other tests; a block marked as continuing the one above runs with it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TUTORIAL = REPO / "docs" / "fusion-tutorial.md"


CONTINUES = "# (continues the block above"


def python_blocks() -> list[str]:
    """The tutorial's Python blocks; a block whose first line is ``# (continues the block above...``
    is joined to the one before it (one program, split by prose)."""
    blocks: list[str] = []
    for block in re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), flags=re.S):
        if block.startswith(CONTINUES) and blocks:
            blocks[-1] += block
        else:
            blocks.append(block)
    return blocks


def test_the_tutorial_plugin_is_the_example_file():
    blocks = python_blocks()
    assert blocks, "no python block in the tutorial"
    assert blocks[0] == (REPO / "examples" / "plugins" / "conv_relu.py").read_text()


@pytest.mark.parametrize("index", range(1, len(python_blocks())))
def test_tutorial_block_runs(index):
    code = python_blocks()[index]
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"block {index} of {TUTORIAL.name} failed:\n{out.stderr[-3000:]}"


def test_the_tutorial_commands_name_existing_files():
    text = TUTORIAL.read_text()
    for path in re.findall(r"`((?:examples|lit_tests|tests|docs|dialects|passes|lowering|tr_mlir)/[\w./*-]+)`", text):
        if "*" in path:
            assert list(REPO.glob(path)), path
        else:
            assert (REPO / path).exists(), path
