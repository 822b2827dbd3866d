"""Compiled pooling kernels (lowering/cpu/_cpool.py) and their dispatch (pool.use_c).

The C path is checked against PyTorch (max_pool2d values, its arg-max indices converted to our
tap numbers, gradients; avg_pool2d) and against the NumPy path of the same kernels (run with
``TR_MLIR_CC=0``): outputs and INT8 masks must be equal, element for element.
"""

import tracemalloc

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import _cc, _cpool, pool
from tr_mlir.lowering.cpu.window import window

pytestmark = pytest.mark.skipif(_cc.compiler() is None,
                                reason="no C compiler on this machine: compiled pooling kernels untested")


@pytest.fixture(autouse=True)
def _compiled_kernels_on(monkeypatch):
    """These tests test the compiled kernels: a ``TR_MLIR_CC=0`` in the environment (the
    suite's NumPy-path run) must not switch them off; tests of the switch set it themselves."""
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)

# (N, H, W, C), k, s, p: LeNet's pools, overlapping windows (k > s), padding, odd sizes, strides
# larger than the window, a single-pixel window, 1 and many channels
GEOMETRIES = [
    ((3, 28, 28, 6), 2, 2, 0),
    ((3, 10, 10, 16), 2, 2, 0),
    ((2, 7, 9, 5), 3, 2, 1),
    ((2, 9, 7, 3), 3, 2, 0),
    ((2, 7, 6, 3), 3, 1, 1),
    ((2, 7, 6, 3), 2, 1, 0),
    ((2, 11, 10, 4), 3, 3, 1),
    ((2, 9, 11, 2), 2, 3, 0),
    ((2, 5, 5, 1), 1, 1, 0),
    ((2, 8, 8, 3), 4, 2, 2),
    ((1, 13, 15, 33), 3, 2, 1),
]
IDS = [f"{'x'.join(map(str, g[0]))}-k{g[1]}s{g[2]}p{g[3]}" for g in GEOMETRIES]


def out_shape(shape, k, s, p):
    win = window(shape[1], shape[2], k, s, p)
    return (shape[0], win.ho, win.wo, shape[3])


