"""Prepared launches of the batch-norm training kernels (:mod:`tr_mlir.lowering.cpu._prepared_norm`):
each compiled fp32 BN kernel's prepared call is C jobs only (``steps``: a replay group can run
it) and gives the kernel function's bits, the per-channel work between the passes included: the
running statistics in fp32 as NumPy 2 computes them, the variance clamp, NaN channels, the
scalar operands read anew each step, every thread count and block split."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tr_mlir.lowering.backend import ClosureGraph
from tr_mlir.lowering.cpu import _cc, _cnorm, _parallel, _prepared, conv_stats, norm
from tr_mlir.lowering.cpu.registry import KERNELS, PreparedLaunch

from _launch_twice import launch_twice
from _sgd_steps import assert_same_training, three_sgd_steps

F32 = np.float32

SHAPES = [(4, 3, 3, 5), (2, 2, 2, 1280), (1, 1, 1, 24), (32, 1, 1, 10), (1, 1, 1, 3), (8, 32, 32, 64),
          (3, 33, 33, 161), (3, 7, 7, 240)]
"""Few and many channels, M = 1 row and more, (N, 1, 1, C) batch norms, two activations of at
least :data:`._cnorm.SPLIT_ELEMENTS` (one with an odd channel count and uneven row blocks), and
one between :data:`._cnorm.BLOCK_ELEMENTS` and it (row blocks that a prepared launch runs on two
threads and the kernel function on one)."""

SCALARS = ("f32", "f64", "number", "none")
"""How ``eps`` and ``momentum`` come: 1-element fp32 or fp64 arrays, Python numbers, None."""


def _scalar(form: str, value: float):
    return {"f32": np.array([value], F32), "f64": np.array([value], np.float64), "number": value,
            "none": None}[form]


def _activation(rng, shape: tuple[int, ...], offset: float = 0.0) -> np.ndarray:
    """Random fp32 values with a constant channel (variance 0) and, from 4 channels, a NaN in
    channel 2 (a row after the first) and in the pivot row of channel 3."""
    x = (rng.standard_normal(shape) + offset).astype(F32)
    x2 = x.reshape(-1, shape[-1])
    x2[:, 1 % shape[-1]] = 2.5
    if shape[-1] >= 4:
        x2[-1, 2] = np.nan
        x2[0, 3] = np.nan
    return x


def _conv_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``sum``, ``sq_sum`` a conv would write for x, with a negative and a -0 ``sq_sum`` (the
    variance clamp of :func:`.conv_stats.mean_var`)."""
    c = x.shape[-1]
    s, sq = np.zeros((1, 1, 1, c), F32), np.zeros((1, 1, 1, c), F32)
    conv_stats.from_output(x, s, sq)
    sq.reshape(-1)[0] = -1.5
    sq.reshape(-1)[-1] = -0.0
    return s, sq


def _forward_cases(rng, shape, form: str) -> list:
    c = shape[-1]
    vec = lambda: rng.standard_normal(c).astype(F32)  # noqa: E731
    base = {"x": _activation(rng, shape, 3.0), "gamma": vec(), "beta": vec(), "running_mean": vec(),
            "running_var": np.abs(vec()), "y": np.zeros(shape, F32), "save_mean": np.zeros(c, F32),
            "save_istd": np.zeros(c, F32), "eps": _scalar(form, 1e-3), "momentum": _scalar(form, 0.3)}
    stats = dict(zip(("sum", "sq_sum"), _conv_stats(base["x"])))
    mask, skip = np.zeros(shape, np.int8), rng.standard_normal(shape).astype(F32)
    fwd = "bn1d_fwd" if shape[1:3] == (1, 1) else "bn2d_fwd"
    return [(fwd, base, {}), (fwd, base, {"y": "x"}), (fwd, {**base, **stats}, {}),
            ("bn2d_relu_fwd", {**base, "mask": mask}, {}), ("bn2d_relu_fwd", base, {}),
            ("bn2d_relu_fwd", {**base, **stats, "mask": mask}, {}),
            ("bn2d_add_relu_fwd", {**base, "skip": skip, "mask": mask}, {}),
            ("bn2d_add_relu_fwd", {**base, "skip": skip}, {}),
            ("bn2d_add_relu_fwd", {**base, **stats, "skip": skip}, {})]


