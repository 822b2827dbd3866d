"""lowering/cpu/winograd.py: Winograd F(2x2, 3x3) and F(4x4, 3x3) convs, both directions of the gradient.

Forward, input gradient and weight gradient of both variants against PyTorch's conv2d and
autograd (NHWC <-> NCHW permutes) over a table of geometries (1 to 64 channels, odd and even
maps, 4x4 to 32x32, padding 0 and 1, batch 1 to 4), fp32 within the module's error bound
(winograd.RTOL) and AMP (fp16 x / w / dy in, fp16 y / dx / dw out) against PyTorch on the
fp16-rounded inputs; against conv.py's im2col path; on the C path and the NumPy path
(TR_MLIR_CC=0); dx over x's own buffer; bit-identical reruns and thread counts; a Hypothesis
property test of the NumPy path against a float64 direct conv. Workspaces are exactly the
sizes of workspace_sizes, filled with NaN, so a read of scratch never written shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import _cc, _parallel
from tr_mlir.lowering.cpu import conv as C
from tr_mlir.lowering.cpu import winograd as W

torch.set_num_threads(1)

needs_c = pytest.mark.skipif(_cc.compiler() is None or _parallel.sgemm_address() is None,
                             reason="no C compiler or no NumPy OpenBLAS GEMM: the C path is untested")

VARIANTS = sorted(W.VARIANTS)

GEOMS = [  # n, h, w, c, k, p; channel pairs (5, 8), (1, 3), (64, 64) shared so few kernels compile
    (2, 4, 4, 5, 8, 1),      # a 4x4 map: one F(4x4) tile per image
    (3, 7, 7, 5, 8, 0),      # 7x7 without padding: 5x5 output, partial edge tiles
    (1, 7, 4, 5, 8, 1),      # non-square, batch 1
    (4, 9, 6, 1, 3, 1),      # one input channel, batch 4
    (2, 3, 5, 1, 3, 0),      # a 1x3 output
    (2, 32, 32, 64, 64, 1),  # CIFAR ResNet's first stage (batch 2)
    (1, 11, 10, 64, 64, 0),  # odd map, no padding
]


@pytest.fixture(autouse=True)
def _c_path_on(monkeypatch):
    """These tests pick the path themselves: a ``TR_MLIR_CC=0`` in the environment must not."""
    monkeypatch.delenv(_cc.ENV_SWITCH, raising=False)


def _ids(geom):
    return "n{}h{}w{}c{}k{}p{}".format(*geom)


def _data(geom, seed=0):
    n, h, w, c, k, p = geom
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((k, 3, 3, c)).astype(np.float32)
    g = C.conv_geom(x.shape, wt.shape, 3, 1, p, 1)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    return x, wt, dy, g


def _ws(g, variant, **f16):
    flags = dict(x16=False, w16=False, y16=False, dw16=False) | f16
    return {name: np.full(size, np.nan, np.float32)
            for name, size in W.workspace_sizes(g, variant, **flags).items()}


def _torch(x, w, dy, p):
    """y, dx, dw (NHWC / KRSC) of PyTorch's conv2d and autograd, computed in float64."""
    tx = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_()
    tw = torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_()
    ty = F.conv2d(tx, tw, padding=p)
    ty.backward(torch.tensor(dy, dtype=torch.float64).permute(0, 3, 1, 2))
    return (ty.detach().permute(0, 2, 3, 1).numpy(), tx.grad.permute(0, 2, 3, 1).numpy(),
            tw.grad.permute(0, 2, 3, 1).numpy())


def _run(x, w, dy, g, variant, ws, out_dtype=np.float32):
    y = np.empty(g.y_shape, out_dtype)
    dx = np.empty(g.x_shape, out_dtype)
    dw = np.empty(g.w_shape, out_dtype)
    W.forward(x, w, y, g, ws, variant)
    W.wgrad(dy, x, dw, g, ws, variant)
    W.dgrad(dy, w, dx, g, ws, variant)
    return y, dx, dw


def _close(got, ref, rtol, what):
    err = np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= rtol, f"{what}: max error {err:.2e} of max |ref| above {rtol:.1e}"


def _check_all(got, ref, m, tag):
    for name, a, b in zip(("y", "dx", "dw"), got, ref):
        _close(a, b, W.RTOL[m], f"{tag} {name}")


def test_transforms_are_exact_in_1d():
    """F(m, 3) on one tile, float64: A^T [(G g) * (B^T d)] is the correlation of d with g."""
    rng = np.random.default_rng(0)
    for m in (2, 4):
        tf = W.transform(m)
        d, g = rng.standard_normal(tf.alpha), rng.standard_normal(3)
        ref = np.array([d[i:i + 3] @ g for i in range(m)])
        np.testing.assert_allclose(tf.at @ ((tf.g @ g) * (tf.bt @ d)), ref, rtol=0, atol=1e-13)
    assert W.error_factor(2) == 64.0 and round(W.error_factor(4), 2) == 876.16
    with pytest.raises(ValueError, match="distinct finite points"):
        W.transform(4, (0, 1, 1, 2, -2))
    with pytest.raises(ValueError, match="unknown Winograd variant"):
        W.variant_tile("winograd_6x6_3x3")


