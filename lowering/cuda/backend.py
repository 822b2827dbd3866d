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
1x1 convolutions, direct depthwise kernels, BN as column sums plus element-wise passes): they are
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
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from tr_mlir.dialects.memplan import Target
from tr_mlir.lowering.cuda.sources import BLOCK, DTYPE_CODES, NVRTC_OPTIONS, SOURCE
from tr_mlir.lowering.cpu import KERNELS, KernelSpec
from tr_mlir.lowering.cpu._util import F32, flat, nhwc, take
from tr_mlir.lowering.cpu.activation import ACTIVATIONS
from tr_mlir.lowering.cpu.conv import WORKSPACES as CONV_WS
from tr_mlir.lowering.cpu.conv import ConvGeom, conv_geom
from tr_mlir.lowering.cpu.fused import BLOCKS, Layout
from tr_mlir.lowering.cpu.window import window

F16 = np.dtype(np.float16)
I8 = np.dtype(np.int8)
I32 = np.dtype(np.int32)
MAX_BLOCKS = 2048
"""Grid size cap of the grid-stride kernels (about 8 blocks of 256 threads per H200 SM)."""
TARGET_BLOCKS = 1024
"""Blocks a split reduction (weight gradients, column sums) aims for."""

ACT_CODES = {"relu": 0, "tanh": 1, "sigmoid": 2, "silu": 3, "relu6": 4, "leaky_relu": 5, "hardswish": 6, "elu": 7}
"""Activation name -> the ``act`` code of ``tr_act_fwd`` / ``tr_act_bwd``."""


class CaptureAllocationError(RuntimeError):
    """Device memory was allocated while a CUDA graph was being captured."""


class CudaUnavailableError(RuntimeError):
    """No usable CUDA device (CuPy missing, no driver, or no GPU); the message says which."""


# --------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------


class CudaDevice(Protocol):
    """What the backend needs from a device: memory, launches, copies, capture.

    Pointers are plain ints; ``launch`` takes numpy scalars typed as the kernel's parameters
    (``np.uint64`` pointers, ``np.int32``, ``np.int64``, ``np.float32``, ``np.float64``).
    """

    name: str
    comm: Any

    def available_memory(self) -> int | None: ...
    def allocate(self, nbytes: int) -> Any: ...
    def view(self, arena: Any, offset: int, dtype: Any, shape: tuple[int, ...]) -> Any: ...
    def host_buffer(self, nbytes: int) -> np.ndarray: ...
    def ptr(self, a: Any) -> int: ...
    def is_host(self, a: Any) -> bool: ...
    def to_host(self, a: Any) -> np.ndarray: ...
    def synchronize(self) -> None: ...
    def launch(self, name: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               extents: Sequence[tuple[int, int]] = ()) -> None: ...
    def memcpy(self, dst: int, src: int, nbytes: int, kind: str) -> None: ...
    def memset(self, dst: int, value: int, nbytes: int) -> None: ...
    def allreduce(self, ptr: int, count: int, dtype: Any, op: str) -> None: ...
    def begin_capture(self) -> None: ...
    def end_capture(self) -> Any: ...
    def abort_capture(self) -> None: ...
    def launch_graph(self, graph: Any) -> None: ...


def _refuse_allocation(size: int) -> Any:
    raise CaptureAllocationError(f"allocation of {size} bytes during CUDA graph capture: every buffer must be "
                                 f"a view of the arena (a kernel wrapper created a temporary)")


def cuda_available() -> tuple[bool, str]:
    """``(True, device description)`` when CuPy imports and a CUDA device answers, else
    ``(False, reason)``. Never raises."""
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception as e:  # ImportError, or a broken CUDA install raising at import
        return False, f"CuPy is not importable ({type(e).__name__}: {e}); install the 'cuda' extra"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return False, f"no CUDA driver or device ({type(e).__name__}: {e})"
    if n < 1:
        return False, "CUDA reports no device"
    try:
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    except Exception:
        name = "CUDA device 0"
    return True, f"{name} ({n} device{'s' if n > 1 else ''})"


_SHARED: dict[int, tuple[Any, Any]] = {}
"""GPU id -> (stream, RawModule), one per process: every executable of a process works on one
stream (host-side CuPy operations, which run on the current stream, stay ordered with the graphs)
and shares one compiled module."""


class CupyDevice:
    """A CUDA GPU through CuPy: raw arena allocation, pinned staging, the NVRTC module, the
    process's non-blocking stream for this GPU, made current for the thread (so CuPy operations
    of the host side -- scalar writes, reads -- are ordered with the graphs), capture with a
    raising allocator.

    ``device_id``: the GPU (default ``LOCAL_RANK`` or 0). ``comm``: the NCCL communicator of
    :mod:`tr_mlir.lowering.distributed` (None: one process). ``headroom``: bytes kept free of the
    arena (CUDA context, NCCL buffers). Raises :class:`CudaUnavailableError` without a GPU.
    """

    name = "cupy"

    def __init__(self, device_id: int | None = None, comm: Any = None, headroom: int = 1 << 30):
        ok, why = cuda_available()
        if not ok:
            raise CudaUnavailableError(f"the CUDA backend needs a GPU: {why}")
        import cupy  # type: ignore[import-not-found]

        self.cp = cupy
        if device_id is None:
            device_id = int(os.environ.get("LOCAL_RANK", "0")) % cupy.cuda.runtime.getDeviceCount()
        self.device_id = device_id
        cupy.cuda.Device(device_id).use()
        if device_id not in _SHARED:
            _SHARED[device_id] = (cupy.cuda.Stream(non_blocking=True), cupy.RawModule(code=SOURCE, options=NVRTC_OPTIONS))
        self.stream, self.module = _SHARED[device_id]
        self.stream.use()
        self._fns: dict[str, Any] = {}
        self.comm = comm
        self.headroom = headroom
        self._keep: list[Any] = []
        self._guard: Any = None
        self.capturing = False
        self.description = cuda_available()[1]

    def available_memory(self) -> int | None:
        free, _ = self.cp.cuda.runtime.memGetInfo()
        return max(int(free) - self.headroom, 0)

    def allocate(self, nbytes: int) -> Any:
        cp = self.cp
        mem = cp.cuda.Memory(max(nbytes, 1))
        self._keep.append(mem)
        arena = cp.ndarray((nbytes,), np.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
        cp.cuda.runtime.memsetAsync(mem.ptr, 0, max(nbytes, 1), self.stream.ptr)
        self.stream.synchronize()
        return arena

    def view(self, arena: Any, offset: int, dtype: Any, shape: tuple[int, ...]) -> Any:
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        end = offset + n * dtype.itemsize
        if offset < 0 or end > arena.size:
            raise ValueError(f"view [{offset}, {end}) outside the arena of {arena.size} bytes")
        return self.cp.ndarray(shape, dtype, memptr=arena.data + offset)

    def host_buffer(self, nbytes: int) -> np.ndarray:
        import cupyx  # type: ignore[import-not-found]

        a = cupyx.empty_pinned((max(nbytes, 1),), np.uint8)[:nbytes]
        a.fill(0)
        return a

    def ptr(self, a: Any) -> int:
        return int(a.ctypes.data) if isinstance(a, np.ndarray) else int(a.data.ptr)

    def is_host(self, a: Any) -> bool:
        return isinstance(a, np.ndarray)

    def to_host(self, a: Any) -> np.ndarray:
        if isinstance(a, np.ndarray):
            return np.array(a)
        out = a.get(stream=self.stream)
        self.stream.synchronize()
        return out

    def synchronize(self) -> None:
        self.stream.synchronize()

    def _fn(self, name: str) -> Any:
        f = self._fns.get(name)
        if f is None:
            f = self._fns[name] = self.module.get_function(name)
        return f

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               extents: Sequence[tuple[int, int]] = ()) -> None:
        with self.stream:
            self._fn(name)(tuple(int(g) for g in grid), tuple(int(b) for b in block), tuple(args))

    def memcpy(self, dst: int, src: int, nbytes: int, kind: str) -> None:
        if nbytes <= 0:
            return
        rt = self.cp.cuda.runtime
        k = rt.memcpyHostToDevice if kind == "h2d" else rt.memcpyDeviceToDevice
        rt.memcpyAsync(dst, src, nbytes, k, self.stream.ptr)

    def memset(self, dst: int, value: int, nbytes: int) -> None:
        if nbytes > 0:
            self.cp.cuda.runtime.memsetAsync(dst, value, nbytes, self.stream.ptr)

    def allreduce(self, ptr: int, count: int, dtype: Any, op: str) -> None:
        if self.comm is None or self.comm.size == 1:
            return
        self.comm.all_reduce_ptr(ptr, count, np.dtype(dtype), op, self.stream.ptr)

    def begin_capture(self) -> None:
        cp = self.cp
        self._guard = cp.cuda.using_allocator(_refuse_allocation)
        self._guard.__enter__()
        self.capturing = True
        try:
            self.stream.begin_capture(mode=cp.cuda.runtime.streamCaptureModeGlobal)
        except BaseException:
            self._end_guard()
            raise

    def _end_guard(self) -> None:
        self.capturing = False
        if self._guard is not None:
            self._guard.__exit__(None, None, None)
            self._guard = None

    def end_capture(self) -> Any:
        try:
            return self.stream.end_capture()
        finally:
            self._end_guard()

    def abort_capture(self) -> None:
        try:
            if self.stream.is_capturing():
                self.stream.end_capture()
        except Exception:
            pass
        self._end_guard()

    def launch_graph(self, graph: Any) -> None:
        graph.launch(stream=self.stream)


