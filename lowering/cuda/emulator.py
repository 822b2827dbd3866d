"""The GPU kernels without a GPU: NVRTC compile checks and a CPU emulation of the CUDA device.

Two tools for machines with no GPU (CI, development), both over
:data:`tr_mlir.lowering.cuda.sources.SOURCE`:

* :func:`nvrtc_compile` compiles the CUDA source to a cubin for a GPU architecture with NVRTC
  (through ``cupy.cuda.nvrtc`` when CuPy is installed, else ``libnvrtc`` of the
  ``nvidia-cuda-nvrtc`` wheel or the system through ``ctypes``; NVRTC needs no driver and no GPU).
  :func:`nvrtc_library` says whether and where NVRTC was found.
* :class:`EmulatedDevice` runs the **same kernels** on the CPU: the kernel text is compiled by the
  host C++ compiler (``g++``/``c++``) under a small shim (``threadIdx``/``blockIdx`` globals,
  ``__shared__`` as ``static``, fp16 as ``_Float16``, ``atomicAdd`` as a plain add), and a launch
  runs every block's threads one after another, or, for kernels that call ``__syncthreads()``
  (:func:`~tr_mlir.lowering.cuda.sources.barrier_kernels`), as cooperating fibers (``ucontext``)
  that switch at each barrier. The device has an arena (a NumPy ``uint8`` array), pinned host
  buffers, memcpy/memset and a **recording capture**: between :meth:`EmulatedDevice.begin_capture`
  and :meth:`EmulatedDevice.end_capture` nothing executes; every launch, copy, memset and
  all-reduce is checked and recorded, and the returned graph replays the record with the recorded
  arguments (as a CUDA graph does). The checks are the capture-safety rules of the GPU backend:

  - every launch matches the kernel's parameter list (count and kinds, from the source);
  - every pointer lies inside the arena (or, for host-to-device copies, a registered host buffer),
    with the accessed byte range where the launcher states it;
  - no host access to device arrays: the arena views are :class:`DeviceArray` (an ``ndarray``
    subclass) that raise :class:`HostSyncError` on element reads/writes, NumPy math,
    ``float()``/``int()``, ``fill`` while their device captures -- on a GPU each would be a
    synchronizing copy, or a value frozen into the graph;
  - no allocation: :meth:`EmulatedDevice.allocate` and :meth:`EmulatedDevice.host_buffer` raise
    :class:`CaptureAllocationError` during capture.

The emulation is slow (one CPU thread; a fiber switch per thread per barrier) and meant for small
shapes; it is exact C++ semantics of the kernel text except for fp32 ``atomicAdd`` ordering (here
sequential) and the device math library (``expf``, ``tanhf``: the host libm here).
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tr_mlir.errors import TrMlirError
from tr_mlir.lowering.cuda.sources import KERNELS_CU, NVRTC_OPTIONS, SOURCE, Param, barrier_kernels, signatures


class HostSyncError(RuntimeError):
    """Host code read or wrote device memory while a graph was being captured."""


class CaptureAllocationError(RuntimeError):
    """Memory was allocated while a graph was being captured."""


class LaunchError(RuntimeError):
    """A kernel launch does not match the kernel (arguments) or the device (pointers, sizes)."""


class NvrtcUnavailable(TrMlirError, RuntimeError):
    """No NVRTC library was found (install the ``nvidia-cuda-nvrtc`` wheel, or CuPy)."""


class NvrtcCompileError(RuntimeError):
    """NVRTC rejected the source; the message holds NVRTC's log."""


# --------------------------------------------------------------------------------------
# NVRTC
# --------------------------------------------------------------------------------------


def _wheel_nvrtc_dirs() -> list[str]:
    dirs = []
    try:
        import nvidia  # type: ignore[import-not-found]

        for base in list(getattr(nvidia, "__path__", [])):
            dirs += sorted(glob.glob(os.path.join(base, "cu1*", "lib")))
            dirs += sorted(glob.glob(os.path.join(base, "cuda_nvrtc", "lib")))
    except ImportError:
        pass
    return dirs


def nvrtc_library() -> str | None:
    """The NVRTC that :func:`nvrtc_compile` uses: ``'cupy'``, a ``libnvrtc`` path, or None."""
    try:
        from cupy.cuda import nvrtc  # type: ignore[import-not-found]  # noqa: F401

        nvrtc.getVersion()
        return "cupy"
    except Exception:
        pass
    for d in _wheel_nvrtc_dirs() + ["/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"]:
        libs = sorted(glob.glob(os.path.join(d, "libnvrtc.so*")))
        libs = [p for p in libs if "builtins" not in p and ".alt." not in p]
        if libs:
            return libs[0]
    return None


