"""lowering/cuda/winograd.py and kernels/winograd.cu: the CUDA Winograd F(2x2, 3x3) / F(4x4, 3x3) convs.

Without a GPU: NVRTC compiles the module with the new kernels (sm_90, sm_80), and the CUDA backend's
conv primitives with ``algo`` = a Winograd variant run on the CPU emulator
(:class:`~tr_mlir.lowering.cuda.emulator.EmulatedDevice`) for forward, input gradient (also
accumulating) and weight gradient, both variants, fp32 and AMP fp16 operands, over geometries of 1 to
64 channels, odd and even maps (4x4, 7x7, non-square) and padding 0 and 1: against PyTorch's
conv2d / autograd in float64 within the CPU module's bound (winograd.RTOL; fp16: plus the fp16
rounding of each result) and against the CPU winograd.py. Workspaces are exactly the CUDA rule's
sizes, filled with NaN, so a read of scratch never written shows; the registry-level CUDA kernels
take ``algo`` / ``algo_dgrad`` / ``algo_wgrad`` and size their workspaces by ws_fwd_cuda / ws_bwd_cuda.
The forward's batch-norm statistics (``sum`` / ``sq_sum``, memplan-fuse-bn-stats), reduced chunk by
chunk after the output transform: within one fp32 rounding of float64 sums of the y written, y
unchanged, bit-identical reruns, over one chunk and many; and in a compiled training plan.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tr_mlir.lowering.cpu import conv as C
from tr_mlir.lowering.cpu import winograd as W
from tr_mlir.lowering.cuda import emulator as emu
from tr_mlir.lowering.cuda import sources as cuda_sources
from tr_mlir.lowering.cuda import winograd as CW
from tr_mlir.lowering.cuda import winograd_checks as WC
from tr_mlir.lowering.cuda.checks import conv_stats_run, stats_error

torch.set_num_threads(1)

VARIANTS = sorted(W.VARIANTS)
KERNELS = ("tr_wino_wt", "tr_wino_dwt", "tr_wino_in", "tr_wino_out")

GEOMS = list(WC.GEOMS)  # n, h, w, c, k, p: 1 to 64 channels, 4x4 / 7x7 / non-square maps, p 0 and 1


def _ids(geom):
    return "n{}h{}w{}c{}k{}p{}".format(*geom)


@pytest.fixture(scope="module")
def backend():
    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    return CudaBackend(emu.EmulatedDevice())


def _data(geom, seed=0):
    n, h, w, c, k, p = geom
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((k, 3, 3, c)).astype(np.float32)
    g = C.conv_geom(x.shape, wt.shape, 3, 1, p, 1)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    return x, wt, dy, g


def _torch(x, w, dy, p):
    """y, dx, dw (NHWC / KRSC) of PyTorch's conv2d and autograd, in float64."""
    tx = torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_()
    tw = torch.tensor(w, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_()
    ty = F.conv2d(tx, tw, padding=p)
    ty.backward(torch.tensor(dy, dtype=torch.float64).permute(0, 3, 1, 2))
    return (ty.detach().permute(0, 2, 3, 1).numpy(), tx.grad.permute(0, 2, 3, 1).numpy(),
            tw.grad.permute(0, 2, 3, 1).numpy())


def _nan_ws(sizes):
    return {name: np.full(n, np.nan, np.float32) for name, n in sizes.items()}


def _run(backend, x, w, dy, g, variant, out_dtype=np.float32, dx0=None):
    return WC.run(backend, x, w, dy, g, variant, out_dtype, dx0)


def _close(got, ref, rtol, what):
    err = np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err <= rtol, f"{what}: max error {err:.2e} of max |ref| above {rtol:.1e}"


# -- sources -------------------------------------------------------------------------------------


def test_kernels_parse_without_barriers():
    sigs = cuda_sources.signatures()
    assert set(KERNELS) <= set(sigs)
    assert not set(KERNELS) & cuda_sources.barrier_kernels()
    assert [p.kind for p in sigs["tr_wino_out"]][-1] == "f32"


@pytest.mark.skipif(emu.nvrtc_library() is None,
                    reason="NVRTC not installed (pip install 'nvidia-cuda-nvrtc>=13.0,<13.1')")
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvrtc_compiles_the_winograd_kernels(arch):
    """The module with winograd.cu compiles, and the kernels are in the cubin."""
    cubin = emu.nvrtc_compile(arch=arch)
    assert cubin[:4] == b"\x7fELF"
    for name in KERNELS:
        assert name.encode() in cubin, name


# -- numerics on the emulator ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", GEOMS, ids=_ids)
def test_fp32_matches_torch_and_cpu(backend, geom, variant):
    x, w, dy, g = _data(geom)
    m = W.VARIANTS[variant]
    got = _run(backend, x, w, dy, g, variant)
    ref = _torch(x, w, dy, geom[5])
    cpu_ws = {k: np.full(n, np.nan, np.float32)
              for k, n in W.workspace_sizes(g, variant, x16=False, w16=False, y16=False).items()}
    cpu = [np.empty(g.y_shape, np.float32), np.empty(g.x_shape, np.float32), np.empty(g.w_shape, np.float32)]
    W.forward(x, w, cpu[0], g, cpu_ws, variant)
    W.wgrad(dy, x, cpu[2], g, cpu_ws, variant)
    W.dgrad(dy, w, cpu[1], g, cpu_ws, variant)
    for name, a, b, c in zip(("y", "dx", "dw"), got, ref, cpu):
        _close(a, b, W.RTOL[m], f"{name} vs torch")
        _close(a, c.astype(np.float64), 2 * W.RTOL[m], f"{name} vs cpu winograd")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", [GEOMS[1], GEOMS[4]], ids=_ids)
def test_amp_fp16_operands(backend, geom, variant):
    """fp16 x, w, dy in, fp16 y, dx, dw out (read and written in place, fp32 arithmetic): within the
    fp16 rounding of each result (2^-11 relative) plus the fp32 bound of float64 on the rounded inputs."""
    x, w, dy, g = _data(geom, seed=3)
    x16, w16, dy16 = x.astype(np.float16), w.astype(np.float16), dy.astype(np.float16)
    got = _run(backend, x16, w16, dy16, g, variant, np.float16)
    ref = _torch(x16.astype(np.float32), w16.astype(np.float32), dy16.astype(np.float32), geom[5])
    for name, a, b in zip(("y", "dx", "dw"), got, ref):
        assert a.dtype == np.float16
        bound = 2.0 ** -11 * np.abs(b) + W.RTOL[W.VARIANTS[variant]] * np.abs(b).max()
        assert np.all(np.abs(a.astype(np.float64) - b) <= bound * 1.001), name


@pytest.mark.parametrize("variant", VARIANTS)
def test_dgrad_accumulates_and_chunks(backend, variant, monkeypatch):
    """dx += dL/dx (a projection shortcut's accumulate) and several image chunks (CUDA_CHUNK small)."""
    monkeypatch.setattr(CW, "CUDA_CHUNK", 1)
    geom = GEOMS[3]
    x, w, dy, g = _data(geom, seed=5)
    assert CW.chunk_images(W.fwd_plan(g, W.VARIANTS[variant])) == 1
    dx0 = np.random.default_rng(9).standard_normal(g.x_shape).astype(np.float32)
    got = _run(backend, x, w, dy, g, variant, dx0=dx0)
    ref = _torch(x, w, dy, geom[5])
    m = W.VARIANTS[variant]
    _close(got[0], ref[0], W.RTOL[m], "y")
    _close(got[1], ref[1] + dx0, W.RTOL[m], "dx accumulated")
    _close(got[2], ref[2], W.RTOL[m], "dw over chunks")


@pytest.mark.parametrize("chunked", [False, True], ids=["one-chunk", "chunks"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("geom", [GEOMS[1], GEOMS[3], GEOMS[4]], ids=_ids)
def test_forward_writes_bn_statistics_per_chunk(backend, geom, variant, chunked, monkeypatch):
    """conv_fwd with sum / sq_sum as a Winograd variant: each chunk's output reduced after its
    tr_wino_out into float64 parts (tmp, sized by ws_fwd_cuda), merged in a fixed order. Odd outputs
    (5x5 of 7x7 unpadded, 6x5: partial edge tiles), 64 channels, one chunk or one image a chunk
    (CUDA_CHUNK small): the statistics of the y written within one fp32 rounding of float64 sums and
    within the Winograd bound of PyTorch's y statistics, y bit-identical to the call without them,
    and every output bit-identical on a rerun."""
    if chunked:
        monkeypatch.setattr(CW, "CUDA_CHUNK", 1)
    x, w, _, g = _data(geom, seed=11)
    x += 0.5  # a mean away from 0: sq_sum is not sum y^2
    params = {"k": 3, "s": 1, "p": geom[5], "groups": 1, "algo": variant}
    images = CW.chunk_images(W.fwd_plan(g, W.VARIANTS[variant]))
    assert (images == 1) if chunked else (images == g.n)
    splits, parts = CW.stats_layout(g.n, g.k_out, images, g.y_shape[1] * g.y_shape[2])
    assert parts == splits + (g.n if chunked and g.n > 1 else 0)  # a chunk's parts, then one per chunk
    y, ssum, ssq = conv_stats_run(backend, x, w, params)
    assert stats_error(ssum, ssq, y) <= 1.0
    plain, _, _ = conv_stats_run(backend, x, w, params, stats=False)
    assert y.tobytes() == plain.tobytes()
    again = conv_stats_run(backend, x, w, params)
    assert all(a.tobytes() == b.tobytes() for a, b in zip((y, ssum, ssq), again))
    ref = _torch(x, w, np.zeros(g.y_shape, np.float32), geom[5])[0].reshape(-1, g.k_out)
    scale = np.abs(ref).max() * ref.shape[0]
    rtol = W.RTOL[W.VARIANTS[variant]]
    assert np.abs(ssum.reshape(-1) - ref.sum(0)).max() <= rtol * scale
    sq_ref = ((ref - ref.mean(0)) ** 2).sum(0)
    assert np.abs(ssq.reshape(-1) - sq_ref).max() <= 4 * rtol * np.abs(ref).max() * scale


def test_forward_statistics_need_their_workspace(backend):
    """A Winograd forward asked for statistics without the tmp workspace of ws_fwd_cuda refuses."""
    x, w, _, g = _data(GEOMS[1])
    d = WC.on_device(backend, {"x": x, "w": w, "y": np.zeros(g.y_shape, np.float32), "s": np.zeros(8, np.float32),
                               "q": np.zeros(8, np.float32)}
                     | _nan_ws(CW.workspace_sizes(g, "winograd_2x2_3x3", ("fwd",))))
    ws = {"wbuf": d["wbuf"], "col": d["col"]}
    with pytest.raises(ValueError, match="expected a workspace of .* float32 elements, got None"):
        CW.forward(backend.ops, d["x"], d["w"], d["y"], g, ws, "winograd_2x2_3x3", (d["s"], d["q"]))


def test_compiled_plan_fuses_the_statistics_into_the_winograd_forward():
    """A Winograd-forced training plan on the emulator: memplan-fuse-bn-stats pairs its convs with
    their BNs, the CUDA forwards reduce per chunk into the planned ws_tmp (tr_colstats_part /
    tr_colstats_merge) and the BNs read the result (tr_bn_given_stats); it trains like the plan
    without the pass (the last bits of the statistics apart)."""
    from collections import Counter

    from tr_mlir.lowering.cuda.backend import CudaBackend
    from tr_mlir.task import Task

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    params, launched = {}, {}
    for fused in (True, False):
        dev = emu.EmulatedDevice()
        dev.trace = []
        task = Task("resnet_tiny", (8, 8, 1), 10, 8, seed=1, fuse=True, conv_algo="winograd_4x4_3x3",
                    device=CudaBackend(dev), fuse_bn_stats=fused)
        rng = np.random.default_rng(0)
        for _ in range(2):
            task.train_step(rng.standard_normal((8, 8, 8, 1)).astype(np.float32), rng.integers(0, 10, 8))
        launched[fused] = Counter(dev.trace)
        params[fused] = [p.copy() for _, p in task.parameters()]
    assert launched[True]["tr_colstats_part"] > 0 and launched[True]["tr_bn_given_stats"] > 0
    assert launched[True]["tr_colsum_sq"] < launched[False]["tr_colsum_sq"]
    assert launched[False]["tr_colstats_part"] == launched[False]["tr_bn_given_stats"] == 0
    for a, b in zip(params[True], params[False]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_gpu_smoke_checks_pass_on_the_emulator(backend):
    """winograd_checks.check (what scripts/gpu_smoke.py runs on a GPU): every row within its bound."""
    rows = WC.check(backend)
    assert len(rows) == len(GEOMS) * 2 * (2 * 3 + 1)  # y, dx, dw per dtype; fp32's dx added into a dx
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad[:5]


# -- dispatch and workspace rules ----------------------------------------------------------------------


def test_workspace_rules():
    x, w, dy, g = _data(GEOMS[1])
    arrays = {"x": (x.shape, np.dtype(np.float32)), "w": (w.shape, np.dtype(np.float32)),
              "dy": (dy.shape, np.dtype(np.float16)), "dx": (x.shape, np.dtype(np.float32)),
              "dw": (w.shape, np.dtype(np.float16))}
    params = {"k": 3, "s": 1, "p": 0, "groups": 1}
    assert CW.ws_fwd_cuda(arrays, **params) == {} == CW.ws_fwd_cuda(arrays, **params, algo="auto")
    f4 = CW.workspace_sizes(g, "winograd_4x4_3x3", ("fwd",))
    assert f4["wbuf"] == 36 * 8 * 5 and f4["col"] == 36 * 2 * 4 * (5 + 8)  # 2x2 tiles per 5x5 output
    # with tmp for the batch-norm statistics' parts (planned before memplan-fuse-bn-stats sets bn_stats):
    # one chunk here (2 images, 5x5 outputs, 8 channels), one part of 50 rows of {count, mean, M2} x 8
    stats = {**{n: ((e,), np.float32) for n, e in f4.items()}, "tmp": ((1 * 3 * 8 * 2,), np.float32)}
    assert CW.ws_fwd_cuda(arrays, **params, algo="winograd_4x4_3x3") == stats
    assert CW.ws_fwd_cuda(arrays, **params, algo="winograd_4x4_3x3", bn_stats=True) == stats
    # implicit-GEMM backward with an fp16 dw: only the fp32 accumulator (conv.ws_bwd_cuda's rule)
    assert CW.ws_bwd_cuda(arrays, **params) == C.ws_bwd_cuda(arrays, **params)
    both = CW.ws_bwd_cuda(arrays, **params, algo="winograd_2x2_3x3")
    assert both["wbuf"][0] == (16 * 8 * 5,) and both["col"][0][0] == max(
        CW.workspace_sizes(g, "winograd_2x2_3x3", (ph,))["col"] for ph in ("wgrad", "dgrad"))
    # a Winograd input gradient after an implicit-GEMM weight gradient of an fp16 dw: the larger wbuf
    mixed = CW.ws_bwd_cuda(arrays, **params, algo_dgrad="winograd_2x2_3x3", algo_wgrad="implicit_gemm")
    assert mixed["wbuf"][0] == (max(16 * 8 * 5, 9 * 8 * 5),)
    # strided: Winograd does not apply, the rule is the implicit GEMM's
    assert CW.ws_fwd_cuda(arrays, k=3, s=2, p=0, groups=1, algo="winograd_4x4_3x3") == {}
    # the implicit GEMM plans tmp only when it writes the statistics (bn_stats, or a bound sum): one
    # chunk of the whole batch
    with_sum = {**arrays, "sum": ((1, 1, 1, 8), np.dtype(np.float32))}
    assert CW.ws_fwd_cuda(with_sum, **params) == {"tmp": ((CW.stats_workspace(g, None),), np.float32)}
    # ResNet-50's 56x56 layers at batch 64: 7 chunks of 10 images, 128 parts a chunk, then 7 merged
    assert CW.stats_layout(64, 64, 10, 3136) == (128, 128 + 7)
    assert CW.stats_layout(64, 64, 64, 3136) == (128, 128)  # one chunk: its parts only


def test_registry_kernels_dispatch_on_algo(backend):
    """conv_fwd / conv_bwd of the CUDA kernel table with algo params: Winograd where they select it,
    the implicit GEMM otherwise (same results within the bound); unknown variants there raise."""
    geom = GEOMS[0]
    x, w, dy, g = _data(geom, seed=7)
    y_ref, dx_ref, dw_ref = _torch(x, w, dy, geom[5])
    params = {"k": 3, "s": 1, "p": geom[5], "groups": 1}
    info = {k: (a.shape, a.dtype) for k, a in (("x", x), ("w", w), ("dy", dy), ("dx", x), ("dw", w))}
    for algo in (None, "winograd_4x4_3x3"):
        fws = _nan_ws({k: v[0][0] for k, v in CW.ws_fwd_cuda(info, **params, algo=algo).items()})
        bws = _nan_ws({k: v[0][0] for k, v in CW.ws_bwd_cuda(info, **params, algo_dgrad=algo,
                                                              algo_wgrad="winograd_2x2_3x3").items()})
        d = WC.on_device(backend, {"x": x, "w": w, "dy": dy, "y": np.zeros(g.y_shape, np.float32),
                                 "dx": np.zeros(g.x_shape, np.float32), "dw": np.zeros(g.w_shape, np.float32)}
                       | {f"f_{k}": v for k, v in fws.items()} | {f"b_{k}": v for k, v in bws.items()})
        backend.kernels["conv_fwd"].fn(x=d["x"], w=d["w"], y=d["y"], **{k: d[f"f_{k}"] for k in fws}, **params,
                                       algo=algo or "auto")
        backend.kernels["conv_bwd"].fn(dy=d["dy"], x=d["x"], w=d["w"], dw=d["dw"], dx=d["dx"],
                                       **{k: d[f"b_{k}"] for k in bws}, **params, algo_dgrad=algo or "auto",
                                       algo_wgrad="winograd_2x2_3x3")
        for name, ref in (("y", y_ref), ("dx", dx_ref), ("dw", dw_ref)):
            _close(backend.to_host(d[name]), ref, W.RTOL[4], f"{name} algo={algo}")
    with pytest.raises(ValueError, match="unknown Winograd variant"):
        CW.forward(backend.ops, d["x"], d["w"], d["y"], g, {}, "winograd_6x6_3x3")
    g2 = C.conv_geom(x.shape, w.shape, 3, 2, 1, 1)
    with pytest.raises(ValueError, match="3x3 stride-1 dense conv"):
        CW.forward(backend.ops, d["x"], d["w"], d["y"], g2, {}, "winograd_2x2_3x3")
