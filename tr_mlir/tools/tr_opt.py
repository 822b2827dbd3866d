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
import math
import os
import re
import sys
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import import_module
from types import NoneType, UnionType
from typing import IO, Any, NoReturn, Union, get_args, get_origin, get_type_hints

from xdsl.context import Context
from xdsl.dialects import get_all_dialects as get_xdsl_dialects
from xdsl.dialects.builtin import (
    AnyFloat,
    ComplexType,
    DenseArrayBase,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
)
from xdsl.ir import Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.parser import Parser, ParserState
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer
from xdsl.syntax_printer import SyntaxPrinter
from xdsl.targets.mlir import MLIRTarget
from xdsl.transforms import get_all_passes as get_xdsl_passes
from xdsl.utils.arg_spec import (
    ArgSpec,
    PipelineLexer,
    SpecTokenKind,
    _convert_arg_to_type,
    parse_pipeline,
)
from xdsl.utils.exceptions import (
    ArgSpecParseError,
    DiagnosticException,
    MultipleSpansParseError,
    ParseError,
    VerifyException,
)
from xdsl.utils.lexer import Input, Position, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRToken, MLIRTokenKind
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

import tr_mlir
from tr_mlir.dialects import get_all_dialects
from tr_mlir.errors import TrMlirError
from tr_mlir.passes import PASSES, get_all_passes, module_name

PROG = "tr-opt"

XDSL_DIALECTS: tuple[str, ...] = ("builtin", "func", "arith", "test")
"""Dialects of xDSL that tr-opt registers besides ours."""

XDSL_PASSES: tuple[str, ...] = ("cse", "dce", "canonicalize")
"""Passes of xDSL that tr-opt registers besides ours."""

MAX_INTEGER_WIDTH = (1 << 24) - 1
"""Widest integer type accepted: MLIR's ``IntegerType::kMaxWidth`` (16777215 bits)."""

MAX_REGION_DEPTH = 64
"""Deepest region nesting the parser accepts (regions of ``builtin.module`` not counted).
xDSL parses, verifies, prints and rewrites recursively (9-11 Python frames per level when
parsing); Python's default recursion limit of 1000 is hit at about 85 levels of ``arch.seq``
in its custom format (105 for generic ops), fewer inside pytest. Real models nest a handful
of levels (model > seq > repeat > add2 > ...)."""

TRACEBACK_ENV = "TR_OPT_TRACEBACK"
"""Environment variable: set to 1 to print Python tracebacks along with diagnostics."""


class TrOptError(TrMlirError):
    """A user error with a ready message, printed as ``tr-opt: error: <message>``.

    ``notes`` are printed after the message line (context such as an annotated pipeline).
    """

    def __init__(self, message: str, notes: Sequence[str] = ()):
        super().__init__(message)
        self.notes = tuple(notes)


class PipelineSyntaxError(TrMlirError, ValueError):
    """An ``--pass-pipeline`` string that is not ``builtin.module(pass, pass{opts}, ...)``."""


# --------------------------------------------------------------------------------------
# --pass-pipeline (MLIR syntax) -> -p (xDSL syntax)
# --------------------------------------------------------------------------------------

_ANCHOR = "builtin.module"


def _scan_top_level(text: str, what: str) -> list[tuple[int, str]]:
    """Characters of ``text`` outside ``{...}`` option blocks and string literals.

    Returns (index, char) pairs; raises :class:`PipelineSyntaxError` on unbalanced braces or an
    unterminated string.
    """
    out: list[tuple[int, str]] = []
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                raise PipelineSyntaxError(f"unterminated string literal in {what} '{text}'")
            i = end + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise PipelineSyntaxError(f"unbalanced '}}' in {what} '{text}'")
        elif depth == 0:
            out.append((i, ch))
        i += 1
    if depth:
        raise PipelineSyntaxError(f"unbalanced '{{' in {what} '{text}'")
    return out


