"""lowering/cpu/_cconv.py: conv kernels compiled for their shapes, and conv.py's dispatch rule.

The compiled forward, weight gradient and input gradient are checked against PyTorch's conv2d
(forward and autograd) over a table of geometries, against the NumPy path (TR_MLIR_CC=0), in
place (dx over x), run to run (bit-identical) and across thread counts; the dispatch rule
(conv.compiled) is checked case by case; a replayed call allocates nothing large.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import KERNELS, _cc, _cconv, _parallel
from tr_mlir.lowering.cpu import conv as C

needs_cc = pytest.mark.skipif(_cc.compiler() is None,
                              reason="no C compiler on this machine: the compiled conv kernels are untested")

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _compiled_kernels_on(monkeypatch):
    """These tests test the compiled kernels: a ``TR_MLIR_CC=0`` in the environment (the
    suite's NumPy-path run) must not switch them off; tests of the switch set it themselves."""
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)

GEOMS = [  # n, h, w, c, k_out, k, s, p
    (4, 32, 32, 1, 6, 5, 1, 0),    # LeNet conv1: one input channel, K = 6 (expanded-weight path)
    (5, 14, 14, 6, 16, 5, 1, 0),   # LeNet conv2: K = 16 (broadcast forward, K-lane input gradient)
    (3, 9, 11, 3, 5, 3, 2, 1),     # stride 2, padding 1, odd non-square sizes
    (3, 10, 10, 4, 7, 5, 1, 2),    # 5x5 "same" padding 2, K = 7 (lane period 112)
    (3, 11, 13, 2, 8, 3, 2, 0),    # stride 2 without padding, K = 8
    (2, 13, 12, 3, 4, 4, 3, 2),    # even window, stride 3 (three column phases)
    (3, 8, 8, 16, 16, 3, 1, 1),    # 16 -> 16 channels, 3x3
    (3, 9, 9, 3, 16, 3, 2, 1),     # K = 16, stride 2 (K-lane input gradient with phases)
    (2, 9, 10, 5, 16, 4, 3, 2),    # K = 16, stride 3, padding 2
    (3, 12, 12, 16, 12, 1, 2, 0),  # 1x1 stride 2 (a projection shortcut)
    (2, 7, 7, 1, 1, 3, 1, 1),      # a single channel in and out
    (1, 5, 5, 2, 3, 5, 1, 0),      # window as large as the input: a 1x1 output
    (2, 8, 8, 20, 16, 3, 1, 1),    # 20 input channels: K-lane input gradient with 1-pixel tiles
    (2, 8, 8, 3, 32, 3, 2, 1),     # K = 32: two 16-lane blocks per pixel
    (2, 9, 9, 3, 64, 3, 1, 1),     # a 3 -> 64 stem: four blocks per pixel
]

OUTSIDE_RULE = [  # geometries the rule sends to NumPy; the kernels themselves must still be right
    (2, 7, 7, 5, 3, 1, 1, 0),      # pointwise
    (2, 6, 6, 40, 16, 3, 1, 1),    # 40 input channels: channel groups of 16 in the input gradient
    (2, 7, 7, 4, 24, 3, 1, 1),     # K = 24 on the expanded path (lane period 48)
    (2, 6, 6, 32, 32, 3, 2, 1),    # C*K = 1024: K-lane input gradient with 1-pixel tiles
]


def _ids(geom):
    return "n{}h{}w{}c{}k{}_k{}s{}p{}".format(*geom)


def _data(geom, seed=0):
    n, h, w, c, kout, k, s, p = geom
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((kout, k, k, c)).astype(np.float32)
    g = C.conv_geom(x.shape, wt.shape, k, s, p, 1)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    return x, wt, dy, g


def _torch(x, w, dy, s, p):
    tx = torch.tensor(x).permute(0, 3, 1, 2).requires_grad_()
    tw = torch.tensor(w).permute(0, 3, 1, 2).requires_grad_()
    ty = F.conv2d(tx, tw, stride=s, padding=p)
    ty.backward(torch.tensor(dy).permute(0, 3, 1, 2))
    return (ty.detach().permute(0, 2, 3, 1).numpy(), tw.grad.permute(0, 2, 3, 1).numpy(),
            tx.grad.permute(0, 2, 3, 1).numpy())


