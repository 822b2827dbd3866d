"""Replay groups (:class:`tr_mlir.lowering.cpu._prepared.ReplayGroup`): consecutive prepared
launches whose calls are all C jobs run as one call into the C worker's library. A group must run
the same jobs in the same order as the launches' own calls (the same bits), never span a launch
that needs Python, fall back to the launches one by one where their calls would not run as jobs,
and record the jobs' times as the calls would."""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tr_mlir
from tr_mlir.lowering.backend import ClosureGraph
from tr_mlir.lowering.cpu import _cc, _parallel, _prepared
from tr_mlir.lowering.cpu.activation import C_SPLIT_ELEMENTS
from tr_mlir.lowering.cpu.registry import KERNELS, PreparedLaunch
from tr_mlir.zoo import MODELS

from _sgd_steps import assert_same_training, three_sgd_steps

F32 = np.float32


def _need_c_worker() -> None:
    if not (_cc.available() and _parallel.c_gemm()):
        pytest.skip("no C worker here (TR_MLIR_CC=0 or TR_MLIR_C_GEMM=0): launches are not grouped")


def _tanh(x: np.ndarray, y: np.ndarray) -> PreparedLaunch:
    launch = KERNELS["tanh_fwd"].bind({"x": x, "y": y}, {})
    assert isinstance(launch, PreparedLaunch)
    return launch


def _chain(sizes: list[int], seed: int = 0):
    """Tanh launches ``y[i + 1] = tanh(y[i][:sizes[i]])`` (``sizes`` not increasing), each reading
    what the one before wrote; the buffers ``y`` (``y[0]`` the random input) and the launches."""
    rng = np.random.default_rng(seed)
    n = max(s for s in sizes if s)
    bufs = [rng.standard_normal(n).astype(F32)]
    launches = []
    for size in sizes:
        x = bufs[-1][:size]
        y = np.zeros(size, F32)
        launches.append(_tanh(x, y))
        bufs.append(y)
    return bufs, launches