_NVRTC_LOCK = threading.Lock()
_NVRTC_LIBS: dict[str, ctypes.CDLL] = {}


def _ctypes_nvrtc(path: str) -> ctypes.CDLL:
    with _NVRTC_LOCK:
        lib = _NVRTC_LIBS.get(path)
        if lib is None:
            d = os.path.dirname(path)
            for b in sorted(glob.glob(os.path.join(d, "libnvrtc-builtins.so*"))):
                if ".alt." not in b:
                    ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
                    break
            lib = _NVRTC_LIBS[path] = ctypes.CDLL(path)
        return lib


def nvrtc_compile(source: str = SOURCE, arch: str = "sm_90", options: Sequence[str] = NVRTC_OPTIONS,
                  name: str = "tr_kernels.cu") -> bytes:
    """Compile ``source`` with NVRTC for ``arch`` (``sm_90``: H100/H200) and return the cubin.

    Raises :class:`NvrtcUnavailable` when no NVRTC is installed, :class:`NvrtcCompileError` (with
    NVRTC's log) when the source does not compile. Needs no GPU and no driver.
    """
    lib = nvrtc_library()
    if lib is None:
        raise NvrtcUnavailable("NVRTC not found: pip install 'nvidia-cuda-nvrtc>=13.0,<13.1' (or cupy-cuda13x)")
    opts = [f"--gpu-architecture={arch}", *options]
    if lib == "cupy":
        from cupy.cuda import nvrtc  # type: ignore[import-not-found]

        prog = nvrtc.createProgram(source, name, [], [])
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as e:
            raise NvrtcCompileError(f"NVRTC rejected {name} for {arch}: {e}\n{nvrtc.getProgramLog(prog)}") from None
        try:
            return bytes(nvrtc.getCUBIN(prog))
        finally:
            nvrtc.destroyProgram(prog)
    nv = _ctypes_nvrtc(lib)
    prog = ctypes.c_void_p()
    if nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None):
        raise NvrtcCompileError("nvrtcCreateProgram failed")
    try:
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = nv.nvrtcCompileProgram(prog, len(opts), arr)
        size = ctypes.c_size_t()
        nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        nv.nvrtcGetProgramLog(prog, log)
        if rc:
            raise NvrtcCompileError(f"NVRTC rejected {name} for {arch} (error {rc}):\n{log.value.decode(errors='replace')}")
        nv.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        nv.nvrtcGetCUBIN(prog, cubin)
        return cubin.raw
    finally:
        nv.nvrtcDestroyProgram(ctypes.byref(prog))


# --------------------------------------------------------------------------------------
# The host build of the kernels
# --------------------------------------------------------------------------------------

_SHIM = r"""
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <ucontext.h>
struct tr_dim3 { unsigned x, y, z; };
static tr_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define TR_DEV static inline
#define TR_FUNCTOR inline
#define TR_GLOBAL extern "C"
#define TR_SHARED static
typedef unsigned short f16_t;
static inline float h2f(f16_t h) { _Float16 v; memcpy(&v, &h, 2); return (float)v; }
static inline f16_t f2h(float f) { _Float16 v = (_Float16)f; f16_t h; memcpy(&h, &v, 2); return h; }
static inline unsigned long long tr_mulhi64(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline float tr_inf() { return __builtin_inff(); }
static inline float tr_nan() { return __builtin_nanf(""); }
static inline void tr_atomic_add(float* p, float v) { *p += v; }
static void tr_emu_barrier();
#define __syncthreads() tr_emu_barrier()
"""

