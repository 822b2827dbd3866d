"""``tr-opt``'s output: printers whose floats read back (:class:`TrPrinter`), the ``-t`` targets it
adds to xDSL's (``archplan-yaml``, ``memplan-summary``, the ``mlir`` target with those printers),
and the guard that turns a pass module that cannot be imported into a diagnostic. The driver is
:mod:`tr_mlir.tools.tr_opt`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import IO, Any

from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyFloat,
    Float32Type,
    Float64Type,
    ModuleOp,
)
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.syntax_printer import SyntaxPrinter
from xdsl.targets.mlir import MLIRTarget
from xdsl.utils.target import Target

from tr_mlir.passes import module_name
from tr_mlir.tools.opt_pipeline import TrOptError

# --------------------------------------------------------------------------------------
# Targets and passes
# --------------------------------------------------------------------------------------


class _DecimalFloats:
    """Printer mixin: a finite f32 / f64 prints as a decimal literal that reads back as the same
    value. xDSL 0.74 prints it as a hexadecimal bit pattern when neither 6 significant digits nor
    its shortest form with a ``.`` hold it (``2147483648.0``, ``1234567.0``, ``1e+20``: ``0x41E0...``),
    which its own parser reads as an integer (``dense<[...]>``: a silently different value) or
    rejects (``array<f64: ...>`` and the dense arrays of op formats, e.g. a compiled program's
    ``memplan.plan init_values``): tr-opt could not read back its output. Infinities and NaNs
    stay bit patterns (MLIR has no decimal literal for them; :class:`TrParser` reads them)."""

    def print_float(self, value: float, type: AnyFloat) -> None:
        if math.isfinite(value) and isinstance(type, Float32Type | Float64Type):
            short = f"{value:.5e}".replace("e", "0e", 1)
            if type.unpack(type.pack([float(short)]), 1)[0] != value:
                text = f"{value:.{9 if isinstance(type, Float32Type) else 17}g}"
                if "." not in text:
                    mantissa, e, exponent = text.partition("e")
                    text = f"{mantissa}.0{e}{exponent}"
                self.print_string(text)  # type: ignore[attr-defined]
                return
        super().print_float(value, type)  # type: ignore[misc]


class TrPrinter(_DecimalFloats, Printer):
    """xDSL's printer with decimal floats (:class:`_DecimalFloats`)."""


class TrSyntaxPrinter(_DecimalFloats, SyntaxPrinter):
    """xDSL's highlighting printer with decimal floats (:class:`_DecimalFloats`)."""


@dataclass(frozen=True)
class TrMLIRTarget(MLIRTarget):
    """``-t mlir`` (the default): xDSL's MLIR output with :class:`TrPrinter`, so that tr-opt reads
    back every module it prints."""

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        printer = (TrSyntaxPrinter if self.syntax_highlight else TrPrinter)(
            stream=output,
            print_generic_format=self.print_generic_format,
            print_properties_as_attributes=self.print_properties_as_attributes,
            print_debuginfo=self.print_debuginfo,
        )
        printer.print_op(module)
        printer.print_metadata(ctx.loaded_dialects)
        print("\n", file=output)


@dataclass(frozen=True)
class ArchplanYamlTarget(Target):
    """``-t archplan-yaml``: the module's ``arch.model`` as the seed's ArchPlan YAML.

    Delegates to ``tr_mlir.archplan_yaml.print_archplan_yaml(module, stream)``, imported on first
    use; raises :class:`TrOptError` when that module is not available.
    """

    name = "archplan-yaml"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        emitter = _import_optional("tr_mlir.archplan_yaml", "target 'archplan-yaml'")
        emitter.print_archplan_yaml(module, output)


@dataclass(frozen=True)
class MemplanSummaryTarget(Target):
    """``-t memplan-summary``: per variant of each compiled program, its regions, bytes, DTensor
    count and per-GraphId node counts (``tr_mlir.memplan_summary.print_memplan_summary``)."""

    name = "memplan-summary"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        emitter = _import_optional("tr_mlir.memplan_summary", "target 'memplan-summary'")
        emitter.print_memplan_summary(module, output)


def _import_optional(name: str, what: str) -> Any:
    """Import module ``name``; if it (not something it imports) is missing, raise TrOptError."""
    try:
        return import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and name.startswith(e.name):
            raise TrOptError(f"{what} is not available: cannot import module '{name}' ({e})") from e
        raise


def guarded_pass_factory(
    pass_name: str, factory: Callable[[], type[ModulePass]]
) -> Callable[[], type[ModulePass]]:
    """Wrap a lazy pass factory so that a missing pass module is a :class:`TrOptError`."""

    def load() -> type[ModulePass]:
        _import_optional(module_name(pass_name), f"pass '{pass_name}'")
        return factory()

    return load