@needs_c
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", GEOMS, ids=_ids)
def test_c_path_matches_torch(geom, variant):
    x, w, dy, g = _data(geom)
    assert W.applicable(g) and W.compiled(x, w, dy)
    _check_all(_run(x, w, dy, g, variant, _ws(g, variant)), _torch(x, w, dy, geom[5]), W.VARIANTS[variant], "C")


@needs_c
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", [GEOMS[1], GEOMS[3], GEOMS[6]], ids=_ids)
def test_c_path_split_components_matches_torch(geom, variant, monkeypatch):
    """The pass that splits the GEMM components among the threads (taken for U of
    W.U_UNCACHED elements, 256 channels and up; forced here), chunked when U is small: each
    thread transforms and multiplies its block of component rows, then the output transform is
    split by tiles. The same bits on one thread or two, the forward's batch-norm statistics
    (summed per fixed block of tiles) included."""
    from tr_mlir.lowering.cpu import conv_stats

    monkeypatch.setattr(W, "U_UNCACHED", 1)
    x, w, dy, g = _data(geom, seed=11)
    assert W.fwd_plan(g, W.VARIANTS[variant]).split_components
    ws = _ws(g, variant)
    parts: list[list[np.ndarray]] = []
    combine = conv_stats.combine
    monkeypatch.setattr(conv_stats, "combine", lambda ps, *out: (parts.append([p.copy() for p in ps]),
                                                                 combine(ps, *out)))
    runs, sums = [], []
    for threads in (2, 1):
        with threadpool_limits(threads):
            runs.append(_run(x, w, dy, g, variant, ws))
            stats = (np.zeros(g.k_out, np.float32), np.zeros(g.k_out, np.float32))
            W.forward(x, w, np.empty(g.y_shape, np.float32), g, ws, variant, stats)
            sums.append(stats)
    _check_all(runs[0], _torch(x, w, dy, geom[5]), W.VARIANTS[variant], "split")
    for a, b in zip(runs[0] + sums[0], runs[1] + sums[1]):
        assert a.tobytes() == b.tobytes()
    # the statistics' float64 partials: one per fixed block of tiles (not per thread), each of its
    # own block's pixels, the same bits on two threads and one
    pixels = g.n * g.win.ho * g.win.wo
    assert len(parts) == 2 and len(parts[0]) == _parallel.MAX_WORKERS == 2
    assert all(p[0] > 0 for p in parts[0]) and sum(p[0] for p in parts[0]) == pixels
    for a, b in zip(*parts):
        assert a.tobytes() == b.tobytes()
    want = (np.zeros(g.k_out, np.float32), np.zeros(g.k_out, np.float32))
    conv_stats.from_output(runs[0][0], *want)  # the sum and the sum of squared deviations of y
    for got, ref in zip(sums[0], want):
        np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", GEOMS[:4] + GEOMS[6:], ids=_ids)
def test_numpy_path_matches_torch(geom, variant, monkeypatch):
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    x, w, dy, g = _data(geom)
    assert not W.compiled(x, w, dy)
    _check_all(_run(x, w, dy, g, variant, _ws(g, variant)), _torch(x, w, dy, geom[5]), W.VARIANTS[variant],
               "NumPy")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", [GEOMS[1], GEOMS[5]], ids=_ids)
def test_amp_fp16_operands_and_outputs(geom, variant):
    """fp16 x, w, dy in; fp16 y, dx, dw out: against float64 on the fp16-rounded inputs, within
    the fp16 rounding of each result (2^-11 relative) plus the fp32 bound."""
    x, w, dy, g = _data(geom, seed=3)
    x16, w16, dy16 = x.astype(np.float16), w.astype(np.float16), dy.astype(np.float16)
    ws = _ws(g, variant, x16=True, w16=True, y16=True, dw16=True)
    got = _run(x16, w16, dy16, g, variant, ws, np.float16)
    ref = _torch(x16.astype(np.float32), w16.astype(np.float32), dy16.astype(np.float32), geom[5])
    for name, a, b in zip(("y", "dx", "dw"), got, ref):
        assert a.dtype == np.float16
        bound = 2.0 ** -11 * np.abs(b) + W.RTOL[W.VARIANTS[variant]] * np.abs(b).max()
        assert np.all(np.abs(a.astype(np.float64) - b) <= bound * 1.001), name