_SCHEDULER = r"""
typedef void (*tr_thunk_t)(void**);
static ucontext_t tr_sched;
static ucontext_t* tr_fib = 0;
static char* tr_stacks = 0;
static int* tr_done = 0;
static int tr_cap = 0, tr_cur = 0, tr_fiber_mode = 0, tr_error = 0;
static tr_thunk_t tr_fn;
static void** tr_args;
#define TR_STACK (128 * 1024)

static void tr_emu_barrier() {
  if (!tr_fiber_mode) { tr_error = 1; return; }
  swapcontext(&tr_fib[tr_cur], &tr_sched);
}
static void tr_fiber_main() { tr_fn(tr_args); tr_done[tr_cur] = 1; }
static void tr_set_tid(int t) {
  threadIdx.x = t % blockDim.x; threadIdx.y = (t / blockDim.x) % blockDim.y; threadIdx.z = t / (blockDim.x * blockDim.y);
}

/* 0 ok; 1 __syncthreads in a kernel run without fibers; 2 threads diverged at a barrier; 3 bad size */
extern "C" int tr_emu_launch(tr_thunk_t fn, void** args, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, int barriers) {
  int nt = (int)(bx * by * bz);
  if (nt < 1 || nt > 1024) return 3;
  gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
  blockDim.x = bx; blockDim.y = by; blockDim.z = bz;
  tr_error = 0; tr_fn = fn; tr_args = args;
  if (barriers && nt > tr_cap) {
    free(tr_fib); free(tr_stacks); free(tr_done);
    tr_fib = (ucontext_t*)malloc(sizeof(ucontext_t) * nt);
    tr_stacks = (char*)malloc((size_t)TR_STACK * nt);
    tr_done = (int*)malloc(sizeof(int) * nt);
    tr_cap = nt;
  }
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
        if (!barriers) {
          for (int t = 0; t < nt; t++) { tr_set_tid(t); fn(args); }
          if (tr_error) return tr_error;
          continue;
        }
        for (int t = 0; t < nt; t++) {
          getcontext(&tr_fib[t]);
          tr_fib[t].uc_stack.ss_sp = tr_stacks + (size_t)TR_STACK * t;
          tr_fib[t].uc_stack.ss_size = TR_STACK;
          tr_fib[t].uc_link = &tr_sched;
          makecontext(&tr_fib[t], tr_fiber_main, 0);
          tr_done[t] = 0;
        }
        tr_fiber_mode = 1;
        int alive = nt;
        while (alive) {
          int waiting = 0, finished_now = 0;
          for (int t = 0; t < nt; t++) {
            if (tr_done[t]) continue;
            tr_cur = t; tr_set_tid(t);
            swapcontext(&tr_sched, &tr_fib[t]);
            if (tr_done[t]) finished_now++; else waiting++;
          }
          if (waiting && finished_now) { tr_fiber_mode = 0; tr_error = 2; }
          if (tr_error) { tr_fiber_mode = 0; return tr_error; }
          alive = waiting;
        }
        tr_fiber_mode = 0;
      }
  return tr_error;
}
"""


def _thunks() -> str:
    out = []
    for name, params in signatures().items():
        args = ", ".join(f"*({p.ctype}*)a[{i}]" if p.kind != "ptr" else f"*({p.ctype}*)a[{i}]"
                         for i, p in enumerate(params))
        out.append(f'extern "C" void tr_thunk_{name}(void** a) {{ {name}({args}); }}')
    return "\n".join(out)


def host_source() -> str:
    """The C++ text the emulator compiles: shim, the kernels, the fiber scheduler, one thunk per kernel."""
    return _SHIM + KERNELS_CU + _SCHEDULER + _thunks() + "\n"


def host_compiler() -> str | None:
    """The host C++ compiler (``$CXX``, ``g++``, ``c++``, ``clang++``) that supports ``_Float16``, or None."""
    for cxx in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if cxx and shutil.which(cxx):
            return cxx
    return None


_BUILD_LOCK = threading.Lock()


def build_host_library(cache_dir: str | None = None) -> str:
    """Compile :func:`host_source` into a shared library (cached by content hash); returns its path.

    Raises ``RuntimeError`` with the compiler's output when there is no compiler or it fails.
    """
    cxx = host_compiler()
    if cxx is None:
        raise RuntimeError("no host C++ compiler (g++/c++/clang++) to build the CUDA kernel emulator")
    src = host_source()
    flags = ["-O2", "-std=c++17", "-shared", "-fPIC", "-w", "-fno-strict-aliasing"]
    key = hashlib.sha256((cxx + " ".join(flags) + src).encode()).hexdigest()[:16]
    cache = cache_dir or os.environ.get("TR_MLIR_CACHE") or os.path.join(tempfile.gettempdir(), "tr_mlir_cuda_emu")
    os.makedirs(cache, exist_ok=True)
    lib = os.path.join(cache, f"tr_kernels_emu_{key}.so")
    with _BUILD_LOCK:
        if os.path.exists(lib):
            return lib
        cpp = os.path.join(cache, f"tr_kernels_emu_{key}.cpp")
        with open(cpp, "w") as f:
            f.write(src)
        tmp = lib + f".{os.getpid()}.tmp"
        r = subprocess.run([cxx, *flags, cpp, "-o", tmp], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"building the CUDA kernel emulator with {cxx} failed:\n{r.stderr[-4000:]}")
        os.replace(tmp, lib)
    return lib