def mlir_pipeline_to_xdsl(text: str) -> str:
    """Translate an MLIR pass pipeline into xDSL's ``-p`` syntax.

    ``builtin.module(p1, p2{a=1 b=x,y})`` -> ``p1,p2{a=1 b=x,y}``: the anchor is stripped and
    the spaces MLIR allows after the commas between passes are dropped (xDSL rejects them).
    Pass options are the same in both syntaxes and are passed through untouched.
    ``builtin.module()`` (and an empty string) is the empty pipeline.

    Raises :class:`PipelineSyntaxError` when the pipeline is not anchored on
    ``builtin.module(...)``, has text after the anchor's closing parenthesis, contains an empty
    pass element, or nests another anchor (``func.func(...)``, ``any(...)``): tr-opt runs every
    pass on the whole module.
    """
    s = text.strip()
    if not s:
        return ""
    if not s.startswith(_ANCHOR) or not s[len(_ANCHOR):].lstrip().startswith("("):
        raise PipelineSyntaxError(
            f"expected a pipeline anchored on '{_ANCHOR}(...)', got '{text}'; "
            f"write e.g. --pass-pipeline='{_ANCHOR}(cse,canonicalize)'"
        )
    body = s[len(_ANCHOR):].lstrip()[1:]  # after the anchor's '('
    top = _scan_top_level(body, "pass pipeline")
    close = next((i for i, ch in top if ch in "()"), None)
    if close is None or body[close] != ")":
        if close is not None:
            raise PipelineSyntaxError(
                "nested pass pipelines (e.g. 'func.func(...)') are not supported: tr-opt runs "
                f"every pass on the whole module, so list the passes directly in "
                f"'{_ANCHOR}(...)'; got '{text}'"
            )
        raise PipelineSyntaxError(f"missing ')' closing '{_ANCHOR}(' in '{text}'")
    if body[close + 1:].strip():
        raise PipelineSyntaxError(
            f"unexpected text '{body[close + 1:].strip()}' after '{_ANCHOR}(...)' in '{text}'"
        )
    inner = body[:close]
    cuts = [i for i, ch in top if ch == "," and i < close]
    pieces = [inner[a + 1: b].strip() for a, b in zip([-1, *cuts], [*cuts, len(inner)])]
    if pieces == [""]:
        return ""
    if "" in pieces:
        raise PipelineSyntaxError(f"empty pass name in pipeline '{text}'")
    return ",".join(pieces)


# --------------------------------------------------------------------------------------
# Pass options
# --------------------------------------------------------------------------------------

_OPTION_TYPE_WORDS: dict[type, str] = {bool: "true or false", int: "an integer", float: "a number",
                                       str: "a string"}


def _option_hints(pass_cls: type[ModulePass]) -> dict[str, Any]:
    """Option name -> its type hint (``bool | None`` ...), from the pass's dataclass fields."""
    hints = get_type_hints(pass_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(pass_cls) if f.init and f.name in hints}


def _option_types(hint: Any) -> tuple[Any, ...]:
    """The types an option hint accepts, ``None`` left out (``bool | None`` -> ``(bool,)``)."""
    args = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    return tuple(a for a in args if a is not NoneType)


def parse_pass_specs(spec: str) -> tuple[ArgSpec, ...]:
    """The pass specs of an xDSL pipeline (``p1,p2{k=v}``): xDSL's ``parse_pipeline``, which also
    accepts a trailing comma (``arch-plan,``: it stops at the end of the input where a pass name
    must follow). That is a syntax error here, as in ``--pass-pipeline`` and as a leading or a
    doubled comma already is in xDSL: ``ArgSpecParseError`` "Expected pass name here" at the end.
    """
    specs = tuple(parse_pipeline(spec))
    lexer = PipelineLexer(spec)
    last = None
    while (token := lexer.lex()).kind is not SpecTokenKind.EOF:
        last = token
    if last is not None and last.kind is SpecTokenKind.COMMA:
        raise ArgSpecParseError(token, "Expected pass name here")
    return specs


