"""One rank of the data-parallel numerics test (``tests/test_gloo_dp.py``), launched twice with the
torchrun environment (RANK, WORLD_SIZE, ...), or alone (``WORLD_SIZE`` unset) as a reference.

``python tests/gloo_dp_worker.py OUT{rank}.npz B STEPS`` trains each model of :data:`MODELS` with a
:class:`tr_mlir.Task` of batch ``B`` per process for ``STEPS`` steps on the data of :func:`data`
(rank r of N takes rows ``r, r + N, ...`` of each global batch of ``N*B`` rows, the samples one
process of batch ``N*B`` takes for that step) and writes the step losses, parameters and buffers.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import tr_mlir

MODELS = {"mlp_digits": (8, 8, 1), "lenet5": (32, 32, 1), "resnet_tiny": (8, 8, 1)}
"""An MLP, LeNet-5 (conv, pool, tanh) and a residual net with batch norm."""


def data(shape: tuple[int, int, int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` seeded samples: NHWC float32 inputs and labels in [0, 10)."""
    rng = np.random.default_rng(7)
    return rng.standard_normal((n, *shape), dtype=np.float32), rng.integers(0, 10, n)


def train(name: str, batch: int, steps: int) -> dict[str, np.ndarray]:
    """Train ``name`` with batch ``batch`` per process; returns losses, parameters, buffers."""
    task = tr_mlir.Task(name, MODELS[name], 10, batch, seed=3,
                        optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    world, rank = task.world_size, task.rank
    x, y = data(MODELS[name], batch * world * steps)
    losses = []
    for s in range(steps):
        rows = slice(s * batch * world, (s + 1) * batch * world)
        losses.append(task.train_step(x[rows][rank::world], y[rows][rank::world]))
    out = {f"{name}/loss": np.array(losses, np.float64)}
    out.update({f"{name}/param/{k}": v for k, v in task.parameters()})
    out.update({f"{name}/buffer/{k}": v for k, v in task.buffers()})
    out[f"{name}/world"] = np.array([world, rank])
    return out


def train_averaged(name: str, batch: int, steps: int, world: int = 2) -> dict[str, np.ndarray]:
    """The seed's data-parallel semantics simulated in one process (reference for a net with batch
    norm, whose forward statistics are per rank): ``world`` Tasks of batch ``batch`` each take
    their rows of the step, then their parameters, momenta and BN running statistics are replaced
    by the mean over the Tasks (SGD with momentum and weight decay is linear in the gradient, so
    this is the step of the averaged gradient; the running statistics are averaged as STATS_COMM
    does). Losses: the mean of the Tasks' losses (DEEP_COMM averages R_RESULT)."""
    tasks = [tr_mlir.Task(name, MODELS[name], 10, batch, seed=3,
                          optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
             for _ in range(world)]
    x, y = data(MODELS[name], batch * world * steps)
    losses = []
    for s in range(steps):
        rows = slice(s * batch * world, (s + 1) * batch * world)
        losses.append(np.mean([t.train_step(x[rows][r::world], y[rows][r::world]) for r, t in enumerate(tasks)]))
        snaps = [t._snapshot() for t in tasks]
        mean = {k: (np.mean([sn[k] for sn in snaps], axis=0, dtype=np.float64).astype(v.dtype)
                    if k.startswith(("param/", "state/", "buffer/")) else v) for k, v in snaps[0].items()}
        for t in tasks:
            t._restore(mean)
    out = {f"{name}/loss": np.array(losses, np.float64)}
    out.update({f"{name}/param/{k}": v for k, v in tasks[0].parameters()})
    out.update({f"{name}/buffer/{k}": v for k, v in tasks[0].buffers()})
    return out


def main(argv: list[str]) -> int:
    path, batch, steps = argv[0].format(rank=os.environ.get("RANK", "0")), int(argv[1]), int(argv[2])
    out: dict[str, np.ndarray] = {}
    for name in MODELS:
        out.update(train(name, batch, steps))
    np.savez(path, **out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
