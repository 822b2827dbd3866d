"""Data parallel on the CPU over gloo (lowering/gloo.py): two real processes on loopback.

* numerics: 2 ranks of batch B = one process of batch 2B within fp32 reduction-order tolerance
  (:data:`LOSS_TOL`, :data:`PARAM_TOL`) for an MLP and LeNet-5; a residual net with batch norm
  (per-rank forward statistics, running statistics averaged by STATS_COMM) = the seed's semantics
  simulated in one process (``gloo_dp_worker.train_averaged``), and measurably not batch 2B;
* ``torchrun --nproc_per_node 2 tr-train``: rank 0 alone prints and writes, the ranks agree;
* faults: a killed rank ends the other with an ``error:`` line in bounded time, a stopped (hung)
  one after ``TR_MLIR_DIST_TIMEOUT``; the checkpoint before it is intact, resumes with 2 processes
  to the same bits as a run never stopped, and is refused with 1.

Every process runs under a hard timeout (:data:`LIMIT`). Ranks are launched directly with the
torchrun variables (faster than torchrun, and the fault tests need the pids), except the
``tr-train`` runs, which go through ``python -m torch.distributed.run``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

import gloo_dp_worker as worker  # noqa: E402  (tests/ is on sys.path: rootdir conftest)

from tr_mlir.lowering import gloo  # noqa: E402
from tr_mlir.lowering.distributed import DistributedError, FakeComm, run_ranks  # noqa: E402
from tr_mlir.tools.train_outputs import load_run_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 120
"""Seconds any launched process may run before the test kills it and fails."""

LOSS_TOL = dict(rtol=1e-5, atol=1e-6)
PARAM_TOL = dict(rtol=1e-4, atol=1e-5)
"""fp32 reduction order: 2 ranks sum B samples each, then gloo adds the two means, where one
process sums 2B samples (measured: losses within 2.4e-7, parameters within 3e-8 after 3 steps)."""

TRAIN = ["--model", "resnet_tiny", "--dataset", "digits", "--fuse", "--batch-size", "32"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                           "MASTER_ADDR", "MASTER_PORT")}
    e.update({"PYTHONPATH": str(ROOT / "tests") + os.pathsep + e.get("PYTHONPATH", ""), "TR_MLIR_DIST_TIMEOUT": "60"})
    e.update(extra or {})
    return e


def _ranks(argv: list[str], world: int = 2, extra: dict[str, str] | None = None) -> list[subprocess.Popen]:
    """``world`` processes of ``argv`` with the torchrun variables (loopback, a free port)."""
    port = str(_free_port())
    return [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=_env({**(extra or {}), "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world),
                                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                                       "MASTER_PORT": port}))
            for r in range(world)]


def _wait(procs: list[subprocess.Popen], limit: float = LIMIT) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each process; kills them all and fails past ``limit``."""
    deadline = time.monotonic() + limit
    out = []
    try:
        for p in procs:
            so, se = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, so, se))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"a rank ran past {limit} s")
    return out


def _torchrun(args: list[str], nproc: int = 2) -> tuple[int, str, str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(nproc),
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "tr_mlir.tools.tr_train", *args]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    return _wait([p])[0]