def inputs(shape, seed, ties: bool):
    """fp32 NHWC input; with ``ties``, small integers (most windows hold equal maxima)."""
    rng = np.random.default_rng(seed)
    if ties:
        return rng.integers(-2, 3, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def run_fwd(x, k, s, p):
    y = np.full(out_shape(x.shape, k, s, p), 7.0, np.float32)
    mask = np.full(y.shape, 99, np.int8)
    eq = np.empty(2 * y.size, bool)
    pool.maxpool_fwd(x, y, mask, eq, k=k, s=s, p=p)
    return y, mask


def run_bwd(dy, mask, x_shape, k, s, p, dx=None):
    dx = np.full(x_shape, 5.0, np.float32) if dx is None else dx
    pool.maxpool_bwd(dy, mask, dx, np.empty(dy.shape, bool), k=k, s=s, p=p)
    return dx


def numpy_path(monkeypatch, fn, *args, **kw):
    """``fn`` run with the compiled kernels switched off (the NumPy code of pool.py)."""
    with monkeypatch.context() as m:
        m.setenv(_cc.ENV_SWITCH, "0")
        assert not pool.use_c(2, ())
        return fn(*args, **kw)


def torch_taps(idx: torch.Tensor, x_shape, k, s, p) -> np.ndarray:
    """PyTorch's flat arg-max indices (ih*W + iw per plane, NCHW) as our taps t = i*k + j (NHWC)."""
    _, _, w, _ = x_shape
    idx = idx.permute(0, 2, 3, 1).numpy()
    ho, wo = idx.shape[1], idx.shape[2]
    oh = np.arange(ho).reshape(1, ho, 1, 1)
    ow = np.arange(wo).reshape(1, 1, wo, 1)
    i = idx // w - (oh * s - p)
    j = idx % w - (ow * s - p)
    return (i * k + j).astype(np.int8)


@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
@pytest.mark.parametrize("shape,k,s,p", GEOMETRIES, ids=IDS)
def test_maxpool_c_vs_torch_and_numpy(monkeypatch, shape, k, s, p, ties):
    assert pool.use_c(k, (np.zeros(1, np.float32),), (np.zeros(1, np.int8),))
    x = inputs(shape, 1, ties)
    y, mask = run_fwd(x, k, s, p)
    # PyTorch: values, the first maximum in row-major window order, gradients
    xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous().requires_grad_()
    yt, idx = F.max_pool2d(xt, k, s, p, return_indices=True)
    np.testing.assert_array_equal(y, yt.detach().permute(0, 2, 3, 1).numpy())
    np.testing.assert_array_equal(mask, torch_taps(idx, shape, k, s, p))
    dy = inputs(y.shape, 2, False)
    yt.backward(torch.tensor(dy).permute(0, 3, 1, 2))
    dx = run_bwd(dy, mask, shape, k, s, p)
    np.testing.assert_allclose(dx, xt.grad.permute(0, 2, 3, 1).numpy(), rtol=1e-6, atol=1e-6)
    # the NumPy path: equal outputs and masks
    y0, mask0 = numpy_path(monkeypatch, run_fwd, x, k, s, p)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(mask, mask0)
    np.testing.assert_array_equal(dx, numpy_path(monkeypatch, run_bwd, dy, mask, shape, k, s, p))


@pytest.mark.parametrize("shape,k,s,p", GEOMETRIES, ids=IDS)
def test_maxpool_bwd_any_mask_and_aliasing(monkeypatch, shape, k, s, p):
    """Masks naming padded taps (or out-of-range values) drop their dy, as in the NumPy code;
    dx may be x's buffer (overwritten whatever it held)."""
    y_shape = out_shape(shape, k, s, p)
    rng = np.random.default_rng(3)
    mask = rng.integers(0, k * k, y_shape).astype(np.int8)
    mask.reshape(-1)[:3] = (k * k, 127, -1)
    dy = rng.standard_normal(y_shape).astype(np.float32)
    x = inputs(shape, 4, False)
    dx = run_bwd(dy, mask, shape, k, s, p, dx=x)
    assert dx is x
    np.testing.assert_array_equal(dx, numpy_path(monkeypatch, run_bwd, dy, mask, shape, k, s, p))


def test_maxpool_nan_and_inf(monkeypatch):
    """NaN propagates to y (mask 0, as the NumPy code: nothing equals NaN); -inf windows pick the
    first valid tap; the C path equals the NumPy path and torch's values."""
    shape, k, s, p = (2, 7, 7, 3), 3, 2, 1
    x = inputs(shape, 5, False)
    x[0, 1, 1, 0] = np.nan
    x[1, :3, :3, 1] = -np.inf
    x[1, 4, 4, 2] = np.inf
    y, mask = run_fwd(x, k, s, p)
    y0, mask0 = numpy_path(monkeypatch, run_fwd, x, k, s, p)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(mask, mask0)
    yt = F.max_pool2d(torch.tensor(x).permute(0, 3, 1, 2), k, s, p).permute(0, 2, 3, 1).numpy()
    np.testing.assert_array_equal(y, yt)
    assert np.isnan(y[0, 0, 0, 0]) and mask[0, 0, 0, 0] == 0
    assert y[1, 0, 0, 1] == -np.inf and mask[1, 0, 0, 1] == 4  # tap (1, 1): the first inside the input


def test_maxpool_bwd_nonfinite_dy_matches_torch():
    """A non-finite dy reaches only the winning input (PyTorch); the NumPy code's ``dy * (mask == t)``
    would put NaN on the window's other taps (the one documented difference)."""
    shape, k, s, p = (1, 4, 4, 2), 2, 2, 0
    x = inputs(shape, 6, False)
    y, mask = run_fwd(x, k, s, p)
    dy = np.ones(y.shape, np.float32)
    dy[0, 0, 0, 0] = np.inf
    dx = run_bwd(dy, mask, shape, k, s, p)
    xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous().requires_grad_()
    F.max_pool2d(xt, k, s, p).backward(torch.tensor(dy).permute(0, 3, 1, 2))
    np.testing.assert_array_equal(dx, xt.grad.permute(0, 2, 3, 1).numpy())


@pytest.mark.parametrize("shape,k,s,p", GEOMETRIES, ids=IDS)
def test_avgpool_c_vs_torch_and_numpy(monkeypatch, shape, k, s, p):
    x = inputs(shape, 7, False)
    y_shape = out_shape(shape, k, s, p)
    dy = inputs(y_shape, 8, False)

    def both():
        y = np.full(y_shape, 3.0, np.float32)
        pool.avgpool_fwd(x, y, k=k, s=s, p=p)
        dx = np.full(shape, 3.0, np.float32)
        pool.avgpool_bwd(dy, dx, k=k, s=s, p=p)
        return y, dx

    y, dx = both()
    y0, dx0 = numpy_path(monkeypatch, both)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(dx, dx0)
    xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous().requires_grad_()
    yt = F.avg_pool2d(xt, k, s, p, count_include_pad=True)
    yt.backward(torch.tensor(dy).permute(0, 3, 1, 2))
    np.testing.assert_allclose(y, yt.detach().permute(0, 2, 3, 1).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, xt.grad.permute(0, 2, 3, 1).numpy(), rtol=1e-6, atol=1e-6)


def test_long_rows_without_row_buffers(monkeypatch):
    """Rows longer than ROWBUF_MAX (W*C elements) take the tap-by-tap forward: same results."""
    shape, k, s, p = (2, 9, 10, 8), 3, 2, 1
    x = inputs(shape, 9, True)
    y, mask = run_fwd(x, k, s, p)
    monkeypatch.setattr(_cpool, "ROWBUF_MAX", 8)
    _cpool._fn.cache_clear()
    try:
        assert "#define ROWBUF 0" in _cpool.source(9, 10, 8, k, s, p)
        y1, mask1 = run_fwd(x, k, s, p)
    finally:
        monkeypatch.undo()
        _cpool._fn.cache_clear()
    np.testing.assert_array_equal(y, y1)
    np.testing.assert_array_equal(mask, mask1)


def test_dispatch_rule(monkeypatch):
    """pool.use_c: fp32 (INT8 masks), C-contiguous, k*k <= 127, a compiler, TR_MLIR_CC != 0; the
    kernels take the C path exactly then."""
    f32, i8 = np.zeros((1, 4, 4, 2), np.float32), np.zeros((1, 2, 2, 2), np.int8)
    assert pool.use_c(2, (f32,), (i8,))
    assert not pool.use_c(2, (f32.astype(np.float16),), (i8,))
    assert not pool.use_c(2, (f32,), (i8.astype(np.int16),))
    assert not pool.use_c(2, (f32[:, ::2],), (i8,))
    assert not pool.use_c(12, (f32,), (i8,))
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert not pool.use_c(2, (f32,), (i8,))
    monkeypatch.delenv(_cc.ENV_SWITCH)
    calls = []
    monkeypatch.setattr(_cpool, "maxpool_fwd", lambda *a: calls.append("c"))
    x = inputs((1, 4, 4, 2), 10, False)
    run_fwd(x, 2, 2, 0)
    assert calls == ["c"]
    y16, m = np.zeros((1, 2, 2, 2), np.float16), np.zeros((1, 2, 2, 2), np.int8)
    pool.maxpool_fwd(x.astype(np.float16), y16, m, np.empty(16, bool), k=2, s=2, p=0)  # fp16: NumPy
    assert calls == ["c"]
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    run_fwd(x, 2, 2, 0)
    assert calls == ["c"]


def test_mask_shape_checked():
    x = inputs((1, 4, 4, 2), 11, False)
    with pytest.raises(ValueError, match="expected a maxpool mask of shape"):
        pool.maxpool_fwd(x, np.zeros((1, 2, 2, 2), np.float32), np.zeros((1, 2, 2, 1), np.int8),
                         np.empty(16, bool), k=2, s=2, p=0)
    with pytest.raises(ValueError, match="expected a maxpool mask of shape"):
        pool.maxpool_bwd(np.zeros((1, 2, 2, 2), np.float32), np.zeros((2, 2, 2), np.int8), x,
                         np.empty(8, bool), k=2, s=2, p=0)


def test_threads_reproducible_and_no_allocation():
    """A batch large enough to be split among the kernel threads gives the same bits on 1 and 2
    threads and run to run; a warm call allocates no activation-sized memory."""
    shape, k, s, p = (96, 48, 48, 6), 2, 2, 0
    x = inputs(shape, 12, True)
    assert x.size >= _cpool.MIN_SPLIT_BWD >= _cpool.MIN_SPLIT_FWD
    dy = inputs(out_shape(shape, k, s, p), 13, False)
    results = []
    for threads in (1, 2, 2):
        with threadpool_limits(threads):
            y, mask = run_fwd(x, k, s, p)
            results.append((y, mask, run_bwd(dy, mask, shape, k, s, p)))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)
    y, mask = results[0][0].copy(), results[0][1].copy()
    dx = np.empty(shape, np.float32)
    eq = np.empty(2 * y.size, bool)
    with threadpool_limits(2):
        pool.maxpool_fwd(x, y, mask, eq, k=k, s=s, p=p)
        tracemalloc.start()
        try:
            pool.maxpool_fwd(x, y, mask, eq, k=k, s=s, p=p)
            pool.maxpool_bwd(dy, mask, dx, eq, k=k, s=s, p=p)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 64 * 1024, peak


