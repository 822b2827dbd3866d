"""Prepared launches (:class:`tr_mlir.lowering.cpu.registry.PreparedLaunch`): a kernel's checks,
path choice and pieces made once per launch state instead of every step. Each prepared call must
give its kernel function's bits, take the path it claims (not silently the function), follow the
thread count and switches, and leave the kernel's own errors to the kernel."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import _cc, _gemm_bits, _parallel, _prepared, _threads
from tr_mlir.lowering.cpu.registry import KERNELS, PreparedLaunch

from _launch_twice import launch_twice
from _sgd_steps import assert_same_training, three_sgd_steps

F32 = np.float32


def _run(name: str, arrays: dict, params: dict, threads: int, prepared: bool,
         monkeypatch) -> tuple[dict, PreparedLaunch]:
    """Bind kernel ``name`` to copies of ``arrays`` (and its workspaces) and launch it twice (the
    second launch reruns the same call: a stale prepared piece would show up as a difference)."""
    spec = KERNELS[name]
    copies: dict[int, np.ndarray] = {}  # one copy per array: an in-place case stays in place

    def copy(a: np.ndarray) -> np.ndarray:
        return copies.setdefault(id(a), a.copy())
    arrs = {k: (copy(v) if isinstance(v, np.ndarray) else tuple(copy(a) for a in v) if isinstance(v, tuple)
                else v) for k, v in arrays.items()}
    ws = spec.allocate_workspaces({k: v for k, v in arrs.items() if v is not None}, **params)
    return arrs, launch_twice(spec.bind({**arrs, **ws}, params), arrs, threads, prepared, monkeypatch, _next_step)


def _next_step(arrays: dict) -> None:
    """Change what a kernel reads anew each step between the two launches of :func:`_run`: the
    scalar operands (learning rate, skip flag, batch size, label smoothing) and the inputs."""
    for k, v in arrays.items():
        if k in ("lr", "momentum", "weight_decay", "label_smoothing"):
            v *= 0.5
        elif k == "batch_size":
            v[0] = max(int(v[0]) - 1, 0)
        elif k in ("x", "dy", "g", "logits", "src") and isinstance(v, np.ndarray) and v.dtype == F32:
            v += 0.25


def _expect_prepared() -> bool:
    """Whether the prepared calls this file expects can be made here: compiled kernels and the
    C worker (``TR_MLIR_CC=0`` / ``TR_MLIR_C_GEMM=0`` switch them off; the bits are compared anyway)."""
    return _cc.available() and _parallel.c_gemm()


def _rng_arrays(seed: int, **shapes) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(F32) for k, s in shapes.items()}


def _cases():
    """(kernel, arrays, params, outputs) with the LeNet-5 / MLP shapes and small ones: large
    enough that the two-thread versions split (pools and tanh from 64K elements, the FC GEMMs
    from 4 MFLOP, SGD from 512K elements)."""
    rng = np.random.default_rng(0)
    cases = []
    for n, h, c, k_out, k in ((16, 32, 1, 6, 5), (16, 14, 6, 16, 5), (3, 9, 4, 5, 3)):
        a = _rng_arrays(1, x=(n, h, h, c), w=(k_out, k, k, c))
        ho = h - k + 1
        cases.append(("conv_fwd", {**a, "y": np.zeros((n, ho, ho, k_out), F32)}, {"k": k}, ("y",)))
        b = _rng_arrays(2, dy=(n, ho, ho, k_out))
        cases.append(("conv_bwd", {**a, **b, "dw": np.zeros_like(a["w"]), "dx": np.zeros_like(a["x"])},
                      {"k": k}, ("dw", "dx")))
        cases.append(("conv_bwd_first_layer", {**a, **b, "dw": np.zeros_like(a["w"])}, {"k": k}, ("dw",)))
    # MobileNetV2's pointwise (expansion K >= C, projection K < C: dw.T and its transposed copy, the C
    # copy from 1M elements) and depthwise convs (stride 1 and 2; split from 64K outputs, the weight
    # gradient from 256K), and a small one of each
    for n, h, c, k_out, k, s, p, groups, algo in (
            (32, 8, 16, 96, 1, 1, 0, 1, "pointwise"), (32, 8, 96, 24, 1, 1, 0, 1, "auto"),
            (2, 4, 2048, 512, 1, 1, 0, 1, "pointwise"), (3, 3, 5, 4, 1, 1, 0, 1, "pointwise"),
            (32, 16, 96, 96, 3, 1, 1, 96, "depthwise"), (32, 16, 144, 144, 3, 2, 1, 144, "auto"),
            (2, 5, 8, 8, 3, 1, 1, 8, "depthwise")):
        a = _rng_arrays(10, x=(n, h, h, c), w=(k_out, k, k, c // groups))
        ho = (h + 2 * p - k) // s + 1
        conv = {"k": k, "s": s, "p": p, "groups": groups}
        cases.append(("conv_fwd", {**a, "y": np.zeros((n, ho, ho, k_out), F32)}, {**conv, "algo": algo}, ("y",)))
        b = _rng_arrays(11, dy=(n, ho, ho, k_out))
        cases.append(("conv_bwd", {**a, **b, "dw": np.zeros_like(a["w"]), "dx": np.zeros_like(a["x"])},
                      {**conv, "algo_dgrad": algo, "algo_wgrad": algo}, ("dw", "dx")))
    # residual joins and gradient sums: split from 64K elements (in place too: y is a's buffer)
    for shape in ((32, 16, 16, 32), (2, 3, 3, 5)):
        a = _rng_arrays(12, a=shape, b=shape, dy=shape, dx=shape)
        cases.append(("add_fwd", {"a": a["a"], "b": a["b"], "y": np.zeros(shape, F32)}, {}, ("y",)))
        cases.append(("add_fwd", {"a": a["a"], "b": a["b"], "y": None}, {}, ("y",)))
        cases.append(("grad_acc", {"dy": a["dy"], "dx": a["dx"]}, {}, ("dx",)))
        cases.append(("add_bwd_acc", {"dy": a["dy"], "da": a["a"], "db": a["b"]}, {}, ("da", "db")))
    for n, h, c in ((128, 28, 6), (4, 10, 16)):
        x = _rng_arrays(3, x=(n, h, h, c))["x"]
        y, mask = np.zeros((n, h // 2, h // 2, c), F32), np.zeros((n, h // 2, h // 2, c), np.int8)
        cases.append(("maxpool_fwd", {"x": x, "y": y, "mask": mask}, {"k": 2, "s": 2}, ("y", "mask")))
        dy = _rng_arrays(4, dy=y.shape)["dy"]
        m = rng.integers(0, 4, y.shape).astype(np.int8)
        cases.append(("maxpool_bwd", {"dy": dy, "mask": m, "dx": np.zeros_like(x)}, {"k": 2, "s": 2}, ("dx",)))
        cases.append(("avgpool_fwd", {"x": x, "y": y}, {"k": 2, "s": 2}, ("y",)))
        cases.append(("avgpool_bwd", {"dy": dy, "dx": np.zeros_like(x)}, {"k": 2, "s": 2}, ("dx",)))
        cases.append(("tanh_fwd", {"x": x, "y": np.zeros_like(x)}, {}, ("y",)))
        cases.append(("tanh_fwd", {"x": x.copy(), "y": None}, {}, ("y",)))  # in place (y is x, set below)
        cases.append(("tanh_bwd", {"dy": _rng_arrays(5, d=x.shape)["d"], "x": x, "dx": np.zeros_like(x)}, {},
                      ("dx",)))
    for n, f, o in ((200, 784, 1024), (128, 400, 120), (128, 120, 84), (128, 84, 10), (5, 7, 3)):
        a = _rng_arrays(6, x=(n, 1, 1, f), w=(o, 1, 1, f), b=(o,), dy=(n, 1, 1, o))
        fwd = {"x": a["x"], "w": a["w"], "b": a["b"], "y": np.zeros((n, 1, 1, o), F32)}
        cases.append(("fc_fwd", fwd, {}, ("y",)))
        cases.append(("fc_relu_fwd", dict(fwd), {}, ("y",)))
        bwd = {"dy": a["dy"], "w": a["w"], "x": a["x"], "dw": np.zeros_like(a["w"]), "db": np.zeros(o, F32)}
        cases.append(("fc_bwd", {**bwd, "dx": np.zeros_like(a["x"])}, {}, ("dw", "db", "dx")))
        cases.append(("fc_bwd_first_layer", dict(bwd), {}, ("dw", "db")))
        relu_x = np.maximum(a["x"], 0)
        cases.append(("relu_fc_bwd", {**bwd, "x": relu_x, "dx": np.zeros_like(a["x"])}, {}, ("dw", "db", "dx")))
    for n, k, b, ls in ((128, 10, 128, 0.0), (200, 10, 150, 0.1), (3, 4, 3, 0.0)):
        z = _rng_arrays(8, z=(n, 1, 1, k))["z"]
        cases.append(("softmax_ce_fwd", {
            "logits": z, "labels": rng.integers(0, k, n).astype(np.int32), "probs": np.zeros((n, k), F32),
            "loss": np.zeros(1, F32), "top1": np.zeros(1, F32), "top5": np.zeros(1, F32),
            "pred": np.zeros(n, np.int32), "batch_size": np.array([b], np.int32),
            "label_smoothing": np.array([ls], F32), "inv_batch": np.zeros(1, F32)}, {},
            ("probs", "loss", "top1", "top5", "pred", "inv_batch")))
    for sizes, bad in (((1_460_736, 1024), None), ((61_470, 300), (0, 17)), ((600_000, 5), (0, 599_999)),
                       ((700_000, 800_000), (1, 12))):
        grads = [rng.standard_normal(n).astype(F32) for n in sizes]
        if bad is not None:
            grads[bad[0]][bad[1]] = np.nan
        cases.append(("range_check_nan", {"grads": tuple(grads), "has_nan": np.full(1, 7, np.int32)}, {},
                      ("has_nan",)))
    src = [rng.standard_normal(n).astype(F32) for n in (10, 1000)]
    cases.append(("range_d2d_copy", {"src": tuple(src), "dst": tuple(np.zeros(n + 3, F32) for n in (10, 1000))}, {},
                  ("dst",)))
    x = _rng_arrays(9, x=(16, 1, 1, 30))["x"]
    cases.append(("identity_fwd", {"x": x, "y": np.zeros((16, 30), F32)}, {}, ("y",)))
    cases.append(("identity_fwd", {"x": x.copy(), "y": None}, {}, ("y",)))  # y is x's buffer: nothing to do
    cases.append(("dtensor_copy", {"x": rng.integers(0, 9, 16).astype(np.int32), "y": np.zeros(16, np.int32)}, {},
                  ("y",)))
    scal = lambda v: np.array([v], F32)  # noqa: E731
    for size in (1_460_736, 61_470, 9):
        a = _rng_arrays(7, w=(size,), g=(size,), m=(size,))
        common = {"lr": scal(0.05), "loss_scale": scal(1.0), "has_nan": np.zeros(1, np.int32)}
        cases.append(("range_update_weight_momentum", {**a, **common, "momentum": scal(0.9),
                                                       "weight_decay": scal(5e-4)}, {}, ("w", "m")))
        cases.append(("range_update_bias_nesterov", {**a, **common, "momentum": scal(0.9)}, {}, ("w", "m")))
        cases.append(("range_update_weight_sgd", {"w": a["w"], "g": a["g"], **common, "weight_decay": scal(1e-4)},
                      {}, ("w",)))
    return cases


CASES = _cases()


def _fix_in_place(arrays: dict) -> dict:
    if "y" in arrays and arrays["y"] is None:  # in place: y is x's (tanh) or a's (add) own buffer
        arrays["y"] = arrays["x"] if "x" in arrays else arrays["a"]
    return arrays


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: f"{CASES[i][0]}-{i}")
def test_prepared_call_gives_the_kernel_functions_bits(case, threads, monkeypatch):
    name, arrays, params, outs = CASES[case]
    got, launch = _run(name, _fix_in_place(dict(arrays)), params, threads, True, monkeypatch)
    want, _ = _run(name, _fix_in_place(dict(arrays)), params, threads, False, monkeypatch)
    assert launch.last_call is not launch.generic or not _expect_prepared(), f"{name}: no prepared call"
    for k in outs:
        g, w = (got[k], want[k]) if isinstance(got[k], tuple) else ((got[k],), (want[k],))
        assert [a.tobytes() for a in g] == [a.tobytes() for a in w], f"{name}: {k} differs from the kernel function's"


def test_prepare_leaves_the_kernels_errors_to_the_kernel(monkeypatch):
    """Arrays a kernel refuses: no prepared call, and the launch raises the kernel's own error."""
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    bad = [
        ("conv_fwd", {"x": np.zeros((2, 8, 8, 3), F32), "w": np.zeros((4, 3, 3, 3), F32),
                      "y": np.zeros((2, 5, 5, 4), F32)}, {"k": 3}, "conv output"),
        ("maxpool_fwd", {"x": np.zeros((2, 8, 8, 3), F32), "y": np.zeros((2, 3, 3, 3), F32),
                         "mask": np.zeros((2, 3, 3, 3), np.int8)}, {"k": 2, "s": 2}, "pool output"),
        ("fc_fwd", {"x": np.zeros((4, 1, 1, 6), F32), "w": np.zeros((3, 1, 1, 5), F32),
                    "y": np.zeros((4, 1, 1, 3), F32)}, {}, "fc weight"),
        ("tanh_bwd", {"dy": np.zeros(7, F32), "x": np.zeros(8, F32), "dx": np.zeros(8, F32)}, {}, "one size"),
        ("softmax_ce_fwd", {"logits": np.zeros((4, 3), F32), "labels": np.array([0, 1, 3, 2], np.int32),
                            "probs": np.zeros((4, 3), F32), "loss": np.zeros(1, F32), "top1": np.zeros(1, F32),
                            "top5": np.zeros(1, F32)}, {}, "labels in"),
        ("softmax_ce_fwd", {"logits": np.zeros((6, 3), F32), "labels": np.zeros(6, np.int32),
                            "probs": np.zeros((6, 3), F32), "loss": np.zeros(1, F32), "top1": np.zeros(1, F32),
                            "top5": np.zeros(1, F32), "pred": np.zeros(8, np.int32)[:3]}, {}, "6 predictions"),
        ("range_update_weight_momentum", {"w": np.zeros(8, F32), "g": np.zeros(4, F32), "m": np.zeros(8, F32),
                                          "lr": np.ones(1, F32), "momentum": np.ones(1, F32),
                                          "weight_decay": np.zeros(1, F32)}, {}, "gradient and momentum"),
    ]
    for name, arrays, params, match in bad:
        spec = KERNELS[name]
        try:
            ws = spec.allocate_workspaces(arrays, **params)
        except ValueError:
            ws = {}
        launch = spec.bind({**arrays, **ws}, params)
        with pytest.raises(ValueError, match=match) as prepared_error:
            launch()
        if name == "softmax_ce_fwd" and "pred" not in arrays:  # a bad label: the prepared call finds it
            assert launch.last_call is not launch.generic
            with pytest.raises(ValueError) as kernel_error:
                launch.generic()
            assert str(prepared_error.value) == str(kernel_error.value)
        else:
            assert launch.last_call is launch.generic, name