def _tr_train(args: list[str]) -> tuple[int, str, str]:
    p = subprocess.Popen([sys.executable, "-m", "tr_mlir.tools.tr_train", *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env())
    return _wait([p])[0]


# -- in-process: the backend and its checks ----------------------------------------------


def test_backend_reduces_spans_through_the_communicator():
    """GlooBackend's all-reduce kernels over an in-process communicator: sum and mean, in place."""
    comms = FakeComm.group(2)
    backends = [gloo.GlooBackend(c) for c in comms]
    data = [np.array([1.0, 2.0, 3.0], np.float32), np.array([3.0, 6.0, 9.0], np.float32)]
    mean = [backends[r].kernels["range_mean_allreduce"].fn for r in range(2)]
    run_ranks([lambda r=r: mean[r]((data[r],), world_size=2) for r in range(2)])
    assert data[0].tolist() == data[1].tolist() == [2.0, 4.0, 6.0]
    total = [backends[r].kernels["range_sum_allreduce"].fn for r in range(2)]
    run_ranks([lambda r=r: total[r](data[r], world_size=2) for r in range(2)])
    assert data[0].tolist() == [4.0, 8.0, 12.0]
    with pytest.raises(DistributedError, match="compiled for world_size=3"):
        mean[0]((data[0],), world_size=3)


def test_tasks_over_the_backend_in_threads_train_like_one_with_twice_the_batch():
    """Two Tasks on GlooBackend over an in-process communicator (threads): the Task side of data
    parallel (world_size and rank from the backend, the COMM kernels bound) without processes."""
    import tr_mlir

    comms = FakeComm.group(2)
    opt = tr_mlir.optim.SGD(lr=0.05, momentum=0.9)
    tasks = [tr_mlir.Task("mlp_digits", (8, 8, 1), 10, 8, optimizer=opt, seed=3, device=gloo.GlooBackend(c))
             for c in comms]
    assert [(t.world_size, t.rank) for t in tasks] == [(2, 0), (2, 1)]
    x, y = worker.data((8, 8, 1), 32)

    def ranks(r: int) -> list[float]:
        return [tasks[r].train_step(x[s * 16:(s + 1) * 16][r::2], y[s * 16:(s + 1) * 16][r::2]) for s in range(2)]

    losses = run_ranks([lambda r=r: ranks(r) for r in range(2)])
    assert losses[0] == losses[1] and comms[0].calls == comms[1].calls > 0
    one = tr_mlir.Task("mlp_digits", (8, 8, 1), 10, 16, optimizer=opt, seed=3)
    np.testing.assert_allclose(losses[0], [one.train_step(x[s * 16:(s + 1) * 16], y[s * 16:(s + 1) * 16])
                                           for s in range(2)], **LOSS_TOL)
    for (k, a), (_, b) in zip(tasks[0].parameters(), one.parameters()):
        np.testing.assert_allclose(a, b, **PARAM_TOL, err_msg=k)


def test_launch_errors_name_the_variable(monkeypatch):
    assert gloo.cpu_backend().__class__.__name__ == "NumpyBackend"  # no WORLD_SIZE: torch is not needed
    with pytest.raises(DistributedError, match="TR_MLIR_DIST_TIMEOUT must be a positive number"):
        gloo.timeout_seconds({"TR_MLIR_DIST_TIMEOUT": "-3"})
    assert gloo.timeout_seconds({"TR_MLIR_DIST_TIMEOUT": "2.5"}) == 2.5
    with pytest.raises(DistributedError, match="RANK is not set"):
        gloo.launch_rank({"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"})
    monkeypatch.setitem(sys.modules, "torch.distributed", None)  # torch absent
    with pytest.raises(DistributedError, match=r"needs torch \(gloo\): pip install 'tr-mlir\[torch\]'"):
        gloo._torch_dist()


def test_ranks_share_the_cores(monkeypatch):
    """N ranks on C cores: each gets max(1, C // LOCAL_WORLD_SIZE) kernel threads (OpenBLAS's count,
    which the kernels split by), OPENBLAS_NUM_THREADS wins; torch's intra-op threads follow."""
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    from tr_mlir.lowering.cpu import _blas_libs, _parallel

    blas = _blas_libs.numpy_openblas()
    if blas is None:
        pytest.skip("NumPy has no OpenBLAS here")
    before, torch_before = blas.num_threads, torch.get_num_threads()
    monkeypatch.setattr(gloo, "cpu_cores", lambda: 8)
    try:
        for environ, want in (({"LOCAL_WORLD_SIZE": "2"}, 4), ({"LOCAL_WORLD_SIZE": "16"}, 1),
                              ({"WORLD_SIZE": "4"}, 2), ({"LOCAL_WORLD_SIZE": "2", "OPENBLAS_NUM_THREADS": "3"}, 3)):
            assert gloo.divide_threads(environ) == want
            assert _blas_libs.numpy_openblas().num_threads == want, threadpool_info()
            assert torch.get_num_threads() == want
            assert _parallel.workers() == min(want, _parallel.MAX_WORKERS)
        with pytest.raises(DistributedError, match="LOCAL_WORLD_SIZE must be an integer"):
            gloo.divide_threads({"LOCAL_WORLD_SIZE": "two"})
    finally:
        threadpool_limits(limits=before, user_api="blas")
        torch.set_num_threads(torch_before)


def test_bad_launch_is_an_error_line_without_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "tr_mlir.tools.tr_train", "--epochs", "1"], cwd=ROOT, capture_output=True,
                       text=True, timeout=LIMIT, env=_env({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "127.0.0.1"}))
    assert p.returncode == 1
    assert "tr-train: error: RANK=5 outside [0, WORLD_SIZE=2)" in p.stderr and "Traceback" not in p.stderr


