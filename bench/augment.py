"""Host augmentation throughput (issue 17): images/s of each ``tr_mlir.augment`` preset alone, and
of ``Task.fit`` epochs with and without augmentation (the prefetch thread overlaps it with the
step), with the machine's load average before and after.

    python -m bench.augment [--out bench/results/augment-<date>.md] [--mnist DIR] [--epochs 1]
                            [--repeats 5] [--cifar-samples 1280]

Workloads: the seed's MLP on MNIST with the ``mnist`` preset (RandomAffine) when ``--mnist``
(default ``/work/shared/data/mnist``) holds the files, else ``mlp_digits`` on digits with
``digits``; and ``resnet8_cifar`` with the ``cifar`` preset (crop 4 + flip) on ``--cifar-samples``
CIFAR-shaped images (synthetic: standard-normal pixels, random labels; the throughput of a step
does not depend on the values). Batch 128, momentum SGD, CPU; images/s counts training images
only (no validation).

Noise control (the machine is shared): the task without and the task with augmentation are
compiled once and warmed up, then their epochs alternate, ``--repeats`` pairs; the table gives
the median wall-clock images/s of each, the median over pairs of the with / without ratio (a pair
runs back to back, so slow drifts of the load cancel), and the process CPU time per image (all
threads: kernels, augmentation, Python), which other processes barely change.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np


def _rate(fn, n: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def _timed(fn) -> tuple[float, float]:
    """``(wall seconds, process CPU seconds)`` of ``fn()``."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _fit_pair(model: str, train: tuple[np.ndarray, np.ndarray], shape, classes: int, preset: str,
              epochs: int, repeats: int) -> list[dict]:
    """Interleaved Task.fit epochs without / with ``preset`` (module doc): one row per setting."""
    from tr_mlir import augment as A
    from tr_mlir.task import Task

    n = train[0].shape[0]
    tasks = []
    for aug in (None, preset):
        task = Task(model, shape, classes, 128, augment=None if aug is None else A.preset(aug))
        task.compile(n, None)
        task.fit(train, epochs=1)  # warm-up
        tasks.append(task)
    runs: list[list[tuple[float, float]]] = [[], []]
    for _ in range(repeats):
        for task, out in zip(tasks, runs):
            out.append(_timed(lambda task=task: task.fit(train, epochs=epochs)))
    images = epochs * n
    ratio = statistics.median(b[0] / a[0] for a, b in zip(*runs))  # wall time with / without
    return [{"model": model, "augment": aug, "train_images_per_s": images / statistics.median(w for w, _ in r),
             "cpu_us_per_image": 1e6 * statistics.median(c for _, c in r) / images,
             "time_vs_none": 1.0 if aug is None else ratio}
            for aug, r in zip((None, preset), runs)]


def measure(mnist: Path | None, epochs: int, repeats: int, cifar_samples: int = 1280) -> dict:
    """The benchmark's numbers (module doc) as a JSON-able dict."""
    from tr_mlir import augment as A
    from tr_mlir.data import load_dataset

    out: dict = {"load_before": list(os.getloadavg()), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    rng = np.random.default_rng(0)
    alone = []
    for name, shape in (("mnist", (28, 28, 1)), ("cifar", (32, 32, 3))):
        x = rng.standard_normal((128, *shape)).astype(np.float32)
        t = A.preset(name)
        g = np.random.default_rng(1)
        alone.append({"preset": name, "batch": list(x.shape),
                      "images_per_s": _rate(lambda: [t(x, g) for _ in range(20)], 20 * 128, repeats)})
    out["augment_alone"] = alone
    if mnist is not None and (mnist / "train-images-idx3-ubyte.gz").exists():
        ds, model, preset = load_dataset("mnist", mnist), "mlp", "mnist"
    else:
        ds, model, preset = load_dataset("digits"), "mlp_digits", "digits"
    fit = [dict(r, dataset=ds.name) for r in _fit_pair(model, (ds.train_x, ds.train_y), ds.input_shape,
                                                         ds.num_classes, preset, epochs, repeats)]
    if cifar_samples > 0:
        cx = rng.standard_normal((cifar_samples, 32, 32, 3)).astype(np.float32)
        cy = rng.integers(0, 10, cifar_samples)
        fit += [dict(r, dataset=f"cifar-shaped synthetic ({cifar_samples})")
                for r in _fit_pair("resnet8_cifar", (cx, cy), (32, 32, 3), 10, "cifar", epochs, repeats)]
    out["fit"] = fit
    out["load_after"] = list(os.getloadavg())
    return out


def markdown(r: dict) -> str:
    lines = [f"# Host augmentation throughput ({r['date']})", "",
             f"{r['cpus']} CPUs, Python {r['python']}, load average (1/5/15 min) before "
             f"{'/'.join(f'{v:.2f}' for v in r['load_before'])}, after {'/'.join(f'{v:.2f}' for v in r['load_after'])} "
             "(other sessions share the machine).", "",
             "| preset | batch (NHWC) | augmentation alone, images/s |", "|---|---|---:|"]
    lines += [f"| {a['preset']} | {a['batch']} | {a['images_per_s']:,.0f} |" for a in r["augment_alone"]]
    lines += ["", "| model | dataset | augment | Task.fit training images/s | epoch time vs none "
              "(median of pairs) | process CPU us / image |", "|---|---|---|---:|---:|---:|"]
    lines += [f"| {f['model']} | {f['dataset']} | {f['augment'] or 'none'} | {f['train_images_per_s']:,.0f} | "
              f"{f.get('time_vs_none', float('nan')):.3f} | {f.get('cpu_us_per_image', float('nan')):.1f} |"
              for f in r["fit"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write ``--out`` (markdown) and the same name with ``.json``."""
    p = argparse.ArgumentParser(prog="python -m bench.augment", description=__doc__.split("\n\n")[0])
    p.add_argument("--mnist", type=Path, default=Path("/work/shared/data/mnist"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cifar-samples", type=int, default=1280, help="0: skip the resnet8_cifar workload")
    p.add_argument("--out", type=Path, default=Path("bench/results") / f"augment-{_dt.date.today()}.md")
    a = p.parse_args(argv)
    r = measure(a.mnist, a.epochs, a.repeats, a.cifar_samples)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(markdown(r))
    a.out.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n")
    print(markdown(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