def _numpy_chain(x0: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    out, x = [], x0
    for size in sizes:
        x = np.tanh(x[:size])
        out.append(x)
    return out


def _plan(graph: ClosureGraph) -> tuple:
    state = _prepared.begin_replay()
    try:
        return _prepared.replay_plan(graph.launches, state, graph.plans)
    finally:
        _prepared.end_replay()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_group_runs_its_launches_in_order_to_the_bit(threads, monkeypatch):
    """Dependent tanh launches, split in two (a job pair) and whole (a job here), mixed: one group
    giving NumPy's bits, in order (each reads what the one before wrote)."""
    _need_c_worker()
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    sizes = [C_SPLIT_ELEMENTS * 2, C_SPLIT_ELEMENTS + 6, 5000, 1000, 77]
    bufs, launches = _chain(sizes)
    graph = ClosureGraph(tuple(launches))
    with threadpool_limits(threads):
        plan = _plan(graph)
        assert len(plan) == 1 and isinstance(plan[0], _prepared.ReplayGroup)
        if threads == 2:  # the two large ones split: segments of two jobs drained by both threads
            assert list(plan[0].counts) == [2, 2, -1, -1, -1]
        else:
            assert list(plan[0].counts) == [-1] * 5
        graph.replay()
    for got, want in zip(bufs[1:], _numpy_chain(bufs[0], sizes)):
        assert got.tobytes() == want.tobytes()


def test_a_launch_without_jobs_ends_a_group_and_runs_between(monkeypatch):
    """A Python launch between C launches: the plan keeps it in place, groups only the runs of
    two or more C launches around it, and the replay sees its input written and its output read."""
    _need_c_worker()
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    x = np.linspace(-2, 2, 3000, dtype=F32)
    a, b, c, d, e = (np.zeros_like(x) for _ in range(5))
    seen = []

    def python_step() -> None:  # reads a (written by the group before), writes b
        seen.append(a.copy())
        np.multiply(a, 1.5, out=b)

    launches = (_tanh(x, a), _tanh(a, e), python_step, _tanh(b, c), _tanh(c, d), _tanh(d, d))
    graph = ClosureGraph(launches)
    with threadpool_limits(2):
        plan = _plan(graph)
        assert [type(p).__name__ for p in plan] == ["ReplayGroup", "function", "ReplayGroup"]
        assert plan[1] is python_step and plan[2].launches == launches[3:]
        graph.replay()
    assert seen[0].tobytes() == np.tanh(x).tobytes()
    want = np.tanh(np.tanh(np.tanh(np.tanh(x) * F32(1.5))))
    assert d.tobytes() == want.tobytes()


def test_a_single_c_launch_is_not_a_group(monkeypatch):
    _need_c_worker()
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    x = np.ones(100, F32)
    launch = _tanh(x, np.zeros_like(x))
    graph = ClosureGraph((launch, lambda: None))
    with threadpool_limits(2):
        assert _plan(graph)[0] is launch


def test_groups_off_by_the_switch_and_without_prepared_calls(monkeypatch):
    _need_c_worker()
    bufs, launches = _chain([300, 200, 100])
    graph = ClosureGraph(tuple(launches))
    monkeypatch.setenv(_prepared.ENV_GROUPS, "0")
    assert _plan(graph) is graph.launches
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    monkeypatch.setenv(_prepared.ENV_PREPARE, "0")
    assert _plan(graph) is graph.launches
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")
    assert isinstance(_plan(graph)[0], _prepared.ReplayGroup)


def test_a_plan_is_made_once_per_launch_state(monkeypatch):
    _need_c_worker()
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    _, launches = _chain([C_SPLIT_ELEMENTS * 2, 100])
    graph = ClosureGraph(tuple(launches))
    with threadpool_limits(2):
        two = _plan(graph)
        assert _plan(graph) is two
    with threadpool_limits(1):
        one = _plan(graph)
    assert one is not two and len(graph.plans) == 2
    assert list(one[0].counts) == [-1, -1] and list(two[0].counts) == [2, -1]


@pytest.mark.parametrize("why", ["contended", "c_worker_off"])
def test_the_launches_run_one_by_one_where_their_calls_would_not_run_as_jobs(why, monkeypatch):
    """While the threads are contended, or with the C worker off (``TR_MLIR_C_GEMM=0`` after the
    plan was made), the group calls its launches (their own calls decide) and not the C runner."""
    _need_c_worker()
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    sizes = [C_SPLIT_ELEMENTS * 3, C_SPLIT_ELEMENTS * 2, 500]
    bufs, launches = _chain(sizes, seed=1)
    graph = ClosureGraph(tuple(launches))
    with threadpool_limits(2):
        assert isinstance(_plan(graph)[0], _prepared.ReplayGroup)

        def refuse(*_a):
            raise AssertionError("the C runner ran")

        monkeypatch.setattr(_prepared, "_run_segments", lambda: refuse)
        if why == "contended":
            monkeypatch.setattr(_parallel, "contended", lambda: True)
        else:
            monkeypatch.setenv(_parallel.ENV_C_GEMM, "0")
        graph.replay()
    for got, want in zip(bufs[1:], _numpy_chain(bufs[0], sizes)):
        assert got.tobytes() == want.tobytes()


def test_a_c_thread_that_cannot_start_leaves_the_launches_to_their_own_calls(monkeypatch):
    """``tr_run_segments`` returning -1 (pthread_create failed, nothing ran): the C worker is off
    from then on, as after ``run_pair``, and every launch runs on its own, with the same result."""
    _need_c_worker()
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    monkeypatch.setattr(_parallel, "_cgemm", _parallel._cgemm)  # restored after the test
    monkeypatch.setattr(_parallel, "_contended", 0)  # not what an earlier test left: groups run their segments
    sizes = [C_SPLIT_ELEMENTS * 2, 400, 300]
    bufs, launches = _chain(sizes, seed=2)
    graph = ClosureGraph(tuple(launches))
    with threadpool_limits(2):
        assert isinstance(_plan(graph)[0], _prepared.ReplayGroup)
        monkeypatch.setattr(_prepared, "_run_segments", lambda: (lambda *_a: -1))
        graph.replay()
        assert _parallel._cgemm is False
    for got, want in zip(bufs[1:], _numpy_chain(bufs[0], sizes)):
        assert got.tobytes() == want.tobytes()


def test_a_groups_split_times_feed_the_contention_measure(monkeypatch):
    """Each job pair's times, per unit of work, reach ``note_split`` after the group, in order,
    as ``run_pair`` would pass them."""
    _need_c_worker()
    monkeypatch.setenv(_prepared.ENV_GROUPS, "1")
    notes = []
    monkeypatch.setattr(_parallel, "note_split", lambda t: notes.append(tuple(t)))
    _, launches = _chain([C_SPLIT_ELEMENTS * 4, C_SPLIT_ELEMENTS * 2 + 1, 100])
    graph = ClosureGraph(tuple(launches))
    with threadpool_limits(2):
        plan = _plan(graph)
        graph.replay()
    group = plan[0]
    assert len(notes) == 2 and all(len(n) == 2 and min(n) > 0 for n in notes)
    at = [i for i, c in enumerate(group.counts) if c == 2]
    first = sum(abs(c) for c in group.counts[:at[0]])
    assert notes[0][0] == group.array[first].seconds  # equal halves: times as measured


def test_sequence_has_steps_only_when_every_part_has():
    job = functools.partial(print)
    a, b = (lambda: None), (lambda: None)
    a.steps = (_prepared.Step((), True),)
    b.steps = (_prepared.Step((), False, _prepared.NOTE_STATIC),)
    assert _prepared.sequence(a, b).steps == a.steps + b.steps
    assert not hasattr(_prepared.sequence(a, job), "steps")


def test_small_ufunc_forwards_are_c_jobs_with_numpys_bits():
    """A tanh forward too small to split runs NumPy's own loop as one C piece: a job a group can
    take, with ``np.tanh``'s bits (including the values around 0, 9 and the infinities)."""
    _need_c_worker()
    x = np.concatenate([np.linspace(-10, 10, 997, dtype=F32), np.array([0.0, -0.0, np.inf, -np.inf, 1e-30], F32)])
    y = np.zeros_like(x)
    launch = _tanh(x, y)
    with threadpool_limits(2):
        launch()
        assert getattr(launch.last_call, "steps", None) is not None
    assert y.tobytes() == np.tanh(x).tobytes()


def _three_steps(model: str, batch: int, threads: int, groups: bool, monkeypatch):
    task, losses, state = three_sgd_steps(model, batch, threads, monkeypatch,
                                          **{_prepared.ENV_GROUPS: "1" if groups else "0"})
    grouped = sum(isinstance(item, _prepared.ReplayGroup) for g in task.exe.captured
                  for plan in g.plans.values() for item in plan)
    return losses, state, grouped


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model, batch", [("lenet5", 32), ("mlp", 16), ("resnet_tiny", 8)])
def test_training_with_replay_groups_is_bit_identical(model, batch, threads, monkeypatch):
    """Three SGD steps with and without replay groups: the same losses, parameters and buffers to
    the bit; where there is a C worker, the steps had groups (LeNet-5's convolution stages, the
    tiny ResNet's batch norms and poolings; the MLP's FC chains where its GEMMs run as jobs)."""
    on = _three_steps(model, batch, threads, True, monkeypatch)
    off = _three_steps(model, batch, threads, False, monkeypatch)
    assert_same_training(on, off)
    assert off[2] == 0
    least = {"lenet5": 2, "resnet_tiny": 2}.get(model, 0)  # the MLP's FCs: jobs or NumPy, by BLAS core type
    if _cc.available() and _parallel.c_gemm():
        assert on[2] >= least, f"only {on[2]} groups"


def _job_bytes(job) -> bytes:
    raw = bytearray(ctypes.string_at(ctypes.addressof(job), ctypes.sizeof(job)))
    at = _parallel._Job.seconds.offset
    raw[at:at + 8] = bytes(8)  # the time the job took: an output
    return bytes(raw)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("model, batch", [("lenet5", 32), ("mlp", 16), ("resnet_tiny", 8)])
def test_the_jobs_of_a_call_with_steps_never_change(model, batch, threads, monkeypatch):
    """A group copies each call's jobs once, when its plan is made: every job of every prepared
    call with ``steps`` must hold the same bytes after three training steps as when the call was
    made (a call that writes its step's scalars into its jobs, as SGD's, must not have steps)."""
    seen = {}
    real = PreparedLaunch.prepared_call

    def spy(self):
        call = real(self)
        for st in getattr(call, "steps", None) or ():
            for job in st.jobs:
                seen.setdefault(ctypes.addressof(job), (job, _job_bytes(job)))
        return call

    monkeypatch.setattr(PreparedLaunch, "prepared_call", spy)
    three_sgd_steps(model, batch, threads, monkeypatch, **{_prepared.ENV_GROUPS: "0"})
    changed = [a for a, (job, b) in seen.items() if _job_bytes(job) != b]
    assert not changed, f"{len(changed)} of {len(seen)} step jobs were written after their call was made"
    if model != "mlp" and _cc.available() and _parallel.c_gemm():
        assert seen


def test_graphs_replayed_from_two_python_threads_keep_their_bits():
    """Two LeNet-5 tasks trained at once from two Python threads (their groups and split kernels
    share the one C worker, one caller at a time): both end with the parameters of the same
    training run alone, and neither hangs."""
    spec = MODELS["lenet5"]
    rng = np.random.default_rng(5)
    data = [(rng.standard_normal((16, *spec.input_shape)).astype(F32), rng.integers(0, 10, 16).astype(np.int32))
            for _ in range(12)]

    def task():
        return tr_mlir.Task(spec.blueprint(10), spec.input_shape, 10, 16,
                            optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9), seed=3)

    def train(t) -> None:
        for x, y in data:
            t.train_step(x, y)

    def params(t) -> bytes:
        return b"".join(a.tobytes() for _, a in t.parameters())

    with threadpool_limits(2):
        alone = task()
        train(alone)
        tasks = [task(), task()]
        threads = [threading.Thread(target=train, args=(t,), daemon=True) for t in tasks]
        for th in threads:
            th.start()
        for th in threads:
            th.join(120)
    assert not any(th.is_alive() for th in threads), "a training thread hangs"
    assert all(params(t) == params(alone) for t in tasks)