# -- numerics: 2 processes against one ------------------------------------------------


def test_two_ranks_train_like_one_process_with_twice_the_batch(tmp_path):
    batch, steps = 8, 3
    results = _wait(_ranks([sys.executable, str(ROOT / "tests" / "gloo_dp_worker.py"), str(tmp_path / "r{rank}.npz"),
                            str(batch), str(steps)]))
    for rc, _, err in results:
        assert rc == 0, err[-3000:]
    got = [dict(np.load(tmp_path / f"r{r}.npz")) for r in range(2)]
    for r in range(2):
        for name in worker.MODELS:
            assert got[r][f"{name}/world"].tolist() == [2, r]
    for k in got[0]:  # the ranks hold the same bits: every rank receives the same reduced bytes
        assert np.array_equal(got[0][k], got[1][k]) or k.endswith("/world"), k
    for name in ("mlp_digits", "lenet5"):
        one = worker.train(name, 2 * batch, steps)
        np.testing.assert_allclose(got[0][f"{name}/loss"], one[f"{name}/loss"], **LOSS_TOL)
        for k in one:
            if "/param/" in k or "/buffer/" in k:
                np.testing.assert_allclose(got[0][k], one[k], **PARAM_TOL, err_msg=k)
    ref = worker.train_averaged("resnet_tiny", batch, steps)
    np.testing.assert_allclose(got[0]["resnet_tiny/loss"], ref["resnet_tiny/loss"], **LOSS_TOL)
    for k in ref:
        if "/param/" in k or "/buffer/" in k:
            np.testing.assert_allclose(got[0][k], ref[k], **PARAM_TOL, err_msg=k)
    # batch norm normalizes with each rank's own statistics: not the same as one batch of 2B
    one = worker.train("resnet_tiny", 2 * batch, steps)
    assert np.abs(got[0]["resnet_tiny/loss"][1:] - one["resnet_tiny/loss"][1:]).max() > 1e-4


# -- tr-train under torchrun, faults, resume ---------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """``torchrun --nproc_per_node 2 tr-train ... --epochs 2``: its output and folder."""
    d = tmp_path_factory.mktemp("dp_full")
    rc, out, err = _torchrun([*TRAIN, "--epochs", "2", "--save-dir", str(d / "ck"), "--report-json",
                              str(d / "report.json")])
    assert rc == 0, err[-3000:]
    return out, d


def test_torchrun_tr_train_rank0_alone_prints_and_writes(uninterrupted):
    out, d = uninterrupted
    assert out.count("== data") == 1 and out.count("== summary") == 1, out
    assert "cpu x 2 processes" in out and "rank 0 of 2" in out
    report = json.loads((d / "report.json").read_text())
    assert report["config"]["world_size"] == 2 and len(report["epochs"]) == 2
    assert report["epochs"][-1]["val_top1"] > 0.5  # it learned (digits: 10 classes)
    assert json.loads((d / "ck" / "last" / "tr_train.json").read_text())["config"]["world_size"] == 2