@pytest.mark.parametrize("variant", VARIANTS)
def test_through_conv_entry_points_and_vs_im2col(variant):
    """conv_forward / conv_wgrad / conv_dgrad with ``algo`` run Winograd (within its bound of the
    im2col result); without it, or where Winograd does not apply (stride 2), exactly im2col."""
    geom = GEOMS[5]
    x, w, dy, g = _data(geom, seed=5)
    sizes = C.conv_workspace_sizes(g, x16=False, w16=False, y16=False, phases=("fwd", "wgrad", "dgrad"))
    for k, v in W.workspace_sizes(g, variant, x16=False, w16=False, y16=False).items():
        sizes[k] = max(sizes.get(k, 0), v)
    ws = {k: np.full(v, np.nan, np.float32) for k, v in sizes.items()}
    outs = {}
    for algo in (None, variant):
        y, dx, dw = np.empty(g.y_shape, np.float32), np.empty(g.x_shape, np.float32), np.empty(g.w_shape, np.float32)
        C.conv_forward(x, w, y, g, ws, algo=algo)
        C.conv_wgrad(dy, x, dw, g, ws, algo=algo)
        C.conv_dgrad(dy, w, dx, g, ws, algo=algo)
        outs[algo] = (y, dx, dw)
    ref = _torch(x, w, dy, 1)
    _check_all(outs[variant], ref, W.VARIANTS[variant], "conv entry points")
    _check_all(outs[None], ref, 2, "im2col")
    for a, b in zip(outs[variant], outs[None]):
        _close(a, b.astype(np.float64), W.RTOL[W.VARIANTS[variant]] * 1.5, "Winograd vs im2col")
    # not applicable: stride 2 keeps im2col, bit for bit
    gs = C.conv_geom(x.shape, w.shape, 3, 2, 1, 1)
    assert not W.applicable(gs)
    wss = {k: np.zeros(v, np.float32) for k, v in C.conv_workspace_sizes(gs, x16=False, w16=False, y16=False).items()}
    y1, y2 = np.empty(gs.y_shape, np.float32), np.empty(gs.y_shape, np.float32)
    C.conv_forward(x, w, y1, gs, wss)
    C.conv_forward(x, w, y2, gs, wss, algo=variant)
    assert np.array_equal(y1, y2)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("c_path", [True, False])
def test_dx_over_x_and_bit_identical_reruns(variant, c_path, monkeypatch):
    """conv_bwd's order (wgrad, then dgrad into x's own buffer) gives the separate results; every
    result is the same bits on a rerun and on one thread or two."""
    if not c_path:
        monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    elif _cc.compiler() is None:
        pytest.skip("no C compiler")
    geom = (3, 9, 8, 5, 8, 1)  # C = 5 -> K = 8: dx has x's shape
    x, w, dy, g = _data(geom, seed=7)
    ws = _ws(g, variant)
    runs = []
    for threads in (2, 2, 1):
        with threadpool_limits(threads):
            runs.append(_run(x, w, dy, g, variant, ws))
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert np.array_equal(a, b)
    xb = x.copy()
    dw = np.empty(g.w_shape, np.float32)
    W.wgrad(dy, xb, dw, g, ws, variant)
    W.dgrad(dy, w, xb, g, ws, variant)  # dx over x
    assert np.array_equal(dw, runs[0][2]) and np.array_equal(xb, runs[0][1])


def test_too_small_workspace_is_an_error():
    x, w, dy, g = _data(GEOMS[0])
    sizes = W.workspace_sizes(g, "winograd_4x4_3x3", x16=False, w16=False, y16=False, phases=("fwd",))
    for name in sizes:
        ws = {k: np.zeros(v - (k == name), np.float32) for k, v in sizes.items()}
        with pytest.raises(ValueError, match="workspace"):
            W.forward(x, w, np.empty(g.y_shape, np.float32), g, ws, "winograd_4x4_3x3")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), h=st.integers(1, 9), w=st.integers(1, 9), c=st.integers(1, 4), k=st.integers(1, 4),
       p=st.integers(0, 1), m=st.sampled_from([2, 4]), seed=st.integers(0, 2 ** 16))
def test_numpy_path_property(n, h, w, c, k, p, m, seed):
    """Any small geometry the rule accepts: the NumPy path's forward, input and weight gradient
    agree with a float64 direct conv within the error bound (no C: nothing to compile)."""
    if h + 2 * p < 3 or w + 2 * p < 3:
        return
    variant = f"winograd_{m}x{m}_3x3"
    x, wt, dy, g = _data((n, h, w, c, k, p), seed)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(_cc.ENV_SWITCH, "0")
        got = _run(x, wt, dy, g, variant, _ws(g, variant))
    # the error bound's scale (module doc): terms summed per result times the largest operands,
    # not max |result| (a 1x1 map with padding 1 makes y = x w[1, 1], while the transformed
    # products involve all nine taps and cancel)
    mx, mw, mdy = np.abs(x).max(), np.abs(wt).max(), np.abs(dy).max()
    scales = (9 * c * mx * mw, 9 * k * mdy * mw, g.m * mx * mdy)
    for name, a, b, scale in zip(("y", "dx", "dw"), got, _torch(x, wt, dy, p), scales):
        err = np.abs(a - b).max() / scale
        assert err <= W.RTOL[m], f"{name}: error {err:.2e} of the bound's scale above {W.RTOL[m]:.1e}"


