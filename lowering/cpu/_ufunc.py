"""NumPy's own ufunc inner loops, called from C on the kernel threads.

A NumPy ufunc such as ``np.tanh`` runs its SIMD loop on the calling thread only, and splitting it
across the Python kernel threads costs a Python hand-off of tens of microseconds
(:data:`.activation.HALVES_SPLIT_ELEMENTS`). But the loop itself is a plain C function,
``loop(char **args, npy_intp const *dimensions, npy_intp const *steps, void *data)``, that runs
without the GIL: :func:`unary_loop` finds it in the ufunc's loop table and :func:`unary` runs it
over element ranges on the calling thread and the C worker (:func:`._parallel.run_c`), as the
compiled kernels split their work. The results are NumPy's, bit for bit: the same function on
the same elements.

The loop table is read through the layout of ``PyUFuncObject`` in NumPy's public C API
(``numpy/ufuncobject.h``, unchanged from NumPy 1.x to 2.x): after ``PyObject_HEAD``, ``int nin,
nout, nargs, identity``, then ``PyUFuncGenericFunction *functions``, ``void **data``, ``int
ntypes, reserved1``, ``const char *name``, ``const char *types`` (``ntypes`` rows of ``nargs``
type numbers). Before anything is dereferenced the integers must match the ufunc's Python
attributes (``nin``, ``nout``, ``nargs``, ``ntypes``), then the name and the type table; the loop
taken is the first row whose types are the requested ones, the row NumPy's own type resolution
picks for arrays of exactly those dtypes, and its address must lie in an executable mapping of the
process (``/proc/self/maps``; no such check, no loop). A probe then runs it on special values
(signed zeros, infinities, NaN, subnormals, large and small magnitudes) at odd offsets and lengths,
and it is used only if every bit equals the ufunc's own result. Anything else (another layout, a
ufunc without a legacy loop, no C compiler, not Linux) leaves :func:`unary_loop` None and the
callers on NumPy.

"The same bits" assumes the kernel threads run with the same floating-point environment as the
calling thread: a flush-to-zero mode set on the calling thread only (``torch.set_flush_denormal``)
applies to the calling thread's half and not to the C worker's, as for every kernel split there.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

import numpy as np

from . import _cc, _parallel, _prepared

SHIM_SOURCE = r"""
typedef long tr_intp;
typedef void (*tr_loop_t)(char **args, const tr_intp *dimensions, const tr_intp *steps, void *data);
/* y[e] = f(x[e]) for e in [lo, hi) through the ufunc loop `loop` (contiguous fp32 in and out). */
void tr_ufunc_unary_f32(void *loop, void *data, const float *x, float *y, long lo, long hi) {
  if (hi <= lo) return;
  char *args[2] = {(char *)(x + lo), (char *)(y + lo)};
  tr_intp dimensions[1] = {hi - lo};
  tr_intp steps[2] = {(tr_intp)sizeof(float), (tr_intp)sizeof(float)};
  ((tr_loop_t)loop)(args, dimensions, steps, data);
}
"""
"""C source of the shim that calls a unary fp32 loop over an element range (``npy_intp`` is a
``long`` on the LP64 platforms the kernels run on, :func:`unary_loop` checks)."""

_HEAD = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)  # PyObject_HEAD
_INT = ctypes.sizeof(ctypes.c_int)
_PTR = ctypes.sizeof(ctypes.c_void_p)
_OFF_FUNCTIONS = _HEAD + 4 * _INT
_OFF_DATA = _OFF_FUNCTIONS + _PTR
_OFF_NTYPES = _OFF_DATA + _PTR
_OFF_NAME = _OFF_NTYPES + 2 * _INT
_OFF_TYPES = _OFF_NAME + _PTR

_found: dict[np.ufunc, tuple[int, int] | None] = {}
_shim: list = []


def _probe_values() -> np.ndarray:
    """fp32 values a loop must get right, bit for bit, to be used: the special values, the
    subnormals and extremes, and a spread of ordinary ones."""
    f = np.finfo(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, f.tiny, -f.tiny, f.smallest_subnormal,
                        -f.smallest_subnormal, f.max, -f.max, 1.0, -1.0, 0.5, 1e-8, -1e-8, 9.0, -9.0, 20.0],
                       np.float32)
    rng = np.random.default_rng(12345)
    with np.errstate(all="ignore"):  # the float64 -> float32 cast of the tiny ones underflows
        spread = np.concatenate([rng.standard_normal(3000) * 3, rng.uniform(-40, 40, 2000),
                                 np.ldexp(rng.uniform(-1, 1, 1000), rng.integers(-140, 120, 1000))]).astype(np.float32)
    return np.concatenate([special, spread, special[::-1]])


def _table_row(ufunc: np.ufunc, types: tuple[int, ...]) -> int | None:
    """The index of the first row of ``ufunc``'s loop table with exactly ``types`` (NumPy type
    numbers), after checking the struct layout against the Python attributes; None when the
    layout does not match or no row does."""
    addr = id(ufunc)
    nin, nout, nargs = (ctypes.c_int.from_address(addr + _HEAD + i * _INT).value for i in range(3))
    ntypes = ctypes.c_int.from_address(addr + _OFF_NTYPES).value
    reserved1 = ctypes.c_int.from_address(addr + _OFF_NTYPES + _INT).value
    if (nin, nout, nargs, ntypes, reserved1) != (ufunc.nin, ufunc.nout, ufunc.nin + ufunc.nout, ufunc.ntypes, 0) \
            or ntypes <= 0:
        return None
    name = ctypes.c_char_p.from_address(addr + _OFF_NAME).value
    if name is None or name.decode("ascii", "replace") != ufunc.__name__:
        return None
    table = ctypes.c_void_p.from_address(addr + _OFF_TYPES).value
    if not table:
        return None
    rows = (ctypes.c_char * (ntypes * nargs)).from_address(table).raw
    for i in range(ntypes):  # the Python view of the same table must agree, row by row
        chars = ufunc.types[i].replace("->", "")
        if tuple(rows[i * nargs:(i + 1) * nargs]) != tuple(np.dtype(c).num for c in chars):
            return None
    return next((i for i in range(ntypes) if tuple(rows[i * nargs:(i + 1) * nargs]) == types), None)


def _executable(address: int) -> bool:
    """Whether ``address`` lies in an executable mapping of this process (Linux ``/proc/self/maps``;
    False where it cannot be read): a loop pointer is called only then."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            for line in f:
                span, perms = line.split(None, 2)[:2]
                lo, hi = (int(v, 16) for v in span.split("-"))
                if lo <= address < hi:
                    return "x" in perms
    except (OSError, ValueError):
        return False
    return False


