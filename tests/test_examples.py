"""examples/*.mlir are the zoo's models as emitted now (regenerate with `make examples`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.parser import Parser

import tr_mlir.dialects.arch as arch
from tr_mlir.zoo import MODELS, emit_model, example_text

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STALE = "examples/ is stale: run `make examples` (python -m tr_mlir.zoo --write-examples examples)"


def test_one_example_per_model():
    assert sorted(p.stem for p in EXAMPLES.glob("*.mlir")) == sorted(MODELS), STALE


@pytest.mark.parametrize("name", MODELS)
def test_example_is_up_to_date(name):
    path = EXAMPLES / f"{name}.mlir"
    assert path.is_file(), STALE
    assert path.read_text() == example_text(name), STALE


@pytest.mark.parametrize("name", MODELS)
def test_example_parses_to_the_emitted_model(name):
    text = (EXAMPLES / f"{name}.mlir").read_text()
    header = [line for line in text.splitlines() if line.startswith("//")]
    assert len(header) == 2 and header[0].startswith(f"// {name}: ")
    ctx = Context()
    ctx.load_dialect(Builtin)
    ctx.load_dialect(arch.Arch)
    module = Parser(ctx, text, f"{name}.mlir").parse_module()
    module.verify()
    assert module.is_structurally_equivalent(emit_model(name))
    assert text.endswith(str(module) + "\n")