def test_one_prepared_call_per_launch_state(monkeypatch):
    """1 -> 2 -> 1 threads: two prepared calls, the first reused; ``TR_MLIR_CC=0`` and
    ``TR_MLIR_PREPARE=0`` run the kernel function. (Contention, part of the launch state, cleared:
    an unbalanced split of an earlier test would change the state between the launches.)"""
    monkeypatch.setattr(_parallel, "_contended", 0)
    monkeypatch.setattr(_parallel, "_imbalanced", 0)
    name, arrays, params, _ = next(c for c in CASES if c[0] == "maxpool_fwd")
    spec = KERNELS[name]
    arrs = {k: v.copy() for k, v in arrays.items()}
    launch = spec.bind({**arrs, **spec.allocate_workspaces(arrs, **params)}, params)
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    calls = []
    for threads in (1, 2, 1):
        with threadpool_limits(threads):
            launch()
        calls.append(launch.last_call)
    assert calls[0] is calls[2] and calls[0] is not calls[1] and launch.generic not in calls
    monkeypatch.setenv(_cc.ENV_SWITCH, "0")
    launch()
    assert launch.last_call is launch.generic  # the NumPy code: nothing prepared
    monkeypatch.delenv(_cc.ENV_SWITCH)
    monkeypatch.setenv(_prepared.ENV_PREPARE, "0")
    with threadpool_limits(1):
        launch()
    assert launch.last_call is launch.generic


