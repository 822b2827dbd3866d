"""CUDA C++ sources of the GPU backend: one NVRTC module holding every kernel.

The text lives in ``kernels/*.cu`` (package data, one file per kernel family, concatenated in
the order of :data:`KERNEL_FILES`); this module loads it and parses it.

:data:`SOURCE` is compiled once per process (``cupy.RawModule``, ``-std=c++17``, for the
device's architecture) by :class:`tr_mlir.lowering.cuda.backend.CupyDevice`, and, on a machine
without a GPU, by NVRTC alone (:func:`tr_mlir.lowering.cuda.emulator.nvrtc_compile`, tests) and
by the host C++ compiler under a thread-emulation shim (:mod:`tr_mlir.lowering.cuda.emulator`),
which runs the very same kernels on the CPU against the NumPy reference kernels.

Conventions (kept so that one text compiles for both):

* every kernel is ``TR_GLOBAL void tr_<name>(...)`` with scalar parameters ``int``,
  ``long long`` (``i64``), ``float``, ``double`` or pointers; :func:`signatures` parses them, and
  the launchers check every launch against them;
* arrays of run-time dtype are ``(const void* p, int dt)`` pairs read and written through
  :c:func:`ldf` / :c:func:`stf` (dtype codes :data:`DTYPE_CODES`); scalar operands (learning
  rate, loss scale, NaN flag, Adam step, batch size, ...) are such pointers into the arena, read
  by the kernel (a null pointer means "absent": the documented default), so a captured graph
  stays valid when the host changes them;
* fp16 is stored as ``unsigned short`` and converted with the PTX ``cvt`` instructions (no
  ``cuda_fp16.h``, so NVRTC needs no include path); all arithmetic and accumulation is fp32;
* no warp intrinsics and no dynamic shared memory: block-level cooperation is ``__shared__``
  arrays and ``__syncthreads()`` only (``TR_SHARED``), which the CPU shim emulates;
* ``atomicAdd`` on fp32 is used for column sums (a BN's own statistics, bias and weight
  gradients) into pre-zeroed fp32 accumulators; the statistics a conv writes for the BN after it
  (``tr_colstats_part`` / ``tr_colstats_merge``) use none: fixed slots merged in a fixed order,
  the same bits on every run. Everything else writes each output element from one thread.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

import numpy as np

DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.float32): 0,
    np.dtype(np.float16): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.uint8): 4,
    np.dtype(np.bool_): 4,
    np.dtype(np.int64): 5,
}
"""NumPy dtype -> the ``dt`` code the kernels take."""

BLOCK = 256
"""Threads per block of the element-wise and GEMM kernels."""

GEMM_TILE = 64
"""Output tile (rows and columns) of one GEMM block; the reduction step is 16."""

KERNEL_FILES: tuple[str, ...] = (
    "common.cu",  # typedefs, dtype loads and stores (ldf / stf ...), the grid-loop macros
    "elementwise.cu",  # copies, fills, channel pad / crop, add, axpy, masks, activations, EMA
    "step.cu",  # step scalars: NaN check, loss scaling, metrics, step counter, Adam bias correction
    "optim.cu",  # SGD, Adam, LARS (segment, trust, apply)
    "norm.cu",  # column sums (BN statistics, bias gradients), batch norm
    "pool.cu",  # max / average / global average pooling (NHWC)
    "loss.cu",  # softmax cross-entropy
    "dropout.cu",  # dropout masks (NumPy's Philox4x64-10)
    "gemm.cu",  # the tiled GEMM, its operand views (strided, im2col, dgrad), tr_gemm
    "conv.cu",  # implicit-GEMM conv fwd / dgrad / wgrad, depthwise conv
    "winograd.cu",  # Winograd F(2x2, 3x3) / F(4x4, 3x3) transforms (the GEMMs are tr_gemm)
)
"""The ``.cu`` files of ``kernels/`` that make up :data:`KERNELS_CU`, in order (one module: later
files use the helpers of earlier ones)."""


def _read_kernel_file(name: str) -> str:
    # importlib.resources finds the package data in a source tree, an editable install and a wheel
    return resources.files(__package__).joinpath("kernels", name).read_bytes().decode("utf-8")


_DEVICE_PRELUDE = _read_kernel_file("prelude.cu")
"""The GPU prelude (``TR_DEV``, ``TR_GLOBAL``, fp16 conversions, ``atomicAdd``) of ``kernels/prelude.cu``."""

KERNELS_CU = "".join(_read_kernel_file(name) for name in KERNEL_FILES)
"""The kernels (after a prelude: :data:`_DEVICE_PRELUDE` on the GPU, the emulator's shim on a CPU)."""

SOURCE = _DEVICE_PRELUDE + KERNELS_CU
"""The NVRTC source of the module."""

NVRTC_OPTIONS = ("-std=c++17",)
"""Options of every compile (the architecture is added per device)."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its kind (``ptr``, ``i32``, ``i64``, ``f32``, ``f64``), name and
    declared C type."""

    kind: str
    name: str
    ctype: str


_SIG = re.compile(r"TR_GLOBAL\s+void\s+(\w+)\s*\(([^)]*)\)", re.S)


def _kind(ctype: str) -> str:
    if "*" in ctype:
        return "ptr"
    words = ctype.replace("const", " ").split()
    if words in (["i64"], ["long", "long"]):
        return "i64"
    if words == ["int"]:
        return "i32"
    if words == ["float"]:
        return "f32"
    if words == ["double"]:
        return "f64"
    raise ValueError(f"kernel parameter type {ctype!r} is not one of pointer, int, i64, float, double")


@functools.lru_cache(maxsize=1)
def signatures() -> dict[str, tuple[Param, ...]]:
    """Kernel name -> its parameters, parsed from :data:`KERNELS_CU` (every ``TR_GLOBAL`` kernel)."""
    out: dict[str, tuple[Param, ...]] = {}
    for name, params in _SIG.findall(KERNELS_CU):
        ps = []
        for p in params.split(","):
            p = " ".join(p.split())
            m = re.match(r"(.*?)(\w+)$", p)
            assert m is not None, p
            ctype = m.group(1).strip()
            ps.append(Param(_kind(ctype), m.group(2), ctype))
        out[name] = tuple(ps)
    return out


def _function_bodies() -> dict[str, str]:
    """Name -> body text of every function definition in :data:`KERNELS_CU` (comments removed,
    brace-matched)."""
    text = re.sub(r"/\*.*?\*/", " ", KERNELS_CU, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^#.*$", " ", text, flags=re.M)
    bodies: dict[str, str] = {}
    for m in re.finditer(r"(\w+)\s*\([^;{}]*\)\s*(?:const\s*)?\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            ch = text[i]
            depth += ch == "{"
            depth -= ch == "}"
            i += 1
        name = m.group(1)
        if name in ("if", "for", "while", "switch"):
            continue
        bodies[name] = bodies.get(name, "") + text[m.end():i]
    return bodies


@functools.lru_cache(maxsize=1)
def barrier_kernels() -> frozenset[str]:
    """Kernels that call ``__syncthreads()``, directly or through a helper (the CPU emulator runs
    their threads as cooperating fibers; the others one thread after the other)."""
    bodies = _function_bodies()
    uses = {n for n, b in bodies.items() if "__syncthreads" in b}
    changed = True
    while changed:
        changed = False
        for n, b in bodies.items():
            if n not in uses and any(re.search(rf"\b{u}\b", b) for u in uses):
                uses.add(n)
                changed = True
    return frozenset(n for n in signatures() if n in uses)