# --------------------------------------------------------------------------------------
# Launch helpers
# --------------------------------------------------------------------------------------


def _dt(a: Any) -> np.int32:
    return np.int32(0 if a is None else DTYPE_CODES[np.dtype(a.dtype)])


def _grid(n: int) -> tuple[int]:
    return (max(1, min(-(-int(n) // BLOCK), MAX_BLOCKS)),)


class GpuOps:
    """The kernel-launching primitives the registry functions are made of (one per NumPy
    primitive of :mod:`tr_mlir.lowering.cpu`, same argument conventions)."""

    def __init__(self, dev: CudaDevice):
        self.dev = dev
        self.h2d_copies = 0  # host-to-device copies issued (the backend marks transfer graphs by it)

    # -- arguments -------------------------------------------------------------------

    def p(self, a: Any) -> np.uint64:
        return np.uint64(0 if a is None else self.dev.ptr(a))

    def s(self, a: Any) -> tuple[np.uint64, np.int32]:
        """A scalar operand (array or None) as its (pointer, dtype code) pair."""
        return self.p(a), _dt(a)

    def arr(self, a: Any) -> tuple[np.uint64, np.int32]:
        return self.p(a), _dt(a)

    def ext(self, *arrays: Any) -> list[tuple[int, int]]:
        return [(self.dev.ptr(a), int(a.nbytes)) for a in arrays if a is not None and not self.dev.is_host(a)]

    def ew(self, name: str, n: int, *args: Any, touch: Sequence[Any] = ()) -> None:
        """A grid-stride element-wise kernel over ``n`` elements."""
        if n > 0:
            self.dev.launch(name, _grid(n), (BLOCK,), args, self.ext(*touch))

    def one(self, name: str, *args: Any, touch: Sequence[Any] = ()) -> None:
        """A single-thread kernel (scalar bookkeeping)."""
        self.dev.launch(name, (1,), (32,), args, self.ext(*touch))

    # -- copies and fills --------------------------------------------------------------

    def same(self, a: Any, b: Any) -> bool:
        return self.dev.ptr(a) == self.dev.ptr(b) and a.nbytes == b.nbytes

    def zero(self, a: Any) -> None:
        if a is not None and a.size:
            self.dev.memset(self.dev.ptr(a), 0, int(a.nbytes))

    def fill(self, a: Any, value: float) -> None:
        if value == 0.0:
            self.zero(a)
        else:
            self.ew("tr_fill", a.size, *self.arr(a), np.int64(a.size), np.float32(value), touch=(a,))

    def convert(self, dst: Any, src: Any, n: int | None = None) -> None:
        """``dst[:n] = src[:n]`` over the flat arrays (cast when dtypes differ; skipped when both
        are one buffer of one dtype; a host ``src`` is an asynchronous host-to-device copy)."""
        n = min(dst.size, src.size) if n is None else n
        if n <= 0:
            return
        if self.dev.is_host(src):
            if np.dtype(src.dtype) != np.dtype(dst.dtype):
                raise ValueError(f"host-to-device copy from {src.dtype} into {dst.dtype}")
            self.dev.memcpy(self.dev.ptr(dst), self.dev.ptr(src), n * dst.itemsize, "h2d")
            self.h2d_copies += 1
            return
        if np.dtype(src.dtype) == np.dtype(dst.dtype):
            if self.dev.ptr(dst) != self.dev.ptr(src):
                self.dev.memcpy(self.dev.ptr(dst), self.dev.ptr(src), n * dst.itemsize, "d2d")
            return
        self.ew("tr_convert", n, *self.arr(src), *self.arr(dst), np.int64(n), touch=(src, dst))

    def copy_into(self, dst: Any, src: Any) -> None:
        """``dst[...] = src`` reshaped (the NumPy ``copy_into``)."""
        if src.size != dst.size:
            raise ValueError(f"cannot copy {src.shape} into {dst.shape}")
        if self.same(dst, src) and dst.dtype == src.dtype:
            return
        self.convert(dst, src)

    # -- element-wise --------------------------------------------------------------------

    def add(self, a: Any, b: Any, y: Any) -> None:
        self.ew("tr_add", y.size, *self.arr(a), *self.arr(b), *self.arr(y), np.int64(y.size), touch=(a, b, y))

    def mul_mask(self, dy: Any, mask: Any, dx: Any, scale: float = 1.0) -> None:
        if mask.dtype != I8:
            raise ValueError(f"expected an int8 mask, got {mask.dtype}")
        self.ew("tr_mul_mask", dx.size, *self.arr(dy), self.p(mask), *self.arr(dx), np.int64(dx.size),
                np.float32(scale), touch=(dy, mask, dx))

    def relu_bwd_from_output(self, dy: Any, y: Any, dx: Any) -> None:
        if not (dy.size == y.size == dx.size):
            raise ValueError(f"expected dy, y, dx of one size, got {dy.size}, {y.size}, {dx.size}")
        self.ew("tr_relu_bwd_y", dx.size, *self.arr(dy), *self.arr(y), *self.arr(dx), np.int64(dx.size),
                touch=(dy, y, dx))

    def act_fwd(self, act: str, x: Any, y: Any, mask: Any = None) -> None:
        if mask is not None and mask.dtype != I8:
            raise ValueError(f"expected an int8 mask, got {mask.dtype}")
        if x.size != y.size:
            raise ValueError(f"expected {act} output of {x.size} elements, got {y.shape}")
        self.ew("tr_act_fwd", x.size, np.int32(ACT_CODES[act]), *self.arr(x), *self.arr(y), self.p(mask),
                np.int64(x.size), touch=(x, y, mask))

    def act_bwd(self, act: str, dy: Any, x: Any, dx: Any) -> None:
        self.ew("tr_act_bwd", x.size, np.int32(ACT_CODES[act]), *self.arr(dy), *self.arr(x), *self.arr(dx),
                np.int64(x.size), touch=(dy, x, dx))

    # -- GEMM and convolution ------------------------------------------------------------

    def gemm(self, a: Any, sa: tuple[int, int, int], b: Any, sb: tuple[int, int, int], c: Any,
             sc: tuple[int, int, int], m: int, n: int, k: int, *, batch: int = 1, beta: float = 0.0,
             bias: Any = None, accumulate_atomic: bool = False, a_kfast: bool = True, b_kfast: bool = True) -> None:
        """``C(m, n) = sum_k A(m, k) B(k, n) (+ beta C) (+ bias(n))`` with element strides
        ``(row, col, batch)``; ``accumulate_atomic``: add into an fp32 C in K-splits."""
        if m <= 0 or n <= 0:
            return
        tiles = -(-m // 64) * -(-n // 64) * batch
        splits = 1
        if accumulate_atomic:
            splits = max(1, min(TARGET_BLOCKS // max(tiles, 1), -(-k // 512)))
        grid = (-(-m // 64), -(-n // 64), batch * splits)
        self.dev.launch("tr_gemm", grid, (BLOCK,), (
            *self.arr(a), np.int64(sa[0]), np.int64(sa[1]), np.int64(sa[2]),
            *self.arr(b), np.int64(sb[0]), np.int64(sb[1]), np.int64(sb[2]),
            *self.arr(c), np.int64(sc[0]), np.int64(sc[1]), np.int64(sc[2]),
            np.int64(m), np.int64(n), np.int64(k), np.float32(1.0), np.float32(beta), *self.arr(bias),
            np.int32(1 if accumulate_atomic else 0), np.int32(splits), np.int32(a_kfast), np.int32(b_kfast)),
            self.ext(a, b, c, bias))

    def _conv_args(self, g: ConvGeom) -> tuple:
        w = g.win
        return (np.int32(g.n), np.int32(w.h), np.int32(w.w), np.int32(g.c), np.int32(w.ho), np.int32(w.wo),
                np.int32(g.k_out), np.int32(w.k), np.int32(w.s), np.int32(w.p), np.int32(g.groups))

    def _dw_args(self, g: ConvGeom) -> tuple:
        w = g.win
        return (np.int32(g.n), np.int32(w.h), np.int32(w.w), np.int32(g.c), np.int32(w.ho), np.int32(w.wo),
                np.int32(w.k), np.int32(w.s), np.int32(w.p))

    def conv_forward(self, x: Any, w: Any, y: Any, g: ConvGeom, ws: Mapping[str, Any]) -> None:
        """y = conv(x, w) (geometry ``g``); workspaces unused (implicit GEMM)."""
        meth = g.method
        if meth == "pointwise":
            self.gemm(x, (g.c, 1, 0), w, (1, g.c, 0), y, (g.k_out, 1, 0), g.m, g.k_out, g.c)
        elif meth == "depthwise":
            self.ew("tr_dwconv_fwd", y.size, *self.arr(x), *self.arr(w), *self.arr(y), *self._dw_args(g),
                    touch=(x, w, y))
        else:
            grid = (-(-g.m // 64), -(-g.kg // 64), g.groups)
            self.dev.launch("tr_conv_fwd", grid, (BLOCK,), (*self.arr(x), *self.arr(w), *self.arr(y),
                                                            *self._conv_args(g)), self.ext(x, w, y))

    def conv_wgrad(self, dy: Any, x: Any, dw: Any, g: ConvGeom, ws: Mapping[str, Any]) -> None:
        """dw = dL/dw (overwritten), accumulated in fp32 (dw itself, or the ``wbuf`` workspace)."""
        acc = dw if dw.dtype == F32 else take(ws.get("wbuf"), g.w_shape)
        self.zero(acc)
        meth = g.method
        if meth == "pointwise":
            self.gemm(dy, (1, g.k_out, 0), x, (g.c, 1, 0), acc, (g.c, 1, 0), g.k_out, g.c, g.m,
                      accumulate_atomic=True, a_kfast=False, b_kfast=False)
        elif meth == "depthwise":
            kk = g.win.k * g.win.k
            cb = -(-g.c // 32)
            splits = max(1, min(TARGET_BLOCKS // max(cb * kk, 1), -(-g.m // 64), 65535))
            self.dev.launch("tr_dwconv_wgrad", (cb, kk, splits), (32, 8),
                            (*self.arr(dy), *self.arr(x), self.p(acc), *self._dw_args(g)), self.ext(dy, x, acc))
        else:
            tiles = -(-g.kg // 64) * -(-g.kkc // 64) * g.groups
            splits = max(1, min(TARGET_BLOCKS // max(tiles, 1), -(-g.m // 512)))
            grid = (-(-g.kg // 64), -(-g.kkc // 64), g.groups * splits)
            self.dev.launch("tr_conv_wgrad", grid, (BLOCK,), (*self.arr(dy), *self.arr(x), self.p(acc),
                                                              *self._conv_args(g), np.int32(splits)),
                            self.ext(dy, x, acc))
        if acc is not dw:
            self.convert(dw, acc)

    def conv_dgrad(self, dy: Any, w: Any, dx: Any, g: ConvGeom, ws: Mapping[str, Any],
                   accumulate: bool = False) -> None:
        """dx = dL/dx (``accumulate``: dx += dL/dx); dx may be x's buffer (x is not read)."""
        beta = 1.0 if accumulate else 0.0
        meth = g.method
        if meth == "pointwise":
            self.gemm(dy, (g.k_out, 1, 0), w, (g.c, 1, 0), dx, (g.c, 1, 0), g.m, g.c, g.k_out, beta=beta,
                      b_kfast=False)
        elif meth == "depthwise":
            self.ew("tr_dwconv_dgrad", dx.size, *self.arr(dy), *self.arr(w), *self.arr(dx), *self._dw_args(g),
                    np.float32(beta), touch=(dy, w, dx))
        else:
            win = g.win
            grid = (-(-(g.n * win.h * win.w) // 64), -(-g.cg // 64), g.groups)
            self.dev.launch("tr_conv_dgrad", grid, (BLOCK,), (*self.arr(dy), *self.arr(w), *self.arr(dx),
                                                              *self._conv_args(g), np.float32(beta)),
                            self.ext(dy, w, dx))

    # -- dense ---------------------------------------------------------------------------

    @staticmethod
    def fc_dims(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[int, int, int]:
        n = int(x_shape[0])
        f = int(np.prod(x_shape[1:], dtype=np.int64))
        o = int(w_shape[0])
        if int(np.prod(w_shape, dtype=np.int64)) != o * f:
            raise ValueError(f"expected fc weight of {o} x {f} (out x H*W*C of input {tuple(x_shape)}), "
                             f"got shape {tuple(w_shape)}")
        return n, f, o

    def fc_forward(self, x: Any, w: Any, b: Any, y: Any) -> None:
        n, f, o = self.fc_dims(x.shape, w.shape)
        if y.size != n * o:
            raise ValueError(f"expected fc output of {n} x {o} elements, got shape {y.shape}")
        self.gemm(x, (f, 1, 0), w, (1, f, 0), y, (o, 1, 0), n, o, f, bias=b)

    def fc_backward(self, dy: Any, w: Any, x: Any, dw: Any, db: Any, dx: Any) -> None:
        n, f, o = self.fc_dims(x.shape, w.shape)
        self.gemm(dy, (1, o, 0), x, (f, 1, 0), dw, (f, 1, 0), o, f, n, a_kfast=False, b_kfast=False)
        if db is not None:
            self.colsum(dy, db, rows=n, cols=o)
        if dx is not None:
            self.gemm(dy, (o, 1, 0), w, (f, 1, 0), dx, (f, 1, 0), n, f, o, b_kfast=False)

    # -- reductions and batch norm ---------------------------------------------------------

    def _colgrid(self, rows: int, cols: int) -> tuple[int, int]:
        cb = -(-cols // 32)
        return cb, max(1, min(TARGET_BLOCKS // cb, -(-rows // 64), 65535))

    def colsum(self, x: Any, out: Any, *, rows: int, cols: int) -> None:
        """out (fp32, cols) = column sums of x (rows, cols)."""
        if out.dtype != F32:
            raise ValueError(f"expected an fp32 column-sum output, got {out.dtype}")
        self.zero(out)
        self.dev.launch("tr_colsum", self._colgrid(rows, cols), (32, 8),
                        (*self.arr(x), np.int64(rows), np.int32(cols), self.p(out)), self.ext(x, out))

    def bn_forward_train(self, x: Any, gamma: Any, beta: Any, rm: Any, rv: Any, y: Any, save_mean: Any,
                         save_istd: Any, eps: Any, momentum: Any) -> None:
        """Training-mode batch norm (the NumPy ``bn_forward_train``); y may be x's buffer.
        ``eps`` / ``momentum``: scalar operand arrays or Python numbers."""
        c = int(x.shape[-1])
        m = x.size // c
        for a in (gamma, beta, rm, rv, save_mean, save_istd):
            if a.dtype != F32 or a.size != c:
                raise ValueError(f"expected batch-norm parameters and statistics of {c} fp32 elements, "
                                 f"got {a.dtype} {a.shape}")
        self.colsum(x, save_mean, rows=m, cols=c)
        self.ew("tr_scale_vec", c, self.p(save_mean), np.int32(c), np.float32(1.0 / m), touch=(save_mean,))
        self.zero(save_istd)
        self.dev.launch("tr_colsum_sq", self._colgrid(m, c), (32, 8),
                        (*self.arr(x), np.int64(m), np.int32(c), self.p(save_mean), self.p(save_istd)),
                        self.ext(x, save_mean, save_istd))
        e_ptr, e_val = (eps, 1e-5) if not isinstance(eps, (int, float)) else (None, float(eps))
        m_ptr, m_val = (momentum, 0.1) if not isinstance(momentum, (int, float)) else (None, float(momentum))
        self.ew("tr_bn_finalize", c, self.p(save_mean), self.p(save_istd), self.p(rm), self.p(rv), np.int32(c),
                np.float32(1.0 / m), np.float64(m / (m - 1) if m > 1 else 1.0), *self.s(e_ptr), np.float64(e_val),
                *self.s(m_ptr), np.float64(m_val), touch=(save_mean, save_istd, rm, rv))
        self.ew("tr_bn_apply", x.size, *self.arr(x), *self.arr(y), np.int64(m), np.int32(c), self.p(gamma),
                self.p(beta), self.p(save_mean), self.p(save_istd), touch=(x, y))

    def bn_backward(self, dy: Any, x: Any, gamma: Any, save_mean: Any, save_istd: Any, dx: Any, dgamma: Any,
                    dbeta: Any) -> None:
        c = int(x.shape[-1])
        m = x.size // c
        self.zero(dgamma)
        self.zero(dbeta)
        self.dev.launch("tr_bn_bwd_sums", self._colgrid(m, c), (32, 8),
                        (*self.arr(dy), *self.arr(x), np.int64(m), np.int32(c), self.p(save_mean), self.p(save_istd),
                         self.p(dgamma), self.p(dbeta)), self.ext(dy, x, dgamma, dbeta))
        if dx is not None:
            self.ew("tr_bn_bwd_dx", x.size, *self.arr(dy), *self.arr(x), *self.arr(dx), np.int64(m), np.int32(c),
                    self.p(gamma), self.p(save_mean), self.p(save_istd), self.p(dgamma), self.p(dbeta),
                    np.float32(1.0 / m), touch=(dy, x, dx))

    def bn_affine(self, x: Any, scale: Any, bias: Any, y: Any) -> None:
        c = int(x.shape[-1])
        self.ew("tr_bn_affine", x.size, *self.arr(x), *self.arr(y), np.int64(x.size // c), np.int32(c),
                self.p(scale), self.p(bias), touch=(x, y, scale, bias))

    # -- pooling -----------------------------------------------------------------------------

    @staticmethod
    def pool_window(x_shape: tuple[int, ...], y_shape: tuple[int, ...], k: int, s: int, p: int, what: str):
        _, h, w, _ = nhwc(tuple(x_shape), what)
        if 2 * p > k:
            raise ValueError(f"expected pool padding ({p}) <= k/2 ({k}/2)")
        win = window(h, w, k, s, p)
        want = (x_shape[0], win.ho, win.wo, x_shape[3])
        if tuple(y_shape) != want:
            raise ValueError(f"expected pool output of shape {want}, got {tuple(y_shape)}")
        return win

    def _pool_args(self, x_shape: tuple[int, ...], win: Any, k: int, s: int, p: int) -> tuple:
        n, h, w, c = x_shape
        return (np.int32(n), np.int32(h), np.int32(w), np.int32(c), np.int32(win.ho), np.int32(win.wo),
                np.int32(k), np.int32(s), np.int32(p))

    def maxpool_fwd(self, x: Any, y: Any, mask: Any, k: int, s: int, p: int) -> None:
        win = self.pool_window(x.shape, y.shape, k, s, p, "maxpool input")
        if mask.dtype != I8 or mask.size != y.size:
            raise ValueError(f"expected an int8 pool mask of {y.size} elements, got {mask.dtype} {mask.shape}")
        self.ew("tr_maxpool_fwd", y.size, *self.arr(x), *self.arr(y), self.p(mask),
                *self._pool_args(x.shape, win, k, s, p), touch=(x, y, mask))

    def maxpool_bwd(self, dy: Any, mask: Any, dx: Any, k: int, s: int, p: int) -> None:
        win = self.pool_window(dx.shape, dy.shape, k, s, p, "maxpool input")
        self.ew("tr_maxpool_bwd", dx.size, *self.arr(dy), self.p(mask), *self.arr(dx),
                *self._pool_args(dx.shape, win, k, s, p), touch=(dy, mask, dx))

    def avgpool(self, name: str, src: Any, dst: Any, x_shape: tuple[int, ...], y_shape: tuple[int, ...], k: int,
                s: int, p: int) -> None:
        win = self.pool_window(x_shape, y_shape, k, s, p, "avgpool input")
        self.ew(name, dst.size, *self.arr(src), *self.arr(dst), *self._pool_args(x_shape, win, k, s, p),
                np.float32(1.0 / (k * k)), touch=(src, dst))

    def gap_forward(self, x: Any, y: Any) -> None:
        n, h, w, c = nhwc(x.shape, "gap input")
        if y.size != n * c:
            raise ValueError(f"expected gap output of shape ({n}, 1, 1, {c}), got {y.shape}")
        self.ew("tr_gap_fwd", n * c, *self.arr(x), *self.arr(y), np.int32(n), np.int32(h * w), np.int32(c),
                np.float32(1.0 / (h * w)), touch=(x, y))

    def gap_backward(self, dy: Any, dx: Any) -> None:
        n, h, w, c = nhwc(dx.shape, "gap input")
        self.ew("tr_gap_bwd", dx.size, *self.arr(dy), *self.arr(dx), np.int32(n), np.int32(h * w), np.int32(c),
                np.float32(1.0 / (h * w)), touch=(dy, dx))

    def relu_inplace(self, a: Any, mask: Any) -> None:
        self.act_fwd("relu", a, a, mask)


# --------------------------------------------------------------------------------------
# Fused blocks (the NumPy block routines, step for step, on the GPU primitives)
# --------------------------------------------------------------------------------------


def _geoms(lay: Layout, x_shape: tuple[int, ...], w: Callable[[str], tuple[int, ...]]) -> dict[str, ConvGeom]:
    out, h = {}, tuple(x_shape)
    for st in lay.main:
        g = st.geom(h, w(st.tag))
        out[st.tag] = g
        h = g.y_shape
    if lay.projection:
        out["_sc"] = lay.projection.geom(tuple(x_shape), w("_sc"))
    return out


def block_forward(ops: GpuOps, lay: Layout, arr: dict[str, Any], eps: float, momentum: float) -> None:
    """Training forward of a fused block (:func:`tr_mlir.lowering.cpu.fused.block_forward`)."""
    x = arr["x"]
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    h = x
    for i, st in enumerate(lay.main):
        t = st.tag
        c, out = arr[f"c{t}"], arr[lay.out_name(i)]
        ops.conv_forward(h, arr[f"w{t}"], c, geoms[t], ws)
        ops.bn_forward_train(c, arr[f"gamma{t}"], arr[f"beta{t}"], arr[f"mean{t}"], arr[f"var{t}"], out,
                             arr[f"save_mean{t}"], arr[f"save_istd{t}"], eps, momentum)
        if st.relu:
            ops.relu_inplace(out, arr[f"mask{t}"])
        h = out
    y = arr["y"]
    if lay.shortcut == "identity":
        ops.add(y, x, y)
    elif lay.shortcut == "projection":
        c = arr["c_sc"]
        ops.conv_forward(x, arr["w_sc"], c, geoms["_sc"], ws)
        tb = take(arr.get("t"), y.shape)
        ops.bn_forward_train(c, arr["gamma_sc"], arr["beta_sc"], arr["mean_sc"], arr["var_sc"], tb,
                             arr["save_mean_sc"], arr["save_istd_sc"], eps, momentum)
        ops.add(y, tb, y)
    if lay.post_relu:
        ops.relu_inplace(y, arr["mask_out"])
    if lay.pool:
        k, s, p = lay.pool
        ops.maxpool_fwd(h, y, arr["pool_mask"], k, s, p)


def block_backward(ops: GpuOps, lay: Layout, arr: dict[str, Any]) -> None:
    """Backward of a fused block (:func:`tr_mlir.lowering.cpu.fused.block_backward`)."""
    x, dx = arr["x"], arr.get("dx")
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    g = arr["dy"]
    if lay.pool:
        k, s, p = lay.pool
        last = arr[f"a{lay.main[-1].tag}"]
        ops.maxpool_bwd(g, arr["pool_mask"], last, k, s, p)
        g = last
    if lay.post_relu:
        ops.mul_mask(g, arr["mask_out"], g)
    dz = g
    for i in reversed(range(len(lay.main))):
        st = lay.main[i]
        t = st.tag
        if st.relu:
            ops.mul_mask(g, arr[f"mask{t}"], g)
        c = arr[f"c{t}"]
        ops.bn_backward(g, c, arr[f"gamma{t}"], arr[f"save_mean{t}"], arr[f"save_istd{t}"], c,
                        arr[f"dgamma{t}"], arr[f"dbeta{t}"])
        h_in = x if i == 0 else arr[f"a{lay.main[i - 1].tag}"]
        ops.conv_wgrad(c, h_in, arr[f"dw{t}"], geoms[t], ws)
        if i > 0:
            ops.conv_dgrad(c, arr[f"w{t}"], h_in, geoms[t], ws)
            g = h_in
    if lay.shortcut == "projection":
        c = arr["c_sc"]
        ops.bn_backward(dz, c, arr["gamma_sc"], arr["save_mean_sc"], arr["save_istd_sc"], c, arr["dgamma_sc"],
                        arr["dbeta_sc"])
        ops.conv_wgrad(c, x, arr["dw_sc"], geoms["_sc"], ws)
    if dx is None:
        return
    first = lay.main[0].tag
    ops.conv_dgrad(arr[f"c{first}"], arr[f"w{first}"], dx, geoms[first], ws)
    if lay.shortcut == "identity":
        ops.add(dx, dz, dx)
    elif lay.shortcut == "projection":
        ops.conv_dgrad(arr["c_sc"], arr["w_sc"], dx, geoms["_sc"], ws, accumulate=True)


def block_inference(ops: GpuOps, lay: Layout, arr: dict[str, Any]) -> None:
    """Inference of a fused block with folded BN (:func:`tr_mlir.lowering.cpu.fused.block_inference`)."""
    x = arr["x"]
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    h = x
    for i, st in enumerate(lay.main):
        t = st.tag
        out = arr[lay.out_name(i)]
        ops.conv_forward(h, arr[f"w{t}"], out, geoms[t], ws)
        ops.bn_affine(out, arr[f"eq_scale{t}"], arr[f"eq_bias{t}"], out)
        if st.relu:
            ops.relu_inplace(out, None)
        h = out
    y = arr["y"]
    if lay.shortcut == "identity":
        ops.add(y, x, y)
    elif lay.shortcut == "projection":
        c = arr["c_sc"]
        ops.conv_forward(x, arr["w_sc"], c, geoms["_sc"], ws)
        ops.bn_affine(c, arr["eq_scale_sc"], arr["eq_bias_sc"], c)
        ops.add(y, c, y)
    if lay.post_relu:
        ops.relu_inplace(y, None)
    if lay.pool:
        k, s, p = lay.pool
        ops.maxpool_fwd(h, y, arr["pool_mask"], k, s, p)


# --------------------------------------------------------------------------------------
# The kernel table: registry name -> GPU function with the NumPy kernel's signature
# --------------------------------------------------------------------------------------

Impl = Callable[..., None]


def _seq(a: Any) -> tuple[Any, ...]:
    return tuple(a) if isinstance(a, (tuple, list)) else (a,)


def _pairs(src: Any, dst: Any) -> list[tuple[Any, Any]]:
    s, d = _seq(src), _seq(dst)
    if len(s) != len(d):
        raise ValueError(f"expected as many source as destination ranges, got {len(s)} and {len(d)}")
    out = []
    for a, b in zip(s, d):
        af, bf = flat(a), flat(b)
        n = min(af.size, bf.size)
        out.append((af[:n], bf[:n]))
    return out


def _ws(kw: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {k: kw[k] for k in names if kw.get(k) is not None}


def _impls(ops: GpuOps) -> dict[str, Impl]:
    """Every kernel of the registry, on ``ops`` (keyword arguments as the NumPy kernels)."""
    t: dict[str, Impl] = {}

    def reg(*names: str) -> Callable[[Impl], Impl]:
        def deco(fn: Impl) -> Impl:
            for n in names:
                t[n] = fn
            return fn
        return deco

    # -- conv ------------------------------------------------------------------------------
    @reg("conv_fwd", "conv_inf")
    def conv_fwd(x, w, y, col=None, wbuf=None, ybuf=None, xbuf=None, tmp=None, *, k, s=1, p=0, groups=1):
        g = conv_geom(tuple(x.shape), tuple(w.shape), k, s, p, groups)
        if tuple(y.shape) != g.y_shape:
            raise ValueError(f"expected conv output of shape {g.y_shape}, got {tuple(y.shape)}")
        ops.conv_forward(x, w, y, g, {})

    @reg("conv_bwd", "conv_bwd_first_layer")
    def conv_bwd(dy, x, w, dw, dx=None, col=None, wbuf=None, ybuf=None, xbuf=None, tmp=None, *, k, s=1, p=0,
                 groups=1):
        g = conv_geom(tuple(x.shape), tuple(w.shape), k, s, p, groups)
        ws = {"wbuf": wbuf} if wbuf is not None else {}
        ops.conv_wgrad(dy, x, dw, g, ws)
        if dx is not None:
            ops.conv_dgrad(dy, w, dx, g, ws)

    # -- dense, reshapes, copies -------------------------------------------------------------
    @reg("fc_fwd", "fc_inf")
    def fc_fwd(x, w, y, b=None, xbuf=None, wbuf=None, ybuf=None):
        ops.fc_forward(x, w, b, y)

    @reg("fc_bwd", "fc_bwd_first_layer")
    def fc_bwd(dy, w, x, dw, db=None, dx=None, xbuf=None, wbuf=None, ybuf=None):
        ops.fc_backward(dy, w, x, dw, db, dx)

    @reg("flatten_fwd", "flatten_inf")
    def flatten_fwd(x, y):
        ops.copy_into(y, x)

    @reg("flatten_bwd")
    def flatten_bwd(dy, dx):
        ops.copy_into(dx, dy)

    @reg("noop", "flatten_bwd_first_layer", "channel_padding_bwd_first_layer")
    def noop():
        return None

    @reg("channel_padding_fwd", "channel_padding_inf")
    def channel_padding_fwd(x, y):
        cx, cy = int(x.shape[-1]), int(y.shape[-1])
        rows = x.size // cx
        ops.ew("tr_pad_channels", rows * cy, *ops.arr(x), *ops.arr(y), np.int64(rows), np.int32(cx), np.int32(cy),
               touch=(x, y))

    @reg("channel_padding_bwd")
    def channel_padding_bwd(dy, dx):
        cx, cy = int(dx.shape[-1]), int(dy.shape[-1])
        rows = dx.size // cx
        ops.ew("tr_crop_channels", rows * cx, *ops.arr(dy), *ops.arr(dx), np.int64(rows), np.int32(cx),
               np.int32(cy), touch=(dy, dx))

    @reg("add_fwd")
    def add_fwd(a, b, y):
        ops.add(a, b, y)

    @reg("add_bwd")
    def add_bwd(dy, da=None, db=None):
        for d in (da, db):
            if d is not None:
                ops.copy_into(d, dy)

    @reg("add_bwd_acc")
    def add_bwd_acc(dy, da=None, db=None):
        for d in (da, db):
            if d is not None:
                ops.add(d, dy, d)

    @reg("grad_acc", "grad_accum")
    def grad_acc(dy, dx):
        ops.add(dx, dy, dx)

    @reg("identity_fwd", "identity_bwd", "identity_inf", "dtensor_copy", "dropout_inf")
    def identity_fwd(x, y):
        ops.copy_into(y, x)

    @reg("axpy_fwd")
    def axpy_fwd(x, y, a):
        ops.ew("tr_axpy", y.size, *ops.arr(x), *ops.arr(y), *ops.s(a), np.int64(y.size), touch=(x, y))

    # -- activations -----------------------------------------------------------------------
    for name in ACTIVATIONS:
        def fwd(x, y, _n=name):
            ops.act_fwd(_n, x, y)

        def bwd(dy, x, dx, _n=name):
            ops.act_bwd(_n, dy, x, dx)

        t[f"{name}_fwd"] = t[f"{name}_inf"] = fwd
        t[f"{name}_bwd"] = bwd

    @reg("relu_fwd")
    def relu_fwd(x, y, mask=None):
        ops.act_fwd("relu", x, y, mask)

    @reg("relu_inf")
    def relu_inf(x, y, mask=None):
        ops.act_fwd("relu", x, y)

    @reg("relu_bwd")
    def relu_bwd(dy, mask, dx):
        ops.mul_mask(dy, mask, dx)

    @reg("relu_bwd_from_output")
    def relu_bwd_from_output(dy, y, dx):
        ops.relu_bwd_from_output(dy, y, dx)

    # -- batch norm --------------------------------------------------------------------------
    @reg("bn2d_fwd", "bn1d_fwd")
    def bn_fwd(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd, eps=None, momentum=None):
        ops.bn_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean, save_istd,
                             1e-5 if eps is None else eps, 0.1 if momentum is None else momentum)

    @reg("bn2d_bwd", "bn1d_bwd")
    def bn_bwd(dy, x, gamma, save_mean, save_istd, dgamma, dbeta, dx=None):
        ops.bn_backward(dy, x, gamma, save_mean, save_istd, dx, dgamma, dbeta)

    @reg("bn2d_inf", "bn1d_inf")
    def bn_inf(x, eq_scale, eq_bias, y):
        ops.bn_affine(x, eq_scale, eq_bias, y)

    @reg("bn_update_eq_params")
    def bn_update_eq_params(gamma, beta, running_mean, running_var, eq_scale, eq_bias, eps=None):
        c = gamma.size
        ops.ew("tr_bn_eq_params", c, ops.p(gamma), ops.p(beta), ops.p(running_mean), ops.p(running_var),
               ops.p(eq_scale), ops.p(eq_bias), np.int32(c), *ops.s(eps), np.float64(1e-5),
               touch=(gamma, beta, running_mean, running_var, eq_scale, eq_bias))

    # -- pooling ---------------------------------------------------------------------------
    @reg("maxpool_fwd", "maxpool_inf")
    def maxpool_fwd(x, y, mask, eq=None, *, k, s, p=0):
        ops.maxpool_fwd(x, y, mask, k, s, p)

    @reg("maxpool_bwd")
    def maxpool_bwd(dy, mask, dx, eq=None, acc=None, *, k, s, p=0):
        ops.maxpool_bwd(dy, mask, dx, k, s, p)

    @reg("avgpool_fwd", "avgpool_inf")
    def avgpool_fwd(x, y, acc=None, *, k, s, p=0):
        ops.avgpool("tr_avgpool_fwd", x, y, tuple(x.shape), tuple(y.shape), k, s, p)

    @reg("avgpool_bwd")
    def avgpool_bwd(dy, dx, acc=None, *, k, s, p=0):
        ops.avgpool("tr_avgpool_bwd", dy, dx, tuple(dx.shape), tuple(dy.shape), k, s, p)

    @reg("gap_fwd", "gap_inf")
    def gap_fwd(x, y):
        ops.gap_forward(x, y)

    @reg("gap_bwd")
    def gap_bwd(dy, dx):
        ops.gap_backward(dy, dx)

    # -- loss ------------------------------------------------------------------------------
    @reg("softmax_ce_fwd", "softmax_ce_inf")
    def softmax_ce_fwd(logits, labels, probs, loss, top1, top5, pred=None, batch_size=None, label_smoothing=None,
                       inv_batch=None):
        k = int(logits.shape[-1])
        n = logits.size // k
        if probs.dtype != F32 or probs.size != n * k:
            raise ValueError(f"expected fp32 probabilities of {n} x {k}, got {probs.dtype} {probs.shape}")
        if labels.size != n:
            raise ValueError(f"expected {n} labels, got {labels.size}")
        ops.dev.launch("tr_softmax_ce_fwd", (1,), (256,), (
            *ops.arr(logits), *ops.arr(labels), ops.p(probs), np.int32(n), np.int32(k), *ops.s(loss), *ops.s(top1),
            *ops.s(top5), *ops.s(pred), *ops.s(batch_size), *ops.s(label_smoothing), *ops.s(inv_batch)),
            ops.ext(logits, labels, probs, pred))

    @reg("softmax_ce_bwd")
    def softmax_ce_bwd(probs, labels, dlogits, loss_scale=None, batch_size=None, label_smoothing=None,
                       inv_batch=None):
        k = int(probs.shape[-1])
        n = probs.size // k
        if labels.size != n:
            raise ValueError(f"expected {n} labels, got {labels.size}")
        ops.ew("tr_softmax_ce_bwd", n * k, ops.p(probs), *ops.arr(labels), *ops.arr(dlogits), np.int32(n),
               np.int32(k), *ops.s(loss_scale), *ops.s(batch_size), *ops.s(label_smoothing), *ops.s(inv_batch),
               touch=(probs, labels, dlogits))

    # -- dropout ---------------------------------------------------------------------------
    @reg("dropout_fwd")
    def dropout_fwd(x, y, mask, rng, *, p):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"expected dropout probability in [0, 1], got {p}")
        if rng.dtype != I32 or rng.size < 2:
            raise ValueError(f"expected the int32 dropout state (seed, calls), got {rng.dtype} {rng.shape}")
        scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
        ops.ew("tr_dropout_fwd", x.size, *ops.arr(x), *ops.arr(y), ops.p(mask), np.int64(x.size), ops.p(rng),
               np.float32(p), np.float32(scale), touch=(x, y, mask, rng))
        ops.one("tr_dropout_advance", ops.p(rng), touch=(rng,))

    @reg("dropout_bwd")
    def dropout_bwd(dy, mask, dx, *, p):
        ops.mul_mask(dy, mask, dx, 0.0 if p >= 1.0 else 1.0 / (1.0 - p))

    # -- ranges and step scalars ---------------------------------------------------------------
    @reg("range_clear")
    def range_clear(out):
        for a in _seq(out):
            ops.zero(a)

    @reg("range_d2d_copy", "range_h2d_copy_a", "range_h2d_copy_b", "range_h2d_copy_dtensor", "range_sema_switch",
         "range_cast_fp32_to_fp16", "range_cast_fp16_to_fp32")
    def range_copy(src, dst):
        for a, b in _pairs(src, dst):
            ops.convert(b, a)

    @reg("range_check_nan")
    def range_check_nan(grads, has_nan, *, clip=0.0):
        ops.zero(has_nan)
        for g in _seq(grads):
            f = flat(g)
            ops.ew("tr_check_nan", f.size, *ops.arr(f), np.int64(f.size), *ops.arr(has_nan), np.float32(clip),
                   touch=(f, has_nan))

    @reg("range_grad_scaling")
    def range_grad_scaling(has_nan, loss_scale):
        ops.one("tr_grad_scaling", *ops.s(has_nan), *ops.s(loss_scale), touch=(has_nan, loss_scale))

    @reg("range_accum_metrics")
    def range_accum_metrics(batch_size, loss, top1, top5, acc_loss, acc_top1, acc_top5):
        ops.one("tr_accum_metrics", *ops.s(batch_size), *ops.s(loss), *ops.s(top1), *ops.s(top5), *ops.s(acc_loss),
                *ops.s(acc_top1), *ops.s(acc_top5))

    def allreduce(how: str) -> Impl:
        def fn(data, *, world_size=1):
            size = 1 if ops.dev.comm is None else ops.dev.comm.size
            if world_size not in (1, size):
                raise ValueError(f"the graph was compiled for world_size={world_size}, the process group has {size}")
            for a in _seq(data):
                f = flat(a)
                if np.dtype(f.dtype) not in (F32, F16):
                    raise ValueError(f"all-reduce of a {f.dtype} range (mixed dtypes?) is not supported")
                ops.dev.allreduce(ops.dev.ptr(f), int(f.size), f.dtype, how)
        return fn

    t["range_mean_allreduce"] = allreduce("avg")
    t["range_bn_stats_allreduce"] = allreduce("avg")
    t["range_sum_allreduce"] = allreduce("sum")

    @reg("range_ema_param_update")
    def range_ema_param_update(w, ema, decay):
        for a, e in _pairs(w, ema):
            ops.ew("tr_ema", a.size, *ops.arr(a), *ops.arr(e), *ops.s(decay), np.int64(a.size), touch=(a, e))

    @reg("scalar_increment")
    def scalar_increment(step, has_nan=None):
        ops.one("tr_scalar_increment", *ops.s(step), *ops.s(has_nan), touch=(step,))

    @reg("adam_bias_correction")
    def adam_bias_correction(step, beta1, beta2, bc1, bc2):
        ops.one("tr_adam_bias_correction", *ops.s(step), *ops.s(beta1), *ops.s(beta2), *ops.s(bc1), *ops.s(bc2))

    # -- optimizers ----------------------------------------------------------------------------
    def f32(*arrays: Any) -> None:
        for a in arrays:
            if a is not None and a.dtype != F32:
                raise ValueError(f"expected fp32 optimizer spans, got {a.dtype}")

    def sgd(w, g, m, lr, wd, mom, loss_scale, has_nan, nesterov: bool) -> None:
        wf, gf = flat(w), flat(g)
        mf = None if m is None else flat(m)
        f32(wf, gf, mf)
        ops.ew("tr_sgd", wf.size, ops.p(wf), ops.p(gf), ops.p(mf), np.int64(wf.size), *ops.s(lr), *ops.s(wd),
               *ops.s(mom), *ops.s(loss_scale), *ops.s(has_nan), np.int32(nesterov), touch=(wf, gf, mf))

    for kind, mom, nest in (("sgd", False, False), ("momentum", True, False), ("nesterov", True, True)):
        if mom:
            def weight(w, g, m, lr, momentum, weight_decay, loss_scale=None, has_nan=None, _n=nest):
                sgd(w, g, m, lr, weight_decay, momentum, loss_scale, has_nan, _n)

            def bias(w, g, m, lr, momentum, loss_scale=None, has_nan=None, _n=nest):
                sgd(w, g, m, lr, None, momentum, loss_scale, has_nan, _n)
        else:
            def weight(w, g, lr, weight_decay, loss_scale=None, has_nan=None):  # type: ignore[misc]
                sgd(w, g, None, lr, weight_decay, None, loss_scale, has_nan, False)

            def bias(w, g, lr, loss_scale=None, has_nan=None):  # type: ignore[misc]
                sgd(w, g, None, lr, None, None, loss_scale, has_nan, False)
        t[f"range_update_weight_{kind}"] = weight
        t[f"range_update_bias_{kind}"] = bias

    def adam(w, g, m, v, lr, beta1, beta2, eps, wd, step, loss_scale, has_nan, bc1, bc2, decoupled: bool) -> None:
        wf, gf, mf, vf = flat(w), flat(g), flat(m), flat(v)
        f32(wf, gf, mf, vf)
        if step is None and (bc1 is None or bc2 is None):
            raise ValueError("expected the Adam step or both bias corrections bc1, bc2")
        ops.ew("tr_adam", wf.size, ops.p(wf), ops.p(gf), ops.p(mf), ops.p(vf), np.int64(wf.size), *ops.s(lr),
               *ops.s(beta1), *ops.s(beta2), *ops.s(eps), *ops.s(wd), *ops.s(step), *ops.s(loss_scale),
               *ops.s(has_nan), *ops.s(bc1), *ops.s(bc2), np.int32(decoupled), touch=(wf, gf, mf, vf))

    @reg("range_update_weight_adam")
    def range_update_weight_adam(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step=None, loss_scale=None,
                                 has_nan=None, bc1=None, bc2=None):
        adam(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step, loss_scale, has_nan, bc1, bc2, False)

    @reg("range_update_bias_adam")
    def range_update_bias_adam(w, g, m, v, lr, beta1, beta2, eps, step=None, loss_scale=None, has_nan=None,
                               bc1=None, bc2=None):
        adam(w, g, m, v, lr, beta1, beta2, eps, None, step, loss_scale, has_nan, bc1, bc2, False)

    @reg("range_update_weight_adamw")
    def range_update_weight_adamw(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step=None, loss_scale=None,
                                  has_nan=None, bc1=None, bc2=None):
        adam(w, g, m, v, lr, beta1, beta2, eps, weight_decay, step, loss_scale, has_nan, bc1, bc2, True)

    def lars_range(nesterov: bool) -> Impl:
        def fn(w, g, m, lr, momentum, weight_decay, trust_coefficient, eps, loss_scale=None, has_nan=None, *,
               segments):
            wf, gf, mf = flat(w), flat(g), flat(m)
            f32(wf, gf, mf)
            for off, size in segments:
                if off < 0 or off + size > wf.size:
                    raise ValueError(f"LARS segment ({off}, {size}) outside the span of {wf.size} elements")
                sub = (np.uint64(ops.dev.ptr(wf) + 4 * off), np.uint64(ops.dev.ptr(gf) + 4 * off),
                       np.uint64(ops.dev.ptr(mf) + 4 * off))
                ops.dev.launch("tr_lars_segment", (1,), (BLOCK,), (
                    *sub, np.int64(size), *ops.s(lr), *ops.s(momentum), *ops.s(weight_decay),
                    *ops.s(trust_coefficient), *ops.s(eps), *ops.s(loss_scale), *ops.s(has_nan),
                    np.int32(nesterov)), [(int(p), 4 * size) for p in sub])
        return fn

    t["range_update_weight_lars"] = lars_range(False)
    t["range_update_weight_lars_nesterov"] = lars_range(True)

    @reg("lars_compute_trust_ratio", "lars_compute_trust_ratio_fc", "lars_compute_trust_ratio_first",
         "lars_compute_trust_ratio_deep")
    def lars_compute_trust_ratio(w, g, trust_ratio, trust_coefficient, weight_decay, eps, loss_scale=None,
                                 has_nan=None):
        wf, gf = flat(w), flat(g)
        ops.dev.launch("tr_lars_trust", (1,), (BLOCK,), (
            *ops.arr(wf), *ops.arr(gf), np.int64(wf.size), *ops.s(trust_coefficient), *ops.s(weight_decay),
            *ops.s(eps), *ops.s(loss_scale), *ops.s(has_nan), *ops.s(trust_ratio)), ops.ext(wf, gf))

    def lars_tensor(nesterov: bool) -> Impl:
        def fn(w, g, m, trust_ratio, lr, momentum, weight_decay, loss_scale=None, has_nan=None):
            wf, gf, mf = flat(w), flat(g), flat(m)
            f32(wf, gf, mf)
            ops.ew("tr_lars_apply", wf.size, ops.p(wf), ops.p(gf), ops.p(mf), np.int64(wf.size),
                   *ops.s(trust_ratio), *ops.s(lr), *ops.s(momentum), *ops.s(weight_decay), *ops.s(loss_scale),
                   *ops.s(has_nan), np.int32(nesterov), touch=(wf, gf, mf))
        return fn

    for suffix in ("", "_fc", "_first", "_deep"):
        t[f"lars_update{suffix}"] = lars_tensor(False)
        t[f"lars_nesterov_update{suffix}"] = lars_tensor(True)

    # -- fused blocks ----------------------------------------------------------------------------
    for kind in BLOCKS.values():
        keys = ("eps", "momentum")

        def split(kw: dict[str, Any], _k=kind) -> tuple[Layout, dict[str, Any], dict[str, Any]]:
            params = {k: kw.pop(k) for k in (*_k.params, *keys) if k in kw}
            return _k.make(int(kw["x"].shape[-1]), **params), kw, params

        def bfwd(_split=split, **kw):
            lay, arr, params = _split(kw)
            block_forward(ops, lay, arr, params.get("eps", 1e-5), params.get("momentum", 0.1))

        def bbwd(_split=split, **kw):
            lay, arr, _ = _split(kw)
            block_backward(ops, lay, arr)

        def binf(_split=split, **kw):
            lay, arr, _ = _split(kw)
            block_inference(ops, lay, arr)

        t[f"{kind.name}_fwd"] = bfwd
        t[f"{kind.name}_bwd"] = t[f"{kind.name}_bwd_first_layer"] = bbwd
        t[f"{kind.name}_inf"] = binf

    @reg("gap_fc_fwd", "gap_fc_inf")
    def gap_fc_fwd(x, w, g, y, b=None, xbuf=None, wbuf=None, ybuf=None):
        ops.gap_forward(x, g)
        ops.fc_forward(g, w, b, y)

    @reg("gap_fc_bwd")
    def gap_fc_bwd(dy, w, g, dw, db=None, dx=None, xbuf=None, wbuf=None, ybuf=None):
        ops.fc_backward(dy, w, g, dw, db, None if dx is None else g)
        if dx is not None:
            ops.gap_backward(g, dx)

    return t


_IMPL_NAMES: frozenset[str] = frozenset(_impls(None))  # type: ignore[arg-type]  # the table's names only
"""The kernels the backend implements itself (building the table binds no device)."""

CUDA_IMPLS: dict[str, Callable[[GpuOps], Impl]] = {}
"""Plugins' CUDA implementations: kernel name -> ``factory(ops: GpuOps) -> fn``, where ``fn`` takes
the arguments of the kernel's registry spec (device arrays, keyword params) and launches on
``ops`` (:func:`register_cuda_kernel`)."""


def register_cuda_kernel(name: str, factory: Callable[[GpuOps], Impl]) -> None:
    """Give the registry kernel ``name`` (its CPU implementation registered with ``@kernel``) a
    CUDA implementation: ``factory(ops)`` returns the launcher, called with the spec's arrays and
    params like the CPU function (``ops.compile(source)`` / ``ops.launch(...)`` build it from CUDA
    C++ source). Raises ``KeyError`` when ``name`` is not a registered kernel."""
    if name not in KERNELS:
        raise KeyError(f"register_cuda_kernel('{name}'): no kernel '{name}' is registered; register its CPU "
                       "implementation with @tr_mlir.extend.kernel first")
    CUDA_IMPLS[name] = factory


def missing_cuda_kernels(names: Iterable[str] | None = None) -> list[str]:
    """Registry kernels (all, or ``names``) without a CUDA implementation, sorted. The built-in
    kernels all have one (``tests/test_gpu_kernels.py``); a plugin's CPU-only kernel is listed."""
    have = set(_IMPL_NAMES) | set(CUDA_IMPLS)
    return sorted(n for n in (KERNELS if names is None else names) if n not in have)


def cuda_kernels(ops: GpuOps) -> dict[str, KernelSpec]:
    """The GPU kernel table: for every name of :data:`KERNELS` with a CUDA implementation (the
    built-in ones and :data:`CUDA_IMPLS`) its spec with the GPU function. A kernel without one is
    left out: the executable reports it, by name, only when a model's graphs use it."""
    impls = _impls(ops)
    for name, factory in CUDA_IMPLS.items():
        impls[name] = factory(ops)
    return {name: dataclasses.replace(spec, fn=impls[name]) for name, spec in KERNELS.items() if name in impls}


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