def test_a_replay_pins_the_state_and_always_unpins_it(monkeypatch):
    from tr_mlir.lowering.backend import ClosureGraph

    seen = []

    def look() -> None:
        seen.append((_parallel.workers(), _cc.available(), _prepared.launch_state()))

    def boom() -> None:
        raise RuntimeError("kernel failed")

    with threadpool_limits(2):
        ClosureGraph((look,)).replay()
        assert seen[0][0] == 2 and seen[0][2].workers == 2
        assert _threads.replay.workers is None and _cc.pinned.value is None
        with pytest.raises(RuntimeError, match="kernel failed"):
            ClosureGraph((look, boom)).replay()
    assert _threads.replay.workers is None and _cc.pinned.value is None
    with threadpool_limits(1):
        ClosureGraph((look,)).replay()
    assert seen[-1][0] == 1 and seen[-1][2].workers == 1


def _three_steps(model: str, batch: int, threads: int, prepared: bool, monkeypatch):
    task, losses, state = three_sgd_steps(model, batch, threads, monkeypatch,
                                          **{_prepared.ENV_PREPARE: "1" if prepared else "0"})
    launches = [launch for g in task.exe.captured for launch in g.launches if isinstance(launch, PreparedLaunch)]
    prepared_calls = sum(launch.last_call is not launch.generic for launch in launches)
    return losses, state, prepared_calls


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model, batch", [("lenet5", 32), ("mlp", 16), ("resnet_tiny", 8), ("mobilenet_tiny", 8)])
def test_training_with_prepared_launches_is_bit_identical(model, batch, threads, monkeypatch):
    """Three SGD steps with and without prepared launches: the same losses, parameters and
    buffers to the bit; and the prepared run did prepare most of LeNet-5's, the MLP's and the
    MobileNet's calls (its pointwise and depthwise convs)."""
    on = _three_steps(model, batch, threads, True, monkeypatch)
    off = _three_steps(model, batch, threads, False, monkeypatch)
    assert_same_training(on, off)
    assert off[2] == 0
    if model != "resnet_tiny" and _expect_prepared():
        assert on[2] >= (20 if model == "mobilenet_tiny" else 8), f"only {on[2]} prepared calls"


