"""Convention tests of the registries: dialects, passes, and the ``xdsl.universe`` entry point.

The conventions (CONTRIBUTING.md, DESIGN section 8):

* ``tr_mlir.dialects.get_all_dialects()`` maps a dialect name to a factory of the ``Dialect``
  with that name, whose ops and attributes all carry the ``<name>.`` prefix.
* ``tr_mlir.passes.PASSES`` maps a pass name to its class name. A pass, its module and its lit
  test share one stem, the pass name with ``-`` replaced by ``_``: pass ``arch-merge-blocks`` is
  class ``ArchMergeBlocksPass`` (a documented ``ModulePass`` whose ``name`` is the key) defined in
  ``passes/arch_merge_blocks.py`` (``tr_mlir.passes.arch_merge_blocks``) and tested by a lit file
  ``lit_tests/**/arch_merge_blocks.mlir`` (by default ``lit_tests/arch/arch_merge_blocks.mlir``).
  Every public module of ``passes/`` (not starting with ``_``) is a registered pass. An entry whose
  module does not exist yet is reported as an expected failure naming the pass (passes are
  being written in parallel); once the module exists, the full convention applies.
* The ``xdsl.universe`` entry point exposes the same dialects and passes to every xDSL tool:
  ``Universe.get_multiverse()`` lists them and stock ``xdsl-opt`` parses arch IR.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from xdsl.passes import ModulePass
from xdsl.universe import Universe

from tr_mlir.dialects import get_all_dialects
from tr_mlir.passes import PASSES, get_all_passes, module_name

REPO = Path(__file__).resolve().parents[1]
PASSES_DIR = REPO / "passes"
LIT_DIR = REPO / "lit_tests"

SMALL_ARCH_MODULE = """\
arch.model @tiny input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
  %r = arch.relu %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %g = arch.gap_fc %r out_features = 10 : tensor<?x8x8x8xf32> -> tensor<?x1x1x10xf32>
  %l = arch.softmax_ce %g num_classes = 10 : tensor<?x1x1x10xf32> -> tensor<?x1x1x10xf32>
  arch.output %l : tensor<?x1x1x10xf32>
}
"""


def stem(pass_name: str) -> str:
    """``arch-merge-blocks`` -> ``arch_merge_blocks`` (module file and lit test stem)."""
    return pass_name.replace("-", "_")


def module_exists(pass_name: str) -> bool:
    return importlib.util.find_spec(module_name(pass_name)) is not None


def pass_params() -> list:
    """One param per PASSES entry: a registered pass without its module fails the test (strictly:
    a missing pass must never pass CI)."""
    return list(PASSES)


# Passes
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", pass_params())
def test_pass_follows_the_convention(name: str) -> None:
    assert module_exists(name), f"PASSES['{name}'] names {module_name(name)}, which does not exist"
    module = importlib.import_module(module_name(name))
    assert Path(module.__file__).resolve() == PASSES_DIR / f"{stem(name)}.py"
    cls = getattr(module, PASSES[name], None)
    assert cls is not None, f"{module.__name__} defines no class {PASSES[name]} (PASSES['{name}'])"
    assert isinstance(cls, type) and issubclass(cls, ModulePass)
    assert cls.__module__ == module.__name__, f"{cls.__name__} must be defined in its own module"
    assert cls.name == name, f"{cls.__name__}.name is '{cls.name}', its PASSES key is '{name}'"
    assert cls.__doc__ and cls.__doc__.strip(), f"{cls.__name__} has no docstring"
    assert get_all_passes()[name]() is cls
    lit_tests = sorted(LIT_DIR.glob(f"**/{stem(name)}.mlir"))
    assert lit_tests, f"pass '{name}' has no lit test lit_tests/**/{stem(name)}.mlir"
    assert any(f" {name}" in p.read_text() or f"{name}{{" in p.read_text() for p in lit_tests), (
        f"no RUN line of {[str(p.relative_to(REPO)) for p in lit_tests]} names pass '{name}'"
    )


EXAMPLE_PLUGINS = sorted((REPO / "examples" / "plugins").glob("*.py"))


@pytest.mark.parametrize("plugin", EXAMPLE_PLUGINS, ids=lambda p: p.name)
def test_plugin_entries_follow_the_conventions(plugin: Path) -> None:
    """A plugin's passes, ops, descriptors and kernels meet the rules of the built-in ones: a
    documented ModulePass under its own name with a lit test of its stem whose RUN line names it
    (and loads the plugin); arch ops prefixed ``arch.`` with a descriptor and a YAML form;
    ``extend.check()`` clean."""
    from tr_mlir import extend
    from tr_mlir.archplan_yaml import LAYER_SPECS
    from tr_mlir.dialects import arch
    from tr_mlir.passes._descriptors import DESCRIPTORS

    with extend.scoped():
        before = dict(PASSES)
        extend.load_plugin(plugin)
        added = {n: c for n, c in PASSES.items() if n not in before}
        assert added or arch.registered_ops(), f"{plugin.name} registers nothing"
        for name, cls in added.items():
            assert isinstance(cls, type) and issubclass(cls, ModulePass)
            assert cls.name == name and cls.__doc__ and cls.__doc__.strip()
            assert name == name.lower() and "_" not in name
            assert get_all_passes()[name]() is cls
            lit_tests = sorted(LIT_DIR.glob(f"**/{stem(name)}.mlir"))
            assert lit_tests, f"plugin pass '{name}' has no lit test lit_tests/**/{stem(name)}.mlir"
            assert any(f" {name}" in p.read_text() and f"--load-plugin %plugins/{plugin.name}" in p.read_text()
                       for p in lit_tests), f"no RUN line loads {plugin.name} and names pass '{name}'"
        dialect = get_all_dialects()["arch"]()
        for op in arch.registered_ops():
            assert op.name.startswith("arch.") and op in dialect.operations
            assert op in DESCRIPTORS and op in LAYER_SPECS
        extend.check()


def test_every_pass_module_is_registered() -> None:
    modules = sorted(p.stem for p in PASSES_DIR.glob("*.py") if not p.stem.startswith("_"))
    registered = {stem(name) for name in PASSES}
    unregistered = [m for m in modules if m not in registered]
    assert not unregistered, (
        f"passes/{unregistered[0]}.py is not in tr_mlir.passes.PASSES "
        f"(add '{unregistered[0].replace('_', '-')}': '<ClassName>'; helpers start with '_')"
    )


def test_pass_names_are_kebab_case() -> None:
    for name in PASSES:
        assert name == name.lower() and "_" not in name and name.replace("-", "").isalnum(), name


# --------------------------------------------------------------------------------------
# The xdsl.universe entry point
# --------------------------------------------------------------------------------------


def test_multiverse_has_our_dialects_and_passes() -> None:
    multiverse = Universe.get_multiverse()
    assert set(get_all_dialects()) <= set(multiverse.all_dialects)
    assert set(PASSES) <= set(multiverse.all_passes)
    assert multiverse.all_dialects["arch"]() is get_all_dialects()["arch"]()


def _xdsl_opt() -> list[str]:
    script = Path(sys.executable).with_name("xdsl-opt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "xdsl.tools.xdsl_opt"]


def test_stock_xdsl_opt_parses_arch(tmp_path: Path) -> None:
    path = tmp_path / "tiny.mlir"
    path.write_text(SMALL_ARCH_MODULE)
    proc = subprocess.run([*_xdsl_opt(), str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "arch.model @tiny input(8, 8, 3) num_classes = 10 {" in proc.stdout
    assert "arch.conv %x out_ch = 8 k = 3 p = 1" in proc.stdout


def test_stock_xdsl_opt_runs_our_pass(tmp_path: Path) -> None:
    name = "arch-mark-first-layer"
    assert module_exists(name)
    path = tmp_path / "tiny.mlir"
    path.write_text(SMALL_ARCH_MODULE)
    proc = subprocess.run(
        [*_xdsl_opt(), str(path), "-p", name], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "first_layer = 0" in proc.stdout
