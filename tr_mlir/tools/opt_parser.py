"""``tr-opt``'s input guards: a parser that closes holes of the xDSL 0.74 parser (:class:`TrParser`,
:func:`literal_problem`, :func:`unstorable_float`: integer widths, region depth, literals their type
cannot hold) and the dominance check xDSL's verifier lacks (:func:`check_dominance`,
:func:`verify_module`). The driver is :mod:`tr_mlir.tools.tr_opt`."""

from __future__ import annotations

import math
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import (
    AnyFloat,
    ComplexType,
    DenseArrayBase,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
)
from xdsl.ir import Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.parser import Parser, ParserState
from xdsl.utils.exceptions import (
    MultipleSpansParseError,
    ParseError,
    VerifyException,
)
from xdsl.utils.lexer import Input, Position, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRToken, MLIRTokenKind

from tr_mlir.errors import TrMlirError

MAX_INTEGER_WIDTH = (1 << 24) - 1
"""Widest integer type accepted: MLIR's ``IntegerType::kMaxWidth`` (16777215 bits)."""

MAX_REGION_DEPTH = 64
"""Deepest region nesting the parser accepts (regions of ``builtin.module`` not counted).
xDSL parses, verifies, prints and rewrites recursively (9-11 Python frames per level when
parsing); Python's default recursion limit of 1000 is hit at about 85 levels of ``arch.seq``
in its custom format (105 for generic ops), fewer inside pytest. Real models nest a handful
of levels (model > seq > repeat > add2 > ...)."""


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
