"""pytest configuration shared by the suite.

The ``slow`` marker: tests that take more than a few seconds each (the largest models, e.g. the
ResNet-101/152 compiles) are skipped by default so the suite stays fast; run them with
``pytest --runslow`` (or select only them with ``pytest --runslow -m slow``).

The ``gpu`` marker: tests that need a CUDA GPU (CuPy and a device); skipped, with the reason,
on machines without one (CI). The CPU checks of the GPU backend (NVRTC compiles, the kernel
emulator, capture safety) are not marked and run everywhere.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow (the largest models)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds; skipped unless --runslow")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (CuPy and a device); skipped without one")


def _skip_gpu_tests(items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    from tr_mlir.lowering.cuda.backend import cuda_available

    ok, why = cuda_available()
    if not ok:
        skip = pytest.mark.skip(reason=f"gpu: {why}")
        for item in gpu_items:
            item.add_marker(skip)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _skip_gpu_tests(items)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
