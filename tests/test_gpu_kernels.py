"""The CUDA kernels without a GPU: NVRTC compiles, the kernel table, every kernel under the CPU emulator.

* NVRTC (the ``nvidia-cuda-nvrtc`` wheel or CuPy) compiles the whole module for sm_90 (H100/H200)
  and sm_80, and rejects a broken kernel with its log; nvcc, where installed, compiles it too.
* The GPU kernel table has every name of the NumPy registry with the identical spec (arrays,
  roles, params, workspace rules per target) -- the compiler plans a cuda plan's workspaces from
  its ``cuda`` rules, and each case gives the launcher only what they declare.
* Every registry kernel, in fp32 and AMP dtypes, run by the CUDA backend over the emulated device
  (the same kernel text compiled for the host, :mod:`tr_mlir.lowering.cuda.emulator`) agrees with
  the NumPy kernel (:mod:`tr_mlir.lowering.cuda.checks`); dropout's mask is bit-identical (the
  kernel reproduces NumPy's Philox stream).
* The batch-norm statistics a conv forward writes (implicit GEMM and Winograd): within one fp32
  rounding of float64 sums of its y, y unchanged, bit-identical reruns; the BN forwards reading
  them agree with their own statistics pass.
* Launch checks: wrong argument counts or kinds and pointers outside the arena are refused.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from tr_mlir.lowering.cuda import emulator as emu
from tr_mlir.lowering.cuda import sources as cuda_sources
from tr_mlir.lowering.cuda.checks import STATS_GEOMS, cases, conv_stats_check, conv_stats_run, error, run_case
from tr_mlir.lowering.cpu import CUDA, KERNELS

needs_cxx = pytest.mark.skipif(emu.host_compiler() is None, reason="no host C++ compiler for the kernel emulator")
needs_nvrtc = pytest.mark.skipif(emu.nvrtc_library() is None,
                                 reason="NVRTC not installed (pip install 'nvidia-cuda-nvrtc>=13.0,<13.1')")


@pytest.fixture(scope="module")
def backend():
    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    return CudaBackend(emu.EmulatedDevice())


# -- sources ----------------------------------------------------------------------------------


def test_signatures_parse_every_kernel():
    sigs = cuda_sources.signatures()
    assert len(sigs) >= 40
    assert [p.kind for p in sigs["tr_gemm"]][:2] == ["ptr", "i32"]
    assert {"tr_conv_fwd", "tr_conv_dgrad", "tr_conv_wgrad", "tr_softmax_ce_fwd", "tr_dropout_fwd"} <= set(sigs)
    assert {"tr_gemm", "tr_conv_wgrad", "tr_softmax_ce_fwd", "tr_colsum", "tr_colstats_part",
            "tr_colstats_merge"} <= cuda_sources.barrier_kernels()
    assert not {"tr_add", "tr_bn_given_stats"} & cuda_sources.barrier_kernels()


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_nvrtc_compiles_the_module(arch):
    cubin = emu.nvrtc_compile(arch=arch)
    assert cubin[:4] == b"\x7fELF" and len(cubin) > 100_000


@needs_nvrtc
def test_nvrtc_rejects_a_broken_kernel_with_its_log():
    bad = cuda_sources.SOURCE + '\nTR_GLOBAL void tr_bad(float* y) { y[0] = undefined_name; }\n'
    with pytest.raises(emu.NvrtcCompileError, match="undefined_name"):
        emu.nvrtc_compile(bad)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_compiles_the_module_without_spills(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(cuda_sources.SOURCE)
    r = subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-Xptxas", "-v", str(src), "-o",
                        str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    spills = [line for line in r.stderr.splitlines() if "spill" in line and not line.strip().startswith("0 bytes")
              and " 0 bytes spill stores, 0 bytes spill loads" not in line]
    assert not spills, spills[:5]


@needs_cxx
def test_host_build_of_the_kernels():
    lib = emu.build_host_library()
    assert lib.endswith(".so")


# -- the kernel table -----------------------------------------------------------------------------


def test_every_registry_kernel_has_a_cuda_kernel_with_the_same_spec(backend):
    assert set(backend.kernels) == set(KERNELS)
    for name, spec in KERNELS.items():
        g = backend.kernels[name]
        assert (g.arrays, g.writes, g.workspaces, g.optional, g.params, dict(g.defaults), g.kind, g.workspace_fn,
                dict(g.target_workspace_fns)) == \
            (spec.arrays, spec.writes, spec.workspaces, spec.optional, spec.params, dict(spec.defaults), spec.kind,
             spec.workspace_fn, dict(spec.target_workspace_fns)), name
        assert g.fn is not spec.fn


def test_cases_cover_every_kernel_in_both_precisions():
    cs = cases()
    assert {c.kernel for c in cs} == set(KERNELS)
    halves = {c.kernel for c in cs if "float16" in c.label}
    assert {"conv_fwd", "conv_bwd", "bn2d_fwd", "softmax_ce_fwd", "maxpool_bwd", "bn2d_bwd",
            "fc_bwd", "dropout_fwd"} <= halves


_CASES = cases()


@pytest.mark.parametrize("case", _CASES, ids=[c.label for c in _CASES])
def test_kernel_matches_numpy(backend, case):
    r = run_case(case, backend)
    assert r.ok, {k: f"{v:.3g}" for k, v in r.errors.items()}


def test_a_wrong_result_is_detected(backend):
    case = next(c for c in _CASES if c.label == "conv_fwd im2col float32")

    def off_by_a_bit(**kw):
        KERNELS["conv_fwd"].fn(**kw)
        kw["y"].reshape(-1)[7] += 1e-2

    assert not run_case(case, backend, reference=off_by_a_bit).ok


def test_a_launcher_needing_an_undeclared_workspace_fails(backend, monkeypatch):
    # the fp16 weight gradient (6 x 3 x 3 x 5) accumulates in wbuf: with a cuda rule that declares nothing, the
    # launcher gets None there (as on a plan of that rule) and refuses
    case = next(c for c in _CASES if c.label == "conv_bwd im2col float16")
    assert run_case(case, backend).ok
    spec = backend.kernels["conv_bwd"]
    monkeypatch.setitem(backend.kernels, "conv_bwd", dataclasses.replace(spec, target_workspace_fns={CUDA: None}))
    with pytest.raises(ValueError, match="expected a workspace of 270 float32 elements, got None"):
        run_case(case, backend)


def _on_device(backend, kernel: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``kernel`` on ``backend`` over copies of ``arrays`` in one arena; the arrays after."""
    arena = backend.allocate(sum(-(-a.nbytes // 256) * 256 for a in arrays.values()) + 256)
    views, off = {}, 0
    for k, a in arrays.items():
        views[k] = backend.view(arena, off, a.dtype, a.shape)
        views[k][...] = a
        off += -(-a.nbytes // 256) * 256
    backend.kernels[kernel].bind(views, {})()
    return {k: backend.to_host(v) for k, v in views.items()}


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_relu_output_form_is_bit_identical_to_the_mask_form_on_the_device(backend, dt):
    """tr_relu_bwd_y (dx = dy * (y > 0)) gives tr_mul_mask's bits with the mask of x for every pair
    of special values (NaN, +-0, +-Inf, subnormals, extremes), and the forward writes the same y
    with and without the mask; the values match the NumPy kernels (NaN where they have NaN)."""
    info = np.finfo(dt)
    v = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf, info.smallest_subnormal, -info.smallest_subnormal,
                  info.tiny, info.max, -info.max, 1.0, -2.5], dt)
    x, dy = (a.reshape(-1).copy() for a in np.meshgrid(v, v))
    zeros = np.zeros_like(x)
    fwd = _on_device(backend, "relu_fwd", {"x": x, "y": zeros, "mask": np.zeros(x.shape, np.int8)})
    y = _on_device(backend, "relu_fwd", {"x": x, "y": zeros + 1})["y"]
    assert y.tobytes() == fwd["y"].tobytes()
    assert np.array_equal(y > 0, x > 0) and np.array_equal(fwd["mask"], (x > 0).astype(np.int8))
    with_mask = _on_device(backend, "relu_bwd", {"dy": dy, "mask": fwd["mask"], "dx": zeros})["dx"]
    from_y = _on_device(backend, "relu_bwd_from_output", {"dy": dy, "y": y, "dx": zeros})["dx"]
    assert from_y.tobytes() == with_mask.tobytes()
    want = np.full_like(x, 7)
    with np.errstate(invalid="ignore"):
        KERNELS["relu_bwd_from_output"](dy=dy, y=y, dx=want)
    assert error(from_y, want) == 0.0


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_fc_relu_epilogues_are_bit_identical_to_the_unfused_kernels_on_the_device(backend, dt):
    """The FC+ReLU GEMM epilogues of tr_gemm (fc_relu_fwd, relu_fc_bwd) write what fc_fwd then
    relu_fwd, and fc_bwd then relu_bwd_from_output, write on the device, to the bit (the values:
    test_kernel_matches_numpy)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 1, 1, 70)).astype(dt)  # 70 and 66: past one 64-wide tile
    x[0, 0, 0, :5] = [0.0, -0.0, 1e-8, -1e-8, np.nan]
    w = (rng.standard_normal((66, 1, 1, 70)) * 0.2).astype(dt)
    b = rng.standard_normal(66).astype(np.float32)
    zy = np.zeros((6, 1, 1, 66), dt)
    t = _on_device(backend, "fc_fwd", {"x": x, "w": w, "b": b, "y": zy})["y"]
    unfused = _on_device(backend, "relu_fwd", {"x": t, "y": zy})["y"]
    fused = _on_device(backend, "fc_relu_fwd", {"x": x, "w": w, "b": b, "y": zy})["y"]
    assert fused.tobytes() == unfused.tobytes()
    dy = rng.standard_normal((6, 1, 1, 66)).astype(dt)
    xr = _on_device(backend, "relu_fwd", {"x": x, "y": np.zeros_like(x)})["y"]
    grads = {"dy": dy, "w": w, "x": xr, "dw": np.zeros((66, 1, 1, 70), np.float32), "db": np.zeros(66, np.float32),
             "dx": np.zeros_like(x)}
    one = _on_device(backend, "fc_bwd", grads)
    g = _on_device(backend, "relu_bwd_from_output", {"dy": one["dx"], "y": xr, "dx": np.zeros_like(x)})["dx"]
    both = _on_device(backend, "relu_fc_bwd", grads)
    assert both["dx"].tobytes() == g.tobytes()
    assert both["dw"].tobytes() == one["dw"].tobytes() and both["db"].tobytes() == one["db"].tobytes()
    # dy @ w past fp16's range where the gate is 0: Inf * 0 = NaN unfused, so fused too
    big = {"dy": np.full((2, 1, 1, 3), 60000, dt), "w": np.ones((3, 1, 1, 4), dt),
           "x": np.array([0, 1, 0, 1] * 2, dt).reshape(2, 1, 1, 4), "dw": np.zeros((3, 1, 1, 4), np.float32),
           "db": np.zeros(3, np.float32), "dx": np.zeros((2, 1, 1, 4), dt)}
    g = _on_device(backend, "relu_bwd_from_output", {"dy": _on_device(backend, "fc_bwd", big)["dx"], "y": big["x"],
                                                     "dx": np.zeros((2, 1, 1, 4), dt)})["dx"]
    assert _on_device(backend, "relu_fc_bwd", big)["dx"].tobytes() == g.tobytes()


def test_relu_fc_bwd_refuses_a_dx_overlapping_x_on_the_device(backend):
    """A dx sharing any byte with x (not only the same pointer) is refused: the gate reads x
    while the GEMM writes dx."""
    x = np.ones((6, 1, 1, 70), np.float32)
    arena = backend.allocate(4 * x.nbytes)
    views = {"x": backend.view(arena, 0, np.float32, x.shape), "dx": backend.view(arena, 256, np.float32, x.shape),
             "dy": backend.view(arena, 2 * x.nbytes, np.float32, (6, 1, 1, 3)),
             "w": backend.view(arena, 2 * x.nbytes + 256, np.float32, (3, 1, 1, 70)),
             "dw": backend.view(arena, 3 * x.nbytes, np.float32, (3, 1, 1, 70))}
    with pytest.raises(ValueError, match="needs a dx apart from x"):
        backend.kernels["relu_fc_bwd"].bind(views, {})()
    views["dx"] = backend.view(arena, x.nbytes, np.float32, x.shape)  # adjacent: fine
    backend.kernels["relu_fc_bwd"].bind(views, {})()


# -- batch-norm statistics written by the conv (memplan-fuse-bn-stats) ---------------------------------


def test_conv_writes_deterministic_bn_statistics_on_the_device(backend):
    """conv_fwd with sum / sq_sum (the implicit GEMM's pass over y: dense, strided, pointwise,
    depthwise; both Winograd variants' per-chunk reduction, odd outputs), fp32 and fp16 y: the
    statistics of the y it wrote within one fp32 rounding of float64 sums, y bit-identical to the
    call without them, every output bit-identical on a rerun (checks.conv_stats_check, which
    scripts/gpu_smoke.py's kernel cases complement on a GPU)."""
    rows = conv_stats_check(backend)
    assert len(rows) == len(STATS_GEOMS) * 2 * 3
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad[:5]


_BN_FORWARDS = ("bn2d_fwd", "bn2d_relu_fwd", "bn2d_add_relu_fwd")


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("name", _BN_FORWARDS)
def test_bn_forward_reading_the_conv_statistics_matches_its_own_pass(backend, name, dt):
    """A conv writing its statistics, then a BN forward reading them (tr_bn_given_stats), against the
    BN forward's own statistics pass (tr_colsum / tr_colsum_sq) on the same conv output: saved mean
    and inv_std, running statistics within ~1e-6 relative, y within that (fp16 y: one fp16 rounding
    more), the same mask but where the pre-activation is within rounding of 0; the fused path is
    bit-identical on a rerun."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-0.5, 1.5, (2, 7, 7, 5)).astype(dt)
    w = rng.uniform(-1.0, 1.0, (40, 3, 3, 5)).astype(dt)
    y, ssum, ssq = conv_stats_run(backend, x, w, {"k": 3, "s": 1, "p": 1, "groups": 1, "algo": "auto"})
    c = y.shape[-1]
    arrays = {"x": y, "gamma": rng.uniform(0.5, 1.5, c).astype(np.float32),
              "beta": rng.uniform(-1, 1, c).astype(np.float32), "running_mean": rng.uniform(-1, 1, c).astype(np.float32),
              "running_var": rng.uniform(0.5, 2.0, c).astype(np.float32), "y": np.zeros_like(y),
              "save_mean": np.zeros(c, np.float32), "save_istd": np.zeros(c, np.float32)}
    if name != "bn2d_fwd":
        arrays["mask"] = np.zeros(y.shape, np.int8)
    if name == "bn2d_add_relu_fwd":
        arrays["skip"] = rng.uniform(-1, 1, y.shape).astype(dt)
    own = _on_device(backend, name, arrays)
    fused = _on_device(backend, name, arrays | {"sum": ssum, "sq_sum": ssq})
    again = _on_device(backend, name, arrays | {"sum": ssum, "sq_sum": ssq})
    assert all(fused[k].tobytes() == again[k].tobytes() for k in fused)
    for k in ("save_mean", "save_istd", "running_mean", "running_var"):
        assert error(fused[k], own[k]) <= 1e-6, k
    assert error(fused["y"], own["y"]) <= (1e-6 if dt == np.float32 else 2.0 ** -10), "y"
    if "mask" in arrays:
        assert error(fused["mask"], own["mask"]) <= 0.01


def test_bn_forward_refuses_half_the_statistics(backend):
    """sum without sq_sum, or statistics of another size, is refused (as on the CPU)."""
    c = 6
    arrays = {"x": np.ones((2, 3, 3, c), np.float32), "gamma": np.ones(c, np.float32), "beta": np.zeros(c, np.float32),
              "running_mean": np.zeros(c, np.float32), "running_var": np.ones(c, np.float32),
              "y": np.zeros((2, 3, 3, c), np.float32), "save_mean": np.zeros(c, np.float32),
              "save_istd": np.zeros(c, np.float32), "sum": np.zeros(c, np.float32)}
    with pytest.raises(ValueError, match="expected both 'sum' and 'sq_sum'"):
        _on_device(backend, "bn2d_fwd", arrays)
    with pytest.raises(ValueError, match="expected 'sq_sum' of 6 fp32 elements"):
        _on_device(backend, "bn2d_fwd", arrays | {"sq_sum": np.zeros(5, np.float32)})


def test_error_measure():
    a = np.array([1.0, np.inf, np.nan], np.float32)
    assert error(a, a.copy()) == 0.0
    assert error(a, np.array([1.0, 2.0, np.nan], np.float32)) == float("inf")
    assert error(np.array([1, 2], np.int8), np.array([1, 3], np.int8)) == 0.5


# -- launch checks ------------------------------------------------------------------------------------


@needs_cxx
def test_launches_are_checked_against_the_kernel_and_the_arena():
    dev = emu.EmulatedDevice()
    arena = dev.allocate(1024)
    x = dev.view(arena, 0, np.float32, (16,))
    p = np.uint64(dev.ptr(x))
    with pytest.raises(emu.LaunchError, match="takes 4 arguments"):
        dev.launch("tr_fill", (1,), (256,), (p, np.int32(0)))
    with pytest.raises(emu.LaunchError, match="expects a numpy.int64"):
        dev.launch("tr_fill", (1,), (256,), (p, np.int32(0), 16, np.float32(1)))
    with pytest.raises(emu.LaunchError, match="no kernel 'tr_nope'"):
        dev.launch("tr_nope", (1,), (256,), ())
    outside = np.zeros(16, np.float32)
    with pytest.raises(emu.LaunchError, match="outside the device arena"):
        dev.launch("tr_fill", (1,), (256,), (np.uint64(outside.ctypes.data), np.int32(0), np.int64(16),
                                               np.float32(1.0)))
    with pytest.raises(emu.LaunchError, match="outside the device arena"):
        dev.launch("tr_fill", (1,), (256,), (p, np.int32(0), np.int64(1000), np.float32(1.0)), [(int(p), 4000)])
    with pytest.raises(emu.LaunchError, match="not .*registered as a pinned host buffer"):
        dev.memcpy(int(p), outside.ctypes.data, 64, "h2d")
    dev.launch("tr_fill", (1,), (256,), (p, np.int32(0), np.int64(16), np.float32(2.5)))
    assert np.all(dev.to_host(x) == 2.5)
