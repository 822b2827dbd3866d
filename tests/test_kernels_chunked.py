"""The fast paths of the conv kernels (lowering/cpu/conv.py) against one-chunk runs and torch:
im2col in batch chunks (one strided window copy, padded through the col workspace's tail),
forward, weight gradient (both GEMM orientations, fp32 and fp16 dw) and input gradient (as a
convolution of the padded dy with rotated weights for stride 1, col2im otherwise), strided,
padded, unpadded and grouped. The chunk size is forced small with monkeypatch so the small
shapes here take several chunks, including a short last chunk."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import KERNELS, _parallel
from tr_mlir.lowering.cpu import conv as C

torch.set_num_threads(1)

CASES = [  # n, h, c, k_out, k, s, p, groups, dtype
    (5, 9, 4, 6, 3, 1, 1, 1, np.float32),   # kg < kkc: transposed wgrad orientation
    (7, 8, 6, 4, 3, 2, 1, 2, np.float32),   # grouped, strided
    (6, 7, 8, 8, 1, 2, 0, 1, np.float32),   # 1x1 stride 2 (projection): kg >= kkc, direct orientation
    (5, 9, 4, 8, 3, 2, 1, 1, np.float16),   # AMP: fp16 x, w, y, dw, dx
    (5, 9, 4, 8, 3, 1, 1, 1, np.float16),   # AMP, dX as a convolution
    (5, 14, 4, 7, 5, 1, 0, 1, np.float32),  # LeNet-like: 5x5, no padding, dX tap-major (C < 16)
    (4, 9, 16, 8, 3, 1, 1, 1, np.float32),  # 16 channels, stride 1: dX as a convolution
    (4, 9, 16, 8, 3, 1, 1, 1, np.float16),  # the same in AMP
    (5, 12, 3, 7, 5, 1, 0, 1, np.float32),  # 3 input channels: dX by col2im
    (5, 10, 4, 6, 5, 1, 2, 1, np.float32),  # 5x5 "same" padding
]


def _run(x, w, dy, k, s, p, groups):
    f, b = KERNELS["conv_fwd"], KERNELS["conv_bwd"]
    g = C.conv_geom(x.shape, w.shape, k, s, p, groups)
    y = np.zeros(g.y_shape, x.dtype)
    arrays = dict(x=x, w=w, y=y)
    f(**arrays, **f.allocate_workspaces(arrays, k=k, s=s, p=p, groups=groups), k=k, s=s, p=p, groups=groups)
    dw, dx = np.zeros_like(w), np.zeros_like(x)
    arrays = dict(dy=dy, x=x, w=w, dw=dw, dx=dx)
    b(**arrays, **b.allocate_workspaces(arrays, k=k, s=s, p=p, groups=groups), k=k, s=s, p=p, groups=groups)
    return y, dw, dx, C.chunk_images(g)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}h{}c{}k{}_k{}s{}p{}g{}_{}".format(*c[:8], np.dtype(c[8]).name))
def test_chunked_conv_equals_one_chunk_and_torch(case, monkeypatch):
    n, h, c, kout, k, s, p, groups, dt = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, h, h, c)).astype(dt)
    w = rng.standard_normal((kout, k, k, c // groups)).astype(dt)
    g = C.conv_geom(x.shape, w.shape, k, s, p, groups)
    dy = rng.standard_normal(g.y_shape).astype(dt)

    monkeypatch.setattr(C, "COL_MIN_ROWS", 10**9)
    monkeypatch.setattr(_parallel, "MAX_WORKERS", 1)
    with threadpool_limits(1):
        whole = _run(x, w, dy, k, s, p, groups)
    monkeypatch.setattr(_parallel, "MAX_WORKERS", 2)
    monkeypatch.setattr(C, "COL_MIN_ROWS", 2 * g.win.ho * g.win.wo)  # two images a chunk, a short last one
    monkeypatch.setattr(C, "COL_CHUNK", 1)
    with threadpool_limits(2):  # two kernel threads share the chunks (workspace slots, partial sums)
        chunked = _run(x, w, dy, k, s, p, groups)
    assert whole[3] == n and chunked[3] == 2

    tol = 1e-5 if dt == np.float32 else 2e-3
    for a, b in zip(whole[:3], chunked[:3]):
        a, b = a.astype(np.float64), b.astype(np.float64)
        assert np.abs(a - b).max() <= tol * np.abs(a).max()

    tx = torch.tensor(x.astype(np.float32)).permute(0, 3, 1, 2).requires_grad_()
    tw = torch.tensor(w.astype(np.float32)).permute(0, 3, 1, 2).requires_grad_()
    ty = F.conv2d(tx, tw, stride=s, padding=p, groups=groups)
    ty.backward(torch.tensor(dy.astype(np.float32)).permute(0, 3, 1, 2))
    ref = (ty.detach().permute(0, 2, 3, 1).numpy(), tw.grad.permute(0, 2, 3, 1).numpy(),
           tx.grad.permute(0, 2, 3, 1).numpy())
    tol = 1e-5 if dt == np.float32 else 1e-2
    for got, want in zip(chunked[:3], ref):
        assert np.abs(got.astype(np.float32) - want).max() <= tol * np.abs(want).max()


@pytest.mark.parametrize("n", [14, 13])
def test_im2col_parts_are_even_and_the_same_bits_on_one_thread_or_two(n, monkeypatch):
    """The batch is cut into one part per kernel thread, each chunked on its own
    (``C.part_images``): the parts differ by at most one image (the chunk list shared
    round-robin gave one thread 5 of 7 chunks' worth here), and the forward, both gradients and
    the weight gradient's partial sums are the same bits on one thread (the parts in turn) and
    on two."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, 9, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 3, 3, 8)).astype(np.float32)
    g = C.conv_geom(x.shape, w.shape, 3, 2, 1, 1)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    monkeypatch.setattr(C, "COL_MIN_ROWS", 2 * g.win.ho * g.win.wo)  # 2-image chunks (3-4 in a part)
    monkeypatch.setattr(C, "COL_CHUNK", 1)
    parts = C._chunks(g)
    sizes = [sum(c[1] for c in part) for part in parts]
    assert len(parts) == C.col_slots(g) == 2 and sum(sizes) == n and max(sizes) - min(sizes) <= 1
    assert all(len(part) >= 3 for part in parts) and parts[1][0][0] == sizes[0]
    runs = []
    for threads in (1, 2):
        with threadpool_limits(threads):
            runs.append(_run(x, w, dy, 3, 2, 1, 1))
    for a, b in zip(runs[0][:3], runs[1][:3]):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("threads", [1, 2])
def test_fc_and_pointwise_gemm_split_across_threads(threads):
    """Row-split GEMMs (FC forward/backward, 1x1 conv) agree with one NumPy matmul."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 1, 1, 300)).astype(np.float32)
    w = rng.standard_normal((200, 1, 1, 300)).astype(np.float32)
    b = rng.standard_normal((1, 1, 1, 200)).astype(np.float32)
    y = np.zeros((64, 1, 1, 200), np.float32)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dw, db, dx = np.zeros_like(w), np.zeros_like(b), np.zeros_like(x)
    with threadpool_limits(threads):
        KERNELS["fc_fwd"](x=x, w=w, b=b, y=y)
        KERNELS["fc_bwd"](dy=dy, w=w, x=x, dw=dw, db=db, dx=dx)
    x2, w2, dy2 = x.reshape(64, 300), w.reshape(200, 300), dy.reshape(64, 200)
    for got, want in ((y.reshape(64, 200), x2 @ w2.T + b.reshape(200)), (dw.reshape(200, 300), dy2.T @ x2),
                      (dx.reshape(64, 300), dy2 @ w2)):
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_dgrad_paths_are_chosen_by_shape():
    """Which input-gradient path a conv takes: tap-major for few channels, a convolution for
    stride 1 on large maps, col2im otherwise."""
    lenet2 = C.conv_geom((128, 14, 14, 6), (16, 5, 5, 6), 5, 1, 0, 1)
    stage1 = C.conv_geom((64, 32, 32, 64), (64, 3, 3, 64), 3, 1, 1, 1)
    stage4 = C.conv_geom((64, 4, 4, 512), (512, 3, 3, 512), 3, 1, 1, 1)
    down = C.conv_geom((64, 32, 32, 64), (128, 3, 3, 64), 3, 2, 1, 1)
    assert C.dgrad_tap_major(lenet2) and C.dgrad_geom(lenet2) is None
    assert not C.dgrad_tap_major(stage1) and C.dgrad_geom(stage1) is not None
    for g in (stage4, down):
        assert not C.dgrad_tap_major(g) and C.dgrad_geom(g) is None


@pytest.mark.parametrize("k,s,p", [(1, 2, 0), (3, 2, 1), (3, 3, 0)])
def test_col2im_dgrad_overwrites_every_element_of_dx(k, s, p, monkeypatch):
    """The col2im input gradient zeroes each chunk's images of dx on the thread that adds into
    them (no serial fill of the whole dx first): a dx full of NaN comes out as torch's dX, with
    the positions no window reaches (stride above k) zero, the same bits on one thread or two."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((11, 10, 10, 16)).astype(np.float32)
    w = rng.standard_normal((6, k, k, 16)).astype(np.float32)
    g = C.conv_geom(x.shape, w.shape, k, s, p, 1)
    assert C.dgrad_geom(g) is None and not C.dgrad_tap_major(g)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    monkeypatch.setattr(C, "COL_MIN_ROWS", 2 * g.win.ho * g.win.wo)  # 2-image chunks, several a part
    monkeypatch.setattr(C, "COL_CHUNK", 1)
    ws = KERNELS["conv_bwd"].allocate_workspaces(dict(dy=dy, x=x, w=w, dw=np.empty_like(w), dx=np.empty_like(x)),
                                                 k=k, s=s, p=p, groups=1)
    runs = []
    for threads in (1, 2):
        dx = np.full(x.shape, np.nan, np.float32)
        with threadpool_limits(threads):
            C.conv_dgrad(dy, w, dx, g, C._ws(**ws), algo="im2col")
        runs.append(dx)
    xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy()).requires_grad_()
    F.conv2d(xt, torch.from_numpy(w.transpose(0, 3, 1, 2).copy()), stride=s, padding=p).backward(
        torch.from_numpy(dy.transpose(0, 3, 1, 2).copy()))
    want = xt.grad.numpy().transpose(0, 2, 3, 1)
    assert runs[0].tobytes() == runs[1].tobytes()
    assert np.abs(runs[0] - want).max() <= 1e-5 * np.abs(want).max()


