"""lowering/cpu/_cc.py: compiled kernels (C source -> shared library -> ctypes)."""

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tr_mlir.lowering.cpu import _cc

needs_cc = pytest.mark.skipif(_cc.compiler() is None, reason="no C compiler on this machine: compiled kernels untested")

SRC = """
void scale(const float* restrict x, float* restrict y, int n, float a) {
  for (int i = 0; i < n; i++) y[i] = a * x[i];
}
"""


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A private cache directory and a process state as if nothing was compiled yet (the
    ``TR_MLIR_CC`` switch unset: the tests set it themselves where they test it)."""
    monkeypatch.setenv(_cc.ENV_CACHE, str(tmp_path))
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)
    monkeypatch.setattr(_cc, "_libs", {})
    monkeypatch.setattr(_cc, "_state", {})
    return tmp_path


@needs_cc
def test_compile_call_and_disk_cache(fresh):
    fn = _cc.function(SRC, "scale", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float])
    x = np.arange(10, dtype=np.float32)
    y = np.zeros_like(x)
    fn(_cc.ptr(x), _cc.ptr(y), 10, 2.5)
    np.testing.assert_array_equal(y, 2.5 * x)
    libs = list(fresh.glob("k*.so"))
    assert len(libs) == 1
    # a new process state loads the cached library instead of compiling again
    _cc._libs.clear()
    before = libs[0].stat().st_mtime_ns
    _cc.function(SRC, "scale", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float])
    assert libs[0].stat().st_mtime_ns == before
    assert not list(fresh.glob("*.part"))


@needs_cc
def test_available_and_switch(fresh, monkeypatch):
    assert _cc.available()
    assert _cc.reason() == ""
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert not _cc.available()
    assert "TR_MLIR_CC=0" in _cc.reason()


def test_no_compiler(fresh, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/tr-mlir-cc")
    assert _cc.compiler() is None
    assert not _cc.available()
    assert "no C compiler" in _cc.reason()
    with pytest.raises(RuntimeError, match="no C compiler"):
        _cc.load(SRC)


@needs_cc
def test_compile_error_names_compiler_output(fresh):
    with pytest.raises(_cc.CompileError, match="failed on a generated kernel") as e:
        _cc.load("void broken( { }\n")
    assert "void broken" in str(e.value)


@needs_cc
def test_unwritable_cache_falls_back(fresh, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_cc.ENV_CACHE, str(blocker / "sub"))
    fn = _cc.function(SRC, "scale", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float])
    x = np.ones(3, np.float32)
    y = np.zeros(3, np.float32)
    fn(_cc.ptr(x), _cc.ptr(y), 3, 3.0)
    np.testing.assert_array_equal(y, 3.0)


def test_cache_dir_default(monkeypatch, tmp_path):
    monkeypatch.delenv(_cc.ENV_CACHE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _cc.cache_dir() == tmp_path / "tr-mlir" / "cc"


@needs_cc
def test_read_only_cache_compiles_once_into_one_private_dir(fresh, monkeypatch):
    """A cache directory that exists but cannot be written: each kernel is compiled once (not
    once for the cache and again for a fallback) into one private directory of the process, and
    no partial file stays behind."""
    real_mkstemp, real_run = _cc.tempfile.mkstemp, _cc.subprocess.run
    compiles = []

    def mkstemp(*args, dir=None, **kw):
        if dir is not None and str(dir).startswith(str(fresh)):
            raise PermissionError(13, "Read-only file system", str(dir))
        return real_mkstemp(*args, dir=dir, **kw)

    def run(cmd, *args, **kw):
        if "-shared" in cmd:
            compiles.append(cmd)
        return real_run(cmd, *args, **kw)

    monkeypatch.setattr(_cc.tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(_cc.subprocess, "run", run)
    monkeypatch.setattr(_cc, "_private", [])
    a = _cc.function(SRC, "scale", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float])
    b = _cc.function(SRC.replace("scale", "scale2"), "scale2",
                     [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float])
    assert len(compiles) == 2  # one per source
    x, y = np.ones(3, np.float32), np.zeros(3, np.float32)
    a(_cc.ptr(x), _cc.ptr(y), 3, 2.0)
    b(_cc.ptr(y), _cc.ptr(x), 3, 2.0)
    np.testing.assert_array_equal(x, 4.0)
    assert len(_cc._private) == 1 and len(list(_cc._private[0].glob("k*.so"))) == 2
    assert not list(fresh.iterdir())


@needs_cc
def test_cc_with_arguments(fresh, monkeypatch):
    """``CC`` may hold arguments (``ccache gcc``, ``gcc -m64``): they reach the compiler."""
    monkeypatch.setenv("CC", f"{_cc.compiler()} -DTR_TEST_SCALE=3.0f")
    fn = _cc.function("void f(float* y) { *y = TR_TEST_SCALE; }\n", "f", [ctypes.c_void_p])
    y = np.zeros(1, np.float32)
    fn(_cc.ptr(y))
    assert y[0] == 3.0


@needs_cc
def test_private_dir_survives_a_forked_child(tmp_path):
    """A child forked after the private directory was made (a data loader, a launcher) and
    exiting normally must not remove the parent's directory."""
    script = tmp_path / "fork.py"
    script.write_text("""
import ctypes, os, sys
from tr_mlir.lowering.cpu import _cc
src = "int f(int a) { return a + 2; }\\n"
_cc.function(src, "f", [ctypes.c_int])
d = _cc._private[0]
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: atexit handlers run in the child
os.waitpid(pid, 0)
assert d.exists(), "the child removed the parent's private directory"
fn = _cc.function(src.replace("f(", "g("), "g", [ctypes.c_int])
fn.restype = ctypes.c_int
assert fn(1) == 3
print("ok", d)
""")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = dict(os.environ, **{_cc.ENV_CACHE: str(blocker / "sub")})
    env.pop(_cc.ENV_SWITCH, None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok ")
    assert not Path(proc.stdout.split()[1]).exists()  # removed at the parent's exit


@needs_cc
@pytest.mark.parametrize("damage", ["empty", "not a library"])
def test_damaged_cached_library_is_built_again(fresh, damage):
    """A cached file that does not load (empty, garbage, another user's unreadable file) is
    rebuilt in the private directory instead of failing the run; the cache file is left alone."""
    path = fresh / f"k{_cc._key(SRC, _cc.compiler())}.so"
    path.write_bytes(b"" if damage == "empty" else b"\x7fELF garbage" * 10)
    before = path.read_bytes()
    fn = _cc.function(SRC, "scale", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float])
    x, y = np.ones(2, np.float32), np.zeros(2, np.float32)
    fn(_cc.ptr(x), _cc.ptr(y), 2, 5.0)
    np.testing.assert_array_equal(y, 5.0)
    assert path.read_bytes() == before
