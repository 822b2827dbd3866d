"""Import a user's Python file by path (``--blueprint FILE.py:FUNC``, ``--torch-model FILE.py:FACTORY``).

One loader for the tools that run a user's file, so each reports a missing file, a file Python
cannot import and an exception while importing it alike, with the user's own ``file:line``.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from types import ModuleType

from tr_mlir.errors import TrMlirError


class PythonFileError(TrMlirError):
    """A user's Python file that cannot be imported; the message names the file (and the line)."""


def split_spec(spec: str) -> tuple[Path, str] | None:
    """``FILE.py:NAME`` -> ``(Path('FILE.py'), 'NAME')`` (split at the last colon); None when
    either part is empty."""
    file_text, _, name = spec.rpartition(":")
    return (Path(file_text), name) if file_text and name else None


def import_spec(spec: str, prefix: str, placeholder: str = "NAME") -> tuple[Path, ModuleType, str]:
    """Import the file of ``FILE.py:NAME`` (:func:`import_file` with ``prefix``): returns the
    path, the module and NAME. Raises :class:`PythonFileError`: ``expected FILE.py:<placeholder>,
    got 'SPEC'`` for a spec without both parts, else as :func:`import_file`."""
    parts = split_spec(spec)
    if parts is None:
        raise PythonFileError(f"expected FILE.py:{placeholder}, got '{spec}'")
    path, name = parts
    return path, import_file(path, prefix), name


def takes_arguments(fn, *, unknown: bool) -> bool:
    """Whether ``fn`` declares parameters (``unknown`` when its signature cannot be read, as for
    some builtins)."""
    try:
        return bool(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return unknown


def user_frame(exc: BaseException, path: Path) -> str:
    """``file:line: `` of the innermost traceback frame inside ``path`` (the line of a
    ``SyntaxError``), or ``''`` when the exception did not pass through the file."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            where = f"{path}:{frame.lineno}: "
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        where = f"{path}:{exc.lineno}: "
    return where


def import_file(path: Path, prefix: str) -> ModuleType:
    """Import the file ``path`` as a fresh module named ``<prefix><hash of its resolved path>``
    (registered in ``sys.modules`` while it runs, so dataclasses and pickling work in it).

    Raises :class:`PythonFileError`: ``no such file: PATH``, ``cannot import PATH (not a Python
    file?)``, or ``importing PATH failed: PATH:LINE: Type: message`` for anything the file raises
    (``SystemExit`` included) while it is imported.
    """
    if not path.is_file():
        raise PythonFileError(f"no such file: {path}")
    name = f"{prefix}{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PythonFileError(f"cannot import {path} (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # the user's module may raise anything, or exit, while importing
        sys.modules.pop(name, None)
        raise PythonFileError(f"importing {path} failed: {user_frame(e, path)}{type(e).__name__}: {e}") from None
    return module