# --------------------------------------------------------------------------------------
# tanh: NumPy ufunc forward on whole blocks, compiled fused backward (activation.py)
# --------------------------------------------------------------------------------------

from tr_mlir.lowering.cpu import activation  # noqa: E402
from tr_mlir.lowering.cpu.registry import KERNELS  # noqa: E402


def tanh_bwd(dy, x, dx=None):
    dx = np.empty_like(x) if dx is None else dx
    KERNELS["tanh_bwd"](dy=dy, x=x, dx=dx)
    return dx


def test_tanh_c_accuracy():
    """The C derivative (dy = 1) against float64 sech^2 over a dense sweep of x: within 4.5 ulp
    relative and 2e-7 absolute (module doc of activation.py), and the specials."""
    x = np.concatenate([np.linspace(-12, 12, 400_001, dtype=np.float32),
                        np.logspace(-30, 1.2, 100_000).astype(np.float32)])
    x = np.concatenate([x, -x])
    dx = tanh_bwd(np.ones_like(x), x)
    ref = 1.0 / np.cosh(x.astype(np.float64)) ** 2
    assert (np.abs(dx - ref) / np.spacing(ref.astype(np.float32))).max() <= 4.5
    assert np.abs(dx - ref).max() < 2e-7
    special = np.array([0.0, -0.0, np.inf, -np.inf, 30.0, 100.0, np.nan], np.float32)
    got = tanh_bwd(np.full(7, 2.0, np.float32), special)
    np.testing.assert_array_equal(got[:4], [2.0, 2.0, 0.0, 0.0])
    assert 0 < got[4] < 1e-24 and got[5] == 0.0
    assert np.isnan(got[6])