def _close(got, want, tol=2e-5):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    assert np.isfinite(got).all()
    err = np.abs(got - want).max()
    assert err <= tol * max(1.0, np.abs(want).max()), err


def _registry(x, w, dy, k, s, p, dx_is_x=False):
    """conv_fwd then conv_bwd through the kernel registry with planned workspaces (NaN-filled,
    as a shared workspace would hold garbage)."""
    f, b = KERNELS["conv_fwd"], KERNELS["conv_bwd"]
    g = C.conv_geom(x.shape, w.shape, k, s, p, 1)
    y = np.full(g.y_shape, np.nan, np.float32)
    arrays = dict(x=x, w=w, y=y)
    ws = {n: np.full_like(a, np.nan) for n, a in f.allocate_workspaces(arrays, k=k, s=s, p=p, groups=1).items()}
    f(**arrays, **ws, k=k, s=s, p=p, groups=1)
    dw = np.full(w.shape, np.nan, np.float32)
    dx = x if dx_is_x else np.full(x.shape, np.nan, np.float32)
    arrays = dict(dy=dy, x=x, w=w, dw=dw, dx=dx)
    ws = {n: np.full_like(a, np.nan) for n, a in b.allocate_workspaces(arrays, k=k, s=s, p=p, groups=1).items()}
    b(**arrays, **ws, k=k, s=s, p=p, groups=1)
    return y, dw, dx


@needs_cc
@pytest.mark.parametrize("geom", GEOMS, ids=_ids)
def test_compiled_matches_torch(geom):
    x, w, dy, g = _data(geom)
    assert C.compiled(g, x, w), "the table's geometries are inside the dispatch rule"
    want = _torch(x, w, dy, g.win.s, g.win.p)
    with threadpool_limits(2):
        got = _registry(x, w, dy, g.win.k, g.win.s, g.win.p)
    for a, b in zip(got, want):
        _close(a, b)


@needs_cc
@pytest.mark.parametrize("geom", OUTSIDE_RULE, ids=_ids)
def test_kernels_outside_the_rule_are_right_too(geom):
    x, w, dy, g = _data(geom)
    assert not C.compiled(g, x, w)
    want = _torch(x, w, dy, g.win.s, g.win.p)
    tmp = np.full(_cconv.workspace_elements(g), np.nan, np.float32)
    y, dw, dx = (np.full(a.shape, np.nan, np.float32) for a in (dy, w, x))
    with threadpool_limits(2):
        _cconv.forward(x, w, y, g, tmp)
        _cconv.wgrad(dy, x, dw, g, tmp)
        _cconv.dgrad(dy, w, dx, g, tmp)
    for a, b in zip((y, dw, dx), want):
        _close(a, b)


@needs_cc
@pytest.mark.parametrize("geom", [GEOMS[1], GEOMS[2], GEOMS[7]], ids=_ids)
def test_dx_in_place_over_x(geom):
    x, w, dy, g = _data(geom)
    want = _torch(x, w, dy, g.win.s, g.win.p)
    buf = x.copy()
    with threadpool_limits(2):
        y, dw, dx = _registry(buf, w, dy, g.win.k, g.win.s, g.win.p, dx_is_x=True)
    assert dx is buf
    _close(y, want[0])
    _close(dw, want[1])  # computed from x before dx overwrote it
    _close(dx, want[2])


@needs_cc
@pytest.mark.parametrize("geom", [GEOMS[0], GEOMS[1], GEOMS[3], GEOMS[7]], ids=_ids)
def test_compiled_equals_numpy_path(geom, monkeypatch):
    x, w, dy, g = _data(geom)
    with threadpool_limits(2):
        compiled = _registry(x, w, dy, g.win.k, g.win.s, g.win.p)
        monkeypatch.setenv(_cc.ENV_SWITCH, "0")
        assert not C.compiled(g, x, w)
        numpy_path = _registry(x, w, dy, g.win.k, g.win.s, g.win.p)
    for a, b in zip(compiled, numpy_path):
        _close(a, b)


