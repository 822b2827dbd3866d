"""Data parallel: one process per GPU, gradients all-reduced by NCCL inside the captured graphs.

Launch (any launcher that sets the torchrun environment: ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``)::

    # one machine, 8 GPUs
    torchrun --standalone --nproc-per-node 8 -m tr_mlir.tools.tr_train ... --device gpu
    # two machines of 8 GPUs (run on each; node 0's address reachable from node 1)
    torchrun --nnodes 2 --node-rank {0|1} --nproc-per-node 8 \
             --master-addr 10.0.0.1 --master-port 29500 -m tr_mlir.tools.tr_train ... --device gpu

Each process drives ``LOCAL_RANK``'s GPU. :func:`init` reads the environment; with
``WORLD_SIZE`` unset or 1 it returns None and every all-reduce is a no-op (the single-process
case records nothing into the graphs). Otherwise rank 0 creates the NCCL unique id
(``cupy.cuda.nccl.get_unique_id()``), publishes it in a TCP key-value store at
``MASTER_ADDR:MASTER_PORT`` (``torch.distributed.TCPStore`` when torch is installed, else
:class:`TcpStore`, a small store of our own speaking the same role: rank 0 serves, everyone
reads), every rank builds ``cupy.cuda.nccl.NcclCommunicator(world, id, rank)``, and a first
all-reduce warms the connections up before any capture (NCCL's rule: a captured collective must
be captured on every rank; the graphs are identical on all ranks because every rank compiles the
same program).

Semantics of the COMM graphs (:mod:`tr_mlir.lowering.cuda.backend`): ``RANGE_MEAN_ALLREDUCE``
and ``RANGE_BN_STATS_ALLREDUCE`` average (``NCCL_AVG``) -- gradients of the local mean losses
average to the gradient of the global mean loss, and the per-step loss/top-k average to the
global batch's -- and ``RANGE_SUM_ALLREDUCE`` sums. Each rank trains on its own shard of the data
(:func:`shard`: the rank's ``ceil(N / world)`` samples, padded by wrapping around as PyTorch's
``DistributedSampler``), so the compiler's per-rank batch sizes hold on every rank.

:class:`FakeComm` is an in-process communicator (threads, NumPy) with the same interface, for
testing the logic without GPUs.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tr_mlir.errors import TrMlirError


class DistributedError(TrMlirError, RuntimeError):
    """A bad launcher environment or a failed rendezvous; the message says which variable or peer."""


@dataclass(frozen=True)
class DistEnv:
    """The launcher's view of this process: ``rank`` of ``world``, ``local_rank`` (its GPU),
    the store address ``master_addr:master_port``."""

    rank: int
    world: int
    local_rank: int
    master_addr: str
    master_port: int


def env(environ: dict[str, str] | None = None) -> DistEnv | None:
    """The torchrun-style environment (module doc), or None when ``WORLD_SIZE`` is unset or 1.
    Raises :class:`DistributedError` naming a missing or bad variable."""
    e = os.environ if environ is None else environ
    world = e.get("WORLD_SIZE")
    if world in (None, "", "1"):
        return None

    def num(name: str, default: str | None = None) -> int:
        v = e.get(name, default)
        if v is None:
            raise DistributedError(f"WORLD_SIZE={world} but {name} is not set; launch with torchrun (module doc)")
        try:
            return int(v)
        except ValueError:
            raise DistributedError(f"{name} must be an integer, got {v!r}") from None

    w, rank = num("WORLD_SIZE"), num("RANK")
    if not 0 <= rank < w:
        raise DistributedError(f"RANK={rank} outside [0, WORLD_SIZE={w})")
    addr = e.get("MASTER_ADDR")
    if not addr:
        raise DistributedError(f"WORLD_SIZE={w} but MASTER_ADDR is not set; launch with torchrun (module doc)")
    return DistEnv(rank, w, num("LOCAL_RANK", str(rank)), addr, num("MASTER_PORT", "29500"))


def shard_indices(n: int, rank: int, world: int) -> np.ndarray:
    """The sample indices of ``rank``: ``rank, rank + world, ...`` over ``0 .. N-1`` padded by
    wrapping to ``ceil(N / world) * world`` (PyTorch's ``DistributedSampler`` without shuffle),
    so every rank has ``ceil(N / world)`` samples."""
    per = -(-n // world)
    idx = np.arange(per * world) % max(n, 1)
    return idx[rank::world]


def shard(x: np.ndarray, y: np.ndarray, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of this rank (:func:`shard_indices`); the arrays themselves for one process."""
    if world <= 1:
        return x, y
    idx = shard_indices(x.shape[0], rank, world)
    return x[idx], y[idx]


# --------------------------------------------------------------------------------------
# A tiny TCP key-value store (rank 0 serves) for the NCCL id when torch is absent
# --------------------------------------------------------------------------------------


class TcpStore:
    """A minimal blocking key-value store: ``set(key, bytes)`` / ``get(key, timeout)``.

    The master (rank 0) listens on ``port`` and serves a dict; clients connect per call.
    Protocol: one request per connection, ``op (1 byte) | len(key) u32 | key | len(value) u32 |
    value``; ``op`` ``S`` stores, ``G`` answers the value (``len`` 0xFFFFFFFF: not yet there).
    """

    def __init__(self, host: str, port: int, is_master: bool, timeout: float = 300.0):
        self.host, self.port, self.timeout = host, port, timeout
        self._data: dict[bytes, bytes] = {}
        self._server: socket.socket | None = None
        if is_master:
            srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("", port))
            srv.listen(64)
            self._server = srv
            threading.Thread(target=self._serve, args=(srv,), daemon=True).start()

    @staticmethod
    def _recv(c: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            part = c.recv(n - len(buf))
            if not part:
                raise ConnectionError("store connection closed")
            buf += part
        return buf

    def _serve(self, srv: socket.socket) -> None:
        """Answer set/get requests until :meth:`close` closes ``srv`` (the thread then ends)."""
        while True:
            try:
                c, _ = srv.accept()
            except OSError:  # closed by close(): the normal way out
                return
            with c:
                try:
                    op = self._recv(c, 1)
                    (kl,) = struct.unpack("!I", self._recv(c, 4))
                    key = self._recv(c, kl)
                    if op == b"S":
                        (vl,) = struct.unpack("!I", self._recv(c, 4))
                        self._data[key] = self._recv(c, vl)
                        c.sendall(b"K")
                    else:
                        v = self._data.get(key)
                        c.sendall(struct.pack("!I", 0xFFFFFFFF) if v is None else struct.pack("!I", len(v)) + v)
                except (ConnectionError, OSError, struct.error):
                    continue

    def _call(self, payload: bytes, reply: int | None) -> bytes:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=10) as c:
                    c.sendall(payload)
                    if reply is not None:
                        return self._recv(c, reply)
                    (n,) = struct.unpack("!I", self._recv(c, 4))
                    return b"" if n == 0xFFFFFFFF else self._recv(c, n) if n else b"\0"
            except OSError:
                if time.monotonic() > deadline:
                    raise DistributedError(f"cannot reach the store at {self.host}:{self.port} (MASTER_ADDR/PORT)")
                time.sleep(0.2)

    def set(self, key: str, value: bytes) -> None:
        k = key.encode()
        self._call(b"S" + struct.pack("!I", len(k)) + k + struct.pack("!I", len(value)) + value, 1)

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting until some rank sets it (``timeout`` seconds)."""
        k = key.encode()
        deadline = time.monotonic() + self.timeout
        while True:
            v = self._call(b"G" + struct.pack("!I", len(k)) + k, None)
            if v:
                return v
            if time.monotonic() > deadline:
                raise DistributedError(f"timed out waiting for '{key}' in the store at {self.host}:{self.port}")
            time.sleep(0.05)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def make_store(e: DistEnv, timeout: float = 300.0) -> Any:
    """``torch.distributed.TCPStore`` when torch imports, else :class:`TcpStore` (module doc)."""
    try:
        from datetime import timedelta

        from torch.distributed import TCPStore  # type: ignore[import-not-found]

        return TCPStore(e.master_addr, e.master_port, e.world, e.rank == 0, timeout=timedelta(seconds=timeout))
    except ImportError:
        return TcpStore(e.master_addr, e.master_port, e.rank == 0, timeout)


# --------------------------------------------------------------------------------------
# Communicators
# --------------------------------------------------------------------------------------

_NCCL_OPS = {"sum": 0, "avg": 4}  # ncclSum, ncclAvg
_NCCL_DTYPES = {np.dtype(np.float32): 7, np.dtype(np.float16): 6}  # ncclFloat32, ncclFloat16


class NcclComm:
    """CuPy's NCCL communicator for this process (``size`` ranks, this ``rank``).

    :meth:`all_reduce_ptr` is the in-place all-reduce the captured COMM graphs record.
    """

    def __init__(self, e: DistEnv, store: Any = None):
        from cupy.cuda import nccl  # type: ignore[import-not-found]

        self.nccl = nccl
        self.size, self.rank = e.world, e.rank
        store = store if store is not None else make_store(e)
        key = "tr_mlir/nccl_unique_id"
        if e.rank == 0:
            uid = nccl.get_unique_id()
            store.set(key, bytes(uid) if not isinstance(uid, tuple) else bytes(bytearray(uid)))
        raw = store.get(key)
        self.comm = nccl.NcclCommunicator(e.world, raw, e.rank)
        self._store = store

    def all_reduce_ptr(self, ptr: int, count: int, dtype: np.dtype, op: str, stream: int) -> None:
        """In-place ``op`` ('sum' / 'avg') of ``count`` elements at device pointer ``ptr`` on ``stream``."""
        self.comm.allReduce(ptr, ptr, count, _NCCL_DTYPES[np.dtype(dtype)], _NCCL_OPS[op], stream)

    def warm_up(self) -> None:
        """One eager all-reduce (connection setup, outside any capture)."""
        import cupy  # type: ignore[import-not-found]

        buf = cupy.ones(1024, cupy.float32)
        s = cupy.cuda.get_current_stream()
        self.all_reduce_ptr(buf.data.ptr, buf.size, np.dtype(np.float32), "sum", s.ptr)
        s.synchronize()
        got = float(buf[0].get())
        if got != float(self.size):
            raise DistributedError(f"NCCL warm-up all-reduce gave {got}, expected {self.size}")


_COMM: Any = None


def init(environ: dict[str, str] | None = None) -> NcclComm | None:
    """The process group from the launcher's environment (module doc), created once per process
    and warmed up; None for a single process."""
    global _COMM
    e = env(environ)
    if e is None:
        return None
    if _COMM is None:
        import cupy  # type: ignore[import-not-found]

        cupy.cuda.Device(e.local_rank % cupy.cuda.runtime.getDeviceCount()).use()
        _COMM = NcclComm(e)
        _COMM.warm_up()
    return _COMM


class FakeComm:
    """An in-process communicator for tests: ``size`` ranks in ``size`` threads of one process,
    ``all_reduce(array, op)`` reduces the ranks' NumPy buffers in place (sum in float64, then
    'avg' divides), in rank order, so the result is the same on every rank. Create the ranks with
    :meth:`group`. ``calls`` counts this rank's all-reduces."""

    def __init__(self, size: int, rank: int, shared: dict[str, Any]):
        self.size, self.rank = size, rank
        self._shared = shared
        self.calls = 0

    @classmethod
    def group(cls, size: int) -> list[FakeComm]:
        shared: dict[str, Any] = {"barrier": threading.Barrier(size, timeout=120), "bufs": [None] * size, "ops": [None] * size}
        return [cls(size, r, shared) for r in range(size)]

    def all_reduce(self, array: np.ndarray, op: str) -> None:
        sh = self._shared
        sh["bufs"][self.rank] = array
        sh["ops"][self.rank] = (op, array.dtype.str, array.size)
        sh["barrier"].wait()
        if len(set(sh["ops"])) != 1:
            raise DistributedError(f"ranks issued different all-reduces: {sh['ops']}")
        total = np.zeros(array.size, np.float64)
        for b in sh["bufs"]:
            total += b.astype(np.float64)
        if op == "avg":
            total /= self.size
        sh["barrier"].wait()
        array[...] = total.astype(array.dtype)
        self.calls += 1
        sh["barrier"].wait()

    def all_reduce_ptr(self, ptr: int, count: int, dtype: np.dtype, op: str, stream: int) -> None:
        raise DistributedError("FakeComm reduces host arrays (EmulatedDevice), not device pointers")


def run_ranks(fns: Sequence[Any]) -> list[Any]:
    """Run ``fns[r]()`` in one thread per rank; returns their results, re-raising the first error."""
    out: list[Any] = [None] * len(fns)
    errs: list[BaseException | None] = [None] * len(fns)

    def body(r: int) -> None:
        try:
            out[r] = fns[r]()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errs[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errs:
        if e is not None:
            raise e
    return out
