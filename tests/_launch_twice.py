"""Two launches of a bound kernel with its inputs changed in between, for the tests that compare
a prepared launch with its kernel function to the bit (tests/test_prepared_launches.py,
tests/test_prepared_norm.py)."""

from __future__ import annotations

from collections.abc import Callable

from threadpoolctl import threadpool_limits

from tr_mlir.lowering.cpu import _prepared
from tr_mlir.lowering.cpu.registry import PreparedLaunch


def launch_twice(launch: PreparedLaunch, arrays: dict, threads: int, prepared: bool, monkeypatch,
                 next_step: Callable[[dict], None]) -> PreparedLaunch:
    """Run ``launch`` (bound to ``arrays``) on ``threads`` kernel threads, its prepared call on
    or off (``TR_MLIR_PREPARE``), then ``next_step(arrays)`` and the launch again: the second
    launch reruns the same call, so a stale prepared piece shows up as a difference."""
    assert isinstance(launch, PreparedLaunch), launch
    monkeypatch.setenv(_prepared.ENV_PREPARE, "1" if prepared else "0")
    with threadpool_limits(threads):
        launch()
        next_step(arrays)
        launch()
    return launch
