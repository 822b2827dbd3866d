"""``tr-opt``: xDSL's modular optimizer driver with the tr-mlir dialects and passes.

``tr-opt`` is :class:`xdsl.xdsl_opt_main.xDSLOptMain` (every ``xdsl-opt`` flag is kept) with:

* dialects ``builtin``, ``func``, ``arith``, ``test`` from xDSL plus every dialect of
  :func:`tr_mlir.dialects.get_all_dialects`; passes ``cse``, ``dce``, ``canonicalize`` from
  xDSL plus every pass of :func:`tr_mlir.passes.get_all_passes` (loaded lazily: a pass whose
  module cannot be imported is an error only when a pipeline names it);
* the targets of xDSL (``mlir`` ...) plus ``archplan-yaml`` (the seed's ArchPlan YAML, written by
  ``tr_mlir.archplan_yaml.print_archplan_yaml``) and ``memplan-summary`` (per-variant tables of a
  compiled program, ``tr_mlir.memplan_summary.print_memplan_summary``);
* ``--pass-pipeline='builtin.module(p1,p2{k=v})'`` in MLIR syntax, next to xDSL's ``-p p1,p2{k=v}``
  (:func:`mlir_pipeline_to_xdsl` translates the former into the latter);
* diagnostics instead of Python tracebacks (DESIGN section 6): bad input prints
  ``tr-opt: error: <where>: <message>`` (``<where>`` is ``file:line:col`` when known, else the file),
  maybe followed by context (the source line, or the IR annotated at the failing op), and exits 1.
  Anything unexpected prints ``tr-opt: internal error: <type>: <message>`` and exits 1; set
  ``TR_OPT_TRACEBACK=1`` to see the Python traceback as well;
* guards for holes of the xDSL 0.74 parser and verifier (:class:`TrParser`,
  :func:`check_dominance`): integer types wider than MLIR's limit (their value range is computed
  as ``1 << width``, which for ``i99999999999`` allocates gigabytes and seems to hang), regions
  nested too deeply for the recursive-descent parser (``RecursionError``), numeric literals their
  type cannot hold (xDSL raised ``OverflowError`` for ``1.0e39 : f32``, read ``1.0e400`` as
  infinity, kept ``10^23 : index`` and failed inside ``dense<[300]> : tensor<1xi8>``: each is a
  parse error at the literal, :func:`literal_problem`), f80 / f128 values, which xDSL can neither
  store nor print (:func:`unstorable_float`), parser recursion errors in general, an empty input
  (MLIR reads it as an empty module) and the missing dominance check (a use before its definition);
* output that reads back: floats print as decimal literals (:class:`TrPrinter`; xDSL printed
  ``2147483648.0`` as a bit pattern its parser refused in a dense array), and a hexadecimal
  literal in a dense literal or array is a bit pattern, as in MLIR (how xDSL prints infinities);
* ``-t`` built before any work (:meth:`TrOptMain._build_target`): an unknown or mistyped target
  option, or a second target, is a command-line error, and the ``mlir`` target's options hold;
* plugins (:mod:`tr_mlir.extend`): ``--load-plugin FILE_OR_MODULE`` (repeatable) loads a plugin
  before anything else, so its ops parse, its passes run in ``-p`` / ``--pass-pipeline`` and its
  fusion steps join ``arch-plan``; installed plugins (the ``tr_mlir.plugins`` entry point group)
  load always, and so do the dialects and passes of other packages' ``xdsl.universe`` entry
  points, as in stock ``xdsl-opt``. A plugin that fails to load is an error naming it.

With ``--verify-diagnostics`` / ``--parsing-diagnostics`` the behaviour is xDSL's: diagnostics of
each ``--split-input-file`` chunk are printed to stdout and the exit code is 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import io
import os
import sys
import traceback
from collections.abc import Iterable, Sequence
from typing import IO, Any, NoReturn

from xdsl.dialects import get_all_dialects as get_xdsl_dialects
from xdsl.dialects.builtin import (
    ModuleOp,
)
from xdsl.ir import Operation
from xdsl.passes import ModulePass, PassPipeline
from xdsl.transforms import get_all_passes as get_xdsl_passes
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    MultipleSpansParseError,
    ParseError,
)
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

import tr_mlir
from tr_mlir.dialects import get_all_dialects
from tr_mlir.passes import PASSES, get_all_passes
from tr_mlir.tools.opt_parser import TrParser, verify_module
from tr_mlir.tools.opt_pipeline import (
    PipelineSyntaxError,
    TrOptError,
    build_passes,
    from_spec,
    mlir_pipeline_to_xdsl,
    parse_pass_specs,
)
from tr_mlir.tools.opt_targets import (
    ArchplanYamlTarget,
    MemplanSummaryTarget,
    TrMLIRTarget,
    TrPrinter,
    guarded_pass_factory,
)

PROG = "tr-opt"

XDSL_DIALECTS: tuple[str, ...] = ("builtin", "func", "arith", "test")
"""Dialects of xDSL that tr-opt registers besides ours."""

XDSL_PASSES: tuple[str, ...] = ("cse", "dce", "canonicalize")
"""Passes of xDSL that tr-opt registers besides ours."""

TRACEBACK_ENV = "TR_OPT_TRACEBACK"
"""Environment variable: set to 1 to print Python tracebacks along with diagnostics."""


# --------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------


class TrOptMain(xDSLOptMain):
    """The ``tr-opt`` driver (see the module docstring).

    ``TrOptMain(args=[...]).run()`` runs it in-process; errors raise ``SystemExit(1)`` after
    printing the diagnostic to stderr. Do not pass ``--disable-verify`` in-process: xDSL then
    disables attribute verification for the whole Python process.
    """

    version_format = f"tr-opt {tr_mlir.__version__} (tr-mlir) built from xdsl version {{xdsl_version}}"

    def __init__(
        self,
        description: str = "tr-mlir modular optimizer driver (xdsl-opt with the arch dialects and passes)",
        args: Sequence[str] | None = None,
    ):
        self._stage = "reading the command line"
        self._pass: ModulePass | None = None
        self._parser: TrParser | None = None
        self._module: ModuleOp | None = None
        self._chunk_offset = 0
        self._pass_start = 0.0
        try:
            self._stage = "loading plugins"
            load_cli_plugins(sys.argv[1:] if args is None else args)
            self._stage = "reading the command line"
            super().__init__(description, args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as e:  # ArgSpecParseError is a BaseException
            self._fail(e)

    # -- registries ---------------------------------------------------------------------

    def register_all_dialects(self) -> None:
        upstream = get_xdsl_dialects()
        for name in XDSL_DIALECTS:
            self.ctx.register_dialect(name, upstream[name])
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)
        for name, factory in _other_universes().all_dialects.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        upstream = get_xdsl_passes()
        for name in XDSL_PASSES:
            self.register_pass(name, upstream[name])
        for name, factory in get_all_passes().items():
            builtin = isinstance(PASSES.get(name), str)
            self.register_pass(name, guarded_pass_factory(name, factory) if builtin else factory)
        for name, factory in _other_universes().all_passes.items():
            if name not in self.available_passes:
                self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets[TrMLIRTarget.name] = lambda: TrMLIRTarget
        self.available_targets[ArchplanYamlTarget.name] = lambda: ArchplanYamlTarget
        self.available_targets[MemplanSummaryTarget.name] = lambda: MemplanSummaryTarget

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        self.available_frontends["mlir"] = self._parse_mlir

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.prog = PROG

        def error(message: str) -> NoReturn:
            # one line, then the hint (argparse would print the usage first and exit 2)
            _emit(f"{PROG}: error: {message}", [f"{PROG}: note: see '{PROG} --help'"])
            raise SystemExit(1)

        arg_parser.error = error  # type: ignore[method-assign]
        arg_parser.add_argument(
            "--load-plugin",
            action="append",
            default=[],
            metavar="FILE_OR_MODULE",
            help="load a tr-mlir plugin (a Python file or an importable module, see tr_mlir.extend) "
            "before reading the input; repeatable",
        )
        arg_parser.add_argument(
            "--pass-pipeline",
            type=str,
            default=None,
            help="pass pipeline in MLIR syntax, e.g. 'builtin.module(arch-expand,cse)' "
            "(the same passes and options as -p; do not combine the two)",
        )

    # -- pipeline -----------------------------------------------------------------------

    def setup_pipeline(self) -> None:
        self._target = self._build_target()
        self._stage = "reading the pass pipeline"
        spec = self.args.passes
        try:
            if self.args.pass_pipeline is not None:
                if spec:
                    raise TrOptError("use either -p/--passes or --pass-pipeline, not both")
                spec = mlir_pipeline_to_xdsl(self.args.pass_pipeline)
            self.pipeline = PassPipeline(build_passes(self.available_passes, spec), self._callback)
        except ArgSpecParseError as e:
            raise _spec_error(e, "pass pipeline", spec) from None
        except PipelineSyntaxError as e:
            raise TrOptError(f"invalid pass pipeline: {e}") from None
        except (ValueError, TypeError) as e:
            hint = " (see tr-opt --help for the passes)" if "Unrecognized passes" in str(e) else ""
            raise TrOptError(f"invalid pass pipeline: {e}{hint}") from None

    def _callback(
        self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
    ) -> None:
        """Between passes: timing, verification + dominance, ``--print-between-passes``."""
        if self.args.time_passes and previous is not None:
            print(f"Pass {previous.name} took {_now() - self._pass_start} seconds")
        self._stage = "verifying the input" if previous is None else "verifying"
        self._pass = previous
        self._module = module
        if not self.args.disable_verify:
            verify_module(module)
        if previous is not None and following is not None and self.args.print_between_passes:
            print(f"IR after {previous.name}:")
            TrPrinter(stream=sys.stdout).print_op(module)
            print("\n\n\n")
        self._stage = "running a pass"
        self._pass = following
        self._pass_start = _now()

    # -- input and output ---------------------------------------------------------------

    def prepare_input(self):  # type: ignore[override]
        self._stage = "reading the input"
        name = self.args.input_file
        if name is not None:
            if not self.args.frontend and os.path.splitext(name)[1][1:] not in self.available_frontends:
                self.args.frontend = "mlir"  # like mlir-opt: any file name is MLIR
            try:
                return super().prepare_input()
            except OSError as e:
                raise TrOptError(f"could not open input file '{name}': {e.strerror}") from None
        return super().prepare_input()

    def prepare_output(self) -> IO[str]:
        try:
            return super().prepare_output()
        except OSError as e:
            raise TrOptError(
                f"could not open output file '{self.args.output_file}': {e.strerror}"
            ) from None

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0):
        self._stage = "parsing"
        self._pass = None
        self._chunk_offset = start_offset
        return super().parse_chunk(chunk, file_extension, start_offset)

    def _parse_mlir(self, io: IO[bytes]) -> ModuleOp:
        data = io.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data.count(b"\n", 0, e.start) + 1 + self._chunk_offset
            raise TrOptError(
                f"{self.get_input_name()}:{line}: input is not valid UTF-8 text "
                f"(byte {data[e.start]:#04x} at offset {e.start})"
            ) from None
        self._parser = TrParser(self.ctx, text, self.get_input_name())
        return self._parser.parse_module(not self.args.no_implicit_module)

    def output_resulting_program(self, prog: ModuleOp) -> str:
        self._stage = "printing the output"
        self._pass = None
        if self._target is None:  # a legacy target function
            return super().output_resulting_program(prog)
        output = io.StringIO()
        self._target.emit(self.ctx, prog, output)
        return output.getvalue()

    def _build_target(self) -> Target | None:
        """The ``-t`` target, built before any work (``None`` for a legacy target function).

        xDSL builds it only to print the output, after the passes ran: an option the target does
        not have or a value of the wrong type was an internal error then, a second target
        (``-t mlir,archplan-yaml``) was ignored, and so were the ``mlir`` target's own options
        (``-t 'mlir{print_generic_format=true}'``: xDSL overwrote them with the flags). Here each
        is a command-line error, and an ``mlir`` option holds when it or its flag
        (``--print-op-generic`` ...) is given.
        """
        self._stage = "reading the target"
        text = self.args.target
        try:
            specs = parse_pass_specs(text)
        except ArgSpecParseError as e:
            raise _spec_error(e, "target", text) from None
        if len(specs) != 1:
            raise TrOptError(f"invalid target: expected one target, got {len(specs)} (in '{text}')")
        spec = specs[0]
        entry = self.available_targets[spec.name]
        if inspect.signature(entry).parameters:
            return None
        target = from_spec(entry(), spec, f"invalid target: target '{spec.name}'")
        if spec.name == "mlir":
            flags = {
                "print_generic_format": self.args.print_op_generic,
                "print_properties_as_attributes": self.args.print_no_properties,
                "print_debuginfo": self.args.print_debuginfo,
                "syntax_highlight": self.args.syntax_highlight,
            }
            target = dataclasses.replace(
                target, **{k: bool(getattr(target, k) or flag) for k, flag in flags.items()}
            )
        return target

    # -- errors -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            super().run()
        except (SystemExit, KeyboardInterrupt, BrokenPipeError):
            raise
        except BaseException as e:
            self._fail(e)

    def _where(self, op: Operation | None = None) -> str:
        """``file:line:col`` of ``op`` when it was parsed, else the input's name."""
        name = self.get_input_name() if hasattr(self, "args") else "stdin"
        if op is not None and self._parser is not None:
            if (span := self._parser.op_spans.get(op)) is not None:
                loc = span.get_location()
                return f"{name}:{loc.line + self._chunk_offset}:{loc.col}"
        return name

    def _parse_position(self) -> str:
        """``file:line:col`` of the parser's current token (while parsing)."""
        if self._parser is None:
            return self._where()
        loc = self._parser._current_token.span.get_location()
        return f"{loc.file}:{loc.line + self._chunk_offset}:{loc.col}"

    def _fail(self, e: BaseException) -> NoReturn:
        """Print the diagnostic for ``e`` to stderr and exit 1."""
        if os.environ.get(TRACEBACK_ENV) == "1":
            traceback.print_exception(e)
        pass_note = [f"{PROG}: note: in pass '{self._pass.name}'"] if self._pass else []
        if self._stage == "verifying" and self._pass is not None:
            pass_note = [f"{PROG}: note: the IR does not verify after pass '{self._pass.name}'"]
        # xDSL's Diagnostic adds the whole module, failing op marked, as one note
        notes: list[str] = _trim_dump([line for n in getattr(e, "__notes__", ()) for line in n.splitlines()])
        match e:
            case TrOptError():
                _emit(f"{PROG}: error: {e}", e.notes)
            case ParseError():
                _emit(f"{PROG}: error: {e.span.get_location()}: {e.msg}", _parse_context(e))
            case DiagnosticException():
                if self._stage == "parsing":
                    where = self._parse_position()
                else:
                    where = self._where(getattr(e, "op", None) or self._failing_op(e))
                head, *rest = (str(e) or type(e).__name__).splitlines() or [""]
                _emit(f"{PROG}: error: {where}: {head}", [*_trim_dump(rest), *pass_note, *notes])
            case RecursionError():
                _emit(
                    f"{PROG}: error: {self._where()}: IR nested too deeply while {self._stage} "
                    "(Python recursion limit reached)",
                    pass_note,
                )
            case ArgSpecParseError():  # only -t is parsed outside setup_pipeline
                err = _spec_error(e, "target", getattr(getattr(self, "args", None), "target", ""))
                _emit(f"{PROG}: error: {err}", err.notes)
            case _ if _plugin_frame(e) is not None:  # a loaded plugin's code failed: its error
                _emit(f"{PROG}: error: {_plugin_frame(e)}: {type(e).__name__}: {e}",
                      [f"{PROG}: note: while {self._stage} ({self._where()})", *pass_note])
            case _:
                _emit(
                    f"{PROG}: internal error: {type(e).__name__}: {e}",
                    [
                        f"{PROG}: note: while {self._stage} ({self._where()})",
                        *pass_note,
                        *notes,
                        f"{PROG}: note: this is a bug in tr-opt or a pass, please report it with "
                        f"the input; set {TRACEBACK_ENV}=1 for the Python traceback",
                    ],
                )
        raise SystemExit(1)

    def _failing_op(self, e: BaseException) -> Operation | None:
        """The op whose own verification raises ``e``'s message again (to locate a verifier error)."""
        if self._stage != "verifying the input" and self._stage != "verifying":
            return None
        if self._module is None:
            return None
        message = str(e)
        for op in self._module.walk(region_first=True):
            try:
                op.verify(verify_nested_ops=False)
            except Exception as again:  # noqa: BLE001 - we only compare messages
                if str(again) == message:
                    return op
        return None


