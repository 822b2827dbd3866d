"""Host augmentation throughput (issue 17): images/s of each ``tr_mlir.augment`` preset alone, and
of ``Task.fit`` epochs with and without augmentation (the prefetch thread overlaps it with the
step), with the machine's load average before and after.

    python -m bench.augment [--out bench/results/augment-<date>.md] [--mnist DIR] [--epochs 2]

Training is the seed's MLP on MNIST when ``--mnist`` (default ``/work/shared/data/mnist``) holds
the files, else ``mlp_digits`` on digits; batch 128, momentum SGD, CPU. Each number is the median
of ``--repeats`` runs; images/s counts training images only (no validation).
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


def measure(mnist: Path | None, epochs: int, repeats: int) -> dict:
    """The benchmark's numbers (module doc) as a JSON-able dict."""
    from tr_mlir import augment as A
    from tr_mlir.data import load_dataset
    from tr_mlir.task import Task

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
    fit = []
    for aug in (None, preset):
        task = Task(model, ds.input_shape, ds.num_classes, 128, augment=None if aug is None else A.preset(aug))
        task.compile(ds.num_train, ds.num_val)
        task.fit((ds.train_x, ds.train_y), epochs=1)  # warm-up
        rate = _rate(lambda: task.fit((ds.train_x, ds.train_y), epochs=epochs), epochs * ds.num_train, repeats)
        fit.append({"model": model, "dataset": ds.name, "augment": aug, "train_images_per_s": rate})
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
    lines += ["", "| model | dataset | augment | Task.fit training images/s |", "|---|---|---|---:|"]
    lines += [f"| {f['model']} | {f['dataset']} | {f['augment'] or 'none'} | {f['train_images_per_s']:,.0f} |"
              for f in r["fit"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write ``--out`` (markdown) and the same name with ``.json``."""
    p = argparse.ArgumentParser(prog="python -m bench.augment", description=__doc__.split("\n\n")[0])
    p.add_argument("--mnist", type=Path, default=Path("/work/shared/data/mnist"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("bench/results") / f"augment-{_dt.date.today()}.md")
    a = p.parse_args(argv)
    r = measure(a.mnist, a.epochs, a.repeats)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(markdown(r))
    a.out.with_suffix(".json").write_text(json.dumps(r, indent=1) + "\n")
    print(markdown(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
