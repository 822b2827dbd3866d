"""pytest configuration shared by the suite.

The ``slow`` marker: tests that take more than a few seconds each (the largest models, e.g. the
ResNet-101/152 compiles) are skipped by default so the suite stays fast; run them with
``pytest --runslow`` (or select only them with ``pytest --runslow -m slow``).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow (the largest models)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few seconds; skipped unless --runslow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
