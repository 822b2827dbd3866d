"""Where a GEMM may be cut and keep the bits of the whole: probes of NumPy's OpenBLAS (and of the
kernels' own instance, :func:`._parallel.own_blas`), once per process, on one thread.

A split GEMM (:func:`._parallel.matmul`, the FC kernels of :mod:`.dense`) gives the bits of the
whole only where the BLAS sums each output element in the same order whatever the block it lies
in: NumPy's OpenBLAS with its SkylakeX kernels does for any cut; its Haswell kernels (Zen 1-3,
AVX2 Intel CPUs, ``OPENBLAS_CORETYPE=Haswell``) only for row cuts at multiples of their row
unroll (:data:`._parallel.OWN_ROW_ALIGN`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _parallel


def row_cuts_keep_bits(gemm: Callable[[np.ndarray, np.ndarray, np.ndarray], None]) -> bool:
    """Whether ``gemm(a, b, out)`` (``out = a @ b`` on one thread) gives the same bits for row
    blocks cut at multiples of :data:`._parallel.OWN_ROW_ALIGN` (24: a 200-row GEMM cut at 96, and
    at 48 and 120), plain or transposed operands, as for the whole GEMM."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((200, 131)).astype(np.float32)
    b = rng.standard_normal((131, 203)).astype(np.float32)
    for lhs in (a, np.ascontiguousarray(a.T).T):
        for rhs in (b, np.ascontiguousarray(b.T).T):
            whole = np.empty((200, 203), np.float32)
            gemm(lhs, rhs, whole)
            for cuts in ((0, 96, 200), (0, 48, 120, 200)):
                part = np.empty_like(whole)
                for lo, hi in zip(cuts, cuts[1:]):
                    gemm(lhs[lo:hi], rhs, part[lo:hi])
                if not np.array_equal(part, whole):
                    return False
    return True


_invariant: list[bool] = []


def cuts_keep_bits() -> bool:
    """Whether NumPy's OpenBLAS gives the same bits for a GEMM cut into row or column blocks at
    arbitrary places as for the whole (a probe, once per process, on one thread). True for its
    SkylakeX kernels; the Haswell kernels, for one, sum differently in column tails. When False
    the number of blocks of a split never depends on timing (:func:`._parallel.contended` is ignored),
    so a run's results depend only on the shapes and the thread count."""
    if not _invariant:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((97, 131)).astype(np.float32)
        b = rng.standard_normal((131, 203)).astype(np.float32)
        whole = np.empty((97, 203), np.float32)
        _parallel.serial_matmul(a, b, whole)
        ok = True
        for cut in (37, 48):
            part = np.empty_like(whole)
            _parallel.serial_matmul(a[:cut], b, part[:cut])
            _parallel.serial_matmul(a[cut:], b, part[cut:])
            ok = ok and np.array_equal(part, whole)
        for cut in (64, 101):
            part = np.empty_like(whole)
            _parallel.serial_matmul(a, b[:, :cut], part[:, :cut])
            _parallel.serial_matmul(a, b[:, cut:], part[:, cut:])
            ok = ok and np.array_equal(part, whole)
        _invariant.append(bool(ok))
    return _invariant[0]


_numpy_align: list[int] = []


def numpy_cut_align() -> int:
    """Where a GEMM of NumPy's OpenBLAS may be cut and keep the bits of the whole (probes, once
    per process, on one thread): 1, anywhere, into row or column blocks (:func:`cuts_keep_bits`:
    its SkylakeX kernels); :data:`._parallel.OWN_ROW_ALIGN`, into row blocks at its multiples only (its
    Haswell kernels, which sum column tails and other row cuts differently: the core type
    OpenBLAS picks on Zen 1-3 and AVX2 Intel CPUs, and on any CPU under
    ``OPENBLAS_CORETYPE=Haswell``); 0, nowhere found (its split GEMMs run whole)."""
    if not _numpy_align:
        if cuts_keep_bits():
            _numpy_align.append(1)
        else:
            _numpy_align.append(_parallel.OWN_ROW_ALIGN if row_cuts_keep_bits(_parallel.serial_matmul) else 0)
    return _numpy_align[0]
