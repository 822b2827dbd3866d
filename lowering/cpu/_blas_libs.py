"""The OpenBLAS libraries the CPU kernels call: NumPy's own (:func:`numpy_openblas`, its
``cblas_sgemm``: :func:`find_sgemm`) and the kernels' private second instance with a chosen core
type (:func:`own_blas_core`, :func:`load_own_blas`). The thread pool and the split GEMMs that use
them are :mod:`._parallel`."""

from __future__ import annotations

import ctypes
import os

def numpy_openblas():
    """threadpoolctl's controller of NumPy's own OpenBLAS (the one in ``numpy.libs``), else of
    the first OpenBLAS loaded, else None. Other wheels bring their own OpenBLAS (scipy, loaded
    by scikit-learn); which one threadpoolctl lists first depends on import order, so the
    kernels pick NumPy's by its directory (they call it through ``np.matmul``)."""
    from threadpoolctl import ThreadpoolController

    libs = [c for c in ThreadpoolController().lib_controllers if c.internal_api == "openblas"]
    ours = [c for c in libs if "numpy" in os.path.basename(os.path.dirname(c.filepath))]
    return (ours or libs or [None])[0]


def find_sgemm():
    """(address of NumPy's OpenBLAS ``cblas_sgemm``, ILP64?) from the library :func:`_controller`
    controls, or None (another BLAS, or a library that is not NumPy's)."""
    try:
        lib = numpy_openblas()
        if lib is None or "numpy" not in os.path.basename(os.path.dirname(lib.filepath)):
            return None
        for name, ilp64 in (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True), ("scipy_cblas_sgemm", False),
                            ("cblas_sgemm", False)):
            fn = getattr(lib.dynlib, name, None)
            if fn is not None:
                return ctypes.cast(fn, ctypes.c_void_p).value, ilp64
    except Exception:  # noqa: BLE001 - no threadpoolctl or an unexpected library: no C worker
        return None
    return None


ENV_OWN_BLAS = "TR_MLIR_OWN_BLAS_CORETYPE"
"""Environment variable: the OpenBLAS core type of the kernels' own OpenBLAS instance
(:func:`own_blas_core`), or ``0`` / ``native`` for none (NumPy's OpenBLAS everywhere)."""

_AVX512_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


ZEN4_FAMILY = 0x19
"""``cpu family`` of AMD's Zen 3 and Zen 4 CPUs (/proc/cpuinfo; AMD's family/model tables). Of
these only Zen 4 has AVX-512, and it executes each 512-bit instruction in two 256-bit halves."""


def _cpu_vendor_family() -> tuple[str, int | None]:
    """(``vendor_id``, ``cpu family``) of the first CPU in /proc/cpuinfo; ("", None) where it cannot
    be read (no /proc: not Linux)."""
    vendor, family = "", None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "vendor_id" and not vendor:
                    vendor = value.strip()
                elif key == "cpu family" and family is None:
                    family = int(value.strip())
                if vendor and family is not None:
                    break
    except (OSError, ValueError):
        return "", None
    return vendor, family