def test_chunk_rule_bounds_the_col_workspace():
    """A large early ResNet layer gets a col chunk of about COL_CHUNK elements, not the whole batch."""
    g = C.conv_geom((64, 32, 32, 64), (64, 3, 3, 64), 3, 1, 1, 1)
    sizes = C.conv_workspace_sizes(g, x16=False, w16=False, y16=False, phases=("fwd", "wgrad", "dgrad"))
    assert C.chunk_images(g) == 1 and C.dgrad_geom(g) is not None and C.col_slots(g) == _parallel.MAX_WORKERS
    # per worker slot: one image's columns and its padded copy
    assert sizes["col"] == _parallel.MAX_WORKERS * (32 * 32 * 576 + 34 * 34 * 64)
    assert sizes["wbuf"] == 2 * _parallel.MAX_WORKERS * 64 * 576  # per worker: a partial sum and a product


@pytest.mark.parametrize("s,p", [(1, 0), (1, 2), (2, 1)])
def test_one_channel_conv_tap_major_matches_torch(s, p):
    """One input channel: the tap-major im2col path (forward, weight gradient, input gradient)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 12, 12, 1)).astype(np.float32)
    w = rng.standard_normal((6, 5, 5, 1)).astype(np.float32)
    g = C.conv_geom(x.shape, w.shape, 5, s, p, 1)
    assert C.tap_major(g)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    y, dw, dx, _ = _run(x, w, dy, 5, s, p, 1)
    tx = torch.tensor(x).permute(0, 3, 1, 2).requires_grad_()
    tw = torch.tensor(w).permute(0, 3, 1, 2).requires_grad_()
    ty = F.conv2d(tx, tw, stride=s, padding=p)
    ty.backward(torch.tensor(dy).permute(0, 3, 1, 2))
    for got, want in ((y, ty.detach().permute(0, 2, 3, 1)), (dw, tw.grad.permute(0, 2, 3, 1)),
                      (dx, tx.grad.permute(0, 2, 3, 1))):
        want = want.numpy()
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_norm_split_across_threads_matches_float64(threads):
    """BN on an activation large enough to be split among the kernel threads (per-thread partial
    sums): forward, running statistics and backward against a float64 reference."""
    from tr_mlir.lowering.cpu import norm

    rng = np.random.default_rng(3)
    c = 64
    x = (rng.standard_normal((norm.SPLIT_ELEMENTS // (16 * 16 * c) + 1, 16, 16, c)) * 2 + 1).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    g, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    sm, si, y = np.zeros(c, np.float32), np.zeros(c, np.float32), np.empty_like(x)
    dg, db, dx = np.zeros(c, np.float32), np.zeros(c, np.float32), np.empty_like(x)
    with threadpool_limits(threads):
        KERNELS["bn2d_fwd"](x=x, gamma=g, beta=b, running_mean=rm, running_var=rv, y=y, save_mean=sm, save_istd=si)
        KERNELS["bn2d_bwd"](dy=dy, x=x, gamma=g, save_mean=sm, save_istd=si, dgamma=dg, dbeta=db, dx=dx)
    x64, d64 = x.astype(np.float64).reshape(-1, c), dy.astype(np.float64).reshape(-1, c)
    m = x64.shape[0]
    mu, var = x64.mean(0), x64.var(0)
    xh = (x64 - mu) / np.sqrt(var + 1e-5)
    want = {"y": (y, xh * g + b), "rm": (rm, 0.1 * mu), "rv": (rv, 0.9 + 0.1 * var * m / (m - 1)),
            "dg": (dg, (d64 * xh).sum(0)), "db": (db, d64.sum(0)),
            "dx": (dx, g / np.sqrt(var + 1e-5) * (d64 - d64.mean(0) - xh * (d64 * xh).mean(0)))}
    for name, (got, ref) in want.items():
        err = np.abs(got.reshape(ref.shape) - ref).max() / np.abs(ref).max()
        assert err < 2e-5, (name, err)


def test_pool_and_relu_split_by_threads_equal_serial():
    """Max pool (forward mask, backward) and ReLU on arrays large enough to be split among the
    kernel threads give exactly the serial results (element-wise work); 2^20 elements, so the
    NumPy ReLU (``TR_MLIR_CC=0``: whole-block halves from ``activation.HALVES_SPLIT_ELEMENTS``)
    splits too."""
    from tr_mlir.lowering.cpu import activation

    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 64, 64, 16)).astype(np.float32)
    assert x.size >= max(_parallel.MIN_SPLIT_ELEMENTS, activation.HALVES_SPLIT_ELEMENTS)
    x[0, 0, 0, 0] = x[0, 0, 1, 0] = 10.0  # a tie for the maximum: the first in row-major order wins
    out = {}
    for threads in (1, 2):
        y = np.empty((16, 32, 32, 16), np.float32)
        mask = np.empty(y.shape, np.int8)
        eq = np.empty(2 * y.size, bool)
        dy = np.arange(y.size, dtype=np.float32).reshape(y.shape)
        dx = np.empty_like(x)
        r, rm, rdx = np.empty_like(x), np.empty(x.shape, np.int8), np.empty_like(x)
        with threadpool_limits(threads):
            KERNELS["maxpool_fwd"](x=x, y=y, mask=mask, eq=eq, k=2, s=2, p=0)
            KERNELS["maxpool_bwd"](dy=dy, mask=mask, dx=dx, eq=eq, k=2, s=2, p=0)
            KERNELS["relu_fwd"](x=x, y=r, mask=rm)
            KERNELS["relu_bwd"](dy=x, mask=rm, dx=rdx)
        out[threads] = (y, mask, dx, r, rm, rdx)
    for a, b in zip(out[1], out[2]):
        assert np.array_equal(a, b)
    t = torch.tensor(x).permute(0, 3, 1, 2)
    ref, idx = F.max_pool2d(t, 2, 2, return_indices=True)
    assert np.array_equal(out[2][0], ref.permute(0, 2, 3, 1).numpy())
    assert out[2][1][0, 0, 0, 0] == 0  # the tie went to tap (0, 0)


def test_activation_split_by_threads_equals_serial(monkeypatch):
    """tanh forward/backward on an array large enough to be split among the kernel threads
    (both the forward's whole-block halves and the backward's chunks) equals the serial result
    and torch; the split is checked to have happened."""
    from tr_mlir.lowering.cpu import _parallel, _ufunc, activation

    pieces = []
    real_run = _parallel.run
    monkeypatch.setattr(_parallel, "run", lambda tasks: (pieces.append(len(tasks)), real_run(tasks)))
    # the forward's fallback: the ufunc on whole-block halves when NumPy's loop cannot run on the C
    # worker (tests/test_ufunc_loops.py covers that path)
    monkeypatch.setattr(_ufunc, "unary", lambda *a, **kw: False)
    rng = np.random.default_rng(5)
    n = max(activation.SPLIT_ELEMENTS, activation.HALVES_SPLIT_ELEMENTS) + 1000
    x = rng.standard_normal(n).astype(np.float32).reshape(-1, 1, 1, 8)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    out = {}
    for threads in (1, 2):
        y, dx = np.empty_like(x), np.empty_like(x)
        with threadpool_limits(threads):
            KERNELS["tanh_fwd"](x=x, y=y)
            assert pieces[-1] == threads  # the forward's halves (one call on 1 thread)
            KERNELS["tanh_bwd"](dy=dy, x=x, dx=dx)
        out[threads] = (y, dx)
    assert np.array_equal(out[1][0], out[2][0]) and np.array_equal(out[1][1], out[2][1])
    t = torch.tensor(x).requires_grad_()
    torch.tanh(t).backward(torch.tensor(dy))
    assert np.abs(out[2][0] - torch.tanh(torch.tensor(x)).numpy()).max() < 1e-6
    assert np.abs(out[2][1] - t.grad.numpy()).max() < 1e-5