def _shim_fn():
    """The compiled :data:`SHIM_SOURCE` function (built once; raises ``_cc.CompileError`` when the
    compiler fails on it)."""
    if not _shim:
        _shim.append(_cc.function(SHIM_SOURCE, "tr_ufunc_unary_f32", [ctypes.c_void_p] * 4 + [ctypes.c_long] * 2))
    return _shim[0]


def unary_loop(ufunc: np.ufunc) -> tuple[int, int] | None:
    """``(loop, data)`` addresses of ``ufunc``'s fp32 -> fp32 inner loop, validated as the module doc
    says (found once per ufunc and process); None when it cannot be used: not a one-in one-out
    ufunc with an ``f->f`` loop, another ``PyUFuncObject`` layout, a ``npy_intp`` that is not a C
    ``long``, no C compiler (:func:`._cc.available`), or a probe result that differs from the
    ufunc's in any bit."""
    if not _cc.available():  # re-read every call (``TR_MLIR_CC=0`` switches the C paths off for now)
        return None
    if ufunc in _found:
        return _found[ufunc]
    _found[ufunc] = None
    if (ufunc.nin, ufunc.nout) != (1, 1) or "f->f" not in ufunc.types or sys.implementation.name != "cpython" \
            or np.dtype(np.intp).itemsize != ctypes.sizeof(ctypes.c_long):
        return None
    try:
        _found[ufunc] = _validated(ufunc)
    except Exception:  # noqa: BLE001 - a probe that raises (an error state, a failed compile): NumPy then
        _found[ufunc] = None
    return _found[ufunc]