def _backward_cases(rng, shape) -> list:
    c = shape[-1]
    x = _activation(rng, shape, -1.0)
    dy = rng.standard_normal(shape).astype(F32)
    if c >= 4:
        dy.reshape(-1, c)[-1, 0] = np.nan
    base = {"dy": dy, "x": x, "gamma": rng.standard_normal(c).astype(F32),
            "save_mean": x.reshape(-1, c).mean(axis=0, dtype=np.float64).astype(F32),
            "save_istd": (np.abs(rng.standard_normal(c)) + 0.1).astype(F32), "dgamma": np.zeros(c, F32),
            "dbeta": np.zeros(c, F32), "dx": np.zeros(shape, F32)}
    mask = (rng.random(shape) > 0.4).astype(np.int8)
    y = np.where(mask, rng.random(shape) + 0.5, rng.choice([0.0, -0.0], shape)).astype(F32)
    bwd = "bn1d_bwd" if shape[1:3] == (1, 1) else "bn2d_bwd"
    dskip = {"dskip": np.zeros(shape, F32)}
    return [(bwd, base, {}), (bwd, {**base, "dx": None}, {}), (bwd, base, {"dx": "x"}),
            ("bn2d_relu_bwd", {**base, "mask": mask}, {}),
            ("bn2d_relu_bwd_from_output", {**base, "y": y}, {"dx": "dy"}),
            ("bn2d_add_relu_bwd", {**base, "mask": mask, **dskip}, {}),
            ("bn2d_add_relu_bwd", {**base, "mask": mask, **dskip}, {"dskip": "dy"}),
            ("bn2d_add_relu_bwd_from_output", {**base, "y": y, **dskip}, {})]


def _cases() -> list:
    """(kernel, arrays, aliases: output -> the input whose buffer it is) for every shape."""
    rng = np.random.default_rng(0)
    cases = []
    for i, shape in enumerate(SHAPES):
        cases += _forward_cases(rng, shape, SCALARS[i % len(SCALARS)]) + _backward_cases(rng, shape)
    return cases


CASES = _cases()


def _copy(arrays: dict, aliases: dict) -> dict:
    out = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
    out.update({k: out[v] for k, v in aliases.items()})
    return out


def _next_step(arrays: dict) -> None:
    """What changes between two steps: the activation and gradients (the constant channel stays
    constant), the conv's statistics, ``eps`` and ``momentum``."""
    for k in ("x", "dy", "skip", "sum", "sq_sum"):
        if k in arrays:
            arrays[k] += F32(0.25)
    for k in ("eps", "momentum"):
        if isinstance(arrays.get(k), np.ndarray):
            arrays[k] *= 0.5


def _run(name: str, arrays: dict, aliases: dict, threads: int, prepared: bool, monkeypatch):
    arrs = _copy(arrays, aliases)
    return arrs, launch_twice(KERNELS[name].bind(arrs, {}), arrs, threads, prepared, monkeypatch, _next_step)


def _assert_prepared(launch: PreparedLaunch, name: str) -> None:
    """The prepared call ran (with compiled kernels), made of C jobs only (with the C worker)."""
    if not _cc.available():
        assert launch.last_call is launch.generic, name
        return
    assert launch.last_call is not launch.generic, f"{name}: no prepared call"
    if _parallel.c_gemm():
        assert getattr(launch.last_call, "steps", None) is not None, f"{name}: not all C jobs"


def _outputs(name: str, arrays: dict) -> dict:
    return {k: arrays[k] for k in KERNELS[name].outputs if isinstance(arrays.get(k), np.ndarray)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)),
                         ids=lambda i: f"{CASES[i][0]}-{'x'.join(map(str, CASES[i][1]['x'].shape))}-{i}")
def test_prepared_bn_gives_the_kernel_functions_bits(case, threads, monkeypatch):
    name, arrays, aliases = CASES[case]
    got, launch = _run(name, arrays, aliases, threads, True, monkeypatch)
    want, _ = _run(name, arrays, aliases, threads, False, monkeypatch)
    _assert_prepared(launch, name)
    for k, w in _outputs(name, want).items():
        assert got[k].tobytes() == w.tobytes(), f"{name}: {k} differs from the kernel function's"