def build_passes(available: dict[str, Callable[[], type[ModulePass]]], spec: str) -> tuple[ModulePass, ...]:
    """The passes of an xDSL pipeline spec (``p1,p2{k=v}``), like ``PassPipeline.parse_spec``,
    with MLIR's rules and messages for options:

    * a bool option written without a value (``arch-plan{fuse}``) is true, as in ``mlir-opt``
      (xDSL reads it as "not given", which silently ignored it); any other option without a value
      is an error;
    * an option of the wrong type is reported with the pass, the option, the expected type and
      the value: ``pass 'arch-plan': option 'fuse' expects true or false, got 'maybe'``.

    Raises ``ValueError`` for unknown passes (xDSL's message), :class:`TrOptError` for bad
    options and ``ArgSpecParseError`` for syntax errors (:func:`parse_pass_specs`).
    """
    specs = parse_pass_specs(spec)
    unknown = [p.name for p in specs if p.name not in available]
    if unknown:
        raise ValueError(f"Unrecognized passes: {unknown}")
    return tuple(from_spec(available[p.name](), p, f"invalid pass pipeline: pass '{p.name}'") for p in specs)


def from_spec(cls: Any, spec: ArgSpec, what: str) -> Any:
    """``cls.from_spec(spec)`` (a pass or a target) with MLIR's rules and messages for options (see
    :func:`build_passes`); ``what`` starts each message (``invalid target: target 'mlir'``)."""
    hints = _option_hints(cls)
    params = dict(spec.normalize_parameter_names().parameters)
    for key, value in params.items():
        if value or key not in hints:
            continue
        if _option_types(hints[key]) != (bool,):
            raise TrOptError(f"{what}: option '{key}' needs a value ({key}=...)")
        params[key] = (True,)
    try:
        return cls.from_spec(ArgSpec(spec.name, params))
    except ValueError as e:
        for key, value in params.items():
            if key not in hints:
                continue
            try:
                _convert_arg_to_type(value, hints[key])
            except ValueError:
                expected = " or ".join(_OPTION_TYPE_WORDS.get(t, str(t)) for t in _option_types(hints[key]))
                got = ", ".join(repr(v) if isinstance(v, str) else str(v).lower() for v in value)
                raise TrOptError(f"{what}: option '{key}' expects {expected}, got {got or 'no value'}") from None
        raise TrOptError(f"{what}: {e}") from None


# --------------------------------------------------------------------------------------
# Parser guards
# --------------------------------------------------------------------------------------


INDEX_RANGE = (-(1 << 63), 1 << 63)
"""Values an ``index`` literal may take, ``[min, max + 1)``: MLIR's index is a signed 64-bit
integer (``IndexType::kInternalStorageBitWidth``); xDSL 0.74 checks nothing (10^23 is kept)."""


def _float_problem(value: float, type: Any) -> str | None:
    """Why the finite ``value`` has no finite value in the float ``type`` (it rounds to infinity,
    or to NaN in a format without infinities; it is negative for an unsigned format), else
    ``None``. f80 and f128 hold any Python float (xDSL keeps it as is)."""
    try:
        stored = type.unpack(type.pack((value,)), 1)[0]
    except NotImplementedError:
        return None
    except OverflowError:
        stored = math.inf
    except ValueError as e:  # a negative value of an unsigned format
        return str(e)
    return None if math.isfinite(stored) else f"it is above the largest finite {type}"


_UNSTORABLE_FIX = "; use f64"


def unstorable_float(type: Any) -> str | None:
    """Why xDSL cannot hold a value of the float type ``type`` (or of a complex of it), else
    ``None``: xDSL 0.74 has no storage format for ``f80`` and ``f128`` (building, packing or
    printing a value raises ``NotImplementedError``; the types themselves are fine)."""
    if isinstance(type, ComplexType):
        type = type.element_type
    if not isinstance(type, AnyFloat):
        return None
    try:
        type.pack((0.0,))
    except NotImplementedError:
        return f"{type} values are not supported (xDSL 0.74 can neither store nor print them){_UNSTORABLE_FIX}"
    return None


