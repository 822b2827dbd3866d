"""Kernels compiled for their static shapes: C source -> shared library -> ``ctypes`` call.

The memplan fixes every shape before the first step, so a kernel can be generated for exactly
the shapes it will run: loop bounds, strides and channel counts become compile-time constants,
which lets the C compiler unroll the small loops and keep accumulators in vector registers.
That matters where NumPy is call- and memory-bound: convolutions and pooling with a few
channels (LeNet's 1, 6 and 16), where an im2col GEMM has 6 or 16 output columns. The approach is
tinygrad's CPU backend (generated C, the system compiler, ``ctypes``); the kernels themselves
are ours (see the callers in :mod:`.conv` and :mod:`.pool`).

* :func:`available` says whether compiled kernels can be used: a C compiler (``$CC``, else
  ``cc``) that builds and loads a probe library, and ``TR_MLIR_CC`` not set to ``0``. Without
  one every kernel runs its NumPy code; results agree to float rounding.
* :func:`load` compiles a source once per process and caches the library on disk under
  :func:`cache_dir`, keyed by a SHA-256 of the source, the compiler's version line, the flags
  and the machine, so a later process loads it in about a millisecond. Libraries are written
  to a temporary name and renamed into place, so concurrent processes never load a half-written
  file. Where the cache cannot be written (a read-only or full disk), a library goes into one
  private temporary directory of the process instead, removed when the process exits
  (:func:`cached_file`).
* ``ctypes`` releases the GIL for the duration of a call, so :mod:`._parallel` can run pieces of
  one kernel (image ranges) on several threads.

Flags: ``-O3 -march=native -fPIC -shared`` (ISO float semantics: no ``-ffast-math``, so a
kernel's results do not depend on re-association; the compiler may still fuse multiply-adds),
and GCC's predictive commoning off (:data:`PRELUDE`: it stores outside a kernel's range).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c99")
"""Compiler flags of every kernel library."""

PRELUDE = """#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("no-predictive-commoning")
#endif
"""
"""Put before every kernel source (and so part of its cache key). GCC's predictive commoning
(on at ``-O3``) carries values loaded for the next iterations of a loop past its end and stores
them back afterwards: stores to elements outside the range ``[lo, hi)`` a kernel was given. When
two threads run one kernel on neighbouring ranges, those stale values overwrite the other
thread's results. Seen in the Winograd weight transform split by filters with 1-4 channels
(compile-time strides made the next filter's row the same address as the next component's):
about a third of the 2-thread calls lost writes; with the pass off, none in 300 (GCC 12; the
code of every other kernel checked was unchanged by it). The pass only reuses values, so the
results are the same bits. Clang has no such pass."""

ENV_SWITCH = "TR_MLIR_CC"
"""Environment variable: ``0`` disables compiled kernels (the NumPy code runs instead)."""

ENV_CACHE = "TR_MLIR_CACHE_DIR"
"""Environment variable: the directory for compiled libraries (default: :func:`cache_dir`)."""

_PROBE = "int tr_mlir_probe(int a) { return a + 1; }\n"

_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL] = {}
_state: dict[str, object] = {}


class CompileError(RuntimeError):
    """The C compiler rejected a generated kernel source (a bug in tr-mlir: the message holds
    the compiler's diagnostics and the first lines of the source)."""


def compiler() -> str | None:
    """Path of the C compiler to use (the first word of ``$CC``, else ``cc``), or None when there
    is none."""
    cc = _words()
    return shutil.which(cc[0]) if cc else None


def _words() -> list[str]:
    """``$CC`` (else ``cc``) split as a shell would: the compiler and its own arguments
    (``CC="ccache gcc"``, ``CC="gcc -m64"``, as make passes them)."""
    try:
        return shlex.split(os.environ.get("CC") or "cc")
    except ValueError:  # unbalanced quotes: no usable compiler
        return []


def _command(cc: str) -> list[str]:
    """The compiler command: ``cc`` (the path :func:`compiler` found) and the rest of ``$CC``."""
    return [cc, *_words()[1:]]


def cache_dir() -> Path:
    """Where compiled kernel libraries are kept: ``$TR_MLIR_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tr-mlir/cc``, else ``~/.cache/tr-mlir/cc`` (created on first use)."""
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tr-mlir" / "cc"


@functools.lru_cache(maxsize=8)
def _version(cc: str) -> str:
    """The compiler's first ``--version`` line (asked once per compiler and process)."""
    try:
        out = subprocess.run([*_command(cc), "--version"], capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else cc
    except (OSError, subprocess.SubprocessError):
        return cc


def _key(source: str, cc: str) -> str:
    h = hashlib.sha256()
    for part in (PRELUDE + source, _version(cc), " ".join(_command(cc)[1:] + list(FLAGS)), platform.machine(),
                 _cpu_model()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _cpu_model() -> str:
    """The CPU model line (``-march=native`` code is only valid on a CPU like this one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    return line.strip()
    except OSError:
        pass
    return platform.processor()


_private: list[Path] = []


def _private_dir() -> Path:
    """This process's directory for files the cache cannot take (created on first use, removed
    at exit by this process only, not by a forked child; a loaded library stays mapped after
    its file is gone)."""
    if not _private:
        d = Path(tempfile.mkdtemp(prefix="tr-mlir-cc-"))
        atexit.register(_remove_private, d, os.getpid())
        _private.append(d)
    return _private[0]


def _remove_private(d: Path, pid: int) -> None:
    """The exit handler of :func:`_private_dir`: remove ``d`` if this is the process that made it
    (a forked child inherits the handler, and the parent may still need the directory)."""
    if os.getpid() == pid:
        shutil.rmtree(d, ignore_errors=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_private.clear)  # a child makes its own when it needs one


def cached_file(name: str, write: Callable[[Path], None], *, private: bool = False) -> Path:
    """The path of file ``name`` in :func:`cache_dir`, made there by ``write(path)`` (into a
    temporary name, then renamed into place: concurrent processes never see a half-written file)
    when it is not there yet. When the cache cannot be written (read-only, full, not a
    directory), or with ``private``, the file is made in the process's private directory
    instead (removed at exit) and that path is returned; ``write`` raising ``OSError`` there
    propagates."""
    target = cache_dir() / name
    if target.exists() and not private:
        return target
    partial = None
    try:
        if private:
            raise FileExistsError(target)  # the cached file is there but unusable: a private one
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=target.parent, prefix=name, suffix=".part")
        os.close(fd)
        write(Path(partial))
        os.replace(partial, target)
        return target
    except OSError:
        if partial is not None:
            with contextlib.suppress(OSError):
                os.unlink(partial)
    private = _private_dir() / name
    if not private.exists():
        write(private)
    return private


def _compile(source: str, cc: str, name: str, private: bool = False) -> Path:
    """Compile ``source`` into library ``name`` of the cache (:func:`cached_file`, ``private``
    as there); returns its path. Raises :class:`CompileError` when the compiler rejects the
    source."""
    with tempfile.TemporaryDirectory(prefix="tr-mlir-cc-") as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(PRELUDE + source, encoding="utf-8")
        out = Path(tmp) / "kernel.so"
        proc = subprocess.run([*_command(cc), *FLAGS, str(src), "-o", str(out), "-lm"], capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0:
            head = "\n".join(source.splitlines()[:20])
            raise CompileError(f"{cc} failed on a generated kernel (exit {proc.returncode}):\n"
                               f"{proc.stderr.strip()}\n--- source (first lines) ---\n{head}")
        return cached_file(name, lambda path: shutil.copyfile(out, path), private=private)


def load(source: str) -> ctypes.CDLL:
    """The shared library built from C ``source`` (compiled on first use, then cached in this
    process and on disk). Raises :class:`CompileError` when the compiler rejects the source and
    ``RuntimeError`` when there is no usable compiler (check :func:`available` first)."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC or install cc); compiled kernels are unavailable")
    key = _key(source, cc)
    lib = _libs.get(key)
    if lib is not None:
        return lib
    with _lock:
        lib = _libs.get(key)
        if lib is None:
            path = cache_dir() / f"k{key}.so"
            if not path.exists():
                path = _compile(source, cc, path.name)
            try:
                lib = ctypes.CDLL(str(path))
            except OSError:  # a damaged or unreadable cached file (empty, another user's): build anew
                if path.parent != cache_dir():
                    raise
                lib = ctypes.CDLL(str(_compile(source, cc, path.name, private=True)))
            _libs[key] = lib
    return lib


def function(source: str, name: str, argtypes: Sequence[type]) -> ctypes._CFuncPtr:
    """Function ``name`` of the library built from ``source``, with ``argtypes`` set and a
    ``void`` result (the kernels write their outputs through pointers)."""
    fn = getattr(load(source), name)
    fn.argtypes = list(argtypes)
    fn.restype = None
    return fn


class AvailablePin(threading.local):
    """Per thread: ``value``, what :func:`available` answers inside the graph replay this thread
    runs (pinned at its start by :func:`._prepared.begin_replay`; a ``TR_MLIR_CC`` set by a
    kernel inside the replay takes effect at the next one; in a training step's replays, pinned
    once for the step, at the next step), None outside one."""

    value: bool | None = None


pinned = AvailablePin()


def available() -> bool:
    """Whether compiled kernels can be used here: ``TR_MLIR_CC`` is not ``0`` and a probe source
    compiles, loads and runs (checked once per process; :func:`reason` says why not). Inside a
    graph replay, the answer pinned at its start (:data:`pinned`)."""
    value = pinned.value
    if value is not None:
        return value
    if os.environ.get(ENV_SWITCH, "1").strip() == "0":
        _state["reason"] = f"disabled by {ENV_SWITCH}=0"
        return False
    if "ok" not in _state:
        try:
            probe = function(_PROBE, "tr_mlir_probe", [ctypes.c_int])
            probe.restype = ctypes.c_int
            _state["ok"] = probe(41) == 42
            _state["reason"] = "" if _state["ok"] else "the probe kernel returned a wrong value"
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            _state["ok"] = False
            _state["reason"] = str(e).splitlines()[0]
    return bool(_state["ok"])


def reason() -> str:
    """Why :func:`available` is False ('' when it is True or has not been asked)."""
    return str(_state.get("reason", ""))


def address(a) -> int:
    """The data address of NumPy array ``a``, through the array interface (``a.ctypes`` builds
    helper objects that outlive the call, which a replayed step must not leave behind; this is
    also the faster lookup)."""
    return a.__array_interface__["data"][0]


def ptr(a) -> ctypes.c_void_p:
    """The data pointer of a NumPy array, for a ``ctypes.c_void_p`` argument."""
    return ctypes.c_void_p(a.ctypes.data)


def describe() -> str:
    """One line for a user: whether the CPU kernels compile C here (with which compiler), or
    why not (then every kernel runs its NumPy code)."""
    if available():
        return f"compiled C kernels on ({_version(compiler())})"
    return f"compiled C kernels off: {reason()}"