@needs_cc
@pytest.mark.parametrize("geom", [GEOMS[0], GEOMS[1], GEOMS[5]], ids=_ids)
def test_reproducible_and_thread_split(geom):
    x, w, dy, g = _data(geom)
    with threadpool_limits(2):
        assert _parallel.workers() == min(2, _parallel.MAX_WORKERS)
        first = _registry(x, w, dy, g.win.k, g.win.s, g.win.p)
        second = _registry(x, w, dy, g.win.k, g.win.s, g.win.p)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)  # bit-identical run to run (fixed partial-sum order)
    with threadpool_limits(1):
        serial = _registry(x, w, dy, g.win.k, g.win.s, g.win.p)
    np.testing.assert_array_equal(serial[0], first[0])  # y and dx: per-image work, split-independent
    np.testing.assert_array_equal(serial[2], first[2])
    _close(serial[1], first[1], 1e-5)  # dw: the thread partial sums add in another order


def test_dispatch_rule(monkeypatch):
    f32 = np.zeros((2, 14, 14, 6), np.float32)
    w32 = np.zeros((16, 5, 5, 6), np.float32)
    g = C.conv_geom(f32.shape, w32.shape, 5, 1, 0, 1)
    assert C.cc_geometry(g)
    assert C.cc_geometry(C.conv_geom((2, 32, 32, 1), (6, 5, 5, 1), 5, 1, 0, 1))
    assert C.cc_geometry(C.conv_geom((2, 8, 8, 16), (16, 1, 1, 16), 1, 2, 0, 1))  # strided 1x1: im2col
    assert not C.cc_geometry(C.conv_geom((2, 8, 8, 16), (16, 1, 1, 16), 1, 1, 0, 1))  # pointwise
    assert C.cc_geometry(C.conv_geom((2, 8, 8, 32), (16, 3, 3, 32), 3, 1, 1, 1))  # C = 32, K = 16
    assert not C.cc_geometry(C.conv_geom((2, 8, 8, 33), (16, 3, 3, 33), 3, 1, 1, 1))  # C > 32
    assert not C.cc_geometry(C.conv_geom((2, 8, 8, 16), (24, 3, 3, 16), 3, 1, 1, 1))  # K = 24: expanded, > 16
    assert C.cc_geometry(C.conv_geom((2, 8, 8, 16), (32, 3, 3, 16), 3, 1, 1, 1))  # K = 32, C*K = 512
    assert C.cc_geometry(C.conv_geom((2, 8, 8, 3), (64, 3, 3, 3), 3, 1, 1, 1))  # a 3 -> 64 stem
    assert not C.cc_geometry(C.conv_geom((2, 8, 8, 32), (32, 3, 3, 32), 3, 1, 1, 1))  # C*K = 1024
    assert not C.cc_geometry(C.conv_geom((2, 8, 8, 16), (64, 3, 3, 16), 3, 1, 1, 1))
    assert not C.cc_geometry(C.conv_geom((2, 8, 8, 8), (8, 3, 3, 4), 3, 1, 1, 2))  # groups
    assert not C.cc_geometry(C.conv_geom((2, 8, 8, 8), (8, 3, 3, 1), 3, 1, 1, 8))  # depthwise
    big = C.conv_geom((1, 224, 224, 16), (6, 3, 3, 16), 3, 1, 1, 1)  # K = 6: 6 copies of the image
    assert _cconv.slot_elements(big) > C.COL_CHUNK and not C.cc_geometry(big)
    assert C.cc_geometry(C.conv_geom((1, 224, 224, 3), (16, 7, 7, 3), 7, 2, 3, 1))  # K = 16: one copy
    expect = _cc.available()
    assert C.compiled(g, f32, w32) == expect
    assert not C.compiled(g, f32.astype(np.float16), w32)  # AMP operands: NumPy path
    assert not C.compiled(g, f32, w32, accumulate=True)
    assert not C.compiled(g, np.zeros((2, 14, 28, 6), np.float32)[:, :, ::2], w32)  # not contiguous
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert not C.compiled(g, f32, w32)
    # the planned workspaces serve both paths: tmp is requested for fp32 geometries in the rule
    sizes = C.conv_workspace_sizes(g, x16=False, w16=False, y16=False, phases=("fwd", "wgrad", "dgrad"))
    assert sizes["tmp"] >= _cconv.workspace_elements(g)
    assert "tmp" not in C.conv_workspace_sizes(g, x16=True, w16=True, y16=True)