def _validated(ufunc: np.ufunc) -> tuple[int, int] | None:
    """:func:`unary_loop`'s search and probe (module doc) for a one-in one-out ufunc with an
    ``f->f`` loop."""
    row = _table_row(ufunc, (np.dtype(np.float32).num,) * 2)
    if row is None:
        return None
    addr = id(ufunc)
    functions = ctypes.c_void_p.from_address(addr + _OFF_FUNCTIONS).value
    data = ctypes.c_void_p.from_address(addr + _OFF_DATA).value
    if not functions:
        return None
    loop = ctypes.c_void_p.from_address(functions + row * _PTR).value
    loop_data = (ctypes.c_void_p.from_address(data + row * _PTR).value or 0) if data else 0
    if not loop or not _executable(loop):
        return None
    x = _probe_values()
    with np.errstate(all="ignore"):
        want = ufunc(x)
    shim = _shim_fn()
    for lo, hi in ((0, x.size), (3, 20), (1, x.size - 5), (7, 8), (5, 5)):
        y = np.full(x.size, 7.0, np.float32)
        shim(loop, loop_data, x.ctypes.data, y.ctypes.data, lo, hi)
        if y[lo:hi].tobytes() != want[lo:hi].tobytes() or (y[:lo] != 7).any() or (y[hi:] != 7).any():
            return None
    return loop, loop_data


def _unary_pieces(ufunc: np.ufunc, x: np.ndarray, y: np.ndarray, split_elements: int, parts: int = 2):
    """The shim and its argument lists for :func:`unary`: ``parts`` element ranges (2: None where
    it does not split; 1: the whole array, on any thread count), or None."""
    if x.dtype != np.float32 or y.dtype != np.float32 or x.size != y.size or x.ndim != 1 or y.ndim != 1 \
            or x.size < split_elements or not (x.flags.c_contiguous and y.flags.c_contiguous) \
            or not (x.flags.aligned and y.flags.aligned and y.flags.writeable):
        return None
    px, py = x.ctypes.data, y.ctypes.data
    if px != py and np.may_share_memory(x, y):  # a partial overlap: NumPy copies first, the ranges would not
        return None
    if parts > 1 and _parallel.workers() < 2:
        return None
    found = unary_loop(ufunc)
    if found is None:
        return None
    n = x.size
    return _shim_fn(), [(*found, px, py, n * i // parts, n * (i + 1) // parts) for i in range(parts)]


def unary(ufunc: np.ufunc, x: np.ndarray, y: np.ndarray, split_elements: int) -> bool:
    """``y = ufunc(x)`` split in two element ranges on the calling thread and the C worker
    (:func:`._parallel.run_c`) through the ufunc's own loop (:func:`unary_loop`): the same bits as
    ``ufunc(x, out=y)``. For flat, aligned, C-contiguous fp32 ``x`` and writeable ``y`` of one size
    and at least ``split_elements`` elements, y either x itself or not overlapping it, on two
    kernel threads; False (nothing done: the caller runs the ufunc, which is faster on one thread
    than a call through the shim) otherwise, or when the loop cannot be used. Raises nothing of its
    own; what the loop search raises leaves the loop unused (:func:`unary_loop`)."""
    found = _unary_pieces(ufunc, x, y, split_elements)
    if found is None:
        return False
    _parallel.run_c(*found)
    return True


def unary_call(ufunc: np.ufunc, x: np.ndarray, y: np.ndarray, split_elements: int,
               whole: bool = False) -> Callable[[], None] | None:
    """:func:`unary` on these arrays as a ready zero-argument call (:func:`._prepared.c_call`,
    for the thread count in force now), or None where :func:`unary` would return False.
    ``whole``: where it would not split, the whole array through the shim as one piece instead
    (``ufunc(x, out=y)``'s bits; a C job a :class:`._prepared.ReplayGroup` can run), still None
    where the loop cannot be used."""
    found = _unary_pieces(ufunc, x, y, split_elements)
    if found is None and whole:
        found = _unary_pieces(ufunc, x, y, 0, parts=1)
    return None if found is None else _prepared.c_call(*found)