DUMP_LINES = 40
"""Longest module dump a verifier error prints whole; a longer one (a compiled ResNet's memplan
module runs to megabytes) is cut to the lines around the failing op."""


def _trim_dump(lines: list[str], before: int = 8, after: int = 4) -> list[str]:
    """xDSL's verifier message prints the whole module with the failing op marked
    (``^^^^`` and ``| Operation does not verify``). Above :data:`DUMP_LINES` lines, keep
    ``before`` lines above the marked op and ``after`` below its marker box, and say how many
    lines were left out on each side."""
    if len(lines) <= DUMP_LINES:
        return lines
    mark = next((i for i, line in enumerate(lines) if line.lstrip().startswith("^^^")), None)
    if mark is None:
        return [*lines[:DUMP_LINES], f"... ({len(lines) - DUMP_LINES} more lines of the module left out)"]
    lo = max(0, mark - 1 - before)
    hi = min(len(lines), mark + 3 + after)
    out = [f"... ({lo} lines of the module left out)"] if lo else []
    out += lines[lo:hi]
    if hi < len(lines):
        out.append(f"... ({len(lines) - hi} lines of the module left out)")
    return out


def _spec_error(e: ArgSpecParseError, what: str, spec: str) -> TrOptError:
    """A ``name{opt=v}`` syntax error (pass pipeline or target) as a one-line error + context."""
    lines = str(e).splitlines()
    if len(lines) >= 5:  # header, location, source, carets, message
        return TrOptError(f"invalid {what}: {lines[4].strip()} (in '{spec}')", lines[2:4])
    return TrOptError(f"invalid {what}: {' '.join(lines)}")