def literal_problem(value: Any, type: Any) -> str | None:
    """Why the parsed literal ``value`` has no value of type ``type`` (the element type of an
    attribute), as a note for the diagnostic; ``None`` when it has one. Integer types keep xDSL's
    ranges (a signless integer holds its signed and unsigned values), ``index`` is a signed
    64-bit integer (:data:`INDEX_RANGE`), a float type must hold the value as a finite number."""
    if isinstance(type, ComplexType):
        parts = value if isinstance(value, tuple) else (value,)
        return next((why for part in parts if (why := literal_problem(part, type.element_type))), None)
    if (why := unstorable_float(type)) is not None:
        return why
    if isinstance(type, IntegerType | IndexType):
        if not isinstance(value, int):
            return None
        low, high = type.value_range() if isinstance(type, IntegerType) else INDEX_RANGE
        if low <= value < high:
            return None
        return f"{type} holds {low} to {high - 1}"
    if isinstance(type, AnyFloat) and isinstance(value, int | float):
        try:
            as_float = float(value)
        except OverflowError:
            return "it is above the largest finite f64, the widest float tr-opt can hold"
        if math.isfinite(as_float):
            return _float_problem(as_float, type)
    return None


def _float_from_bits(bits: int, type: AnyFloat) -> tuple[float, str | None]:
    """The value of the bit pattern ``bits`` in the float ``type``, and why it has none (a pattern
    wider than the type; ``None`` when it fits)."""
    if (why := unstorable_float(type)) is not None:
        return 0.0, why
    if bits >= 1 << type.bitwidth:
        return 0.0, f"a hexadecimal {type} is a pattern of {type.bitwidth} bits"
    return next(type.iter_unpack(bits.to_bytes(type.compile_time_size, "little"))), None


class TrLexer(MLIRLexer):
    """xDSL's MLIR lexer without its exponential string-literal regex, and with decimal float
    literals beyond f64 (``1.0e400``, read as infinity by xDSL) a parse error at the literal.

    xDSL 0.74 matches string literals with ``"(?:[^"...]+|\\...)*"``: a repeated group of
    repeated characters, so an unterminated literal (``"abc`` up to the end of the line)
    backtracks through every way of splitting the line, 2^(line length) steps, which never
    finishes on a normal line. The same language with one character per repetition fails in
    linear time.
    """

    _unescaped_characters_regex = re.compile(
        r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"'
    )

    def _lex_number(self, start_pos: Position) -> MLIRToken:
        """xDSL's number lexer; a decimal float literal too large for a Python float (``1.0e400``,
        which xDSL reads as infinity) is a parse error at the literal."""
        token = super()._lex_number(start_pos)
        if token.kind is MLIRTokenKind.FLOAT_LIT and math.isinf(float(token.text)):
            raise ParseError(
                token.span,
                f"float literal {token.text} is out of range: its magnitude is above the largest "
                f"finite f64 ({sys.float_info.max:.17g}), the widest float tr-opt can hold",
            )
        return token