def own_blas_core() -> str | None:
    """The OpenBLAS core type whose kernels the FC GEMMs use (through :func:`._parallel.matmul` with
    ``own_blas=True``), or None for NumPy's OpenBLAS as it is.

    ``TR_MLIR_OWN_BLAS_CORETYPE`` when set; otherwise ``Haswell`` (AVX2 kernels) on an AMD Zen 4
    CPU (vendor AuthenticAMD, cpu family 0x19, :data:`ZEN4_FAMILY`) where NumPy's OpenBLAS chose
    one of Intel's AVX-512 core types. Zen 4 executes AVX-512 in two 256-bit halves: on this
    project's Zen 4 EPYC, OpenBLAS 0.3.31 picks SkylakeX, and its Haswell kernels ran the MLP's
    GEMMs 10-14% faster on one thread (200x784 @ 784x512: 1.52 vs 1.68 ms, 200x1024 @ 1024x256:
    0.99 vs 1.14, 200x512 @ 512x128: 0.25 vs 0.28; OPENBLAS_CORETYPE=Zen gave the same as
    Haswell, Cooperlake and SapphireRapids the same as SkylakeX). Zen 5 (family 0x1A) server and
    desktop parts have full 512-bit data paths and the rule does not apply: on a Zen 5 EPYC
    (2026-12-07, one thread) SkylakeX ran the MLP's whole forward and weight-gradient GEMMs at
    207-245 GFLOP/s and Haswell at 121-128, 1.7-1.9x slower (200x784 @ 784x1024: 1.52 vs 2.65 ms). Zen 5 parts with a 256-bit
    data path (the mobile ones) may set ``TR_MLIR_OWN_BLAS_CORETYPE=Haswell``. A fixed rule on
    the machine, not a timing, so a process's results do not depend on a measurement."""
    env = os.environ.get(ENV_OWN_BLAS)
    if env is not None:
        env = env.strip()
        return None if env in ("", "0", "native") else env
    try:
        lib = numpy_openblas()
        arch = str(lib.architecture or "").lower() if lib is not None else ""
    except (OSError, AttributeError):
        return None
    vendor, family = _cpu_vendor_family()
    return "Haswell" if (vendor == "AuthenticAMD" and family == ZEN4_FAMILY and arch in _AVX512_CORES) else None


def load_own_blas() -> tuple[int, bool, str] | bool:
    """A second instance of NumPy's OpenBLAS with the core type :func:`own_blas_core`, one
    thread: (address of its ``cblas_sgemm``, ILP64?, core name), or False. The library file is
    copied once into the compiled-kernel cache (:func:`._cc.cache_dir`; a second file makes a
    second instance, which reads ``OPENBLAS_CORETYPE`` and ``OPENBLAS_NUM_THREADS`` when it is
    loaded; both are set only around that load; a cache that cannot be written gives a copy in
    the process's private directory, :func:`._cc.cached_file`). NumPy's own OpenBLAS is left as
    it is."""
    core = own_blas_core()
    if not core:
        return False
    try:
        import hashlib
        import shutil

        from . import _cc

        lib = numpy_openblas()
        if lib is None or "numpy" not in os.path.basename(os.path.dirname(lib.filepath)):
            return False
        src = lib.filepath
        st = os.stat(src)
        tag = hashlib.sha256(f"{src}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        # not named like an OpenBLAS: threadpoolctl must not find (and re-thread) this instance;
        # an unwritable cache gives a private copy (the same instance, so the same bits)
        target = _cc.cached_file(f"tr-mlir-blas-{tag}.so", lambda path: shutil.copyfile(src, path))
        saved = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")}
        try:
            os.environ["OPENBLAS_CORETYPE"] = core
            os.environ["OPENBLAS_NUM_THREADS"] = "1"
            lib = ctypes.CDLL(str(target), mode=os.RTLD_LOCAL | os.RTLD_NOW)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        name = None
        for sym in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "scipy_openblas_get_corename",
                    "openblas_get_corename"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                name = (fn() or b"").decode()
                break
        if name is None or name.lower() != core.lower():
            return False  # the copy did not take the core type (an OpenBLAS without DYNAMIC_ARCH)
        for sym, ilp64 in (("scipy_cblas_sgemm64_", True), ("cblas_sgemm64_", True), ("scipy_cblas_sgemm", False),
                           ("cblas_sgemm", False)):
            fn = getattr(lib, sym, None)
            if fn is not None:
                _own_lib.append(lib)  # keep it loaded
                return ctypes.cast(fn, ctypes.c_void_p).value, ilp64, name
    except Exception:  # noqa: BLE001 - any failure: NumPy's OpenBLAS for everything
        return False
    return False


_own_lib: list = []