def test_bench_conv_algos_table(monkeypatch):
    """``python -m bench.conv_algos``'s measurement and table on a tiny layer (NumPy path)."""
    repo = str(Path(__file__).resolve().parents[1])
    if repo not in sys.path:  # bench/ is a plain package of the checkout, not installed
        sys.path.insert(0, repo)
    from bench import conv_algos

    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    res = conv_algos.measure(batch=2, threads=1, repeats=1, shapes=((4, 4),))
    assert [r["direction"] for r in res["rows"]] == list(conv_algos.DIRECTIONS)
    assert all(set(r["ms"]) == set(conv_algos.ALGOS) and min(r["ms"].values()) > 0 for r in res["rows"])
    lines = conv_algos.markdown(res).splitlines()
    assert lines[2].startswith("| layer") and len(lines) == 4 + len(conv_algos.DIRECTIONS)
    assert lines[4].startswith("| 4 @ 4x4 | fwd |")


@needs_c
@pytest.mark.parametrize("guard", [True, False], ids=["guarded", "split"])
def test_weight_transforms_keep_every_write(guard, monkeypatch):
    """The weight transforms of convs with 1-4 channels, split by filters on the calling thread
    and the C worker (``split``: W.SPLIT_K_MIN_CHANNELS lowered so they are) or kept on one
    thread (``guarded``, the default): GCC's predictive commoning stored stale values past a
    filter range and lost the other thread's writes in about a third of the calls until
    _cc.PRELUDE turned it off. Repeated back to back (the C worker spinning, so both halves
    really overlap), every U is the NumPy transform's."""
    from tr_mlir.lowering.cpu import _parallel

    if not _parallel.c_gemm():
        pytest.skip("no C worker here")
    if not guard:
        monkeypatch.setattr(W, "SPLIT_K_MIN_CHANNELS", 1)
    for geom in ((2, 3, 5, 1, 3, 0), (2, 6, 6, 2, 3, 1), (2, 6, 6, 4, 3, 1), (2, 6, 6, 3, 4, 1)):
        x, w, dy, g = _data(geom)
        ws = _ws(g, "winograd_2x2_3x3")
        for pl in (W.fwd_plan(g, 2), W.dgrad_plan(g, 2)):
            ref = np.empty(pl.u_shape, np.float32)
            W.numpy_weights(pl, w, ref)
            u = W._wbuf(g, ws, 2, False)[0].reshape(pl.u_shape)
            with threadpool_limits(2):
                for _ in range(300):
                    u.fill(np.nan)
                    W._weights(pl, w, u, True, ws["col"])
                    np.testing.assert_allclose(u, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_weight_transforms_by_component_rows_give_the_whole_transforms_bits(threads, monkeypatch):
    """The plans whose threads split the components (``split_components``) transform the weights
    by component rows (``tr_wt_rows``, each thread the rows its GEMMs read) instead of by filters
    or channels: U has every bit of one whole ``tr_wt`` call, on one thread and on two, forward and
    input gradient (U_UNCACHED lowered so that 8-channel convs split their components)."""
    if not _cc.available():
        pytest.skip("no C compiler here")
    monkeypatch.setattr(W, "U_UNCACHED", 1)
    x, w, dy, g = _data((2, 6, 6, 8, 12, 1))
    ws = _ws(g, "winograd_4x4_3x3")
    for pl in (W.fwd_plan(g, 4), W.dgrad_plan(g, 4)):
        assert pl.split_components
        kern = W._kernels(pl)
        ref = np.full(pl.u_shape, np.nan, np.float32)
        if pl.flip:
            kern.wt(w.ctypes.data, ref.ctypes.data, 0, pl.kw)
        else:
            wt = np.ascontiguousarray(w.transpose(3, 1, 2, 0))  # (CW, 3, 3, KW), what tr_wtrans writes
            kern.wt(wt.ctypes.data, ref.ctypes.data, 0, 0, pl.cw)
        assert not np.isnan(ref).any()
        u = W._wbuf(g, ws, 4, False)[0].reshape(pl.u_shape)
        with threadpool_limits(threads):
            for _ in range(20):
                u.fill(np.nan)
                W._weights(pl, w, u, True, ws["col"])
                np.testing.assert_array_equal(u, ref)
