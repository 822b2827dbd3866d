"""``python -m bench``: the tr-mlir benchmark (see bench/README.md).

Run from the repository root::

    python -m bench --quick        # about 6 minutes on 2 cores (make bench)
    python -m bench                # the full run
    python -m bench --smoke        # seconds: every section on the smallest model (tests)

Writes ``<out>/<date>.json`` and ``<out>/<date>.md`` (default ``bench/results``) and prints the
markdown. When ``OPENBLAS_CORETYPE`` or ``OPENBLAS_L2_SIZE`` is set (this machine sets them for old
OpenBLAS builds; they slow a current one down), the benchmark re-executes itself once without
both, for this command alone, and records which kernel OpenBLAS then runs (threadpoolctl).
"""

from __future__ import annotations

import os
import sys

BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
_MARK = "TR_MLIR_BENCH_UNSET"


def reexec_without_blas_env(argv: list[str], module: str = "bench") -> None:
    """Re-exec ``python -m <module> <argv>`` (``bench`` or one of its entry points, such as
    ``bench.scaling``) without :data:`BLAS_ENV`, before NumPy is imported; nothing when neither
    is set, ``--keep-blas-env`` is given or this process is already the re-executed one."""
    if "--keep-blas-env" in argv or _MARK in os.environ:
        return
    set_vars = [k for k in BLAS_ENV if k in os.environ]
    if not set_vars:
        return
    env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV}
    env[_MARK] = ",".join(set_vars)
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)


if __name__ == "__main__":
    reexec_without_blas_env(sys.argv[1:])
    from bench.cli import main

    sys.exit(main(sys.argv[1:]))
