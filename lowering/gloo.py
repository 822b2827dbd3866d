"""Data parallel on the CPU: the COMM graphs' all-reduces over ``torch.distributed`` with gloo.

Launch (the same command as on GPUs, :mod:`tr_mlir.lowering.distributed`)::

    torchrun --standalone --nproc-per-node 2 tr-train --model resnet_tiny --dataset digits --fuse

Each process is one rank. :func:`cpu_backend` (what :class:`tr_mlir.Task` uses for
``device='cpu'``) reads the torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``); with ``WORLD_SIZE`` unset or 1 it is the
plain :class:`~tr_mlir.lowering.backend.NumpyBackend` and torch is never imported. Otherwise it
joins a gloo process group (:class:`GlooComm`, rendezvous at ``MASTER_ADDR:MASTER_PORT``) and returns a
:class:`GlooBackend`: the NumPy backend whose three all-reduce kernels
(``range_mean_allreduce``, ``range_sum_allreduce``, ``range_bn_stats_allreduce``) reduce their
region span of the arena in place across the ranks. The span is handed to gloo as
``torch.from_numpy(view)``: no copy, the arena's bytes are what gloo reads and writes.

Semantics (the seed's, as on NCCL; ``docs/architecture.md``, *Data parallel*):

* ``FIRST_COMM`` / ``DEEP_COMM`` (``RANGE_MEAN_ALLREDUCE`` over the gradients and
  ``R_RESULT``): the mean over ranks. Every rank's gradient is that of its local mean loss over
  its ``B`` samples, so the mean is the gradient of the mean loss over all ``N*B`` samples; the
  step's loss / top-1 / top-5 (``R_RESULT``, reduced with the gradients) become the global
  batch's.
* ``STATS_COMM`` (``RANGE_BN_STATS_ALLREDUCE`` over ``B_NEXT_MEAN .. B_NEXT_VAR``): the mean of
  the ranks' BN *running* statistics after each step. The forward pass normalizes with each
  rank's own batch statistics (no synchronized BN): a net with batch norm on N ranks of batch
  ``B`` trains like N processes of batch ``B`` whose parameters, optimizer state and running
  statistics are averaged after every step, not like one process of batch ``N*B``. The running
  mean is then the global batch's (equal shards), the running variance the mean of the ranks'
  unbiased variances (not the pooled variance).
* ``VAL_RESULT_COMM`` (``RANGE_MEAN_ALLREDUCE`` over ``R_RESULT_ACCUMULATED``): the mean of
  the ranks' metric sums; divided by the per-rank sample count it is the mean over the padded
  validation set (:func:`tr_mlir.lowering.distributed.shard`).

gloo has no average: a mean is a sum followed by ``/ world`` on every rank. Every rank receives
the same reduced bytes, so the ranks' parameters stay bit-identical. Against one process with
``N*B`` samples per step (a net without batch norm) only the summation order differs: each rank
sums its ``B`` samples, then gloo adds the N partial means.

Faults: every collective runs under the process group's timeout (:data:`TIMEOUT_ENV`, default
:data:`DEFAULT_TIMEOUT` seconds). A rank that dies closes its sockets and the others' next
all-reduce fails at once ("connection reset / closed by peer"); a rank that hangs makes them fail
after the timeout. Either way :meth:`GlooComm.all_reduce` raises :class:`DistributedError`
naming this rank and the collective, which ``tr-train`` prints as ``tr-train: error: ...`` (exit
status 1). Under ``torchrun`` the launcher also stops the surviving workers when one exits
non-zero.

Threads: the CPU kernels split their work across as many threads as OpenBLAS is set to
(:mod:`tr_mlir.lowering.cpu._parallel`). N ranks on one machine of C cores would each take all
C; :func:`divide_threads` sets each rank's OpenBLAS (and torch's intra-op) thread count to
``max(1, C // LOCAL_WORLD_SIZE)`` (C: the cores this process may run on), unless
``OPENBLAS_NUM_THREADS`` is set, which then wins.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np

from tr_mlir.lowering.backend import NumpyBackend
from tr_mlir.lowering.distributed import DistEnv, DistributedError, env
from tr_mlir.lowering.cpu import KERNELS, KernelSpec

TIMEOUT_ENV = "TR_MLIR_DIST_TIMEOUT"
"""Seconds a collective (and the rendezvous) may wait for the other ranks before failing."""

DEFAULT_TIMEOUT = 300.0

_OPS = {"range_mean_allreduce": "avg", "range_bn_stats_allreduce": "avg", "range_sum_allreduce": "sum"}
"""The all-reduce kernels of the COMM graphs and the reduction each one is."""

_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def timeout_seconds(environ: Mapping[str, str] | None = None) -> float:
    """:data:`TIMEOUT_ENV` in seconds (default :data:`DEFAULT_TIMEOUT`). Raises
    :class:`DistributedError` for a value that is not a positive number."""
    e = os.environ if environ is None else environ
    raw = e.get(TIMEOUT_ENV)
    if raw in (None, ""):
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise DistributedError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def _torch_dist() -> Any:
    """``torch.distributed``, or :class:`DistributedError` saying how to install torch."""
    try:
        import torch.distributed as tdist  # type: ignore[import-not-found]
    except ImportError as e:
        raise DistributedError(f"WORLD_SIZE > 1 on the CPU needs torch (gloo): pip install 'tr-mlir[torch]' "
                               f"({e})") from None
    if not tdist.is_available() or not tdist.is_gloo_available():
        raise DistributedError("WORLD_SIZE > 1 on the CPU needs torch.distributed with gloo, which this torch "
                               "build lacks")
    return tdist


class GlooComm:
    """This process's gloo communicator: ``size`` ranks, this ``rank``, the interface of
    :class:`~tr_mlir.lowering.distributed.FakeComm` (``all_reduce(array, op)``) plus
    :meth:`barrier` and :meth:`close`.

    Joins the default ``torch.distributed`` process group (rendezvous ``tcp://MASTER_ADDR:MASTER_PORT``
    of ``e``, rank 0 serving the store), or uses it when the process already joined one of ``e.world``
    ranks. ``timeout``: seconds for the rendezvous and for every collective.

    Raises:
        DistributedError: torch or gloo missing, a process group of another size, or a
            rendezvous that failed or timed out (the message names ``MASTER_ADDR:MASTER_PORT``).
    """

    def __init__(self, e: DistEnv, timeout: float = DEFAULT_TIMEOUT):
        tdist = _torch_dist()
        import torch  # type: ignore[import-not-found]

        self._torch, self._dist = torch, tdist
        self.size, self.rank, self.timeout = e.world, e.rank, timeout
        self.calls = 0
        self.broken = False  # a collective failed: the group is unusable (a peer is gone)
        self.exit_status: int | None = None  # set by abandon()
        where = f"rank {e.rank} of {e.world}"
        if tdist.is_initialized():
            if tdist.get_world_size() != e.world or tdist.get_rank() != e.rank:
                raise DistributedError(f"{where}: torch.distributed is already initialized as rank "
                                       f"{tdist.get_rank()} of {tdist.get_world_size()}")
            self._owner = self._joined = False
            return
        if (e.master_addr in ("127.0.0.1", "localhost") and not os.environ.get("GLOO_SOCKET_IFNAME")
                and os.path.exists("/sys/class/net/lo")):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # one machine: loopback, whatever the hostname resolves to
        host = f"[{e.master_addr}]" if ":" in e.master_addr else e.master_addr  # an IPv6 address
        try:
            tdist.init_process_group("gloo", init_method=f"tcp://{host}:{e.master_port}", rank=e.rank,
                                     world_size=e.world, timeout=timedelta(seconds=timeout))
        except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError, DistStoreError, TimeoutError, ...
            raise DistributedError(f"{where}: cannot join the gloo process group at {e.master_addr}:"
                                   f"{e.master_port} (MASTER_ADDR:MASTER_PORT) within {timeout:g} s: "
                                   f"{_first_line(exc)}") from None
        self._owner = self._joined = True
        atexit.register(self._at_exit)

    def all_reduce(self, array: np.ndarray, op: str) -> None:
        """In-place all-reduce of the contiguous float32/float16 ``array`` across the ranks:
        ``op`` 'sum', or 'avg' (the sum divided by ``size``). Zero-copy (``torch.from_numpy``).

        Raises:
            ValueError: an unknown ``op``, another dtype, or a non-contiguous array.
            DistributedError: a peer died or did not answer within the timeout (the message
                names this rank, the op and the element count).
        """
        if op not in ("sum", "avg"):
            raise ValueError(f"all-reduce op must be 'sum' or 'avg', got {op!r}")
        if array.dtype not in _DTYPES:
            raise ValueError(f"all-reduce of a {array.dtype} array (float32 or float16 expected)")
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError("all-reduce needs a contiguous, writeable array (an arena span)")
        t = self._torch.from_numpy(array)
        try:
            self._dist.all_reduce(t, op=self._dist.ReduceOp.SUM)
        except Exception as exc:  # noqa: BLE001 - gloo raises RuntimeError / DistBackendError
            self.broken = True
            raise DistributedError(f"rank {self.rank} of {self.size}: the all-reduce ({op}, {array.size} "
                                   f"elements) failed: another rank died, was killed or did not answer within "
                                   f"{self.timeout:g} s ({TIMEOUT_ENV}): {_first_line(exc)}") from None
        if op == "avg" and self.size > 1:
            array /= array.dtype.type(self.size)
        self.calls += 1

    def barrier(self) -> None:
        """Wait until every rank has called it; :class:`DistributedError` as :meth:`all_reduce`."""
        try:
            self._dist.barrier()
        except Exception as exc:  # noqa: BLE001
            self.broken = True
            raise DistributedError(f"rank {self.rank} of {self.size}: the barrier failed: another rank died or "
                                   f"did not answer within {self.timeout:g} s ({TIMEOUT_ENV}): "
                                   f"{_first_line(exc)}") from None

    def close(self) -> None:
        """Leave the process group (when this communicator joined it): a barrier, so that no rank
        tears its connections down while another still uses them, then
        ``destroy_process_group``. Raises :class:`DistributedError` when the barrier fails."""
        if self._owner and self._dist.is_initialized():
            self._owner = False
            if not self.broken:
                self.barrier()
            self._dist.destroy_process_group()

    def _at_exit(self) -> None:
        """At interpreter exit, for a group this communicator joined: :meth:`close`; with a
        broken group (a peer died) end the process at once with status 1, after flushing the
        streams: tearing down gloo's threads and sockets to a dead peer can abort the process
        ('terminate called ...', status 134) or hang."""
        if not self._joined:
            return
        if not self.broken and self.exit_status is None:
            try:
                self.close()
                return
            except DistributedError as e:
                print(f"tr-mlir: error: {e}", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(1 if self.exit_status is None else self.exit_status)

    def abandon(self, status: int) -> None:
        """Leave without the closing barrier: at exit the process ends at once with ``status``
        (this rank failed alone; its peers see the connection close and fail in turn, instead of
        waiting for a barrier the timeout long)."""
        self.exit_status = status


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def _allreduce_kernel(spec: KernelSpec, comm: Any, op: str) -> KernelSpec:
    """``spec`` (one of :data:`_OPS`) with a function that all-reduces its spans through ``comm``."""

    def fn(data, *, world_size: int = 1) -> None:
        if world_size not in (1, comm.size):  # 1: the node carries no world_size (the plans' default)
            raise DistributedError(f"rank {comm.rank}: the graph was compiled for world_size={world_size}, "
                                   f"the process group has {comm.size} ranks; recompile")
        for a in data if isinstance(data, (tuple, list)) else (data,):
            comm.all_reduce(a.reshape(-1), op)

    fn.__doc__ = f"All-reduce ({op}) of the spans across the ranks of the gloo process group (lowering/gloo.py)."
    return replace(spec, fn=fn, prepare=None)  # a prepared call is the CPU function's


class GlooBackend(NumpyBackend):
    """The NumPy backend of one data-parallel rank: the same arena, views and kernels, except the
    COMM graphs' all-reduces, which go through ``comm`` (a :class:`GlooComm`, or any object with
    ``size``, ``rank`` and ``all_reduce(array, op)``: :class:`~tr_mlir.lowering.distributed.FakeComm`
    in tests)."""

    def __init__(self, comm: Any, memory_limit: int | None = None):
        super().__init__(memory_limit)
        self.comm = comm
        kernels = dict(KERNELS)
        for name, op in _OPS.items():
            kernels[name] = _allreduce_kernel(KERNELS[name], comm, op)
        self.kernels = kernels


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask; ``os.cpu_count()`` without one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def divide_threads(environ: Mapping[str, str] | None = None) -> int:
    """Give this rank its share of the cores (module doc): sets OpenBLAS's thread count (which the
    CPU kernels split their work by) and torch's intra-op threads to ``max(1, cores //
    LOCAL_WORLD_SIZE)``, or to ``OPENBLAS_NUM_THREADS`` when that is set. Returns the count."""
    e = os.environ if environ is None else environ
    try:
        local = max(1, int(e.get("LOCAL_WORLD_SIZE") or e.get("WORLD_SIZE") or 1))
    except ValueError:
        raise DistributedError(f"LOCAL_WORLD_SIZE must be an integer, got {e.get('LOCAL_WORLD_SIZE')!r}") from None
    threads = max(1, cpu_cores() // local)
    if e.get("OPENBLAS_NUM_THREADS", "").isdigit() and int(e["OPENBLAS_NUM_THREADS"]) > 0:
        threads = int(e["OPENBLAS_NUM_THREADS"])
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")
    except Exception:  # noqa: BLE001 - no threadpoolctl / no OpenBLAS: the kernels run serially anyway
        pass
    try:
        import torch  # type: ignore[import-not-found]

        torch.set_num_threads(threads)
    except ImportError:
        pass
    return threads


def launch_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's rank in the launcher's environment (0 for one process), without joining any
    process group. Raises :class:`DistributedError` for a bad environment."""
    e = env(dict(os.environ) if environ is None else dict(environ))
    return 0 if e is None else e.rank


