"""Shared helpers of the NumPy kernels: scalar operands, workspace views, chunked loops."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)

CHUNK = 1 << 14
"""Elements per chunk of the chunked element-wise loops: temporaries stay at 64 KiB of fp32,
in cache and below glibc's mmap threshold, whatever the tensor size."""


def scalar(v: Any) -> float:
    """The value of a scalar operand: a 1-element array (read now) or a Python number."""
    if isinstance(v, np.ndarray):
        return float(v.reshape(-1)[0])
    return float(v)


def flat(a: np.ndarray) -> np.ndarray:
    """A 1-D view of a contiguous array (raises ``ValueError`` rather than copy)."""
    if not a.flags.c_contiguous:
        raise ValueError(f"expected a contiguous array, got strides {a.strides} for shape {a.shape}")
    return a.reshape(-1)


def take(ws: np.ndarray, shape: tuple[int, ...], dtype: np.dtype = F32) -> np.ndarray:
    """A view of the first ``prod(shape)`` elements of workspace ``ws`` with ``shape``.

    ``ws`` may be larger than needed (planners share temporaries). Raises ``ValueError`` when it
    is too small or of the wrong dtype.
    """
    n = math.prod(map(int, shape))  # Python ints: about 2 us less per call than np.prod (kernels call it each step)
    if ws is None:
        raise ValueError(f"expected a workspace of {n} {np.dtype(dtype).name} elements, got None")
    f = flat(ws)
    if f.dtype != dtype or f.size < n:
        raise ValueError(
            f"expected a workspace of >= {n} {np.dtype(dtype).name} elements, got {f.size} {f.dtype.name}"
        )
    return f[:n].reshape(shape)


def chunks(n: int, step: int = CHUNK) -> Iterator[slice]:
    """Slices ``[i, i+step)`` covering ``range(n)``."""
    for i in range(0, n, step):
        yield slice(i, min(i + step, n))


def row_chunks(rows: int, cols: int) -> Iterator[slice]:
    """Row slices of a ``rows x cols`` matrix holding about :data:`CHUNK` elements each."""
    return chunks(rows, max(1, CHUNK // max(cols, 1)))


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a`` and ``b`` start at the same address with the same byte size (aliases)."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.nbytes == b.nbytes)


def copy_into(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` reshaped to ``dst`` (casting), skipped when both are one buffer."""
    if same_memory(dst, src) and dst.dtype == src.dtype:
        return
    np.copyto(dst.reshape(-1) if dst.flags.c_contiguous else dst,
              src.reshape(-1) if dst.flags.c_contiguous else src.reshape(dst.shape),
              casting="same_kind")


def rows2d(a: np.ndarray) -> np.ndarray:
    """A contiguous array viewed as (rows, last dim)."""
    return a.reshape(-1, a.shape[-1])


def nhwc(shape: tuple[int, ...], what: str) -> tuple[int, int, int, int]:
    """Check a 4-D NHWC shape."""
    if len(shape) != 4:
        raise ValueError(f"expected {what} of shape (N, H, W, C), got {shape}")
    return tuple(int(d) for d in shape)  # type: ignore[return-value]


def as32(a: np.ndarray, ws: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` as an fp32 array of ``shape``: a view when fp32, else a cast copy in workspace ``name``."""
    if a.dtype == F32:
        return a.reshape(shape)
    buf = take(ws.get(name), shape)
    np.copyto(buf, a.reshape(shape))
    return buf


def out32(a: np.ndarray, ws: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Where to compute an output of ``shape`` in fp32: ``a`` itself, or workspace ``name``."""
    return a.reshape(shape) if a.dtype == F32 else take(ws.get(name), shape)


def finish(dst: np.ndarray, buf: np.ndarray) -> None:
    """Round an fp32 result computed by :func:`out32` into its destination (no-op for fp32)."""
    if dst.dtype != F32:
        np.copyto(dst.reshape(buf.shape), buf, casting="same_kind")


TRANSPOSE_BLOCK = 32
"""Rows of the source per block of :func:`sum_transposed` (measured on the Zen 5 host,
2026-12-07, a (2304, 512) fp32 matrix: one strided copy of the transposed view 3.07 ms, blocks of
16 / 32 / 64 / 128 rows 0.47 / 0.53 / 0.94 / 1.58 ms; (1152, 256): 0.38 ms, 0.15 / 0.10 / 0.12 /
0.26 ms)."""


def sum_transposed(dst: np.ndarray, parts: list[np.ndarray]) -> None:
    """``dst[g] = (parts[0][g] + parts[1][g] + ...).T`` for every leading index g, the parts added
    in list order into ``parts[0]`` (so the same bits as adding whole arrays), then copied into
    dst (casting, e.g. to fp16), by blocks of :data:`TRANSPOSE_BLOCK` source rows. ``dst`` (G, n, m),
    each part (G, m, n). A single copy of the transposed view strides by whole rows of a matrix
    whose row length is often a power of two, so the cache keeps few of them and the copy runs
    several times slower than the sum itself."""
    acc = parts[0]
    for gi in range(acc.shape[0]):
        for r in range(0, acc.shape[1], TRANSPOSE_BLOCK):
            blk = acc[gi, r:r + TRANSPOSE_BLOCK]
            for other in parts[1:]:
                np.add(blk, other[gi, r:r + TRANSPOSE_BLOCK], out=blk)
            np.copyto(dst[gi, :, r:r + TRANSPOSE_BLOCK], blk.T, casting="same_kind")
