"""lowering/cpu/_cdepthwise.py: the compiled depthwise conv kernels (groups = C = K).

Each phase (forward, weight gradient, input gradient overwritten and accumulated) is checked to
give the NumPy depthwise code's bits (TR_MLIR_CC=0) on 1 and 2 threads, against PyTorch's
conv2d with groups = C (forward and autograd), and the dispatch rule (:func:`usable`) case by
case; each test checks that the compiled path actually ran.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import _cc, _cdepthwise, _parallel
from tr_mlir.lowering.cpu import conv as C

needs_cc = pytest.mark.skipif(_cc.compiler() is None,
                              reason="no C compiler on this machine: the compiled depthwise kernels are untested")

torch.set_num_threads(1)

GEOMS = [  # n, h, w, c, k, s, p
    (4, 8, 8, 32, 3, 1, 1),      # MobileNet's 3x3 "same"
    (3, 9, 7, 48, 3, 2, 1),      # stride 2, odd non-square sizes
    (2, 5, 5, 16, 5, 1, 2),      # 5x5 window
    (2, 6, 6, 17, 3, 2, 0),      # a channel count that is no multiple of 16, no padding
    (2, 3, 3, 40, 7, 1, 3),      # window larger than the input: taps no output reads
    (1, 1, 1, 96, 3, 1, 1),      # a 1x1 map: only the centre tap
    (3, 16, 16, 64, 3, 1, 1),    # 49,152 outputs: below both split thresholds, one piece
    (2, 12, 12, 144, 3, 2, 1),   # strided
    (8, 32, 32, 40, 3, 1, 1),    # 327,680 outputs: every phase split; channel cut at 16 of 40
    (40, 8, 8, 1000, 3, 2, 1),   # many channels, strided: every phase split
]

SPLIT = {(8, 32, 32, 40, 3, 1, 1), (40, 8, 8, 1000, 3, 2, 1)}


@pytest.fixture(autouse=True)
def _compiled_kernels_on(monkeypatch):
    """The suite may run under TR_MLIR_CC=0; these tests switch it themselves."""
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)


def _case(geom, seed=0):
    n, h, w, c, k, s, p = geom
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    x[0, 0, 0, :3] = 0.0
    x[0, -1, -1, :3] = -0.0
    wgt = rng.standard_normal((c, k, k, 1)).astype(np.float32)
    g = C.conv_geom(x.shape, wgt.shape, k, s, p, c)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    dy[..., 1] = 0.0  # a channel whose weight-gradient products are all signed zeros
    sizes = C.conv_workspace_sizes(g, x16=False, w16=False, y16=False, phases=("fwd", "wgrad", "dgrad"))
    ws = {name: np.zeros(size, np.float32) for name, size in sizes.items()}
    return x, wgt, dy, g, ws


def _run(x, wgt, dy, g, ws):
    y = np.full(g.y_shape, np.nan, np.float32)
    C.conv_forward(x, wgt, y, g, ws, "depthwise")
    dw = np.full(wgt.shape, np.nan, np.float32)
    C.conv_wgrad(dy, x, dw, g, ws, "depthwise")
    dx = np.full(x.shape, np.nan, np.float32)
    C.conv_dgrad(dy, wgt, dx, g, ws, algo="depthwise")
    dxa = x.copy()
    C.conv_dgrad(dy, wgt, dxa, g, ws, accumulate=True, algo="depthwise")
    return y, dw, dx, dxa


class _Calls:
    """Counts the compiled kernels' calls (a test must fail if the NumPy code ran instead)."""

    def __init__(self, monkeypatch):
        self.n = {"forward": 0, "wgrad": 0, "dgrad": 0}
        for name in self.n:
            real = getattr(_cdepthwise, name)

            def counted(*a, _real=real, _name=name, **kw):
                self.n[_name] += 1
                return _real(*a, **kw)

            monkeypatch.setattr(_cdepthwise, name, counted)


