"""Devices of the CUDA backend: the :class:`CudaDevice` protocol (memory, launches, copies,
capture), :class:`CupyDevice` (a GPU through CuPy: raw arena, pinned staging, the NVRTC module of
:mod:`tr_mlir.lowering.cuda.sources`, the process's stream, capture with a raising allocator),
:func:`cuda_available`, and the errors of both (:class:`CudaUnavailableError`,
:class:`CaptureAllocationError`). The CPU stand-in is :class:`tr_mlir.lowering.cuda.emulator.EmulatedDevice`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from tr_mlir.errors import TrMlirError
from tr_mlir.lowering.cuda.sources import NVRTC_OPTIONS, SOURCE


class CaptureAllocationError(RuntimeError):
    """Device memory was allocated while a CUDA graph was being captured."""


class CudaUnavailableError(TrMlirError, RuntimeError):
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
