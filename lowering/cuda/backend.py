"""The CUDA backend: one CuPy arena, NVRTC kernels, CUDA-graph capture per atlas key (DESIGN section 5).

:class:`CudaBackend` implements :class:`~tr_mlir.lowering.backend.Backend` over a
:class:`CudaDevice`: :class:`CupyDevice` on a GPU, or
:class:`~tr_mlir.lowering.cuda.emulator.EmulatedDevice`, which runs the same kernels on the CPU
for the tests. Its kernel table has every name of :data:`tr_mlir.lowering.cpu.KERNELS` with
the same :class:`~tr_mlir.lowering.cpu.KernelSpec` (arrays, roles, params, workspace rules),
only the function differs: it launches the kernels of :mod:`tr_mlir.lowering.cuda.sources` on the
bound views. Each kernel family declares the workspaces of these launchers as its ``cuda`` rule
(``KernelSpec.target_workspace_fns``), which a ``target=cuda`` plan is planned from: only the
fp32 accumulator of an fp16 conv weight gradient (``wbuf``) and a projection block's BN output
(``t``); the CPU kernels' im2col columns, padded copies, fp32 casts and pooling scratch are not
planned, and the launchers get ``None`` for them. Precision follows the views'
dtypes as in the NumPy kernels: fp32, or AMP (fp16 storage, fp32 arithmetic and accumulation,
one rounding per output). Scalars that change during training (learning rate, loss scale, NaN
flag, Adam step, batch size, label smoothing, dropout state) are passed to the kernels as
pointers into the arena and read on the device, so a captured graph stays valid.

**Why own NVRTC kernels for conv, BN and GEMM.** CuPy 14 has no cuDNN and refuses cuBLAS inside
a stream capture (``../shared/reference/gpu-backend-notes.md`` sections 1-3). The notes
recommend cuDNN Frontend graphs on arena pointers; that path needs a wheel that is not on the GPU
image (``nvidia-cudnn-frontend``), per-shape graph builds and plan caches, and it cannot be
compiled, run or tested at all without a GPU. This backend instead uses implicit-GEMM kernels of
its own (``tr_conv_fwd`` / ``tr_conv_dgrad`` / ``tr_conv_wgrad``, a tiled ``tr_gemm`` for FC and
1x1 convolutions, direct depthwise kernels, Winograd transforms around batched ``tr_gemm`` for 3x3
stride-1 convolutions whose ``algo`` selects it (:mod:`.winograd`), BN as column sums plus
element-wise passes): they are
capture-safe by construction (no library handles, no hidden workspaces or allocations, every
pointer in the arena), they compile with NVRTC on a CPU machine, and they run there under the
emulator against the NumPy reference, so every kernel is tested in CI. The price is speed: the
GEMM core is a plain fp32 CUDA-core tile (64x64x16, no tensor cores), far below cuDNN on
ResNet-sized convolutions. cuDNN Frontend (or tensor-core ``mma`` tiles) is the follow-up for
throughput; it would replace ``GpuOps.conv_*`` / ``GpuOps.gemm`` only.

**Capture** (:meth:`CudaBackend.capture`): the launches of an atlas key first run once eagerly
(warm-up: module load, argument checks, NCCL connections), then are recorded on the device's
non-blocking stream with an allocator that raises (:class:`CaptureAllocationError`); the
returned :class:`CudaGraph` replays the CUDA graph on that stream. The warm-up writes the arena,
so the executable re-initializes it after capturing (``Backend.capture_runs_launches``).
Input batches: the host staging buffer is pinned memory; ``RANGE_H2D_COPY_A|B`` are
asynchronous host-to-device copies captured into the transfer graphs. Because the host refills a
staging zone while earlier graphs may still run, a transfer graph's replay waits for its copy
(:class:`CudaGraph` ``sync_after``) before returning, so the zone is free when the runner writes
the next batch into it; the runner launches the transfer after the first layer's forward, so
the deep graph is queued right after.

**Data parallel**: ``RANGE_*_ALLREDUCE`` call the device's communicator (NCCL,
:mod:`tr_mlir.lowering.distributed`), captured into the COMM graphs; with one process they record
nothing.

Layout: :mod:`.device` (the device protocol, :class:`CupyDevice`, :func:`cuda_available`, the
errors), :mod:`.ops` (:class:`GpuOps`, the launch primitives),
:mod:`.impls` (the kernel table, :func:`register_cuda_kernel`); this module holds the backend and
re-exports their public names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tr_mlir.dialects.memplan import Target
from tr_mlir.lowering.cpu import KernelSpec
from tr_mlir.lowering.cuda.device import (
    CaptureAllocationError,
    CudaDevice,
    CudaUnavailableError,
    CupyDevice,
    cuda_available,
)
from tr_mlir.lowering.cuda.impls import CUDA_IMPLS, Impl, cuda_kernels, missing_cuda_kernels, register_cuda_kernel
from tr_mlir.lowering.cuda.ops import ACT_CODES, F16, I8, I32, MAX_BLOCKS, TARGET_BLOCKS, GpuOps

__all__ = [
    # this module
    "CudaBackend", "CudaGraph",
    # re-exported: the modules the backend was split into (device, ops, impls)
    "CaptureAllocationError", "CudaUnavailableError", "CudaDevice", "CupyDevice", "cuda_available",
    "GpuOps", "ACT_CODES", "F16", "I8", "I32", "MAX_BLOCKS", "TARGET_BLOCKS",
    "Impl", "CUDA_IMPLS", "cuda_kernels", "register_cuda_kernel", "missing_cuda_kernels",
]


# --------------------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class CudaGraph:
    """A captured CUDA graph of one atlas key. ``replay()`` launches it on the device's stream
    (asynchronous); ``sync_after``: wait for it (the transfer graphs, module doc)."""

    device: CudaDevice
    graph: Any
    nodes: int
    sync_after: bool = False

    def replay(self) -> None:
        self.device.launch_graph(self.graph)
        if self.sync_after:
            self.device.synchronize()

    def __len__(self) -> int:
        return self.nodes


class CudaBackend:
    """The GPU backend (module doc): ``device`` a :class:`CudaDevice` (default :class:`CupyDevice`
    on ``LOCAL_RANK``'s GPU, with the process group of :func:`tr_mlir.lowering.distributed.init`
    when ``WORLD_SIZE`` > 1). ``memory_limit`` caps :meth:`available_memory`.

    Raises :class:`CudaUnavailableError` when no device is given and there is no usable GPU.
    """

    name = "cuda"
    target = Target.CUDA
    capture_runs_launches = True
    """The warm-up of :meth:`capture` runs the launches: the executable re-initializes the arena."""

    def __init__(self, device: CudaDevice | None = None, *, memory_limit: int | None = None):
        if device is None:
            from tr_mlir.lowering import distributed

            comm = distributed.init()
            device = CupyDevice(comm=comm)
        self.device = device
        self.ops = GpuOps(device)
        self.kernels: Mapping[str, KernelSpec] = cuda_kernels(self.ops)
        self.memory_limit = memory_limit
        self._host: list[np.ndarray] = []

    def available_memory(self) -> int | None:
        avail = self.device.available_memory()
        if self.memory_limit is not None:
            return self.memory_limit if avail is None else min(avail, self.memory_limit)
        return avail

    def allocate(self, nbytes: int) -> Any:
        return self.device.allocate(nbytes)

    def view(self, arena: Any, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        if isinstance(arena, np.ndarray) and self.device.is_host(arena):
            dtype = np.dtype(dtype)
            n = int(np.prod(shape, dtype=np.int64))
            return arena[offset:offset + n * dtype.itemsize].view(dtype).reshape(shape)
        return self.device.view(arena, offset, dtype, shape)

    def host_buffer(self, nbytes: int) -> np.ndarray:
        buf = self.device.host_buffer(nbytes)
        self._host.append(buf)
        return buf

    def to_host(self, a: Any) -> np.ndarray:
        """A host (NumPy) copy of a view (waits for the work queued before)."""
        return self.device.to_host(a)

    def capture(self, launches: Sequence[Callable[[], None]]) -> CudaGraph:
        """Warm up (run once), then record ``launches`` into a CUDA graph (module doc)."""
        launches = tuple(launches)
        for launch in launches:
            launch()
        self.device.synchronize()
        copies = self.ops.h2d_copies
        self.device.begin_capture()
        try:
            for launch in launches:
                launch()
        except BaseException:
            self.device.abort_capture()
            raise
        graph = self.device.end_capture()
        return CudaGraph(self.device, graph, len(launches), sync_after=self.ops.h2d_copies > copies)

    def synchronize(self) -> None:
        """Wait for all queued work."""
        self.device.synchronize()
