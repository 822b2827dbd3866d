"""tr-mlir benchmarks (``python -m bench``; see bench/README.md): compile time per pass and the
tr-opt round trip (:mod:`bench.compile_time`), CPU training throughput against PyTorch eager
(:mod:`bench.throughput`, networks in :mod:`bench.models`), memory against a liveness bound and
PyTorch's peak (:mod:`bench.memory`), the GPU comparison where a GPU exists (:mod:`bench.gpu`),
the report (:mod:`bench.report`) and a per-kernel profile of one step (:mod:`bench.profile`).

A plain package of the source checkout (run from the repository root), not part of the wheel.
"""