class TrParser(Parser):
    """xDSL's MLIR parser with the guards tr-opt needs (DESIGN section 6).

    * integer types wider than :data:`MAX_INTEGER_WIDTH` are a parse error at the type (xDSL
      computes their value range as ``1 << width`` whenever an attribute of that type is built);
    * regions nested deeper than :data:`MAX_REGION_DEPTH` are a parse error at the ``{``, and any
      other ``RecursionError`` while parsing (deeply nested attributes or types) a parse error at
      the token where it happened;
    * a numeric literal its type cannot hold is a parse error at the literal (the element of a
      dense literal, the whole dense array): a decimal float beyond f64 (:class:`TrLexer`), a float
      beyond its type's largest finite value, an integer outside its type's range (``index`` is
      signed 64-bit, as in MLIR); see :func:`literal_problem`;
    * an input without operations (empty or only comments) is an empty module, as in MLIR;
    * the position of every parsed op's name is kept in :attr:`op_spans`, so diagnostics raised
      later (verifier, passes) can point at ``file:line:col``.
    """

    def __init__(self, ctx: Context, input: str | bytes, name: str = "<unknown>"):
        # Parser.__init__ with TrLexer instead of MLIRLexer (it lexes the first token at once)
        text = input.decode("utf-8") if isinstance(input, bytes) else input
        super(Parser, self).__init__(ParserState(TrLexer(Input(text, name))), ctx)
        self.ssa_values = {}
        self.blocks = {}
        self.forward_block_references = defaultdict(list)
        self.forward_ssa_references = {}
        self.op_spans: dict[Operation, Span[str]] = {}
        self._name_spans: list[Span[str]] = []
        self._first_uses: dict[str, Span[str]] = {}
        self._region_depth = 0
        self._open_regions: list[tuple[Span[str], str]] = []

    # -- whole input --------------------------------------------------------------------

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        if allow_implicit_module and self._current_token.kind == MLIRTokenKind.EOF:
            return ModuleOp([])
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as e:
            if not e.msg.startswith("values used but not defined") or not self.forward_ssa_references:
                raise
            # xDSL reports these at the end of the input; point at the first undefined use
            name = next(iter(self.forward_ssa_references))
            span = self._first_uses.get(name)
            if span is None:
                raise
            others = [f"%{n}" for n in self.forward_ssa_references if n != name]
            also = f" (also undefined: {', '.join(others)})" if others else ""
            raise ParseError(span, f"use of undefined value '%{name}'{also}") from None
        except RecursionError:
            self.raise_error(
                "input nested too deeply for the parser (Python recursion limit reached); "
                "flatten the nesting of regions, attributes or types"
            )
        except OverflowError as e:
            self.raise_error(f"numeric literal out of range for its type ({e})")

    def resolve_operand(self, operand: Any, type: Any) -> SSAValue:
        name = operand.operand_name
        if name not in self.ssa_values and name not in self.forward_ssa_references:
            self._first_uses[name] = operand.span  # a new forward reference
        return super().resolve_operand(operand, type)

    # -- op positions -------------------------------------------------------------------

    def _parse_op_result_list(self):  # type: ignore[override]
        results = super()._parse_op_result_list()
        self._name_spans.append(self._current_token.span)
        return results

    def parse_operation(self) -> Operation:
        depth = len(self._name_spans)
        op = super().parse_operation()
        if len(self._name_spans) > depth:
            self.op_spans[op] = self._name_spans[depth]
            del self._name_spans[depth:]
        return op

    def _get_op_by_name(self, name: str) -> type[Operation]:
        """xDSL's lookup, with the error at the op name (xDSL points at the token after it)."""
        if self._name_spans and self.ctx.get_optional_op(
            name, dialect_stack=self._parser_state.dialect_stack
        ) is None and not self.ctx.allow_unregistered:
            self.raise_error(f"Operation {name} is not registered", self._name_spans[-1])
        return super()._get_op_by_name(name)

    # -- regions ------------------------------------------------------------------------

    def parse_optional_region(self, arguments: Any = None) -> Region | None:
        owner = self._name_spans[-1].text.strip('"') if self._name_spans else ""
        if self._current_token.kind != MLIRTokenKind.L_BRACE:
            return super().parse_optional_region(arguments)
        self._open_regions.append((self._current_token.span, owner))
        try:
            if owner == "builtin.module":
                # the body of an explicit module does not count: printed output (which always
                # has an explicit module) must parse whenever the input (maybe implicit) did
                return super().parse_optional_region(arguments)
            if self._region_depth >= MAX_REGION_DEPTH:
                self.raise_error(
                    f"regions nested more than {MAX_REGION_DEPTH} levels deep are not supported"
                )
            self._region_depth += 1
            try:
                return super().parse_optional_region(arguments)
            finally:
                self._region_depth -= 1
        finally:
            self._open_regions.pop()

    def _parse_block(self) -> Block:
        """xDSL's block parser; at the end of the input (xDSL: `` in block definition``) the
        error is the missing ``}`` of the innermost open region, pointing at its ``{``."""
        if self._current_token.kind == MLIRTokenKind.EOF and self._open_regions:
            brace, owner = self._open_regions[-1]
            of = f" of '{owner}'" if owner else ""
            raise MultipleSpansParseError(
                self._current_token.span,
                f"expected '}}' closing the region{of}, got the end of the input",
                "the region opens here:",
                [(brace, None)],
            )
        return super()._parse_block()

    # -- integer widths -----------------------------------------------------------------

    def _parse_optional_integer_or_float_type(self):  # type: ignore[override]
        token = self._current_token
        if token.kind == MLIRTokenKind.BARE_IDENT:
            match = self._builtin_integer_type_regex.match(token.text)
            if match is not None and int(match.group(1)) > MAX_INTEGER_WIDTH:
                self.raise_error(
                    f"integer bitwidth is limited to {MAX_INTEGER_WIDTH} bits, got {token.text}",
                    token.span,
                )
        return super()._parse_optional_integer_or_float_type()

    # -- numeric literals ---------------------------------------------------------------

    def parse_optional_builtin_int_or_float_attr(self):  # type: ignore[override]
        """xDSL's ``<number> : <type>``; a value its type cannot hold is a parse error at the
        literal. xDSL raises ``OverflowError`` for ``1.0e39 : f32`` and a location-less
        ``VerifyException`` for ``300 : i8``, makes ``1.0e39 : bf16`` infinite and keeps
        ``10^23 : index`` (MLIR's index is 64 bits). A hexadecimal float is a bit pattern and may
        be infinite."""
        start = self.pos
        hexadecimal = self._current_token.text[:2] in ("0x", "0X")
        try:
            attr = super().parse_optional_builtin_int_or_float_attr()
        except (OverflowError, ValueError, VerifyException, NotImplementedError):
            if (problem := self._typed_literal_problem(start, hexadecimal)) is None:
                raise
        else:
            problem = unstorable_float(attr.type) if isinstance(attr, FloatAttr) else None
            if problem is not None:
                pass  # f80 / f128: xDSL built the attribute, printing it would fail
            elif isinstance(attr, FloatAttr) and not hexadecimal and math.isinf(attr.value.data):
                problem = f"it is above the largest finite {attr.type}"
            elif isinstance(attr, IntegerAttr) and isinstance(attr.type, IndexType):
                problem = literal_problem(attr.value.data, attr.type)
            if problem is None:
                return attr
        end = self._current_token.span.start
        text = self.lexer.input.content[start:end].strip()
        self.raise_error(
            f"cannot hold '{text}': {problem}" if problem.endswith(_UNSTORABLE_FIX)
            else f"numeric literal out of range for its type: '{text}' ({problem})", start, start + len(text)
        )

    def _typed_literal_problem(self, start: Position, hexadecimal: bool) -> str | None:
        """Read ``<number> : <type>`` at ``start`` again (after xDSL failed to build it) and say
        why the number has no value of the type (:func:`literal_problem`), else ``None``."""
        self._resume_from(start)
        value = self.parse_optional_number()
        if value is None or self._current_token.kind != MLIRTokenKind.COLON:
            return None
        type = self._parse_attribute_type()
        if hexadecimal and isinstance(type, AnyFloat) and isinstance(value, int):
            if (why := unstorable_float(type)) is not None:
                return why
            bits = type.bitwidth
            return None if value < 1 << bits else f"a hexadecimal {type} is a pattern of {bits} bits"
        return literal_problem(value, type)

    @dataclass
    class _TensorLiteralElement(Parser._TensorLiteralElement):
        """An element of a ``dense<...>`` literal whose conversion to the element type checks
        the range (xDSL raises a ``ValueError`` without location for ``dense<300> :
        tensor<1xi8>``, a ``struct.error`` for an index or complex part, infinity for bf16)."""

        def to_type(self, parser: Any, type: Any) -> Any:
            if isinstance(type, AnyFloat) and self.span.text.lstrip("-")[:2] in ("0x", "0X"):
                # a bit pattern, as in MLIR and in xDSL's output (xDSL read its value as an integer)
                if self.is_negative:
                    parser.raise_error("a hexadecimal float literal is a bit pattern and takes no sign",
                                       at_position=self.span)
                value, problem = _float_from_bits(int(self.value), type)
                if problem is not None:
                    parser.raise_error(f"value {self.span.text} is out of range for the element type "
                                       f"{type} of the dense literal ({problem})", at_position=self.span)
                return value
            try:
                value = super().to_type(parser, type)
            except OverflowError:  # an integer too large for a float
                value = self.value
            if (problem := literal_problem(value, type)) is not None:
                parser.raise_error(
                    f"value {self.span.text} is out of range for the element type {type} of the "
                    f"dense literal ({problem})",
                    at_position=self.span,
                )
            return value

    def parse_dense_int_or_fp_elements_attr(self, type: Any) -> Any:
        """xDSL's ``dense<...>``, with an element type xDSL cannot hold (f80, f128:
        :func:`unstorable_float`; xDSL raised ``NotImplementedError``) a parse error at the literal."""
        start = self.pos
        try:
            return super().parse_dense_int_or_fp_elements_attr(type)
        except NotImplementedError:
            why = ("its element type has no storage in xDSL 0.74 (f80 and f128 values are not "
                   f"supported){_UNSTORABLE_FIX}")
            self.raise_error(f"cannot hold this dense literal: {why}", start, self.pos)

    def _parse_builtin_densearray_attr(self) -> DenseArrayBase | None:
        """xDSL's ``array<type: values>``, with, for a float element type: a value out of range for
        the type a parse error at the attribute (xDSL raises ``OverflowError`` for f32 and makes
        bf16 infinite), a hexadecimal literal a bit pattern of the type's width (how xDSL prints an
        infinity or a NaN; xDSL could not read it back) and f80 / f128 refused
        (:func:`unstorable_float`). Integers are xDSL's (already checked, each at its literal)."""
        start = self.pos
        self.parse_characters("<", " in dense array")
        elt = self.parse_attribute()
        if (why := unstorable_float(elt)) is not None:
            self.raise_error(f"cannot hold this dense array: {why}", start, self.pos)
        if not isinstance(elt, AnyFloat) or self._current_token.kind != MLIRTokenKind.COLON:
            self._resume_from(start)
            return super()._parse_builtin_densearray_attr()
        self.parse_characters(":", " in dense array")
        problems: list[str] = []

        def element() -> float:
            value, problem = self._float_element(elt)
            if problem is not None:
                problems.append(problem)
            return value

        values = self.parse_comma_separated_list(self.Delimiter.NONE, element)
        self.parse_characters(">", " in dense array")
        if problems:
            self.raise_error(f"value out of range for the element type of this dense array ({problems[0]})",
                             start, self.pos)
        return DenseArrayBase.from_list(elt, values)

    def _float_element(self, type: AnyFloat) -> tuple[float, str | None]:
        """A float literal of a dense array of ``type`` and why ``type`` cannot hold it (``None``
        when it can): a decimal literal must be finite in ``type``, a hexadecimal one is a bit
        pattern of the type's width (an infinity or a NaN is fine)."""
        token = self._current_token
        if token.kind == MLIRTokenKind.INTEGER_LIT and token.text[:2] in ("0x", "0X"):
            self._consume_token(MLIRTokenKind.INTEGER_LIT)
            return _float_from_bits(int(token.text, 16), type)
        value = self.parse_float()
        if _float_problem(value, type) is not None:
            return value, f"a value is above the largest finite {type}"
        return value, None

    def parse_optional_attribute(self):  # type: ignore[override]
        start = self.pos
        try:
            return super().parse_optional_attribute()
        except OverflowError as e:
            end = self._current_token.span.start
            self.raise_error(
                f"value out of range for its element type in this attribute ({e})",
                start,
                max(end, start + 1),
            )