def test_groups_use_the_c_worker_that_was_set_up_even_after_cc_changes(tmp_path):
    """``CC`` changed after the C worker was set up: a group still runs on that worker's library
    (a second build of it, with no sgemm set and a worker of its own, crashed the process)."""
    _need_c_worker()
    script = tmp_path / "cc_swap.py"
    script.write_text("""
import os, sys
import numpy as np
from threadpoolctl import threadpool_limits
import tr_mlir
from tr_mlir.zoo import MODELS
spec = MODELS["mlp"]  # its FC GEMMs run as jobs in groups (with NumPy's OpenBLAS on its own core type)
task = tr_mlir.Task(spec.blueprint(10), spec.input_shape, 10, 16, optimizer=tr_mlir.optim.SGD(lr=0.05), seed=3)
rng = np.random.default_rng(5)
x = rng.standard_normal((16, *spec.input_shape)).astype(np.float32)
y = rng.integers(0, 10, 16).astype(np.int32)
os.environ["TR_MLIR_REPLAY_GROUPS"] = "0"
with threadpool_limits(2):
    task.train_step(x, y)
    os.environ["CC"] = (os.environ.get("CC") or "cc") + " -DTR_MLIR_TEST_CC_SWAP=1"
    os.environ["TR_MLIR_REPLAY_GROUPS"] = "1"
    print("loss", task.train_step(x, y))
""")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["TR_MLIR_CACHE_DIR"] = str(tmp_path / "cc")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "loss" in done.stdout, done.stderr[-2000:]


