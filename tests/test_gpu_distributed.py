"""Data parallel without GPUs: the launcher environment, sharding, the TCP store, and two ranks
training through the CUDA backend on emulated devices with an in-process communicator.

Two ranks with half the batch each, gradients averaged by the COMM graphs' all-reduces, must take
the same steps as one process with the whole batch (a model without batch norm, whose statistics
are per rank by design).
"""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

import tr_mlir
from tr_mlir.lowering.cuda import emulator as emu
from tr_mlir.lowering import distributed as dist


def test_env_single_process_and_errors():
    assert dist.env({}) is None
    assert dist.env({"WORLD_SIZE": "1"}) is None
    e = dist.env({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "node0", "MASTER_PORT": "1234"})
    assert e == dist.DistEnv(2, 4, 0, "node0", 1234)
    assert dist.env({"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h"}) == dist.DistEnv(1, 2, 1, "h", 29500)
    with pytest.raises(dist.DistributedError, match="RANK is not set"):
        dist.env({"WORLD_SIZE": "2", "MASTER_ADDR": "h"})
    with pytest.raises(dist.DistributedError, match="MASTER_ADDR is not set"):
        dist.env({"WORLD_SIZE": "2", "RANK": "0"})
    with pytest.raises(dist.DistributedError, match="RANK=2 outside"):
        dist.env({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h"})
    with pytest.raises(dist.DistributedError, match="must be an integer"):
        dist.env({"WORLD_SIZE": "2", "RANK": "x", "MASTER_ADDR": "h"})


@pytest.mark.parametrize("n,world", [(10, 3), (16, 2), (7, 8), (1, 2)])
def test_shards_match_torch_distributed_sampler(n, world):
    torch_data = pytest.importorskip("torch.utils.data")
    for rank in range(world):
        want = list(torch_data.DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False))
        assert dist.shard_indices(n, rank, world).tolist() == want
    x, y = np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n)
    xs, ys = dist.shard(x, y, 0, world)
    assert xs.shape[0] == -(-n // world) and np.array_equal(xs[:, 0] / 2, ys)
    assert dist.shard(x, y, 0, 1)[0] is x


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tcp_store_exchanges_bytes_and_waits():
    port = _free_port()
    master = dist.TcpStore("127.0.0.1", port, True, timeout=10)
    try:
        client = dist.TcpStore("127.0.0.1", port, False, timeout=10)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("v", client.get("nccl_id")))
        t.start()
        master.set("nccl_id", b"\x00\x01id-bytes\xff" * 10)
        t.join(10)
        assert got["v"] == b"\x00\x01id-bytes\xff" * 10
        short = dist.TcpStore("127.0.0.1", port, False, timeout=0.3)
        with pytest.raises(dist.DistributedError, match="timed out waiting for 'missing'"):
            short.get("missing")
    finally:
        master.close()


def test_fake_comm_sum_avg_and_mismatch():
    comms = dist.FakeComm.group(3)
    bufs = [np.full(5, r + 1, np.float32) for r in range(3)]
    dist.run_ranks([lambda r=r: comms[r].all_reduce(bufs[r], "sum") for r in range(3)])
    assert all(np.all(b == 6) for b in bufs)
    dist.run_ranks([lambda r=r: comms[r].all_reduce(bufs[r], "avg") for r in range(3)])
    assert all(np.all(b == 6) for b in bufs) and comms[0].calls == 2
    comms = dist.FakeComm.group(2)
    with pytest.raises(dist.DistributedError, match="different all-reduces"):
        dist.run_ranks([lambda: comms[0].all_reduce(np.zeros(3, np.float32), "sum"),
                        lambda: comms[1].all_reduce(np.zeros(4, np.float32), "sum")])


@pytest.mark.skipif(emu.host_compiler() is None, reason="no host C++ compiler for the kernel emulator")
def test_two_ranks_train_like_one_process_with_the_whole_batch():
    from tr_mlir.lowering.cuda.backend import CudaBackend

    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    opt = tr_mlir.optim.SGD(lr=0.1, momentum=0.9, weight_decay=1e-3)

    def run(device, batch):
        task = tr_mlir.Task("mlp_digits", (8, 8, 1), 10, batch_size=batch, optimizer=opt, device=device, seed=5)
        hist = task.fit((x, y), (x, y), epochs=2, shuffle=False)
        return task, hist, dict(task.parameters())

    single = run(CudaBackend(emu.EmulatedDevice()), 16)
    comms = dist.FakeComm.group(2)
    ranks = dist.run_ranks([lambda r=r: run(CudaBackend(emu.EmulatedDevice(comm=comms[r])), 8) for r in range(2)])
    assert [t.world_size for t, _, _ in ranks] == [2, 2] and [t.rank for t, _, _ in ranks] == [0, 1]
    assert comms[0].calls > 0 and comms[0].calls == comms[1].calls
    for name, p in single[2].items():
        np.testing.assert_allclose(ranks[0][2][name], p, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(ranks[1][2][name], ranks[0][2][name], err_msg=name)
    for k in ("train_loss", "train_top1", "val_loss", "val_top1", "val_top5"):
        assert ranks[0][1][-1][k] == pytest.approx(single[1][-1][k], rel=1e-5, abs=1e-6), k
        assert ranks[1][1][-1][k] == ranks[0][1][-1][k], k