def _now() -> float:
    import time

    return time.perf_counter()


def _parse_context(e: ParseError) -> list[str]:
    """The source line and carets of a parse error (and the referenced spans, if any)."""
    lines = e.span.print_with_context().splitlines()[1:]
    if isinstance(e, MultipleSpansParseError):
        if e.ref_text:
            lines.append(e.ref_text.rstrip("\n"))
        for span, msg in e.refs:
            lines.extend(span.print_with_context(msg).rstrip("\n").splitlines())
    return lines


def _emit(head: str, notes: Iterable[str] = ()) -> None:
    print(head, file=sys.stderr)
    for note in notes:
        print(note, file=sys.stderr, end="" if note.endswith("\n") else "\n")


def _plugin_frame(e: BaseException) -> str | None:
    from tr_mlir.extend import plugin_frame

    return plugin_frame(e)


def plugin_args(argv: Sequence[str]) -> list[str]:
    """The values of every ``--load-plugin X`` / ``--load-plugin=X`` in ``argv`` (read before
    argparse: the plugins' dialects and passes must be registered before the parser is built)."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--":
            break
        if a == "--load-plugin":
            value = next(it, None)
            if value is None:
                raise TrOptError("argument --load-plugin: expected one argument")
            out.append(value)
        elif a.startswith("--load-plugin="):
            out.append(a.split("=", 1)[1])
    return out


def load_cli_plugins(argv: Sequence[str]) -> None:
    """Load the plugins ``argv`` names and the installed ones (:func:`tr_mlir.extend.load_plugins`);
    a plugin that fails is a :class:`TrOptError` naming it."""
    from tr_mlir.errors import PluginError
    from tr_mlir.extend import load_plugins

    try:
        load_plugins(plugin_args(argv))
    except PluginError as e:
        raise TrOptError(str(e)) from None


def _other_universes() -> Any:
    """The ``xdsl.universe`` entry points of other packages (not ours, not xDSL's: tr-opt keeps its
    curated xDSL subset), merged as xDSL's ``Universe.get_multiverse`` merges them."""
    from importlib.metadata import entry_points

    from xdsl.universe import Universe

    merged = Universe()
    for ep in sorted(entry_points(group="xdsl.universe"), key=lambda e: e.name):
        if ep.name in ("tr_mlir", "xdsl"):
            continue
        try:
            universe = ep.load()
        except Exception as e:  # noqa: BLE001 - another package's plugin is broken: say which
            raise TrOptError(f"the xdsl.universe entry point '{ep.name}' ({ep.value}) failed to load: "
                             f"{type(e).__name__}: {e}") from None
        if not isinstance(universe, Universe):
            raise TrOptError(f"the xdsl.universe entry point '{ep.name}' ({ep.value}) is not an xdsl Universe")
        for k, v in universe.all_dialects.items():
            merged.all_dialects.setdefault(k, v)
        for k, v in universe.all_passes.items():
            merged.all_passes.setdefault(k, v)
    return merged


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of ``tr-opt``: exits 0 on success, 1 on any error."""
    try:
        TrOptMain(args=argv).run()
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except BrokenPipeError:
        # the reader of stdout went away (`tr-opt ... | head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