# --------------------------------------------------------------------------------------
# Dominance
# --------------------------------------------------------------------------------------


class DominanceError(TrMlirError, VerifyException):
    """A use of a value that its definition does not dominate; ``op`` is the user."""

    def __init__(self, op: Operation, message: str):
        super().__init__(message)
        self.op = op


def _value_name(value: SSAValue) -> str:
    """``%name`` when the value has a name hint, else what defines it."""
    if value.name_hint:
        return f"%{value.name_hint}"
    if isinstance(value, OpResult):
        return f"result #{value.index} of '{value.op.name}'"
    if isinstance(value, BlockArgument):
        return f"block argument #{value.index}"
    return "the value"


class _DominanceChecker:
    """Lazily computed op indices per block and block dominance per region."""

    def __init__(self) -> None:
        self._index: dict[Block, dict[Operation, int]] = {}
        self._dom: dict[Region, tuple[DominanceInfo, set[Block]]] = {}

    def index(self, block: Block, op: Operation) -> int:
        if (table := self._index.get(block)) is None:
            table = self._index[block] = {o: i for i, o in enumerate(block.ops)}
        return table[op]

    def block_dominates(self, region: Region, a: Block, b: Block) -> bool:
        """Whether ``a`` dominates ``b`` (blocks of ``region``); uses in unreachable blocks pass."""
        if (entry := self._dom.get(region)) is None:
            reachable: set[Block] = set()
            todo = [region.blocks[0]] if region.blocks else []
            while todo:
                blk = todo.pop()
                if blk not in reachable:
                    reachable.add(blk)
                    if blk.last_op is not None:
                        todo.extend(blk.last_op.successors)
            entry = self._dom[region] = (DominanceInfo(region), reachable)
        info, reachable = entry
        return b not in reachable or info.dominates(a, b)

    def problem(self, user: Operation, value: SSAValue) -> str | None:
        """Why ``value`` may not be used by ``user`` (None when the use is dominated)."""
        if isinstance(value, BlockArgument):
            def_block, def_op = value.block, None
        elif isinstance(value, OpResult):
            def_op = value.op
            def_block = def_op.parent_block()
        else:
            return None
        if def_block is None:
            return None
        cur = user
        while True:
            blk = cur.parent_block()
            if blk is None:
                break
            if blk is def_block:
                if def_op is None:
                    return None
                if def_op is cur:
                    if cur is user:
                        return f"the op uses its own result #{value.index}"
                    return (
                        f"{_value_name(value)} is a result of the enclosing "
                        f"'{def_op.name}' op"
                    )
                if self.index(blk, def_op) > self.index(blk, cur):
                    return (
                        f"{_value_name(value)} is defined later in the same block "
                        f"(by '{def_op.name}')"
                    )
                return None
            region = blk.parent
            if region is None:
                break
            if def_block.parent is region:
                if self.block_dominates(region, def_block, blk):
                    return None
                return f"{_value_name(value)} is defined in a block that does not dominate this one"
            if (parent := region.parent) is None:
                break
            cur = parent
        return f"{_value_name(value)} is defined in a region that does not enclose this op"