_COMM: GlooComm | None = None


def init(environ: Mapping[str, str] | None = None) -> GlooComm | None:
    """The gloo communicator of this process from the torchrun environment, created once (and the
    threads divided, :func:`divide_threads`); None for a single process. Raises
    :class:`DistributedError` for a bad environment (naming the variable) or a failed rendezvous."""
    global _COMM
    e = env(dict(os.environ) if environ is None else dict(environ))
    if e is None:
        return None
    if _COMM is None or _COMM.size != e.world or _COMM.rank != e.rank:
        divide_threads(environ)
        _COMM = GlooComm(e, timeout_seconds(environ))
    return _COMM


def stop_on_sigterm(prog: str, rank: int, world: int) -> None:
    """Make SIGTERM (what ``torchrun`` sends the other workers when one fails) end this process
    with one line on stderr, ``<prog>: error: rank <rank> of <world>: stopped by SIGTERM ...``,
    and status 143, without running the rest of the program (no traceback, no teardown of a
    process group whose peer may be dead). Only installed for ``world`` > 1, from the main
    thread."""
    import signal
    import threading

    if world <= 1 or threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os.write(2, (f"{prog}: error: rank {rank} of {world}: stopped by SIGTERM (torchrun stops every rank "
                     f"when one fails; see its report for the rank that did)\n").encode())
        os._exit(143)

    signal.signal(signal.SIGTERM, handler)


def abandon(status: int) -> None:
    """:meth:`GlooComm.abandon` of this process's communicator, if it has one (a no-op alone)."""
    if _COMM is not None:
        _COMM.abandon(status)


def cpu_backend(memory_limit: int | None = None) -> NumpyBackend:
    """The CPU backend of this process: :class:`GlooBackend` over :func:`init`'s communicator when
    launched with ``WORLD_SIZE`` > 1, else a plain :class:`NumpyBackend`."""
    comm = init()
    return NumpyBackend(memory_limit) if comm is None else GlooBackend(comm, memory_limit)
