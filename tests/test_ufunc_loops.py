"""NumPy's own ufunc loops on the kernel threads (lowering/cpu/_ufunc.py): found through the loop
table, used only after a bit-exact probe, the same bits as the ufunc on 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import _cc, _parallel, _ufunc, activation
from tr_mlir.lowering.cpu.registry import KERNELS

needs_cc = pytest.mark.skipif(not _cc.available(), reason="no C compiler: the loops are called through a C shim")


@pytest.fixture
def fresh(monkeypatch):
    """An empty cache of found loops for the test (restored after it)."""
    monkeypatch.setattr(_ufunc, "_found", {})


@needs_cc
def test_tanh_loop_is_found_and_gives_numpys_bits(fresh):
    """On two threads the split loop gives np.tanh's bits, in place too; on one thread (and below
    the split size) it declines, and the caller's np.tanh is the same function anyway."""
    assert _ufunc.unary_loop(np.tanh) is not None
    rng = np.random.default_rng(3)
    x = np.concatenate([_ufunc._probe_values(), (rng.standard_normal(200_003) * 4).astype(np.float32)])
    want = np.tanh(x)
    with threadpool_limits(2):
        y = np.full_like(x, 5.0)
        assert _ufunc.unary(np.tanh, x, y, split_elements=1000)
        assert y.tobytes() == want.tobytes()
        inplace = x.copy()  # y may be x's buffer
        assert _ufunc.unary(np.tanh, inplace, inplace, split_elements=1000)
        assert inplace.tobytes() == want.tobytes()
        assert not _ufunc.unary(np.tanh, x, y, split_elements=x.size + 1)
    with threadpool_limits(1):
        assert not _ufunc.unary(np.tanh, x, y, split_elements=1000)


@needs_cc
def test_split_runs_on_both_threads(fresh, monkeypatch):
    """From split_elements on, two element ranges through run_c; below it, nothing."""
    seen = []
    real = _parallel.run_c
    monkeypatch.setattr(_parallel, "run_c", lambda fn, pieces, **kw: (seen.append([p[-2:] for p in pieces]),
                                                                        real(fn, pieces, **kw)))
    x = np.linspace(-3, 3, 10_001, dtype=np.float32)
    y = np.empty_like(x)
    with threadpool_limits(2):
        assert _ufunc.unary(np.tanh, x, y, split_elements=10_001)
        assert not _ufunc.unary(np.tanh, x, y, split_elements=10_002)
    assert seen == [[(0, 5000), (5000, 10_001)]]


@needs_cc
def test_overlapping_read_only_and_unaligned_outputs_are_left_to_numpy(fresh):
    """What NumPy treats specially (a partly overlapping output, which it copies first; a read-only
    one, which it refuses; unaligned data) is left to it."""
    buf = np.linspace(-2, 2, 20_001, dtype=np.float32)
    with threadpool_limits(2):
        assert not _ufunc.unary(np.tanh, buf[:-1], buf[1:], split_elements=1)
        ro = np.empty(buf.size, np.float32)
        ro.flags.writeable = False
        assert not _ufunc.unary(np.tanh, buf, ro, split_elements=1)
        raw = np.zeros(4 * buf.size + 1, np.uint8)
        unaligned = raw[1:].view(np.float32)
        assert not unaligned.flags.aligned
        assert not _ufunc.unary(np.tanh, buf, unaligned, split_elements=1)


@needs_cc
def test_the_search_works_under_a_raising_error_state(fresh):
    """The probe's own arithmetic (underflowing casts) does not depend on the caller's np.errstate."""
    x = np.linspace(-2, 2, 70_000, dtype=np.float32)
    y = np.empty_like(x)
    with threadpool_limits(2), np.errstate(all="raise"):
        assert _ufunc.unary(np.tanh, x, y, split_elements=1)
    assert y.tobytes() == np.tanh(x).tobytes()


@needs_cc
@pytest.mark.parametrize("x, y", [
    (np.zeros(8, np.float64), np.zeros(8, np.float64)),  # not fp32
    (np.zeros(8, np.float32), np.zeros(9, np.float32)),  # sizes differ
    (np.zeros(16, np.float32)[::2], np.zeros(8, np.float32)),  # strided
    (np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)),  # not flat
], ids=["fp64", "sizes", "strided", "2-d"])
def test_other_arrays_are_left_to_numpy(fresh, x, y):
    assert not _ufunc.unary(np.tanh, x, y, split_elements=1)


@needs_cc
def test_tr_mlir_cc_0_is_read_on_every_call(fresh, monkeypatch):
    """TR_MLIR_CC=0 leaves tanh to NumPy while it is set, and the loop comes back after."""
    x = np.linspace(-2, 2, 101, dtype=np.float32)
    monkeypatch.setenv("TR_MLIR_CC", "0")
    with threadpool_limits(2):
        assert _ufunc.unary_loop(np.tanh) is None and not _ufunc.unary(np.tanh, x, x.copy(), split_elements=1)
    monkeypatch.delenv("TR_MLIR_CC")
    assert _ufunc.unary_loop(np.tanh) is not None


def test_ufuncs_without_a_unary_fp32_loop_are_refused(fresh):
    assert _ufunc.unary_loop(np.add) is None  # two inputs
    assert _ufunc.unary_loop(np.isnan) is None  # f->? (bool out)
    assert _ufunc.unary_loop(np.frompyfunc(abs, 1, 1)) is None  # object loops only


@needs_cc
def test_a_wrong_layout_or_probe_leaves_numpy(fresh, monkeypatch):
    """An offset that does not match the struct is caught by the integer checks before any
    pointer is followed; a loop whose probe differs in any bit is not used."""
    monkeypatch.setattr(_ufunc, "_OFF_NTYPES", _ufunc._OFF_NTYPES + 8)
    assert _ufunc.unary_loop(np.tanh) is None
    monkeypatch.undo()
    monkeypatch.setattr(_ufunc, "_found", {})

    def wrong(loop, data, px, py, lo, hi):  # writes +0 where tanh(-0) is -0
        n = hi - lo
        if n > 0:
            np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * n).from_address(py + 4 * lo))[:] = np.abs(
                np.tanh(np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * n).from_address(px + 4 * lo))))
    monkeypatch.setattr(_ufunc, "_shim_fn", lambda: wrong)
    assert _ufunc.unary_loop(np.tanh) is None
    x = np.array([-0.5, 0.5], np.float32)
    with threadpool_limits(2):
        assert not _ufunc.unary(np.tanh, x, x.copy(), split_elements=1)
    monkeypatch.undo()
    monkeypatch.setattr(_ufunc, "_found", {})
    monkeypatch.setattr(_ufunc, "_executable", lambda address: False)  # a loop outside executable memory
    assert _ufunc.unary_loop(np.tanh) is None


@needs_cc
def test_tanh_forward_kernel_splits_with_the_loop(fresh, monkeypatch):
    """The fp32 tanh forward runs NumPy's loop split from C_SPLIT_ELEMENTS, bits of np.tanh."""
    calls = []
    real = _ufunc.unary
    monkeypatch.setattr(_ufunc, "unary", lambda *a, **kw: (calls.append(a[1].size), real(*a, **kw))[1])
    x = np.random.default_rng(4).standard_normal((activation.C_SPLIT_ELEMENTS + 3,)).astype(np.float32)
    with threadpool_limits(2):
        y = np.empty_like(x)
        KERNELS["tanh_fwd"](x=x, y=y)
    assert calls == [x.size] and y.tobytes() == np.tanh(x).tobytes()