@needs_cc
def test_arrays_not_of_the_geometry_are_refused():
    """The kernels index raw pointers with the geometry's sizes: an array of another shape (or
    dtype, or strided) must raise, never be read or written out of bounds. Each too-small array
    here is a view into a larger buffer whose tail must stay untouched."""
    x, w, dy, g = _data(GEOMS[0])
    b = KERNELS["conv_bwd"]
    kw = dict(k=5, s=1, p=0, groups=1)
    ws = b.allocate_workspaces(dict(dy=dy, x=x, w=w, dw=np.zeros_like(w), dx=np.zeros_like(x)), **kw)
    assert C.compiled(g, dy, x, w)
    big_dx = np.full((2 * x.shape[0],) + x.shape[1:], 7.0, np.float32)
    big_dw = np.full((2 * w.shape[0],) + w.shape[1:], 7.0, np.float32)
    cases = {
        "dx": dict(dy=dy, x=x, w=w, dw=np.zeros_like(w), dx=big_dx[:1]),
        "dw": dict(dy=dy, x=x, w=w, dw=big_dw[:1], dx=np.zeros_like(x)),
        "dy": dict(dy=dy[:2], x=x, w=w, dw=np.zeros_like(w), dx=np.zeros_like(x)),
    }
    with threadpool_limits(2):
        for name, arrays in cases.items():
            with pytest.raises(ValueError, match=rf"expected {name} of the compiled conv .* shape"):
                b(**arrays, **ws, **kw)
    assert (big_dx[1:] == 7.0).all() and (big_dw[1:] == 7.0).all()
    tmp = np.zeros(_cconv.workspace_elements(g), np.float32)
    y = np.zeros(g.y_shape, np.float32)
    strided = np.zeros((x.shape[0], x.shape[1], 2 * x.shape[2], x.shape[3]), np.float32)[:, :, ::2]
    with pytest.raises(ValueError, match=r"expected x of the compiled conv .*\(strided\)"):
        _cconv.forward(strided, w, y, g, tmp)
    with pytest.raises(ValueError, match=r"expected w of the compiled conv .*float64"):
        _cconv.dgrad(dy, w.astype(np.float64), np.zeros_like(x), g, tmp)
    with pytest.raises(ValueError, match=r"expected a workspace .* got None"):
        _cconv.forward(x, w, y, g, None)
    with pytest.raises(ValueError):
        _cconv.wgrad(dy, x, np.zeros_like(w), g, tmp[:16])  # scratch too small


def test_no_compiler_runs_numpy(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "/nonexistent/tr-mlir-cc")
    monkeypatch.setenv(_cc.ENV_CACHE, str(tmp_path))
    monkeypatch.setattr(_cc, "_state", {})
    monkeypatch.setattr(_cc, "_libs", {})
    x, w, dy, g = _data(GEOMS[1])
    assert not C.compiled(g, x, w)
    got = _registry(x, w, dy, 5, 1, 0)
    for a, b in zip(got, _torch(x, w, dy, 1, 0)):
        _close(a, b)


@needs_cc
def test_replay_allocates_nothing_large():
    x, w, dy, g = _data((16, 32, 32, 1, 6, 5, 1, 0))
    x2, w2, dy2, g2 = _data((16, 14, 14, 6, 16, 5, 1, 0))
    f, b = KERNELS["conv_fwd"], KERNELS["conv_bwd"]
    calls = []
    for xx, ww, dd, gg in ((x, w, dy, g), (x2, w2, dy2, g2)):
        y = np.zeros(gg.y_shape, np.float32)
        a1 = dict(x=xx, w=ww, y=y)
        a1 |= f.allocate_workspaces(a1, k=5, s=1, p=0, groups=1)
        a2 = dict(dy=dd, x=xx, w=ww, dw=np.zeros_like(ww), dx=np.zeros_like(xx))
        a2 |= b.allocate_workspaces(a2, k=5, s=1, p=0, groups=1)
        calls += [f.bind(a1, dict(k=5, s=1, p=0, groups=1)), b.bind(a2, dict(k=5, s=1, p=0, groups=1))]

    def step():
        for c in calls:
            c()

    with threadpool_limits(2):
        step()  # compiles (or loads) the kernels
        tracemalloc.start()
        tracemalloc.reset_peak()
        step()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 32 * 1024, peak  # activations here are 64-76 KiB each: nothing of that size