@pytest.mark.parametrize("alias", ["none", "x", "dy"])
def test_tanh_bwd_c_vs_torch_and_numpy(monkeypatch, alias):
    rng = np.random.default_rng(20)
    x = (3 * rng.standard_normal((4, 7, 9, 6))).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    assert activation.use_c_tanh(dy, x, x)
    xt = torch.tensor(x).requires_grad_()
    torch.tanh(xt).backward(torch.tensor(dy))
    ref = xt.grad.numpy()
    numpy_dx = numpy_path(monkeypatch, tanh_bwd, dy, x)
    xc, dyc = x.copy(), dy.copy()
    out = {"none": None, "x": xc, "dy": dyc}[alias]
    dx = tanh_bwd(dyc, xc, out)
    # 1 - t^2 cancels where |t| is near 1: a one-ulp difference in t (6e-8) moves it by up to
    # 1.2e-7, times |dy| (< 5 here); torch's own t is rounded to fp32 as well
    np.testing.assert_allclose(dx, ref, rtol=2e-6, atol=6e-7)
    np.testing.assert_allclose(dx, numpy_dx, rtol=2e-6, atol=6e-7)
    assert np.abs(dx - ref).mean() < 3e-8


def test_tanh_dispatch_and_forward(monkeypatch):
    """The C backward runs for fp32 contiguous arrays unless TR_MLIR_CC=0; fp16 and strided
    arrays keep NumPy; the fp32 forward (whole-block np.tanh) equals np.tanh."""
    x = np.linspace(-4, 4, 64, dtype=np.float32).reshape(2, 4, 4, 2)
    assert activation.use_c_tanh(x, x, x)
    assert not activation.use_c_tanh(x.astype(np.float16), x, x)
    assert not activation.use_c_tanh(x[:, ::2], x, x)
    calls = []
    monkeypatch.setitem(activation._C_BACKWARD, "tanh", (activation.use_c_tanh, lambda *a: calls.append(1)))
    dx = np.full_like(x, 9.0)
    tanh_bwd(x, x, dx)
    assert calls == [1]
    tanh_bwd(x.astype(np.float16), x.astype(np.float16))  # fp16: NumPy
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    assert not activation.use_c_tanh(x, x, x)
    np.testing.assert_allclose(tanh_bwd(x, x, dx), x * (1 - np.tanh(x) ** 2), rtol=1e-6, atol=1e-7)
    assert calls == [1]
    monkeypatch.delenv(_cc.ENV_SWITCH)
    y = np.empty_like(x)
    KERNELS["tanh_fwd"](x=x, y=y)
    np.testing.assert_array_equal(y, np.tanh(x))
    h = x.astype(np.float16)
    yh = np.empty_like(h)
    KERNELS["tanh_fwd"](x=h, y=yh)
    np.testing.assert_allclose(yh, np.tanh(x), atol=1e-3)


