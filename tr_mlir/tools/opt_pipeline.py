"""``tr-opt``'s pass pipelines: ``--pass-pipeline`` in MLIR syntax translated to xDSL's ``-p``
syntax (:func:`mlir_pipeline_to_xdsl`), pass options checked against the pass's typed fields
(:func:`build_passes`, :func:`from_spec`), and the error types of the driver (:class:`TrOptError`,
:class:`PipelineSyntaxError`). The driver is :mod:`tr_mlir.tools.tr_opt`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import (
    ArgSpec,
    PipelineLexer,
    SpecTokenKind,
    _convert_arg_to_type,
    parse_pipeline,
)
from xdsl.utils.exceptions import (
    ArgSpecParseError,
)

from tr_mlir.errors import TrMlirError


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


def option_hints(pass_cls: type[ModulePass]) -> dict[str, Any]:
    """Option name -> its type hint (``bool | None`` ...), from the pass's dataclass fields."""
    hints = get_type_hints(pass_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(pass_cls) if f.init and f.name in hints}


def option_types(hint: Any) -> tuple[Any, ...]:
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
    hints = option_hints(cls)
    params = dict(spec.normalize_parameter_names().parameters)
    for key, value in params.items():
        if value or key not in hints:
            continue
        if option_types(hints[key]) != (bool,):
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
                expected = " or ".join(_OPTION_TYPE_WORDS.get(t, str(t)) for t in option_types(hints[key]))
                got = ", ".join(repr(v) if isinstance(v, str) else str(v).lower() for v in value)
                raise TrOptError(f"{what}: option '{key}' expects {expected}, got {got or 'no value'}") from None
        raise TrOptError(f"{what}: {e}") from None