def test_a_training_step_pins_the_launch_state_once_for_its_graphs(monkeypatch):
    """The runner pins one launch state for all the graphs of a step (``begin_step``), not one per
    graph; a switch changed between steps takes effect at the next; an error inside a step leaves
    nothing pinned."""
    spec = MODELS["lenet5"]
    task = tr_mlir.Task(spec.blueprint(10), spec.input_shape, 10, 8, optimizer=tr_mlir.optim.SGD(lr=0.05), seed=3)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, *spec.input_shape)).astype(F32), rng.integers(0, 10, 8).astype(np.int32)
    task.train_step(x, y)
    pins = []
    real = _prepared._state_now
    monkeypatch.setattr(_prepared, "_state_now", lambda: pins.append(1) or real())
    replays = []
    real_replay_in = ClosureGraph.replay_in
    monkeypatch.setattr(ClosureGraph, "replay_in", lambda g, st: replays.append(st) or real_replay_in(g, st))
    task.train_step(x, y)
    assert len(replays) >= 5 and len(set(map(id, replays))) == 1
    assert len(pins) <= 2  # the input copy's graph before the step, then the step
    monkeypatch.setenv(_prepared.ENV_PREPARE, "0")
    task.train_step(x, y)
    assert replays[-1].prepared is False
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1")

    def boom(g, st):
        raise RuntimeError("a failing launch")

    monkeypatch.setattr(ClosureGraph, "replay_in", boom)
    with pytest.raises(RuntimeError, match="a failing launch"):
        task.runner._step(0, "a", False, 0.05, 8)
    assert _prepared._replay_state.state is None and task.runner._pinned is None


def test_a_replay_nested_inside_a_step_leaves_no_graph_of_the_step_unpinned(monkeypatch):
    """A graph replayed inside a step (another task's, from the batch iterator the step's prefetch
    pulls) ends the thread's pin: the step's later graphs must not replay under a state no longer
    pinned (their plans would be made from the live state's calls and kept under the step's)."""
    import tr_mlir.lowering.backend as backend

    spec = MODELS["lenet5"]
    make = lambda: tr_mlir.Task(spec.blueprint(10), spec.input_shape, 10, 8,  # noqa: E731
                                optimizer=tr_mlir.optim.SGD(lr=0.05), seed=3)
    student, teacher = make(), make()
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((24, *spec.input_shape)).astype(F32), rng.integers(0, 10, 24).astype(np.int32)
    teacher.predict(x[:8])
    student.compile()
    seen = []
    real = backend.replay_plan
    monkeypatch.setattr(backend, "replay_plan",
                        lambda launches, st, plans: seen.append(_prepared._replay_state.state is st) or real(launches, st, plans))

    def batches():
        for i in range(3):
            if i == 1:  # staged while step 0 runs
                teacher.predict(x[:8])
            yield x[8 * i:8 * i + 8], y[8 * i:8 * i + 8]

    student.runner.train_epoch(batches(), 3, lambda b: 0.05)
    assert seen and all(seen), seen
    assert _prepared._replay_state.state is None