@needs_cc
@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: "x".join(map(str, g)))
def test_compiled_depthwise_gives_the_numpy_bits_on_one_and_two_threads(geom, monkeypatch):
    x, wgt, dy, g, ws = _case(geom)
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    want = _run(x, wgt, dy, g, ws)
    monkeypatch.delenv(_cc.ENV_SWITCH)
    calls = _Calls(monkeypatch)
    pieces = []
    real_run_c = _parallel.run_c
    monkeypatch.setattr(_parallel, "run_c", lambda fn, p, **kw: (pieces.append(len(p)), real_run_c(fn, p, **kw)))
    for threads in (1, 2):
        with threadpool_limits(limits=threads):
            got = _run(x, wgt, dy, g, ws)
        for name, a, b in zip(("y", "dw", "dx", "dx accumulated"), want, got):
            assert a.tobytes() == b.tobytes(), f"{name} on {threads} thread(s) differs from the NumPy code"
    assert calls.n == {"forward": 2, "wgrad": 2, "dgrad": 4}
    # 1 thread: one piece per call; 2 threads: every phase split where the geometry is large enough
    assert pieces == [1] * 4 + ([2] * 4 if geom in SPLIT else [1] * 4)


@needs_cc
@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: "x".join(map(str, g)))
def test_compiled_depthwise_matches_pytorch(geom, monkeypatch):
    x, wgt, dy, g, ws = _case(geom, seed=1)
    calls = _Calls(monkeypatch)
    with threadpool_limits(limits=2):
        y, dw, dx, dxa = _run(x, wgt, dy, g, ws)
    assert calls.n == {"forward": 1, "wgrad": 1, "dgrad": 2}
    n, h, w, c, k, s, p = geom
    tx = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).double().requires_grad_()
    tw = torch.from_numpy(wgt.transpose(0, 3, 1, 2).copy()).double().requires_grad_()
    ty = F.conv2d(tx, tw, stride=s, padding=p, groups=c)
    ty.backward(torch.from_numpy(dy.transpose(0, 3, 1, 2).copy()).double())
    ref_y = ty.detach().numpy().transpose(0, 2, 3, 1)
    ref_dx = tx.grad.numpy().transpose(0, 2, 3, 1)
    ref_dw = tw.grad.numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(y, ref_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, ref_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dxa, x + ref_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, ref_dw, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref_dw).max()))


@needs_cc
def test_usable_is_the_dispatch_rule(monkeypatch):
    x, wgt, dy, g, ws = _case((2, 6, 6, 32, 3, 1, 1))
    y = np.empty(g.y_shape, np.float32)
    tmp = ws["tmp"]
    assert _cdepthwise.usable(g, tmp, x, wgt, y)
    assert not _cdepthwise.usable(g, tmp, x.astype(np.float16), wgt, y)  # AMP operands: NumPy code
    assert not _cdepthwise.usable(g, tmp, x[:, ::-1], wgt, y)  # strided
    assert not _cdepthwise.usable(g, None, x, wgt, y)
    assert not _cdepthwise.usable(g, tmp[:_cdepthwise.scratch_elements(g) - 1], x, wgt, y)
    grouped = C.conv_geom((2, 6, 6, 32), (64, 3, 3, 1), 3, 1, 1, 32)  # groups = C but K = 2C
    assert not _cdepthwise.usable(grouped, tmp, x, wgt, y)
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert not _cdepthwise.usable(g, tmp, x, wgt, y)


@needs_cc
def test_wgrad_writes_only_inside_its_scratch():
    """The weight gradient's per-thread sums stay inside :func:`scratch_elements` of an exactly
    sized, misaligned ``tmp`` (guard values after it are untouched) on 2 threads."""
    x, wgt, dy, g, _ = _case((8, 32, 32, 40, 3, 1, 1))
    n = _cdepthwise.scratch_elements(g)
    buf = np.full(n + 1 + 64, 7.0, np.float32)
    tmp = buf[1:n + 1]  # 4 bytes past the allocation's alignment
    dw = np.empty(wgt.shape, np.float32)
    with threadpool_limits(limits=2):
        _cdepthwise.wgrad(dy, x, dw, g, tmp)
        _cdepthwise.forward(x, wgt, np.empty(g.y_shape, np.float32), g, tmp)
    assert buf[0] == 7.0 and (buf[n + 1:] == 7.0).all()


def test_workspace_has_room_for_the_compiled_scratch():
    """A 1x1 map with many channels: the NumPy products (N*Ho*Wo*C) are smaller than the
    kernels' per-thread k*k*C sums, and the plan's ``tmp`` must hold either."""
    g = C.conv_geom((1, 1, 1, 960), (960, 3, 3, 1), 3, 1, 1, 960)
    sizes = C.conv_workspace_sizes(g, x16=False, w16=False, y16=False, phases=("fwd", "wgrad", "dgrad"))
    assert sizes["tmp"] >= max(960, _cdepthwise.scratch_elements(g))