# --------------------------------------------------------------------------------------
# Device arrays with a host-access guard
# --------------------------------------------------------------------------------------


class DeviceArray(np.ndarray):
    """A view of the emulated device's arena: a NumPy array whose element access, NumPy math,
    ``fill`` and conversions raise :class:`HostSyncError` while its device captures (shape,
    dtype, strides, reshaping and slicing into views stay allowed, as on a GPU array)."""

    _device: EmulatedDevice | None

    def __array_finalize__(self, obj: Any) -> None:
        self._device = getattr(obj, "_device", None)

    def _guard(self, what: str) -> None:
        dev = getattr(self, "_device", None)
        if dev is not None and dev.capturing:
            raise HostSyncError(f"{what} of a device array while capturing a graph (a host sync on a GPU, or a "
                                f"value frozen into the graph)")

    def __getitem__(self, key: Any) -> Any:
        out = super().__getitem__(key)
        if not isinstance(out, np.ndarray) or out.ndim == 0:
            self._guard("reading an element")
        return out

    def __setitem__(self, key: Any, value: Any) -> None:
        self._guard("writing")
        super().__setitem__(key, value)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        for a in (*inputs, *kwargs.get("out", ())):
            if isinstance(a, DeviceArray):
                a._guard(f"numpy.{ufunc.__name__}")
        args = [a.view(np.ndarray) if isinstance(a, DeviceArray) else a for a in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, DeviceArray) else o for o in kwargs["out"])
        return getattr(ufunc, method)(*args, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        self._guard(f"numpy.{func.__name__}")
        return super().__array_function__(func, types, args, kwargs)

    def fill(self, value: Any) -> None:
        self._guard("fill")
        super().fill(value)

    def item(self, *args: Any) -> Any:
        self._guard("item()")
        return super().item(*args)

    def tolist(self) -> Any:
        self._guard("tolist()")
        return super().tolist()

    def __float__(self) -> float:
        self._guard("float()")
        return float(self.view(np.ndarray).reshape(-1)[0])

    def __int__(self) -> int:
        self._guard("int()")
        return int(self.view(np.ndarray).reshape(-1)[0])

    def __bool__(self) -> bool:
        self._guard("bool()")
        return bool(self.view(np.ndarray))


# --------------------------------------------------------------------------------------
# The emulated device
# --------------------------------------------------------------------------------------

_CTYPES = {"ptr": ctypes.c_void_p, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float,
           "f64": ctypes.c_double}
_NP_KIND = {"ptr": np.uint64, "i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}


def check_launch(name: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any]) -> tuple[Param, ...]:
    """Check one launch against the kernel's parameter list (count, numpy scalar kinds) and the
    launch geometry; returns the parameters. Raises :class:`LaunchError`."""
    params = signatures().get(name)
    if params is None:
        raise LaunchError(f"no kernel '{name}' in the CUDA module")
    if len(args) != len(params):
        raise LaunchError(f"kernel '{name}' takes {len(params)} arguments ({', '.join(p.name for p in params)}), "
                          f"got {len(args)}")
    for p, a in zip(params, args):
        want = _NP_KIND[p.kind]
        if type(a) is not want:
            raise LaunchError(f"kernel '{name}' argument '{p.name}' ({p.ctype}) expects a numpy.{want.__name__}, "
                              f"got {type(a).__name__} {a!r}")
    if not (1 <= len(grid) <= 3 and 1 <= len(block) <= 3):
        raise LaunchError(f"kernel '{name}': bad launch geometry grid={grid} block={block}")
    nt = int(np.prod(block))
    if nt < 1 or nt > 1024 or min(grid) < 1 or (len(grid) > 1 and max(grid[1:]) > 65535):
        raise LaunchError(f"kernel '{name}': bad launch geometry grid={grid} block={block}")
    if name in barrier_kernels() and nt > 1024:
        raise LaunchError(f"kernel '{name}': {nt} threads per block")
    return params


@dataclass
class _Op:
    kind: str  # kernel | memcpy | memset | allreduce
    payload: tuple


@dataclass
class EmulatedGraph:
    """A recorded capture: replays its operations with the recorded arguments."""

    device: EmulatedDevice
    ops: tuple[_Op, ...]
    kernels: tuple[str, ...] = field(default=())

    def launch(self) -> None:
        for op in self.ops:
            self.device._execute(op)


class EmulatedDevice:
    """A CUDA device emulated on the CPU (module doc) for :class:`~tr_mlir.lowering.cuda.backend.CudaBackend`.

    ``comm``: a communicator with ``size``, ``rank`` and ``all_reduce(array, op)`` for the
    data-parallel all-reduces (:class:`tr_mlir.lowering.distributed.FakeComm` in tests); None
    for one process. ``memory_limit``: the bytes :meth:`available_memory` reports.
    """

    name = "cuda-emulator"

    def __init__(self, comm: Any = None, memory_limit: int | None = None):
        self.lib = ctypes.CDLL(build_host_library())
        self.lib.tr_emu_launch.restype = ctypes.c_int
        self.lib.tr_emu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_int]
        self._thunks: dict[str, int] = {}
        self._barriers = barrier_kernels()
        self.comm = comm
        self.memory_limit = memory_limit
        self.capturing = False
        self._record: list[_Op] | None = None
        self._arenas: list[np.ndarray] = []
        self._hosts: list[np.ndarray] = []
        self.allocations = 0
        self.launches = 0
        self.trace: list[str] | None = None

    # -- memory ----------------------------------------------------------------------

    def available_memory(self) -> int | None:
        return self.memory_limit

    def allocate(self, nbytes: int) -> DeviceArray:
        if self.capturing:
            raise CaptureAllocationError(f"allocation of {nbytes} bytes during graph capture")
        a = np.zeros(max(nbytes, 1) + 256, np.uint8)
        off = (-a.ctypes.data) % 256
        arena = a[off:off + nbytes].view(DeviceArray)
        arena._device = self
        self._arenas.append(arena)
        self.allocations += 1
        return arena

    def view(self, arena: DeviceArray, offset: int, dtype: Any, shape: tuple[int, ...]) -> DeviceArray:
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        end = offset + n * dtype.itemsize
        if offset < 0 or end > arena.size:
            raise ValueError(f"view [{offset}, {end}) outside the arena of {arena.size} bytes")
        v = arena.view(np.ndarray)[offset:end].view(dtype).reshape(shape).view(DeviceArray)
        v._device = self
        return v

    def host_buffer(self, nbytes: int) -> np.ndarray:
        if self.capturing:
            raise CaptureAllocationError(f"pinned allocation of {nbytes} bytes during graph capture")
        a = np.zeros(max(nbytes, 1), np.uint8)[:nbytes]
        self._hosts.append(a)
        self.allocations += 1
        return a

    def ptr(self, a: np.ndarray) -> int:
        return int(a.__array_interface__["data"][0])

    def is_host(self, a: Any) -> bool:
        return not isinstance(a, DeviceArray)

    def to_host(self, a: Any) -> np.ndarray:
        if self.capturing:
            raise HostSyncError("copy to the host while capturing a graph")
        return np.array(np.asarray(a).view(np.ndarray) if isinstance(a, np.ndarray) else a)

    def synchronize(self) -> None:
        if self.capturing:
            raise HostSyncError("synchronize() while capturing a graph")

    def _where(self, ptr: int, nbytes: int) -> str | None:
        """'device' / 'host' when [ptr, ptr + nbytes) lies in an arena / a host buffer, else None."""
        for kind, bufs in (("device", self._arenas), ("host", self._hosts)):
            for b in bufs:
                lo = int(b.__array_interface__["data"][0])
                if lo <= ptr and ptr + nbytes <= lo + b.size:
                    return kind
        return None

    # -- work ------------------------------------------------------------------------

    def _thunk(self, name: str) -> int:
        f = self._thunks.get(name)
        if f is None:
            f = self._thunks[name] = ctypes.cast(getattr(self.lib, f"tr_thunk_{name}"), ctypes.c_void_p).value
        return f

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Any],
               extents: Sequence[tuple[int, int]] = ()) -> None:
        """Launch kernel ``name`` (or record it while capturing). ``extents``: (pointer, bytes)
        ranges the kernel touches, checked to lie in device memory (every pointer argument is
        checked to lie in it in any case)."""
        params = check_launch(name, grid, block, args)
        for p, a in zip(params, args):
            if p.kind == "ptr" and int(a) != 0 and self._where(int(a), 1) != "device":
                raise LaunchError(f"kernel '{name}' argument '{p.name}' = {int(a):#x} points outside the device arena")
        for ptr, nbytes in extents:
            if nbytes > 0 and self._where(int(ptr), int(nbytes)) != "device":
                raise LaunchError(f"kernel '{name}' touches [{int(ptr):#x}, +{nbytes}) outside the device arena")
        vals = [_CTYPES[p.kind](int(a) if p.kind in ("ptr", "i32", "i64") else float(a)) for p, a in zip(params, args)]
        g = tuple(int(v) for v in grid) + (1,) * (3 - len(grid))
        b = tuple(int(v) for v in block) + (1,) * (3 - len(block))
        op = _Op("kernel", (name, self._thunk(name), tuple(vals), g, b, name in self._barriers))
        self._submit(op)

    def memcpy(self, dst: int, src: int, nbytes: int, kind: str) -> None:
        """Copy ``nbytes``: ``kind`` 'h2d' (src in a host buffer) or 'd2d'."""
        if nbytes <= 0:
            return
        if self._where(dst, nbytes) != "device":
            raise LaunchError(f"memcpy destination [{dst:#x}, +{nbytes}) is not device memory")
        want = "host" if kind == "h2d" else "device"
        if self._where(src, nbytes) != want:
            raise LaunchError(f"memcpy ({kind}) source [{src:#x}, +{nbytes}) is not {want} memory"
                              + (" registered as a pinned host buffer" if want == "host" else ""))
        self._submit(_Op("memcpy", (dst, src, nbytes)))

    def memset(self, dst: int, value: int, nbytes: int) -> None:
        if nbytes <= 0:
            return
        if self._where(dst, nbytes) != "device":
            raise LaunchError(f"memset [{dst:#x}, +{nbytes}) is not device memory")
        self._submit(_Op("memset", (dst, value, nbytes)))

    def allreduce(self, ptr: int, count: int, dtype: Any, op: str) -> None:
        """In-place all-reduce (``op`` 'sum' or 'avg') of ``count`` elements at ``ptr`` through ``comm``."""
        dtype = np.dtype(dtype)
        if self._where(ptr, count * dtype.itemsize) != "device":
            raise LaunchError(f"all-reduce [{ptr:#x}, +{count * dtype.itemsize}) is not device memory")
        if self.comm is None or self.comm.size == 1:
            return
        self._submit(_Op("allreduce", (ptr, count, dtype, op)))

    def _submit(self, op: _Op) -> None:
        if self.capturing:
            assert self._record is not None
            self._record.append(op)
        else:
            self._execute(op)

    _LOCK = threading.Lock()

    def _execute(self, op: _Op) -> None:
        if op.kind == "kernel":
            name, fn, vals, g, b, barriers = op.payload
            arr = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.addressof(v) for v in vals])
            if self.trace is not None:
                self.trace.append(name)
            with EmulatedDevice._LOCK:  # the kernels' static "shared memory" is one per process
                rc = self.lib.tr_emu_launch(fn, arr, *g, *b, int(barriers))
            self.launches += 1
            if rc:
                why = {1: "__syncthreads() in a kernel classified barrier-free", 2: "threads diverged at a barrier",
                       3: "bad block size"}.get(rc, str(rc))
                raise LaunchError(f"kernel '{name}' failed in the emulator: {why}")
        elif op.kind == "memcpy":
            dst, src, n = op.payload
            ctypes.memmove(dst, src, n)
        elif op.kind == "memset":
            dst, v, n = op.payload
            ctypes.memset(dst, v, n)
        else:
            ptr, count, dtype, how = op.payload
            buf = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
            self.comm.all_reduce(np.frombuffer(buf, dtype, count), how)

    # -- capture ---------------------------------------------------------------------

    def begin_capture(self) -> None:
        if self.capturing:
            raise RuntimeError("a capture is already in progress")
        self._record = []
        self.capturing = True

    def end_capture(self) -> EmulatedGraph:
        if not self.capturing:
            raise RuntimeError("end_capture() without begin_capture()")
        ops = tuple(self._record or ())
        self.capturing = False
        self._record = None
        return EmulatedGraph(self, ops, tuple(o.payload[0] for o in ops if o.kind == "kernel"))

    def abort_capture(self) -> None:
        self.capturing = False
        self._record = None

    def launch_graph(self, graph: EmulatedGraph) -> None:
        if self.capturing:
            raise RuntimeError("graph launch while capturing")
        graph.launch()
