"""Three SGD steps of a zoo model under given environment switches, for the tests that compare a
training run with and without a replay mechanism to the bit (prepared launches, replay groups)."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

import tr_mlir
from tr_mlir.zoo import MODELS


def three_sgd_steps(model: str, batch: int, threads: int, monkeypatch, *, fuse: bool = False, **env: str):
    """``(task, losses, parameters and buffers)`` after three SGD steps (momentum 0.9, lr 0.05,
    seed 3) of zoo model ``model`` (``fuse``: compiled with the fusions) on random NHWC fp32
    batches of ``batch`` images and 10 classes, on ``threads`` kernel threads, with the
    environment variables ``env`` set."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = MODELS[model]
    shape = spec.input_shape
    task = tr_mlir.Task(spec.blueprint(10), shape, 10, batch, optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9),
                        seed=3, fuse=fuse)
    rng = np.random.default_rng(5)
    with threadpool_limits(threads):
        losses = [task.train_step(rng.standard_normal((batch, *shape)).astype(np.float32),
                                  rng.integers(0, 10, batch).astype(np.int32)) for _ in range(3)]
    return task, losses, [a.copy() for _, a in (*task.parameters(), *task.buffers())]


def assert_same_training(on: tuple, off: tuple) -> None:
    """Two :func:`three_sgd_steps` results ``(losses, parameters and buffers, ...)`` the same to
    the bit."""
    assert on[0] == off[0]
    for i, (a, b) in enumerate(zip(on[1], off[1])):
        assert a.tobytes() == b.tobytes(), f"parameter or buffer #{i}"
