"""NumPy kernels against PyTorch (CPU): every layer kernel forward and backward, optimizers against torch.optim, LARS against a transcription
of the facts sheet, range kernels, the registry's conventions and the no-allocation contract.

Layouts: ours NHWC / KRSC / FC (out, H*W*C over NHWC); torch NCHW / OIHW / FC over NCHW-flattened
features, converted here. fp32 must agree to ~1e-5 (relative to the reference's max magnitude);
AMP (fp16 arrays, fp32 accumulation) to ~1e-2, against torch in fp32 on the fp16-rounded inputs.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tr_mlir.lowering.cpu import KERNELS
from tr_mlir.lowering.cpu.dropout import dropout_rng_state

torch.set_num_threads(1)

F32, F16 = np.float32, np.float16
TOL = {F32: 1e-5, F16: 1e-2}
DTYPES = [pytest.param(F32, id="fp32"), pytest.param(F16, id="amp")]


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def to_t(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    """NHWC (or any) array -> torch tensor, NCHW for 4-D."""
    a = np.asarray(a, dtype=np.float32)
    if a.ndim == 4:
        a = a.transpose(0, 3, 1, 2)
    return torch.tensor(np.ascontiguousarray(a), requires_grad=grad)


def from_t(t: torch.Tensor) -> np.ndarray:
    a = t.detach().numpy()
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


def w_t(w: np.ndarray, grad: bool = True) -> torch.Tensor:
    """KRSC conv weight -> OIHW torch tensor."""
    return torch.tensor(np.ascontiguousarray(w.astype(np.float32).transpose(0, 3, 1, 2)), requires_grad=grad)


def w_from_t(g: torch.Tensor) -> np.ndarray:
    return g.detach().numpy().transpose(0, 2, 3, 1)


def check(ours: np.ndarray, ref: np.ndarray, dtype, what: str, tol: float | None = None) -> None:
    ours = np.asarray(ours, dtype=np.float64).reshape(np.shape(ref))
    ref = np.asarray(ref, dtype=np.float64)
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-6)
    err = float(np.abs(ours - ref).max(initial=0.0)) / scale
    assert err <= (tol or TOL[dtype]), f"{what}: relative error {err:.2e} > {(tol or TOL[dtype]):.0e}"


def run(name: str, params: dict | None = None, **arrays) -> dict[str, np.ndarray]:
    """Run kernel ``name`` through its spec (workspaces allocated from its rule); returns them."""
    spec = KERNELS[name]
    params = params or {}
    ws = spec.allocate_workspaces(arrays, **params)
    spec.bind({**arrays, **ws}, params)()
    return ws


def rnd(rng: np.random.Generator, shape, dtype=F32, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def r32(a: np.ndarray) -> np.ndarray:
    """The fp32 values a kernel actually sees (fp16-rounded for AMP arrays)."""
    return a.astype(np.float32)


# --------------------------------------------------------------------------------------
# conv
# --------------------------------------------------------------------------------------


def conv_case(dtype, n, h, w, c, k_out, k, s, p, groups, seed=0):
    rng = np.random.default_rng(seed)
    x = rnd(rng, (n, h, w, c), dtype)
    wt = rnd(rng, (k_out, k, k, c // groups), dtype, 0.3)
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    y = np.zeros((n, ho, wo, k_out), dtype)
    prm = dict(k=k, s=s, p=p, groups=groups)
    run("conv_fwd", prm, x=x, w=wt, y=y)
    xt, wtt = to_t(x, True), w_t(wt)
    yt = F.conv2d(xt, wtt, stride=s, padding=p, groups=groups)
    check(y, from_t(yt), dtype, "conv y")
    dy = rnd(rng, y.shape, dtype)
    yt.backward(to_t(dy))
    dw = np.zeros(wt.shape, dtype)
    buf = x.copy()  # dX is written over X's buffer, as the seed does
    run("conv_bwd", prm, dy=dy, x=buf, w=wt, dw=dw, dx=buf)
    check(dw, w_from_t(wtt.grad), dtype, "conv dw")
    check(buf, from_t(xt.grad), dtype, "conv dx")
    dw2 = np.zeros(wt.shape, dtype)
    run("conv_bwd_first_layer", prm, dy=dy, x=x, w=wt, dw=dw2)
    check(dw2, w_from_t(wtt.grad), dtype, "conv dw (first layer)")


CONV_RECORDS = [
    # (n, h, w, c, K, k, s, p, groups)
    (2, 7, 6, 4, 6, 3, 1, 1, 1),
    (2, 8, 8, 4, 6, 3, 2, 1, 2),
    (2, 8, 8, 6, 6, 3, 2, 1, 6),  # depthwise, stride 2
    (2, 8, 8, 6, 6, 3, 1, 1, 6),  # depthwise
    (2, 5, 5, 4, 8, 1, 1, 0, 1),  # pointwise
    (2, 5, 5, 4, 8, 1, 2, 0, 1),  # strided 1x1 (projection)
    (1, 3, 3, 2, 2, 3, 1, 2, 1),  # padding > k/2: a tap with no valid output
    (2, 9, 7, 4, 4, 5, 3, 2, 2),
    (2, 6, 6, 3, 6, 3, 1, 1, 3),  # grouped, channel multiplier 2
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rec", CONV_RECORDS, ids=lambda r: "x".join(map(str, r)))
def test_conv(rec, dtype):
    conv_case(dtype, *rec)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    k=st.integers(1, 4), s=st.integers(1, 3), p=st.integers(0, 2), g=st.sampled_from([1, 2, 4]),
    mult=st.integers(1, 2), h=st.integers(3, 8), w=st.integers(3, 8), seed=st.integers(0, 1000),
)
def test_conv_sweep(k, s, p, g, mult, h, w, seed):
    if h + 2 * p < k or w + 2 * p < k:
        return
    conv_case(F32, 2, h, w, 4, g * mult, k, s, p, g, seed)


def test_conv_bad_weight_shape_is_an_error():
    x, w, y = np.zeros((1, 4, 4, 3), F32), np.zeros((4, 3, 3, 2), F32), np.zeros((1, 4, 4, 4), F32)
    with pytest.raises(ValueError, match=r"expected conv weight of shape \(K, k, k, C/groups\)"):
        run("conv_fwd", dict(k=3, s=1, p=1, groups=1), x=x, w=w, y=y)


# --------------------------------------------------------------------------------------
# batch norm
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["c", "numpy"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,shape", [("bn2d", (3, 4, 5, 8)), ("bn1d", (6, 1, 1, 8)), ("bn2d", (16, 32, 32, 32))])
def test_batch_norm(kind, shape, dtype, path, monkeypatch):
    """Forward (y, running and saved statistics), backward with dx over x's buffer, and inference,
    against PyTorch's BatchNorm; fp32 runs the C kernels of ``_cnorm`` (``path`` c; the last shape,
    2^19 elements, is split among two kernel threads) or the NumPy code (``TR_MLIR_CC=0``), fp16
    always NumPy."""
    from tr_mlir.lowering.cpu import _cc, _cnorm, _parallel

    if path == "numpy":
        monkeypatch.setenv("TR_MLIR_CC", "0")
    elif not _cc.available():
        pytest.skip(f"no C compiler: {_cc.reason()}")
    split = np.prod(shape) >= _cnorm.SPLIT_ELEMENTS
    assert split == (shape == (16, 32, 32, 32))  # the large shape exercises the split (kept past the threshold)
    if split:
        monkeypatch.setattr(_parallel, "workers", lambda: 2)
    rng = np.random.default_rng(1)
    c = shape[-1]
    x = (rnd(rng, shape) * 2 + 0.5).astype(dtype)
    gamma, beta = rnd(rng, c) + 1, rnd(rng, c)
    rm, rv = rnd(rng, c) * 0.1, np.abs(rnd(rng, c)) + 0.5
    eps, mom = 1e-5, 0.1
    y = np.zeros(shape, dtype)
    sm, si = np.zeros(c, F32), np.zeros(c, F32)
    rm_o, rv_o = rm.copy(), rv.copy()
    run(f"{kind}_fwd", x=x, eps=np.array([eps], F32), momentum=np.array([mom], F32), gamma=gamma, beta=beta, running_mean=rm_o,
        running_var=rv_o, y=y, save_mean=sm, save_istd=si)
    bn = torch.nn.BatchNorm2d(c, eps=eps, momentum=mom) if kind == "bn2d" else torch.nn.BatchNorm1d(c, eps=eps,
                                                                                                  momentum=mom)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(gamma))
        bn.bias.copy_(torch.tensor(beta))
        bn.running_mean.copy_(torch.tensor(rm))
        bn.running_var.copy_(torch.tensor(rv))
    xt = to_t(x, True) if kind == "bn2d" else torch.tensor(r32(x).reshape(shape[0], c), requires_grad=True)
    yt = bn(xt)
    check(y, from_t(yt), dtype, "bn y")
    check(rm_o, bn.running_mean.numpy(), dtype, "running mean")
    check(rv_o, bn.running_var.numpy(), dtype, "running var (unbiased)")
    check(sm, r32(x).reshape(-1, c).mean(0), dtype, "saved mean")
    dy = rnd(rng, shape, dtype)
    yt.backward(to_t(dy) if kind == "bn2d" else torch.tensor(r32(dy).reshape(shape[0], c)))
    buf = x.copy()
    dg, db = np.zeros(c, F32), np.zeros(c, F32)
    run(f"{kind}_bwd", x=buf, dy=dy, gamma=gamma, save_mean=sm, save_istd=si, dgamma=dg, dbeta=db, dx=buf)
    check(buf, from_t(xt.grad).reshape(shape), dtype, "bn dx")
    check(dg, bn.weight.grad.numpy(), dtype, "bn dgamma")
    check(db, bn.bias.grad.numpy(), dtype, "bn dbeta")
    # inference through the folded parameters
    es, eb = np.zeros(c, F32), np.zeros(c, F32)
    run("bn_update_eq_params", eps=eps, gamma=gamma, beta=beta, running_mean=rm_o, running_var=rv_o,
        eq_scale=es, eq_bias=eb)
    bn.eval()
    yi = np.zeros(shape, dtype)
    run(f"{kind}_inf", x=x, eq_scale=es, eq_bias=eb, y=yi)
    ref = bn(xt.detach())
    check(yi, from_t(ref).reshape(shape), dtype, "bn inference")


@pytest.mark.parametrize("c", [3, 64, 144])
def test_batch_norm_compiled_sums_in_row_order(c):
    """The C statistics kernels add row after row in float64 (module doc of ``_cnorm``; the
    products of widened fp32 values are exact in float64): the same bits as NumPy's sequential
    ``cumsum`` over rows. Pins the summation order (a reordering, e.g. two rows per step, would
    change every run's bits) and that the sums kept in locals land in the caller's arrays; the
    gated backward sums (a ReLU output or INT8 mask as the gate) likewise."""
    from tr_mlir.lowering.cpu import _cc, _cnorm

    if not _cc.available():
        pytest.skip(f"no C compiler: {_cc.reason()}")
    rng = np.random.default_rng(7)
    m, r0, r1 = 203, 5, 197
    x = (rnd(rng, (m, c)) * 3 + 7).astype(F32)
    dy = rnd(rng, (m, c))
    p, mu = x[0].copy(), x.mean(0).astype(F32)
    ptr = _cc.address

    def sums(name, *arrays):
        out = np.full((2, c), np.nan)
        _cnorm.function(name, c)(*(ptr(a) for a in arrays), ptr(out[0]), ptr(out[1]), r0, r1)
        return out

    v = x[r0:r1].astype(np.float64) - p.astype(np.float64)
    ref = np.stack([np.cumsum(v, axis=0)[-1], np.cumsum(v * v, axis=0)[-1]])
    assert sums("bn_stats", x, p).tobytes() == ref.tobytes()
    d = dy[r0:r1].astype(np.float64)
    xc = x[r0:r1].astype(np.float64) - mu.astype(np.float64)
    ref = np.stack([np.cumsum(d, axis=0)[-1], np.cumsum(d * xc, axis=0)[-1]])
    assert sums("bn_bwd_stats", dy, x, mu).tobytes() == ref.tobytes()
    y = np.maximum(x - 7, 0).astype(F32)  # a ReLU output as the gate: about half zero
    dg = d * (y[r0:r1] > 0)
    ref = np.stack([np.cumsum(dg, axis=0)[-1], np.cumsum(dg * xc, axis=0)[-1]])
    assert sums("bn_bwd_stats_y", dy, y, x, mu).tobytes() == ref.tobytes()
    assert sums("bn_bwd_stats_m", dy, (y > 0).astype(np.int8), x, mu).tobytes() == ref.tobytes()


def test_batch_norm_wider_than_the_c_kernels_runs_numpy(monkeypatch):
    """Past ``_cnorm.MAX_CHANNELS`` (the C kernels' sums live on the stack) a batch norm runs the
    NumPy code, with the same results to rounding."""
    from tr_mlir.lowering.cpu import _cc, _cnorm

    if not _cc.available():
        pytest.skip(f"no C compiler: {_cc.reason()}")
    rng = np.random.default_rng(3)
    x = rnd(rng, (4, 3, 3, 16)) + 2
    assert _cnorm.usable(x)
    outs = []
    for cap in (_cnorm.MAX_CHANNELS, 8):
        monkeypatch.setattr(_cnorm, "MAX_CHANNELS", cap)
        y, sm, si = np.zeros_like(x), np.zeros(16, F32), np.zeros(16, F32)
        run("bn2d_fwd", x=x, eps=1e-5, momentum=0.1, gamma=np.ones(16, F32), beta=np.zeros(16, F32),
            running_mean=np.zeros(16, F32), running_var=np.ones(16, F32), y=y, save_mean=sm, save_istd=si)
        outs.append(y)
    assert not _cnorm.usable(x)
    np.testing.assert_allclose(outs[1], outs[0], rtol=0, atol=1e-5)


def test_batch_norm_compiled_dx_over_dy_and_large_mean():
    """The C backward may write dx over dy (the seed reuses gradient slots); a mean far from 0
    (100 standard deviations) keeps fp32 accuracy (float64 sums, module doc of ``_cnorm``)."""
    from tr_mlir.lowering.cpu import _cc

    if not _cc.available():
        pytest.skip(f"no C compiler: {_cc.reason()}")
    rng = np.random.default_rng(5)
    shape, c = (8, 6, 6, 24), 24
    x = rnd(rng, shape) + 100
    gamma, beta = rnd(rng, c) + 1, rnd(rng, c)
    y, sm, si = np.zeros(shape, F32), np.zeros(c, F32), np.zeros(c, F32)
    run("bn2d_fwd", x=x, eps=1e-5, momentum=0.1, gamma=gamma, beta=beta, running_mean=np.zeros(c, F32),
        running_var=np.ones(c, F32), y=y, save_mean=sm, save_istd=si)
    xt = torch.tensor(x.astype(np.float64).transpose(0, 3, 1, 2), requires_grad=True)
    yt = F.batch_norm(xt, None, None, torch.tensor(gamma, dtype=torch.float64),
                      torch.tensor(beta, dtype=torch.float64), True, 0.1, 1e-5)
    check(y, yt.detach().numpy().transpose(0, 2, 3, 1), F32, "bn y, mean 100")
    dy = rnd(rng, shape)
    yt.backward(torch.tensor(dy.astype(np.float64).transpose(0, 3, 1, 2)))
    buf = dy.copy()
    run("bn2d_bwd", x=x, dy=buf, gamma=gamma, save_mean=sm, save_istd=si, dgamma=np.zeros(c, F32),
        dbeta=np.zeros(c, F32), dx=buf)
    check(buf, xt.grad.numpy().transpose(0, 2, 3, 1), F32, "bn dx over dy, mean 100")


def test_bn_running_stats_over_steps_match_batchnorm2d():
    rng = np.random.default_rng(2)
    c = 4
    bn = torch.nn.BatchNorm2d(c, momentum=0.3)
    rm, rv = np.zeros(c, F32), np.ones(c, F32)
    for _ in range(3):
        x = rnd(rng, (2, 3, 3, c)) * 3 + 1
        run("bn2d_fwd", eps=1e-5, momentum=np.array([0.3], F32), x=x, gamma=np.ones(c, F32), beta=np.zeros(c, F32),
            running_mean=rm, running_var=rv, y=np.zeros_like(x), save_mean=np.zeros(c, F32),
            save_istd=np.zeros(c, F32))
        bn(to_t(x))
    check(rm, bn.running_mean.numpy(), F32, "running mean")
    check(rv, bn.running_var.numpy(), F32, "running var")


# --------------------------------------------------------------------------------------
# activations
# --------------------------------------------------------------------------------------

ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
    "relu6": F.relu6,
    "leaky_relu": F.leaky_relu,
    "hardswish": F.hardswish,
    "elu": F.elu,
}


def _act_input(rng, shape, dtype):
    x = rnd(rng, shape, scale=4.0)
    x.reshape(-1)[:8] = [0.0, 6.0, -3.0, 3.0, 100.0, -100.0, 1e-8, -1e-8]  # kinks and saturations
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(ACTS))
def test_activation(name, dtype):
    rng = np.random.default_rng(3)
    shape = (2, 5, 7, 3)
    x = _act_input(rng, shape, dtype)
    y = np.zeros(shape, dtype)
    run(f"{name}_fwd", x=x, y=y)
    xt = to_t(x, True)
    yt = ACTS[name](xt)
    check(y, from_t(yt), dtype, f"{name} y")
    y2 = np.zeros(shape, dtype)
    run(f"{name}_inf", x=x, y=y2)
    np.testing.assert_array_equal(y2, y)
    dy = rnd(rng, shape, dtype)
    yt.backward(to_t(dy))
    buf = x.copy()
    run(f"{name}_bwd", dy=dy, x=buf, dx=buf)  # dX over X
    check(buf, from_t(xt.grad), dtype, f"{name} dx")


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu(dtype):
    rng = np.random.default_rng(4)
    shape = (2, 4, 4, 3)
    x = _act_input(rng, shape, dtype)
    y, mask = np.zeros(shape, dtype), np.zeros(shape, np.int8)
    run("relu_fwd", x=x, y=y, mask=mask)
    xt = to_t(x, True)
    yt = F.relu(xt)
    check(y, from_t(yt), dtype, "relu y")
    np.testing.assert_array_equal(mask, (x > 0).astype(np.int8))
    dy = rnd(rng, shape, dtype)
    yt.backward(to_t(dy))
    dx = x.copy()
    run("relu_bwd", dy=dy, mask=mask, dx=dx)
    check(dx, from_t(xt.grad), dtype, "relu dx")
    yi = np.zeros(shape, dtype)
    run("relu_inf", x=x, y=yi)
    np.testing.assert_array_equal(yi, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_output_form_against_torch(dtype):
    """The output form of a ReLU (issue 12): ``relu_fwd`` without a mask writes the same y, and
    ``relu_bwd_from_output`` (dx = dy * (y > 0), from y) matches PyTorch's ReLU backward
    (``threshold_backward(grad, result, 0)``), also written over dy or over y."""
    rng = np.random.default_rng(5)
    shape = (2, 4, 4, 3)
    x = _act_input(rng, shape, dtype)
    y, mask = np.zeros(shape, dtype), np.zeros(shape, np.int8)
    run("relu_fwd", x=x, y=y, mask=mask)
    y2 = np.full(shape, 7, dtype)
    run("relu_fwd", x=x, y=y2)
    assert y2.tobytes() == y.tobytes()
    xt = to_t(x, True)
    yt = F.relu(xt)
    dy = rnd(rng, shape, dtype)
    yt.backward(to_t(dy))
    dx = np.full(shape, np.nan, dtype)
    run("relu_bwd_from_output", dy=dy, y=y, dx=dx)
    check(dx, from_t(xt.grad), dtype, "relu dx from y")
    for over in ("dy", "y"):
        arrays = {"dy": dy.copy(), "y": y.copy()}
        run("relu_bwd_from_output", **arrays, dx=arrays[over])
        assert arrays[over].tobytes() == dx.tobytes(), over


def _special_grid(dtype):
    """Every pair (x, dy) of special values: NaN, +-0, +-Inf, subnormals, the smallest and largest
    normals, +-1, tiled past the kernels' thread split (and chunk) sizes."""
    info = np.finfo(dtype)
    v = np.array([np.nan, -np.nan, 0.0, -0.0, np.inf, -np.inf, info.smallest_subnormal, -info.smallest_subnormal,
                  info.tiny, -info.tiny, 1.0, -1.0, info.max, -info.max, 0.5, -3.0], dtype)
    x, dy = (a.reshape(-1) for a in np.meshgrid(v, v))
    reps = -(-(1 << 19) // x.size) + 1
    return np.tile(x, reps), np.tile(dy, reps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("path", ["c", "numpy"])
def test_relu_backward_from_output_is_bit_identical_to_the_mask_form(dtype, path, monkeypatch):
    """For every input, the output form gives the mask form's bits: y > 0 exactly where x > 0 (y
    keeps NaN; -0 becomes +0 in fp32 and stays -0 in NumPy's fp16 maximum, not > 0 either way), and
    dy * (y > 0) is dy * mask to the bit (Inf * 0 = NaN, -1 * 0 = -0, NaN payloads). Against PyTorch the values agree wherever x is not NaN and dy is finite:
    torch selects (``result <= 0 ? 0 : grad``), so it passes dy through at a NaN input and gives +0
    where we give NaN (dy = +-Inf) or -0 (dy < 0) at y = 0, as the mask form always did."""
    if path == "numpy":
        monkeypatch.setenv("TR_MLIR_CC", "0")
    x, dy = _special_grid(dtype)
    y, mask = np.zeros_like(x), np.zeros(x.shape, np.int8)
    with np.errstate(invalid="ignore"):
        run("relu_fwd", x=x, y=y, mask=mask)
        y2 = np.full_like(x, 3)
        run("relu_fwd", x=x, y=y2)
        assert y2.tobytes() == y.tobytes()
        assert np.array_equal(y > 0, x > 0) and np.array_equal(mask, (x > 0).astype(np.int8))
        assert np.isnan(y[np.isnan(x)]).all() and (dtype is F16 or not np.signbit(y[x == 0]).any())
        want, got = np.full_like(x, 9), np.full_like(x, 5)
        run("relu_bwd", dy=dy, mask=mask, dx=want)
        run("relu_bwd_from_output", dy=dy, y=y, dx=got)
    assert got.tobytes() == want.tobytes()
    xt = torch.tensor(x.astype(np.float32), requires_grad=True)
    torch.relu(xt).backward(torch.tensor(dy.astype(np.float32)))
    ref = xt.grad.numpy().astype(dtype)
    keep = ~np.isnan(x) & np.isfinite(dy)
    assert np.array_equal(got[keep], ref[keep])  # +0 == -0
    assert np.isnan(got[(x <= 0) & np.isinf(dy)]).all() and (got[np.isnan(x) & np.isfinite(dy)] == 0).all()


# --------------------------------------------------------------------------------------
# pooling, fc, reshapes, add
# --------------------------------------------------------------------------------------

POOLS = [(2, 2, 0), (3, 2, 1), (3, 1, 1), (2, 1, 0), (3, 3, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,s,p", POOLS)
def test_maxpool(k, s, p, dtype):
    rng = np.random.default_rng(5)
    x = rnd(rng, (2, 7, 6, 3), dtype)
    x[0, 0, :2, 0] = 1.5  # a tie: the first maximum wins, as in torch
    xt = to_t(x, True)
    yt, idx = F.max_pool2d(xt, k, s, p, return_indices=True)
    y, mask = np.zeros(from_t(yt).shape, dtype), np.zeros(from_t(yt).shape, np.int8)
    run("maxpool_fwd", dict(k=k, s=s, p=p), x=x, y=y, mask=mask)
    check(y, from_t(yt), dtype, "maxpool y")
    dy = rnd(rng, y.shape, dtype)
    yt.backward(to_t(dy))
    buf = x.copy()
    run("maxpool_bwd", dict(k=k, s=s, p=p), dy=dy, mask=mask, dx=buf)
    check(buf, from_t(xt.grad), dtype, "maxpool dx")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,s,p", POOLS)
def test_avgpool(k, s, p, dtype):
    rng = np.random.default_rng(6)
    x = rnd(rng, (2, 7, 6, 3), dtype)
    xt = to_t(x, True)
    yt = F.avg_pool2d(xt, k, s, p)  # count_include_pad=True (default)
    y = np.zeros(from_t(yt).shape, dtype)
    run("avgpool_fwd", dict(k=k, s=s, p=p), x=x, y=y)
    check(y, from_t(yt), dtype, "avgpool y")
    dy = rnd(rng, y.shape, dtype)
    yt.backward(to_t(dy))
    buf = x.copy()
    run("avgpool_bwd", dict(k=k, s=s, p=p), dy=dy, dx=buf)
    check(buf, from_t(xt.grad), dtype, "avgpool dx")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gap(dtype):
    rng = np.random.default_rng(7)
    x = rnd(rng, (3, 5, 4, 6), dtype)
    xt = to_t(x, True)
    yt = F.adaptive_avg_pool2d(xt, 1)
    y = np.zeros((3, 1, 1, 6), dtype)
    run("gap_fwd", x=x, y=y)
    check(y, from_t(yt), dtype, "gap y")
    dy = rnd(rng, y.shape, dtype)
    yt.backward(to_t(dy))
    dx = np.zeros(x.shape, dtype)
    run("gap_bwd", dy=dy, dx=dx)
    check(dx, from_t(xt.grad), dtype, "gap dx")


def _fc_torch(x: np.ndarray, w: np.ndarray, b: np.ndarray | None):
    """torch reference for our FC: features flattened in NHWC order."""
    xt = torch.tensor(r32(x), requires_grad=True)
    wt = torch.tensor(r32(w), requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    yt = F.linear(xt.reshape(x.shape[0], -1), wt, bt)
    return xt, wt, bt, yt


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
def test_fc(bias, dtype):
    rng = np.random.default_rng(8)
    x = rnd(rng, (4, 2, 3, 5), dtype)
    w = rnd(rng, (7, 30), dtype, 0.2)
    b = rnd(rng, 7) if bias else None
    y = np.zeros((4, 1, 1, 7), dtype)
    run("fc_fwd", x=x, w=w, b=b, y=y)
    xt, wt, bt, yt = _fc_torch(x, w, b)
    check(y, yt.detach().numpy(), dtype, "fc y")
    dy = rnd(rng, y.shape, dtype)
    yt.backward(torch.tensor(r32(dy).reshape(4, 7)))
    buf, dw = x.copy(), np.zeros((7, 30), F32)
    db = np.zeros(7, F32) if bias else None
    run("fc_bwd", dy=dy, w=w, x=buf, dw=dw, db=db, dx=buf)
    check(buf, xt.grad.numpy(), dtype, "fc dx")
    check(dw, wt.grad.numpy(), dtype, "fc dw")
    if bias:
        check(db, bt.grad.numpy(), dtype, "fc db")


def test_flatten_channel_padding_add_copies():
    rng = np.random.default_rng(9)
    x = rnd(rng, (2, 3, 4, 5))
    y = np.zeros((2, 1, 1, 60), F32)
    run("flatten_fwd", x=x, y=y)
    np.testing.assert_array_equal(y.reshape(2, -1), x.reshape(2, -1))
    dx = np.zeros_like(x)
    run("flatten_bwd", dy=y, dx=dx)
    np.testing.assert_array_equal(dx, x)
    run("flatten_fwd", x=x, y=x.reshape(2, 1, 1, 60))  # aliasing buffer: nothing to do
    yp = np.full((2, 3, 4, 8), 7.0, F32)
    run("channel_padding_fwd", x=x, y=yp)
    np.testing.assert_array_equal(yp[..., :5], x)
    assert not yp[..., 5:].any()
    dxp = np.zeros_like(x)
    run("channel_padding_bwd", dy=yp, dx=dxp)
    np.testing.assert_array_equal(dxp, x)
    a, b = rnd(rng, x.shape), rnd(rng, x.shape)
    s = np.zeros_like(x)
    run("add_fwd", a=a, b=b, y=s)
    np.testing.assert_allclose(s, a + b)
    da, db = np.zeros_like(x), np.ones_like(x)
    run("add_bwd", dy=s, da=da, db=db)
    np.testing.assert_array_equal(da, s)
    np.testing.assert_array_equal(db, s)
    run("add_bwd_acc", dy=s, da=da, db=db)
    np.testing.assert_allclose(da, 2 * s)
    run("grad_acc", dy=s, dx=db)
    np.testing.assert_allclose(db, 3 * s)
    h = np.zeros(x.shape, F16)
    run("identity_fwd", x=x, y=h)
    np.testing.assert_array_equal(h, x.astype(F16))
    yy = np.ones_like(x)
    run("axpy_fwd", x=x, y=yy, a=np.array([2.0], F32))
    np.testing.assert_allclose(yy, 1 + 2 * x, rtol=1e-6)


# --------------------------------------------------------------------------------------
# dropout
# --------------------------------------------------------------------------------------


def test_dropout():
    rng = np.random.default_rng(10)
    x = rnd(rng, (4, 16, 16, 8))
    p = 0.3
    state = dropout_rng_state(123)
    y, mask = np.zeros_like(x), np.zeros(x.shape, np.int8)
    run("dropout_fwd", dict(p=p), x=x, y=y, mask=mask, rng=state)
    keep = mask.mean()
    assert abs(keep - (1 - p)) < 0.02, keep
    np.testing.assert_allclose(y, x * mask / (1 - p), rtol=1e-6)
    dy = rnd(rng, x.shape)
    dx = np.zeros_like(x)
    run("dropout_bwd", dict(p=p), dy=dy, mask=mask, dx=dx)
    np.testing.assert_allclose(dx, dy * mask / (1 - p), rtol=1e-6)
    # the counter advanced: the next call draws a different mask; the same seed replays
    mask2 = np.zeros_like(mask)
    run("dropout_fwd", dict(p=p), x=x, y=y, mask=mask2, rng=state)
    assert (mask2 != mask).any()
    again, m3 = dropout_rng_state(123), np.zeros_like(mask)
    run("dropout_fwd", dict(p=p), x=x, y=np.zeros_like(x), mask=m3, rng=again)
    np.testing.assert_array_equal(m3, mask)
    yi = np.zeros_like(x)
    run("dropout_inf", x=x, y=yi)
    np.testing.assert_array_equal(yi, x)
    run("dropout_fwd", dict(p=1.0), x=x, y=y, mask=mask, rng=state)
    assert not y.any()


# --------------------------------------------------------------------------------------
# softmax cross-entropy
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.parametrize("k", [10, 3])
def test_softmax_ce(k, ls, dtype):
    rng = np.random.default_rng(11)
    n = 16
    logits = rnd(rng, (n, 1, 1, k), dtype, 3.0)
    labels = rng.integers(0, k, n).astype(np.int32)
    probs = np.zeros((n, k), F32)
    loss, top1, top5 = (np.zeros(1, F32) for _ in range(3))
    pred = np.zeros(n, np.int32)
    run("softmax_ce_fwd", label_smoothing=np.array([ls], F32), logits=logits, labels=labels, probs=probs, loss=loss,
        top1=top1, top5=top5, pred=pred, batch_size=np.array([n], np.int32))
    zt = torch.tensor(r32(logits).reshape(n, k), requires_grad=True)
    lt = torch.nn.CrossEntropyLoss(label_smoothing=ls)(zt, torch.tensor(labels, dtype=torch.long))
    check(loss, lt.detach().numpy(), dtype, "loss", tol=1e-5 if dtype is F32 else 1e-3)
    check(probs, torch.softmax(zt, 1).detach().numpy(), F32, "probs")
    z = r32(logits).reshape(n, k)
    np.testing.assert_array_equal(pred, z.argmax(1))
    assert top1[0] == pytest.approx((z.argmax(1) == labels).mean())
    top5_ref = np.mean([labels[i] in np.argsort(-z[i])[:5] for i in range(n)]) if k >= 5 else top1[0]
    assert top5[0] == pytest.approx(top5_ref)
    scale = 8.0
    lt.backward()
    dl = logits.copy()  # the gradient goes over the logits
    run("softmax_ce_bwd", label_smoothing=ls, probs=probs, labels=labels, dlogits=dl,
        loss_scale=np.array([scale], F32), batch_size=np.array([n], np.int32))
    check(r32(dl).reshape(n, k) / scale, zt.grad.numpy(), dtype, "dlogits")


def test_softmax_ce_short_batch_masks_padding_rows():
    rng = np.random.default_rng(12)
    n, b, k = 8, 5, 6
    logits = rnd(rng, (n, k))
    labels = rng.integers(0, k, n).astype(np.int32)
    probs, loss, top1, top5 = np.zeros((n, k), F32), *(np.zeros(1, F32) for _ in range(3))
    bs = np.array([b], np.int32)
    run("softmax_ce_fwd", {}, logits=logits, labels=labels, probs=probs, loss=loss, top1=top1,
        top5=top5, batch_size=bs)
    zt = torch.tensor(logits[:b], requires_grad=True)
    lt = F.cross_entropy(zt, torch.tensor(labels[:b], dtype=torch.long))
    check(loss, lt.detach().numpy(), F32, "loss over the first B rows")
    lt.backward()
    dl = np.ones_like(logits)
    run("softmax_ce_bwd", probs=probs, labels=labels, dlogits=dl, batch_size=bs)
    check(dl[:b], zt.grad.numpy(), F32, "dlogits")
    assert not dl[b:].any()
    inv, dl2 = np.zeros(1, F32), np.ones_like(logits)  # B through the seed's inv_scaling_factor
    run("softmax_ce_fwd", logits=logits, labels=labels, probs=probs, loss=loss, top1=top1, top5=top5,
        batch_size=bs, inv_batch=inv)
    assert inv[0] == pytest.approx(1 / b)
    run("softmax_ce_bwd", probs=probs, labels=labels, dlogits=dl2, inv_batch=inv)
    np.testing.assert_array_equal(dl2, dl)


def test_softmax_ce_rows_with_nan_logits_are_misses():
    """A diverged network (NaN logits) must not report top-1/top-5 hits."""
    rng = np.random.default_rng(13)
    n, k = 4, 10
    logits = rnd(rng, (n, k))
    labels = np.argmax(logits, axis=1).astype(np.int32)  # every finite row is a hit
    logits[1, 3] = np.nan
    logits[2, :] = np.nan
    probs, loss, top1, top5 = np.zeros((n, k), F32), *(np.zeros(1, F32) for _ in range(3))
    with np.errstate(invalid="ignore"):
        run("softmax_ce_fwd", {}, logits=logits, labels=labels, probs=probs, loss=loss,
            top1=top1, top5=top5)
    assert top1[0] == pytest.approx(2 / n)
    assert top5[0] == pytest.approx(2 / n)


def test_softmax_ce_facts_formula_vs_torch():
    """The facts sheet's loss (12.4) with its 1e-8 epsilons equals torch's to ~1e-7 on ordinary
    logits; we implement torch's (log-sum-exp) form."""
    rng = np.random.default_rng(13)
    n, k, ls = 8, 5, 0.1
    z = rnd(rng, (n, k), scale=2.0).astype(np.float64)
    y = rng.integers(0, k, n)
    e = np.exp(z - z.max(1, keepdims=True))
    p = e / (e.sum(1, keepdims=True) + 1e-8)
    facts = np.mean(-(1 - ls) * np.log(p[np.arange(n), y] + 1e-8) - (ls / k) * np.log(p + 1e-8).sum(1))
    loss = np.zeros(1, F32)
    run("softmax_ce_fwd", label_smoothing=ls, logits=z.astype(F32), labels=y.astype(np.int32),
        probs=np.zeros((n, k), F32), loss=loss, top1=np.zeros(1, F32), top5=np.zeros(1, F32))
    assert abs(facts - loss[0]) < 1e-5


# --------------------------------------------------------------------------------------
# optimizers
# --------------------------------------------------------------------------------------

PARAM_SHAPES = [(4, 3), (5,), (2, 2, 3)]
ALIGN = 8  # elements: spans keep zero padding between tensors, as 256-byte slots do


def _layout(shapes):
    offs, o = [], 0
    for s in shapes:
        n = int(np.prod(s))
        offs.append((o, n))
        o += -(-n // ALIGN) * ALIGN
    return offs, o


def _pack(tensors, offs, total):
    f = np.zeros(total, F32)
    for t, (o, n) in zip(tensors, offs):
        f[o:o + n] = t.reshape(-1)
    return f


OPTS = {
    # name: (torch factory, kernel, scalars); wd = weight decay of the weight range
    "sgd": (lambda ps, wd: torch.optim.SGD(ps, lr=0.1, weight_decay=wd), "sgd", {}),
    "momentum": (lambda ps, wd: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=wd), "momentum",
                 {"momentum": 0.9}),
    "nesterov": (lambda ps, wd: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=wd),
                 "nesterov", {"momentum": 0.9}),
    "adam": (lambda ps, wd: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=wd), "adam",
             {"beta1": 0.8, "beta2": 0.9, "eps": 1e-6}),
    "adamw": (lambda ps, wd: torch.optim.AdamW(ps, lr=0.01, betas=(0.8, 0.9), eps=1e-6, weight_decay=wd),
              "adamw", {"beta1": 0.8, "beta2": 0.9, "eps": 1e-6}),
}


@pytest.mark.parametrize("scale", [1.0, 1024.0])
@pytest.mark.parametrize("name", list(OPTS))
def test_optimizer_matches_torch(name, scale):
    factory, stem, hyper = OPTS[name]
    rng = np.random.default_rng(17)
    wd = 0.05
    init = [rnd(rng, s) for s in PARAM_SHAPES]
    bias_init = [rnd(rng, (3,)), rnd(rng, (6,))]
    tw = [torch.tensor(a.copy(), requires_grad=True) for a in init]
    tb = [torch.tensor(a.copy(), requires_grad=True) for a in bias_init]
    opt = factory([{"params": tw, "weight_decay": wd}, {"params": tb, "weight_decay": 0.0}], wd)
    offs, total = _layout(PARAM_SHAPES)
    boffs, btotal = _layout([(3,), (6,)])
    W, B = _pack(init, offs, total), _pack(bias_init, boffs, btotal)
    mW, vW, mB, vB = (np.zeros(n, F32) for n in (total, total, btotal, btotal))
    step = np.zeros(1, np.int32)
    lr = np.array([opt.param_groups[0]["lr"]], F32)
    sc = np.array([scale], F32)
    nan = np.zeros(1, np.int32)
    adam = stem.startswith("adam")
    bias_stem = "adam" if adam else stem
    for _ in range(3):
        gs = [rnd(rng, s) for s in PARAM_SHAPES]
        gb = [rnd(rng, (3,)), rnd(rng, (6,))]
        for t, g in zip(tw + tb, gs + gb):
            t.grad = torch.tensor(g)
        opt.step()
        G, GB = _pack(gs, offs, total) * scale, _pack(gb, boffs, btotal) * scale
        if adam:
            run("scalar_increment", step=step, has_nan=nan)
        common = dict(lr=lr, loss_scale=sc, has_nan=nan, **{k: np.array([v], F32) for k, v in hyper.items()})
        extra_w = dict(m=mW) if stem != "sgd" else {}
        extra_b = dict(m=mB) if stem != "sgd" else {}
        if adam:
            extra_w.update(v=vW, step=step)
            extra_b.update(v=vB, step=step)
        run(f"range_update_weight_{stem}", w=W, g=G, weight_decay=np.array([wd], F32), **extra_w, **common)
        run(f"range_update_bias_{bias_stem}", w=B, g=GB, **extra_b, **common)
    for t, (o, n) in zip(tw, offs):
        check(W[o:o + n], t.detach().numpy().reshape(-1), F32, f"{name} weight")
    for t, (o, n) in zip(tb, boffs):
        check(B[o:o + n], t.detach().numpy().reshape(-1), F32, f"{name} bias (no decay)")
    pad = np.ones(total, bool)
    for o, n in offs:
        pad[o:o + n] = False
    assert not W[pad].any(), "slot padding stays zero"


@pytest.mark.parametrize("name", ["range_update_weight_momentum", "range_update_weight_adam"])
def test_optimizer_skips_on_nan(name):
    w, g, m, v = np.ones(8, F32), np.ones(8, F32), np.zeros(8, F32), np.zeros(8, F32)
    arrays = dict(w=w, g=g, m=m, lr=0.1, momentum=0.9, weight_decay=0.0, loss_scale=np.array([2.0], F32),
                  has_nan=np.array([1], np.int32))
    if "adam" in name:
        del arrays["momentum"]
        arrays.update(v=v, beta1=0.9, beta2=0.99, eps=1e-8, step=np.array([1], np.int32))
    run(name, **arrays)
    assert (w == 1).all() and not m.any()
    step = np.array([3], np.int32)
    run("scalar_increment", step=step, has_nan=np.array([1], np.int32))
    assert step[0] == 3


def _lars_reference(ws, gs, ms, lr, mu, wd, tc, eps, scale, nesterov):
    """NumPy transcription of facts sheet 12.4 (per tensor)."""
    out = []
    for w, g, m in zip(ws, gs, ms):
        w, g, m = w.astype(np.float64), g.astype(np.float64), m.astype(np.float64)
        wn = np.sqrt((w * w).sum())
        gn = np.sqrt((g * g).sum()) / scale
        eta = min(tc * wn / (gn + wd * wn + eps), 100.0) if wn >= 1e-12 and gn >= 1e-12 else 1.0
        gp = g / scale + wd * w
        m_new = mu * m + lr * eta * gp
        w = w - (lr * eta * gp + mu * m_new) if nesterov else w - m_new
        out.append((w, m_new))
    return out


@pytest.mark.parametrize("nesterov", [False, True])
def test_lars_matches_facts_transcription(nesterov):
    rng = np.random.default_rng(18)
    shapes = PARAM_SHAPES + [(4,)]
    ws = [rnd(rng, s) for s in shapes]
    ws[-1][:] = 0  # a zero tensor: trust ratio 1
    ms = [rnd(rng, s) * 0.1 for s in shapes]
    offs, total = _layout(shapes)
    W, M = _pack(ws, offs, total), _pack(ms, offs, total)
    W2, M2 = W.copy(), M.copy()
    hyper = dict(lr=0.1, momentum=0.9, weight_decay=1e-4, trust_coefficient=0.001, eps=1e-9)
    scale = 4.0
    for _ in range(3):
        gs = [rnd(rng, s) for s in shapes]
        G = _pack(gs, offs, total) * scale
        ref = _lars_reference(ws, [g * scale for g in gs], ms, hyper["lr"], hyper["momentum"],
                              hyper["weight_decay"], hyper["trust_coefficient"], hyper["eps"], scale, nesterov)
        ws, ms = [r[0] for r in ref], [r[1] for r in ref]
        kname = "range_update_weight_lars_nesterov" if nesterov else "range_update_weight_lars"
        run(kname, dict(segments=tuple(offs)), w=W, g=G, m=M, loss_scale=np.array([scale], F32),
            has_nan=np.zeros(1, np.int32), **{k: np.array([v], F32) for k, v in hyper.items()})
        # the seed's per-tensor kernels give the same
        for o, n in offs:
            tr = np.zeros(1, F32)
            run("lars_compute_trust_ratio", w=W2[o:o + n], g=G[o:o + n], trust_ratio=tr,
                trust_coefficient=hyper["trust_coefficient"], weight_decay=hyper["weight_decay"], eps=hyper["eps"],
                loss_scale=scale)
            run("lars_nesterov_update" if nesterov else "lars_update", w=W2[o:o + n], g=G[o:o + n], m=M2[o:o + n],
                trust_ratio=tr, lr=hyper["lr"], momentum=hyper["momentum"], weight_decay=hyper["weight_decay"],
                loss_scale=scale)
    for w, m, (o, n) in zip(ws, ms, offs):
        check(W[o:o + n], w.reshape(-1), F32, "lars w")
        check(M[o:o + n], m.reshape(-1), F32, "lars m")
    np.testing.assert_allclose(W2, W, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------------
# range and scalar kernels
# --------------------------------------------------------------------------------------


def test_range_kernels():
    g = np.arange(10, dtype=F32)
    flag = np.ones(1, np.int32)
    run("range_check_nan", grads=g, has_nan=flag)
    assert flag[0] == 0
    g[3] = np.inf
    run("range_check_nan", grads=g, has_nan=flag)
    assert flag[0] == 1
    g[3] = np.nan
    run("range_check_nan", grads=[np.zeros(2, F32), g], has_nan=flag)
    assert flag[0] == 1
    g2 = np.array([np.inf, -5.0, 1.0], F32)
    run("range_check_nan", dict(clip=2.0), grads=g2, has_nan=flag)
    assert flag[0] == 0 and list(g2) == [2.0, -2.0, 1.0]
    scale = np.array([8192.0], F32)
    run("range_grad_scaling", has_nan=np.array([1], np.int32), loss_scale=scale)
    assert scale[0] == 4096.0
    run("range_grad_scaling", has_nan=np.array([0], np.int32), loss_scale=scale)
    assert scale[0] == 4096.0
    one = np.array([1.5], F32)
    run("range_grad_scaling", has_nan=np.array([1], np.int32), loss_scale=one)
    assert one[0] == 1.0
    w, a = np.linspace(-1, 1, 7).astype(F32), np.zeros(9, F16)
    run("range_cast_fp32_to_fp16", src=w, dst=a)
    np.testing.assert_array_equal(a[:7], w.astype(F16))
    back = np.zeros(7, F32)
    run("range_cast_fp16_to_fp32", src=a, dst=back)
    np.testing.assert_array_equal(back, w.astype(F16).astype(F32))
    run("range_clear", out=[w, a])
    assert not w.any() and not a.any()
    src, dst = [np.ones(3, F32), np.full(2, 2.0, F32)], [np.zeros(3, F32), np.zeros(4, F32)]
    run("range_d2d_copy", src=src, dst=dst)
    assert list(dst[0]) == [1, 1, 1] and list(dst[1]) == [2, 2, 0, 0]
    acc = [np.zeros(1, F32) for _ in range(3)]
    for _ in range(2):
        run("range_accum_metrics", batch_size=np.array([4], np.int32), loss=np.array([0.5], F32),
            top1=np.array([0.25], F32), top5=np.array([1.0], F32), acc_loss=acc[0], acc_top1=acc[1], acc_top5=acc[2])
    assert [a_[0] for a_ in acc] == [4.0, 2.0, 8.0]
    step, bc1, bc2 = np.array([2], np.int32), np.zeros(1, F32), np.zeros(1, F32)
    run("adam_bias_correction", step=step, beta1=0.9, beta2=0.99, bc1=bc1, bc2=bc2)
    assert bc1[0] == pytest.approx(1 / (1 - 0.81)) and bc2[0] == pytest.approx(1 / (1 - 0.99**2))
    run("range_mean_allreduce", data=g)
    with pytest.raises(NotImplementedError, match="world_size=2"):
        run("range_sum_allreduce", dict(world_size=2), data=g)
    e = np.zeros(4, F32)
    run("range_ema_param_update", w=np.ones(4, F32), ema=e, decay=0.75)
    np.testing.assert_allclose(e, 0.25)
    run("range_ema_param_update", w=np.ones(4, F32), ema=e, decay=0.75, has_nan=np.array([1], np.int32))
    np.testing.assert_allclose(e, 0.25)  # a skipped step: the EMA is not updated
    run("range_ema_param_update", w=np.ones(4, F32), ema=e, decay=0.5, has_nan=np.array([0], np.int32))
    np.testing.assert_allclose(e, 0.625)


# --------------------------------------------------------------------------------------
# registry conventions and the no-allocation contract
# --------------------------------------------------------------------------------------


def test_registry_conventions():
    for name, spec in KERNELS.items():
        assert name == name.lower() and " " not in name, name
        assert spec.doc, f"kernel '{name}' has no docstring"
        assert spec.writes <= set(spec.arrays), name
        assert set(spec.workspaces) <= set(spec.arrays), name
        assert spec.kind in ("compute", "range")
        assert (spec.kind == "range") == name.startswith("range_"), name
    # every layer kind has its forward, backward and inference kernels
    for stem in ("conv", "bn2d", "bn1d", "relu", "maxpool", "avgpool", *ACTS):
        for phase in ("fwd", "bwd", "inf"):
            assert f"{stem}_{phase}" in KERNELS, f"{stem}_{phase}"


def test_bind_reports_missing_arrays_and_params():
    with pytest.raises(KeyError, match=r"kernel 'conv_fwd' expected arrays \['y'\]"):
        KERNELS["conv_fwd"].bind(dict(x=np.zeros(1), w=np.zeros(1)), dict(k=1))
    with pytest.raises(KeyError, match=r"expected params \['k'\]"):
        KERNELS["conv_fwd"].bind(dict(x=np.zeros(1), w=np.zeros(1), y=np.zeros(1)), {})
    with pytest.raises(ValueError, match="expected a workspace of >= "):
        run_bad = KERNELS["conv_fwd"].bind(
            dict(x=np.zeros((1, 4, 4, 2), F32), w=np.zeros((2, 3, 3, 2), F32), y=np.zeros((1, 4, 4, 2), F32),
                 col=np.zeros(3, F32)), dict(k=3, p=1))
        run_bad()


def _peak_during(fn: Callable[[], None]) -> int:
    fn()  # warm-up (caches, lazily created module state)
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def test_kernels_allocate_nothing_of_activation_size():
    """Bound kernels on a 1 MiB activation allocate at most chunk temporaries (< half of it)."""
    rng = np.random.default_rng(19)
    shape = (4, 32, 32, 64)
    x = rnd(rng, shape)
    limit = x.nbytes // 2
    c = shape[-1]
    y, dy, mask = np.zeros(shape, F32), rnd(rng, shape), np.zeros(shape, np.int8)
    vec = lambda: np.zeros(c, F32)  # noqa: E731
    w = rnd(rng, (64, 3, 3, 64), scale=0.05)
    cases = {
        "conv_fwd": (dict(x=x, w=w, y=y), dict(k=3, s=1, p=1, groups=1)),
        "conv_bwd": (dict(dy=dy, x=x.copy(), w=w, dw=np.zeros_like(w), dx=np.zeros_like(x)),
                     dict(k=3, s=1, p=1, groups=1)),
        "conv_fwd#dw": (dict(x=x, w=rnd(rng, (64, 3, 3, 1)), y=y), dict(k=3, s=1, p=1, groups=64)),
        "bn2d_fwd": (dict(x=x, gamma=vec() + 1, beta=vec(), running_mean=vec(), running_var=vec() + 1, y=y,
                          save_mean=vec(), save_istd=vec()), {}),
        "bn2d_bwd": (dict(dy=dy, x=x.copy(), gamma=vec() + 1, save_mean=vec(), save_istd=vec() + 1,
                          dgamma=vec(), dbeta=vec(), dx=np.zeros_like(x)), {}),
        "silu_bwd": (dict(dy=dy, x=x.copy(), dx=np.zeros_like(x)), {}),
        "relu_fwd": (dict(x=x, y=y, mask=mask), {}),
        "relu_fwd#nomask": (dict(x=x, y=y), {}),
        "relu_bwd_from_output": (dict(dy=dy, y=x, dx=np.zeros_like(x)), {}),
        "maxpool_fwd": (dict(x=x, y=np.zeros((4, 16, 16, 64), F32), mask=np.zeros((4, 16, 16, 64), np.int8)),
                        dict(k=3, s=2, p=1)),
        "softmax_ce_fwd": (dict(logits=x.reshape(-1, 1, 1, 1024), labels=np.zeros(256, np.int32),
                                probs=np.zeros((256, 1024), F32), loss=np.zeros(1, F32), top1=np.zeros(1, F32),
                                top5=np.zeros(1, F32)), {}),
        "range_update_weight_adam": (dict(w=x.reshape(-1).copy(), g=dy.reshape(-1), m=np.zeros(x.size, F32),
                                          v=np.zeros(x.size, F32), lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8,
                                          weight_decay=0.01, step=np.array([1], np.int32)), {}),
    }
    for key, (arrays, params) in cases.items():
        spec = KERNELS[key.split("#")[0]]
        ws = spec.allocate_workspaces(arrays, **params)
        call = spec.bind({**arrays, **ws}, params)
        peak = _peak_during(call)
        assert peak < limit, f"{key}: peak allocation {peak} bytes >= {limit}"


def test_fc_first_layer_variant_skips_dx():
    rng = np.random.default_rng(20)
    x, w = rnd(rng, (3, 2, 2, 4)), rnd(rng, (5, 16))
    dw, db = np.zeros((5, 16), F32), np.zeros(5, F32)
    run("fc_bwd_first_layer", dy=rnd(rng, (3, 1, 1, 5)), w=w, x=x, dw=dw, db=db)
    assert dw.any() and db.any()


def test_kernel_errors_name_the_problem():
    z = np.zeros
    with pytest.raises(ValueError, match=r"expected labels in \[0, 4\)"):
        run("softmax_ce_fwd", logits=z((2, 4), F32), labels=np.array([0, 4], np.int32), probs=z((2, 4), F32),
            loss=z(1, F32), top1=z(1, F32), top5=z(1, F32))
    with pytest.raises(ValueError, match="expected a window of size 5"):
        run("maxpool_fwd", dict(k=5, s=1, p=0), x=z((1, 3, 3, 1), F32), y=z((1, 1, 1, 1), F32),
            mask=z((1, 1, 1, 1), np.int8))
    with pytest.raises(ValueError, match=r"expected fc weight of 3 x 8"):
        run("fc_fwd", x=z((2, 2, 2, 2), F32), w=z((3, 7), F32), y=z((2, 3), F32))
    with pytest.raises(ValueError, match=r"expected dropout probability in \[0, 1\]"):
        run("dropout_fwd", dict(p=1.5), x=z(4, F32), y=z(4, F32), mask=z(4, np.int8), rng=dropout_rng_state(0))


def test_seed_op_names_resolve():
    from tr_mlir.lowering.cpu import kernel_name, lookup

    assert kernel_name("CONV_AMP_BWD_FIRST_LAYER") == "conv_bwd_first_layer"
    for op in ("CONV_FP32_FWD", "BN2D_AMP_BWD", "RELU_FP32_INF", "SOFTMAX_CE_AMP_FWD", "GRAD_ACCUM_FP32",
               "ADD_FP32_BWD", "DROPOUT_AMP_FWD", "BN_UPDATE_EQ_PARAMS", "RANGE_UPDATE_BIAS_NESTEROV",
               "LARS_COMPUTE_TRUST_RATIO_DEEP", "DTENSOR_COPY", "FLATTEN_AMP_BWD_FIRST_LAYER", "IDENTITY_FP32_BWD",
               "SCALAR_INCREMENT", "ADAM_BIAS_CORRECTION", "RANGE_CAST_FP16_TO_FP32", "AVGPOOL_FP32_INF"):
        assert lookup(op).name == kernel_name(op)
    with pytest.raises(KeyError, match="no kernel for op 'MUL_FWD'"):
        lookup("MUL_FWD")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_sum_transposed_gives_the_whole_array_sum_and_copy_bits(dtype):
    """``_util.sum_transposed`` (the im2col weight gradient's last step, by blocks of rows): the
    same bits as adding the parts whole in order and copying the transposed view, for every group
    and a row count that is no multiple of the block."""
    from tr_mlir.lowering.cpu._util import TRANSPOSE_BLOCK, sum_transposed

    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((2, 3 * TRANSPOSE_BLOCK + 5, 40)).astype(np.float32) for _ in range(3)]
    want = parts[0] + parts[1]
    want += parts[2]
    ref = np.empty((2, 40, 3 * TRANSPOSE_BLOCK + 5), dtype)
    np.copyto(ref, want.transpose(0, 2, 1), casting="same_kind")
    got = np.empty_like(ref)
    sum_transposed(got, [p.copy() for p in parts])
    assert got.tobytes() == ref.tobytes()


@pytest.mark.parametrize("count", [1, 2, 4, 5])
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_sum_transposed_gives_the_numpy_bits(count, threads, monkeypatch):
    """``transpose.sum_transposed``: the C kernel (one block of source rows per kernel thread,
    tiles of 16) gives the bits of the NumPy blocks for 1-4 parts, sizes that are no multiple of
    the tile and two groups; 5 parts and fp16 outputs take the NumPy code. Parts are not changed
    by the C kernel."""
    from threadpoolctl import threadpool_limits

    from tr_mlir.lowering.cpu import _cc, transpose
    from tr_mlir.lowering.cpu._util import sum_transposed as numpy_sum_transposed

    monkeypatch.setattr(transpose, "C_ELEMENTS", 1)
    rng = np.random.default_rng(count)
    parts = [rng.standard_normal((2, 83, 37)).astype(np.float32) for _ in range(count)]
    ref = np.empty((2, 37, 83), np.float32)
    numpy_sum_transposed(ref, [p.copy() for p in parts])
    for dtype in (np.float32, np.float16):
        got = np.full((2, 37, 83), np.nan, dtype)
        mine = [p.copy() for p in parts]
        with threadpool_limits(threads):
            transpose.sum_transposed(got, mine)
        assert got.tobytes() == ref.astype(dtype).tobytes()
        if dtype == np.float32 and count <= transpose.MAX_PARTS and _cc.available():
            assert all(a.tobytes() == b.tobytes() for a, b in zip(mine, parts))


def test_compiled_sum_transposed_rejects_mismatched_shapes():
    from tr_mlir.lowering.cpu import transpose

    with pytest.raises(ValueError, match="expected parts of one shape"):
        transpose.sum_transposed(np.empty((1, 4, 3), np.float32), [np.empty((1, 4, 3), np.float32)])
    with pytest.raises(ValueError, match="expected parts of one shape"):
        transpose.sum_transposed(np.empty((1, 3, 4), np.float32), [np.empty((1, 4, 3), np.float32),
                                                                   np.empty((1, 4, 4), np.float32)])


def test_im2col_weight_gradient_refuses_a_strided_dw():
    """The im2col / pointwise weight gradients write dw through reshapes; a dw that is not
    C-contiguous would be written into a copy and lost, so it is refused by name."""
    from tr_mlir.lowering.cpu import conv as C

    g = C.conv_geom((2, 6, 6, 4), (8, 1, 1, 4), 1, 1, 0, 1)
    x = np.ones((2, 6, 6, 4), np.float32)
    dy = np.ones(g.y_shape, np.float32)
    dw = np.zeros((8, 1, 1, 8), np.float32)[..., :4]
    with pytest.raises(ValueError, match="expected a C-contiguous dw"):
        C.conv_wgrad(dy, x, dw, g, {}, "auto")