def test_the_cases_reach_the_clamp_nan_and_split_paths():
    """The data of the cases does what they are there for: the clamp, NaN channels, the row blocks
    (three shapes; one the kernel function runs in turn on one thread)."""
    name, arrays, _ = next(c for c in CASES if c[0] == "bn2d_fwd" and "sum" in c[1])
    mean, var = conv_stats.mean_var(arrays["sum"], arrays["sq_sum"], arrays["x"].size // arrays["x"].shape[-1])
    assert arrays["sq_sum"].reshape(-1)[0] < 0 and var[0] == 0.0 and var[-1] == 0.0
    x = next(c[1]["x"] for c in CASES if c[0] == "bn2d_fwd" and c[1]["x"].shape == (4, 3, 3, 5))
    assert np.isnan(x[..., 2]).any() and np.isnan(x[0, 0, 0, 3]) and np.ptp(x[..., 1]) == 0
    blocked = [s for s in SHAPES if len(_cnorm._bounds(int(np.prod(s[:-1])), s[-1])) > 2]
    assert len(blocked) == 3
    assert sum(int(np.prod(s)) < _cnorm.SPLIT_ELEMENTS for s in blocked) == 1


@pytest.mark.parametrize("change", ["fp16", "wide", "strided gamma", "aliased statistics", "int eps",
                                    "one statistic", "uint8 mask", "empty"])
def test_unusual_arrays_run_the_kernel_function(change, monkeypatch):
    """No prepared call for what the kernel function does not run compiled or what the C code
    does not read as it does; the kernel function runs (and raises its own errors)."""
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    shape = {"wide": (1, 1, 1, _cnorm.MAX_CHANNELS + 1), "empty": (0, 2, 2, 4)}.get(change, (2, 2, 2, 4))
    c = shape[-1]
    rng = np.random.default_rng(1)
    dtype = np.float16 if change == "fp16" else F32
    arrays = {"x": rng.standard_normal(shape).astype(dtype), "gamma": np.ones(c, F32), "beta": np.zeros(c, F32),
              "running_mean": np.zeros(c, F32), "running_var": np.ones(c, F32), "y": np.zeros(shape, dtype),
              "save_mean": np.zeros(c, F32), "save_istd": np.zeros(c, F32), "mask": None}
    name = "bn2d_fwd"
    if change == "strided gamma":
        arrays["gamma"] = np.ones(2 * c, F32)[::2]
    elif change == "aliased statistics":
        both = np.zeros(c + 1, F32)
        arrays["running_mean"], arrays["save_mean"] = both[:c], both[1:]
    elif change == "int eps":
        arrays["eps"] = np.array([1], np.int32)
    elif change == "one statistic":
        arrays["sum"] = np.zeros(c, F32)
    elif change == "uint8 mask":
        name, arrays["mask"] = "bn2d_relu_fwd", np.zeros(shape, np.uint8)
    if name == "bn2d_fwd":
        del arrays["mask"]
    launch = KERNELS[name].bind(arrays, {})
    if change == "one statistic":
        with pytest.raises(ValueError, match="both 'sum' and 'sq_sum'"):
            launch()
    elif change != "empty":
        launch()
    else:
        assert launch.prepared_call() is launch.generic
    assert launch.last_call is launch.generic, change


def test_bn_launches_form_a_replay_group_with_the_same_bits(monkeypatch):
    """A BN forward, a second one on its output and a backward: one replay group (every part a C
    job), giving the bits of the launches run one by one."""
    if not (_cc.available() and _parallel.c_gemm()):
        pytest.skip("no C worker here (TR_MLIR_CC=0 or TR_MLIR_C_GEMM=0): launches are not grouped")
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    name, fwd, _ = next(c for c in CASES if c[0] == "bn2d_relu_fwd" and c[1]["x"].shape == (8, 32, 32, 64)
                        and "mask" in c[1] and "sum" not in c[1])
    _, bwd, _ = next(c for c in CASES if c[0] == "bn2d_relu_bwd" and c[1]["x"].shape == (8, 32, 32, 64))
    results = []
    for groups in ("1", "0"):
        monkeypatch.setenv(_prepared.ENV_GROUPS, groups)
        a, b = _copy(fwd, {}), _copy(fwd, {})
        b["x"] = a["y"]
        d = _copy(bwd, {})
        d.update(x=a["x"], mask=a["mask"], save_mean=a["save_mean"], save_istd=a["save_istd"], dy=b["y"])
        graph = ClosureGraph((KERNELS[name].bind(a, {}), KERNELS["bn2d_fwd"].bind(
            {k: v for k, v in b.items() if k != "mask"}, {}), KERNELS["bn2d_relu_bwd"].bind(d, {})))
        with threadpool_limits(2):
            graph.replay()
            graph.replay()
        if groups == "1":
            (plan,) = graph.plans.values()
            assert len(plan) == 1 and isinstance(plan[0], _prepared.ReplayGroup) and len(plan[0].launches) == 3
        results.append([v.tobytes() for arrs in (a, b, d) for v in arrs.values() if isinstance(v, np.ndarray)])
    assert results[0] == results[1]


def _three_steps(model: str, batch: int, threads: int, fuse: bool, prepared: bool, monkeypatch):
    task, losses, state = three_sgd_steps(model, batch, threads, monkeypatch, fuse=fuse,
                                          **{_prepared.ENV_PREPARE: "1" if prepared else "0"})
    bn = [launch for g in task.exe.captured for launch in g.launches
          if isinstance(launch, PreparedLaunch) and launch.func.__module__ == norm.__name__]
    return losses, state, bn


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model, batch, fuse", [("resnet_tiny", 8, False), ("resnet_tiny", 8, True),
                                                ("mobilenet_tiny", 4, True), ("resnet8_cifar", 4, True)])