@pytest.mark.parametrize("how", ["kill", "hang"])
def test_a_lost_rank_ends_the_run_and_the_checkpoint_resumes(tmp_path, uninterrupted, how):
    """Rank 0 pauses 3 s after swapping in epoch 1's checkpoint; then rank 1 is killed (or stopped:
    a hung rank). Rank 0's next all-reduce fails: at once (kill) or after the 6 s timeout (hang)."""
    ck = tmp_path / "ck"
    procs = _ranks([sys.executable, "-m", "tr_mlir.tools.tr_train", *TRAIN, "--epochs", "2", "--save-dir", str(ck)],
                   extra={"TR_MLIR_SAVE_PAUSE": "run-swapped@last:3", "TR_MLIR_DIST_TIMEOUT": "6"})
    deadline = time.monotonic() + LIMIT
    while not (ck / "last" / "tr_train.json").exists():
        if time.monotonic() > deadline or procs[0].poll() is not None:
            for p in procs:
                p.kill()
            pytest.fail(f"no checkpoint of epoch 1: {procs[0].communicate()[1][-2000:]}")
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        rc, out, err = _wait(procs[:1], limit=40)[0]
    finally:
        procs[1].kill()
        procs[1].wait()
    waited = time.monotonic() - t0
    assert rc == 1, err[-3000:]
    assert "tr-train: error: rank 0 of 2: the all-reduce" in err and "another rank died" in err, err[-3000:]
    assert "Traceback" not in err
    assert waited < (20 if how == "kill" else 35)
    if how == "hang":
        assert waited > 4 and "did not answer within 6 s" in err  # the gloo timeout, not a closed socket
    assert len(load_run_state(ck / "last")["epochs"]) == 1  # epoch 1's checkpoint, intact (its SHA-256s)

    if how == "kill":  # one resume of each kind is enough (each costs a launch)
        rc, out, err = _tr_train(["--resume", str(ck), "--epochs", "2"])
        assert rc == 1 and "trained by 2 process(es), this run has 1 (WORLD_SIZE)" in err, err[-2000:]
        assert "Traceback" not in err
        rc, out, err = _torchrun(["--resume", str(ck), "--epochs", "2"])
        assert rc == 0, err[-3000:]
        _, full = uninterrupted
        a = np.load(full / "ck" / "last" / "state.npz")
        b = np.load(ck / "last" / "state.npz")
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            assert np.array_equal(a[k], b[k]), k
        rows = [json.loads((d / "last" / "tr_train.json").read_text())["epochs"] for d in (full / "ck", ck)]
        assert [r["train_loss"] for r in rows[0]] == [r["train_loss"] for r in rows[1]]


def test_torchrun_stops_the_others_when_a_rank_dies(tmp_path):
    """Under torchrun: rank 1 killed after epoch 1's checkpoint; the launcher stops rank 0, which
    says so in one line; torchrun fails in bounded time; the checkpoint is intact."""
    psutil = pytest.importorskip("psutil")
    ck = tmp_path / "ck"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2", "--master_addr",
           "127.0.0.1", "--master_port", str(_free_port()), "-m", "tr_mlir.tools.tr_train", *TRAIN, "--epochs", "2",
           "--save-dir", str(ck)]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env({"TR_MLIR_SAVE_PAUSE": "run-swapped@last:5"}))
    deadline = time.monotonic() + LIMIT
    try:
        while not (ck / "last" / "tr_train.json").exists():
            assert time.monotonic() < deadline and p.poll() is None, "no checkpoint of epoch 1"
            time.sleep(0.05)
        ranks = {c.environ().get("RANK"): c for c in psutil.Process(p.pid).children()}
        ranks["1"].kill()
        t0 = time.monotonic()
        rc, out, err = _wait([p], limit=40)[0]
    finally:
        for c in psutil.Process(p.pid).children(recursive=True) if p.poll() is None else ():
            c.kill()
        p.kill()
    assert rc != 0 and time.monotonic() - t0 < 30
    assert "tr-train: error: rank 0 of 2:" in err, err[-3000:]
    assert len(load_run_state(ck / "last")["epochs"]) == 1


def test_a_rank_whose_peer_never_comes_fails_after_the_timeout():
    """Rank 1 of 2 launched alone (rank 0 failed before joining, or was never started)."""
    port = str(_free_port())
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "tr_mlir.tools.tr_train", *TRAIN, "--epochs", "1"], cwd=ROOT,
                       capture_output=True, text=True, timeout=LIMIT,
                       env=_env({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": port, "TR_MLIR_DIST_TIMEOUT": "3"}))
    assert p.returncode == 1 and time.monotonic() - t0 < 60
    assert (f"tr-train: error: rank 1 of 2: cannot join the gloo process group at 127.0.0.1:{port} "
            f"(MASTER_ADDR:MASTER_PORT) within 3 s") in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and p.stdout == ""  # rank 1 prints nothing