def check_dominance(root: Operation) -> None:
    """Check that every operand of every op nested in ``root`` is dominated by its definition.

    Within one block a value must be defined before its use; a value used inside a region must
    come from that region or an enclosing one; across blocks of one region the defining block
    must dominate the using one (uses in unreachable blocks are accepted, as in MLIR). Unlike
    MLIR, graph regions are not exempt (xDSL has no region-kind interface): module bodies are
    checked too. xDSL 0.74 checks none of this.

    Raises :class:`DominanceError` (a ``VerifyException``) naming the first offending op, with
    the IR annotated at that op as a note.
    """
    checker = _DominanceChecker()
    for op in root.walk():
        for i, operand in enumerate(op.operands):
            if (why := checker.problem(op, operand)) is not None:
                message = f"'{op.name}' op operand #{i} does not dominate this use: {why}"
                op.emit_error(message, DominanceError(op, message))


def verify_module(module: ModuleOp) -> None:
    """xDSL's verifier followed by :func:`check_dominance`."""
    module.verify()
    check_dominance(module)


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


def _guarded_pass_factory(
    pass_name: str, factory: Callable[[], type[ModulePass]]
) -> Callable[[], type[ModulePass]]:
    """Wrap a lazy pass factory so that a missing pass module is a :class:`TrOptError`."""

    def load() -> type[ModulePass]:
        _import_optional(module_name(pass_name), f"pass '{pass_name}'")
        return factory()

    return load


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
            self.register_pass(name, _guarded_pass_factory(name, factory) if builtin else factory)
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