def test_training_with_prepared_bn_is_bit_identical(model, batch, fuse, threads, monkeypatch):
    """Three SGD steps with and without prepared launches, the fused models with BN+ReLU,
    residual joins and conv statistics: the same losses, parameters and running statistics to
    the bit, and every BN launch took its prepared C jobs."""
    on = _three_steps(model, batch, threads, fuse, True, monkeypatch)
    off = _three_steps(model, batch, threads, fuse, False, monkeypatch)
    assert_same_training(on, off)
    assert on[2] and all(launch.last_call is launch.generic for launch in off[2])
    for launch in on[2]:
        _assert_prepared(launch, launch.func.__name__)


@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize("case", [i for i, c in enumerate(CASES)
                                  if c[1]["x"].size >= _cnorm.BLOCK_ELEMENTS and "sum" not in c[1]],
                         ids=lambda i: f"{CASES[i][0]}-{'x'.join(map(str, CASES[i][1]['x'].shape))}-{i}")
def test_bn_bits_do_not_depend_on_the_thread_count(case, prepared, monkeypatch):
    """The row blocks are fixed by the shape (:data:`._cnorm.BLOCK_ELEMENTS`), so one thread and two
    give the same bits, prepared or not (the partial sums used to be one per thread). A +1e20 and
    a -1e20 in the last channel (no NaN there) at the start of each block make the float64 sums
    depend on the blocks (the values after the +1e20 are lost in one block, kept after the -1e20
    with one block). Cases given the conv's statistics have no statistics pass: left out."""
    name, arrays, aliases = CASES[case]
    arrays = dict(arrays)
    key = "dy" if "dy" in arrays else "x"  # what the sums run over: plant +-1e20 where block 2 starts
    a = arrays[key] = arrays[key].copy()
    rows = a.reshape(-1, a.shape[-1])
    rows[1, -1], rows[rows.shape[0] // 2, -1] = 1e20, -1e20  # one block: 0 + the later rows; two: 0
    one, _ = _run(name, arrays, aliases, 1, prepared, monkeypatch)
    two, _ = _run(name, arrays, aliases, 2, prepared, monkeypatch)
    for k, w in _outputs(name, one).items():
        assert two[k].tobytes() == w.tobytes(), f"{name}: {k} differs between 1 and 2 threads"


def test_mid_size_bn_blocks_run_in_turn_while_contended(monkeypatch):
    """Below the kernel function's SPLIT_ELEMENTS, a prepared BN runs its two row blocks on both
    threads only through the C worker: while the threads are contended (the Python kernel threads'
    hand-off costs more than a block) they run in turn on the calling thread, the same bits."""
    if not _parallel.c_gemm():
        pytest.skip("no C worker (no C compiler or no NumPy OpenBLAS)")
    name, arrays, aliases = next(c for c in CASES if c[0] == "bn2d_relu_fwd" and c[1]["x"].shape == (3, 7, 7, 240)
                                 and "sum" not in c[1])
    calm, launch = _run(name, arrays, aliases, 2, True, monkeypatch)
    assert any(not st.here for st in launch.last_call.steps)
    monkeypatch.setattr(_parallel, "_contended", 10 ** 9)  # contended for the whole test
    busy, launch = _run(name, arrays, aliases, 2, True, monkeypatch)
    assert all(st.here for st in launch.last_call.steps)
    for k, v in _outputs(name, calm).items():
        assert busy[k].tobytes() == v.tobytes(), k