def test_kernel_tables_of_other_backends_drop_the_cpu_prepared_calls():
    """The CUDA table and the gloo all-reduces replace a spec's function: the CPU ``prepare``
    (which reads host pointers) must not come along, so their launches are the plain bound call."""
    from tr_mlir.lowering.cuda import emulator as emu
    from tr_mlir.lowering.gloo import _allreduce_kernel

    assert any(spec.prepare is not None for spec in KERNELS.values())
    gloo = _allreduce_kernel(KERNELS["range_sum_allreduce"], comm=None, op="sum")
    assert gloo.prepare is None
    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    table = CudaBackend(emu.EmulatedDevice()).kernels
    assert table and all(spec.prepare is None for spec in table.values())
    assert not isinstance(table["conv_fwd"].bind(
        {"x": np.zeros((1, 3, 3, 1), F32), "w": np.zeros((1, 3, 3, 1), F32), "y": np.zeros((1, 1, 1, 1), F32)},
        {"k": 3}), PreparedLaunch)


def test_sgd_with_a_nan_flag_skips_as_the_kernel(monkeypatch):
    """The flag is read each step: set after the call was prepared, the update is skipped."""
    name, arrays, params, _ = next(c for c in CASES if c[0] == "range_update_weight_momentum")
    spec = KERNELS[name]
    arrs = {k: v.copy() for k, v in arrays.items()}
    launch = spec.bind(arrs, params)
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    launch()
    before = arrs["w"].copy()
    arrs["has_nan"][0] = 1
    launch()
    assert arrs["w"].tobytes() == before.tobytes()
    assert launch.last_call is not launch.generic or not _expect_prepared()