def test_tanh_threads_reproducible_and_no_allocation():
    rng = np.random.default_rng(21)
    x = rng.standard_normal(3 * activation.C_SPLIT_ELEMENTS + 5).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    outs = []
    for threads in (1, 2, 2):
        with threadpool_limits(threads):
            y = np.empty_like(x)
            KERNELS["tanh_fwd"](x=x, y=y)
            outs.append((y, tanh_bwd(dy, x)))
    for other in outs[1:]:
        np.testing.assert_array_equal(outs[0][0], other[0])
        np.testing.assert_array_equal(outs[0][1], other[1])
    y, dx = np.empty_like(x), np.empty_like(x)
    with threadpool_limits(2):
        tanh_bwd(dy, x, dx)
        tracemalloc.start()
        try:
            KERNELS["tanh_fwd"](x=x, y=y)
            tanh_bwd(dy, x, dx)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 64 * 1024, peak


@pytest.mark.parametrize("n", [9, 200 * 1024, 300_000])  # a tail, the MLP's widest ReLU, split in two
@pytest.mark.parametrize("alias", [False, True])
def test_relu_c_equals_numpy_bit_for_bit(monkeypatch, n, alias):
    """The compiled ReLU gives the NumPy code's bits: NaN kept by the forward, -0 -> +0, mask 0
    for NaN, and dy * mask as a product (Inf/NaN in dy gives NaN where the mask is 0)."""
    from tr_mlir.lowering.cpu import activation

    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal(n).astype(np.float32)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45], np.float32)
    x[:len(special)] = special
    dy[:len(special)] = special[::-1]

    def run():
        xs, dys = x.copy(), dy.copy()
        y = xs if alias else np.empty_like(xs)
        m = np.empty(n, np.int8)
        activation.relu_fwd(xs, y, m)
        dx = dys if alias else np.empty_like(dys)
        activation.relu_bwd(dys, m, dx)
        return y, m, dx

    with threadpool_limits(2):
        assert activation._relu_fn("relu_fwd", x, x, np.empty(n, np.int8)) is not None
        compiled = run()
        monkeypatch.setenv(_cc.ENV_SWITCH, "0")
        assert activation._relu_fn("relu_fwd", x, x, np.empty(n, np.int8)) is None
        with np.errstate(invalid="ignore"):  # NumPy's Inf * 0: the NaN we check for
            reference = run()
    for c, r in zip(compiled, reference):
        assert c.tobytes() == r.tobytes()
    assert np.isnan(compiled[0][0]) and not np.signbit(compiled[0][4]) and compiled[1][0] == 0


def test_relu_c_dispatch_and_sizes():
    """fp16 (AMP) and non-contiguous arrays keep the NumPy code; mismatched sizes raise."""
    from tr_mlir.lowering.cpu import activation

    x16 = np.ones(8, np.float16)
    assert activation._relu_fn("relu_fwd", x16, x16, np.empty(8, np.int8)) is None
    x = np.ones(16, np.float32)[::2]
    assert activation._relu_fn("relu_bwd", x, np.empty(8, np.int8), x) is None
    with pytest.raises(ValueError, match="expected x, y, mask of one size"):
        activation.relu_fwd(np.ones(4, np.float32), np.ones(4, np.float32), np.empty(3, np.int8))
    with pytest.raises(ValueError, match="expected dy, mask, dx of one size"):
        activation.relu_bwd(np.ones(4, np.float32), np.empty(3, np.int8), np.ones(4, np.float32))