@pytest.mark.parametrize("name", ["identity_fwd", "softmax_ce_fwd"])
def test_strided_inputs_are_read_each_step(name, monkeypatch):
    """A strided input: no prepared reshape copy frozen at prepare time (the kernel reads the
    array on every call)."""
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    rng = np.random.default_rng(3)
    if name == "identity_fwd":
        base = rng.standard_normal((4, 8)).astype(F32)
        arrays = {"x": base[:, :4], "y": np.zeros((4, 4), F32)}
        out = "y"
    else:
        base = rng.standard_normal((6, 4, 5)).astype(F32)
        arrays = {"logits": base[:, :3, :].transpose(1, 0, 2)[0], "labels": np.array([0, 1, 2, 3, 4, 0], np.int32),
                  "probs": np.zeros((6, 5), F32), "loss": np.zeros(1, F32), "top1": np.zeros(1, F32),
                  "top5": np.zeros(1, F32)}
        out = "loss"
    launch = KERNELS[name].bind(arrays, {})
    launch()
    base += 100.0 if name == "identity_fwd" else rng.standard_normal(base.shape).astype(F32)
    launch()
    want = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in arrays.items()}
    KERNELS[name].fn(**want)
    assert arrays[out].tobytes() == want[out].tobytes()


def test_prepared_gemm_blocks_follow_the_pinned_state(monkeypatch):
    """A GEMM prepared inside a replay pinned as not contended gets the uncontended blocks even
    when a split earlier in that replay turned the contended mode on (and the other way)."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((200, 784)).astype(F32), rng.standard_normal((784, 1024)).astype(F32)
    out = np.zeros((200, 1024), F32)
    # the 4-block contended split needs cuts that keep the bits; where NumPy's OpenBLAS runs its
    # Haswell kernels they do not and every state gets 2 blocks: allow them (only blocks are counted)
    monkeypatch.setattr(_gemm_bits, "cuts_keep_bits", lambda: True)
    align = _gemm_bits.numpy_cut_align()
    size = 200 // align if align > 1 else 1024  # row blocks at multiples of align, else column blocks
    with threadpool_limits(2):
        for pinned in (False, True):
            monkeypatch.setattr(_parallel, "_contended", _parallel.CONTENDED_CALLS if pinned else 0)
            try:
                state = _prepared.begin_replay()
                assert state.contended is pinned
                monkeypatch.setattr(_parallel, "_contended", 0 if pinned else _parallel.CONTENDED_CALLS)
                call = _parallel.matmul_call(a, b, out)
            finally:
                _prepared.end_replay()
            if call is None or not hasattr(call, "array"):
                pytest.skip("no split C jobs here (TR_MLIR_CC=0, TR_MLIR_C_GEMM=0 or one thread)")
            assert len(call.array) == (4 if pinned and size >= 8 else 2)


def test_a_c_worker_lost_mid_replay_falls_back_to_the_kernel(monkeypatch):
    """The C worker turned off after a call was prepared (``run_c`` found it could not start):
    the prepared GEMM call raises Stale before running anything and the kernel function runs."""
    name, arrays, params, outs = next(c for c in CASES if c[0] == "fc_fwd" and c[1]["x"].shape[0] == 200)
    spec = KERNELS[name]
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    got = {k: v.copy() for k, v in arrays.items()}
    launch = spec.bind(got, params)
    with threadpool_limits(2):
        launch()
        if launch.last_call is launch.generic:
            pytest.skip("no prepared call here (TR_MLIR_CC=0 or TR_MLIR_C_GEMM=0)")
        got["y"].fill(0)
        monkeypatch.setattr(_parallel, "_cgemm", False)
        launch()  # no TypeError from a job runner that is gone
    want = {k: v.copy() for k, v in arrays.items()}
    with threadpool_limits(2):
        spec.fn(**want)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
    assert np.abs(got["y"]).sum() > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_an_unsplit_prepared_gemm_is_one_c_job_with_numpys_bits(threads):
    """A GEMM too small to split (MobileNetV2's 2x2 pointwise convs, its classifier) prepares as one
    C job (so its launch stays in a replay group) giving ``np.matmul``'s bits, plain or transposed
    operands, with a bias; a matrix-vector product (NumPy's ``gemv``) keeps NumPy."""
    rng = np.random.default_rng(7)
    r = lambda *s: rng.standard_normal(s).astype(F32)  # noqa: E731
    w = r(64, 192)
    cases = [(r(128, 192), w.T, None), (r(128, 192), r(192, 64), None), (r(32, 1280), r(1280, 10), r(10)),
             (r(200, 10).T, r(200, 256), None)]
    with threadpool_limits(threads):
        for a, b, bias in cases:
            out = np.zeros((a.shape[0], b.shape[1]), F32)
            call = _parallel.matmul_call(a, b, out, bias=bias)
            assert call is not None
            if _parallel.c_gemm():
                assert getattr(call, "steps", None) is not None, (a.shape, b.shape)
            call()
            want = np.zeros_like(out)
            _parallel.serial_matmul(a, b, want)  # NumPy's OpenBLAS on one thread, as the kernels run it
            if bias is not None:
                want += bias
            assert out.tobytes() == want.tobytes(), (a.shape, b.shape)
        dy, x = r(128, 84), r(128, 120)  # an FC's weight gradient with its bias gradient summed in the job
        dy[:, 3] = -0.0  # a dead unit's column: np.add.reduce starts from +0, so its sum is +0
        dw, db, want_db = np.zeros((84, 120), F32), np.zeros(84, F32), np.zeros(84, F32)
        call = _parallel.matmul_call(dy.T, x, dw, row_sums=(dy, db))
        if _parallel.c_gemm():
            assert getattr(call, "steps", None) is not None
        call()
        np.add.reduce(dy, axis=0, out=want_db)
        assert db.tobytes() == want_db.tobytes()
        with pytest.raises(ValueError, match="row_sums or an epilogue"):
            _parallel.matmul_call(dy.T, x, dw, row_sums=(dy, db), epilogue=lambda rows, cols: None)
        vec = np.zeros((32, 1), F32)
        call = _parallel.matmul_call(r(32, 100), r(100, 1), vec)
        assert getattr(call, "steps", None) is None


def test_a_small_fc_backward_runs_its_two_gemms_side_by_side(monkeypatch):
    """LeNet-5's 120 -> 84 FC backward (too small to split) prepares, on two threads, as one pair of
    whole-GEMM C jobs: dW (with db summed in its job) and dX side by side, the kernel function's
    bits; with dx written over x (the weight gradient reads x) the two run in turn."""
    if not _parallel.c_gemm():
        pytest.skip("no C worker (no C compiler or no NumPy OpenBLAS)")
    case = next(c for c in CASES if c[0] == "fc_bwd" and c[1]["x"].shape == (128, 1, 1, 120))
    name, arrays, params, outs = case
    got, launch = _run(name, dict(arrays), params, 2, True, monkeypatch)
    want, _ = _run(name, dict(arrays), params, 2, False, monkeypatch)
    steps = launch.last_call.steps
    assert len(steps) == 1 and not steps[0].here and len(steps[0].jobs) == 2
    for k in outs:
        assert got[k].tobytes() == want[k].tobytes(), k
    x = arrays["x"].copy()
    got, launch = _run(name, {**arrays, "x": x, "dx": x}, params, 2, True, monkeypatch)  # one buffer
    assert got["dx"] is got["x"]
    assert [st.here for st in launch.last_call.steps] == [True, True]



@pytest.mark.parametrize("threads", [1, 2])
def test_a_gemm_whose_output_overlaps_an_operand_keeps_numpy(threads):
    """A GEMM writing over an operand (y over x, dx over dy) is neither one C job nor split: NumPy's
    matmul copies the operand first, a job or a block would write over what it or the other block
    still reads. Small (unsplit) and large (split on two threads otherwise) shapes, prepared and
    through the kernel path, give the one-thread NumPy bits."""
    rng = np.random.default_rng(8)
    with threadpool_limits(threads):
        for rows, inner, cols in ((128, 84, 84), (128, 120, 120), (200, 784, 200), (512, 1024, 1024)):
            w = rng.standard_normal((inner, cols)).astype(F32)
            for prepared in (True, False):
                buf = rng.standard_normal((rows, inner)).astype(F32)
                want = np.zeros((rows, cols), F32)
                _parallel.serial_matmul(buf, w, want)
                if prepared:
                    call = _parallel.matmul_call(buf, w, buf[:, :cols])
                    assert getattr(call, "steps", None) is None, (rows, inner, cols)
                    call()
                else:
                    _parallel.matmul(buf, w, out=buf[:, :cols])
                assert buf[:, :cols].tobytes() == want.tobytes(), (rows, inner, cols, prepared)


def test_a_small_fc_backward_with_overlapping_writes_runs_in_turn(monkeypatch):
    """dW and dX side by side only where no array one writes is another's operand: dw in w's buffer
    (read by dX) runs the two in turn, with the kernel function's bits."""
    if not _parallel.c_gemm():
        pytest.skip("no C worker (no C compiler or no NumPy OpenBLAS)")
    name, arrays, params, outs = next(c for c in CASES if c[0] == "fc_bwd" and c[1]["x"].shape == (128, 1, 1, 120))
    w = arrays["w"].copy()
    shared = {**arrays, "w": w, "dw": w}
    got, launch = _run(name, shared, params, 2, True, monkeypatch)
    want, _ = _run(name, shared, params, 2, False, monkeypatch)
    assert got["dw"] is got["w"]
    assert all(st.here for st in launch.last_call.steps)
    for k in outs:
        assert got[k].tobytes() == want[k].tobytes(), k


@pytest.mark.parametrize("name", ["fc_bwd", "relu_fc_bwd"])
def test_an_fc_backward_writing_db_into_dws_buffer_is_deterministic(name, monkeypatch):
    """db laid inside dw's buffer (outside the kernels' contract, but memory a plan could hand
    out): the weight-gradient GEMM is then neither split nor one C job, so the result does not
    depend on which block finished first: prepared or not, one thread or two, the same bits."""
    rng = np.random.default_rng(9)
    n, f, o = 64, 400, 120
    x, w = rng.standard_normal((n, 1, 1, f)).astype(F32), rng.standard_normal((o, 1, 1, f)).astype(F32)
    dy = rng.standard_normal((n, 1, 1, o)).astype(F32)
    results = []
    for threads, prepared in ((1, False), (2, False), (2, True), (1, True)):
        dw = np.zeros((o, 1, 1, f), F32)
        arrays = {"dy": dy.copy(), "w": w.copy(), "x": np.maximum(x, 0) if name == "relu_fc_bwd" else x.copy(),
                  "dw": dw, "db": dw.reshape(-1)[-o:], "dx": np.zeros_like(x)}
        spec = KERNELS[name]
        ws = spec.allocate_workspaces(arrays)
        launch = spec.bind({**arrays, **ws}, {})
        launch_twice(launch, arrays, threads, prepared, monkeypatch, lambda a: None)
        results.append((dw.tobytes(), arrays["dx"].tobytes()))
    assert all(r == results[0] for r in results)
