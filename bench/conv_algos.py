"""``python -m bench.conv_algos``: im2col vs Winograd per conv direction (issue 13's cost table).

For each 3x3 stride-1 conv of CIFAR ResNet-18 at batch 64 (64@32x32, 128@16x16, 256@8x8,
512@4x4, C = K, padding 1) and each direction (``fwd``, ``dgrad``, ``wgrad``), times today's
im2col path of :mod:`tr_mlir.lowering.cpu.conv` against ``winograd_2x2_3x3`` and
``winograd_4x4_3x3`` (:mod:`tr_mlir.lowering.cpu.winograd`) on ``--threads`` kernel threads
(default 2): the three algorithms interleaved call by call, ``--repeats`` rounds, medians, with
the load average before and after. Prints one markdown table (ms and speed-up over im2col) and
writes it with the raw numbers to ``--out`` (``.md`` and ``.json``, default
``bench/results/conv-algos-<date>``).

``--error`` instead prints the max relative error of each algorithm against a float64 direct
conv (:func:`error_table`; the table of :mod:`~tr_mlir.lowering.cpu.winograd`'s docstring).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

SHAPES = ((64, 32), (128, 16), (256, 8), (512, 4))
"""(channels, map size) of CIFAR ResNet-18's 3x3 stride-1 convs."""

ALGOS = ("im2col", "winograd_2x2_3x3", "winograd_4x4_3x3")
DIRECTIONS = ("fwd", "dgrad", "wgrad")


def _setup(n: int, c: int, hw: int, seed: int = 0):
    from tr_mlir.lowering.cpu import conv as C
    from tr_mlir.lowering.cpu import winograd as W

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, hw, hw, c)).astype(np.float32)
    w = (rng.standard_normal((c, 3, 3, c)) / np.sqrt(9 * c)).astype(np.float32)
    g = C.conv_geom(x.shape, w.shape, 3, 1, 1, 1)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    sizes = C.conv_workspace_sizes(g, x16=False, w16=False, y16=False, phases=("fwd", "wgrad", "dgrad"))
    for v in W.VARIANTS:
        for k, e in W.workspace_sizes(g, v, x16=False, w16=False, y16=False).items():
            sizes[k] = max(sizes.get(k, 0), e)
    ws = {k: np.zeros(e, np.float32) for k, e in sizes.items()}
    return g, x, w, dy, ws


def _call(g, x, w, dy, ws, out, algo: str, direction: str):
    from tr_mlir.lowering.cpu import conv as C

    a = None if algo == "im2col" else algo
    if direction == "fwd":
        return lambda: C.conv_forward(x, w, out["y"], g, ws, algo=a)
    if direction == "dgrad":
        return lambda: C.conv_dgrad(dy, w, out["dx"], g, ws, algo=a)
    return lambda: C.conv_wgrad(dy, x, out["dw"], g, ws, algo=a)


def measure(batch: int, threads: int, repeats: int, shapes=SHAPES) -> dict:
    """Median ms per (shape, direction, algorithm) (module doc), as a JSON-able dict."""
    from threadpoolctl import threadpool_limits

    res: dict = {"batch": batch, "threads": threads, "repeats": repeats, "load_before": list(os.getloadavg()),
                 "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "rows": []}
    with threadpool_limits(threads):
        for c, hw in shapes:
            g, x, w, dy, ws = _setup(batch, c, hw)
            out = {"y": np.empty(g.y_shape, np.float32), "dx": np.empty(g.x_shape, np.float32),
                   "dw": np.empty(g.w_shape, np.float32)}
            for d in DIRECTIONS:
                calls = {a: _call(g, x, w, dy, ws, out, a, d) for a in ALGOS}
                for f in calls.values():  # warm-up (and compile)
                    f()
                times: dict[str, list[float]] = {a: [] for a in ALGOS}
                for _ in range(repeats):
                    for a, f in calls.items():
                        t0 = time.perf_counter()
                        f()
                        times[a].append(time.perf_counter() - t0)
                res["rows"].append({"c": c, "hw": hw, "direction": d,
                                    "ms": {a: 1e3 * statistics.median(v) for a, v in times.items()}})
    res["load_after"] = list(os.getloadavg())
    return res


def markdown(res: dict) -> str:
    """One table: ms per algorithm and the speed-up of each Winograd variant over im2col."""
    la, lb = res["load_before"], res["load_after"]
    lines = [f"Conv algorithms, batch {res['batch']}, {res['threads']} threads, median of {res['repeats']} "
             f"interleaved rounds, {res['date']}, load {la[0]:.2f} -> {lb[0]:.2f}", "",
             "| layer (C=K @ HxW) | direction | im2col ms | F(2x2,3x3) ms | F(4x4,3x3) ms | F2 speed-up "
             "| F4 speed-up | best |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        ms = r["ms"]
        best = min(ms, key=ms.get)
        lines.append(f"| {r['c']} @ {r['hw']}x{r['hw']} | {r['direction']} | {ms['im2col']:.2f} | "
                     f"{ms['winograd_2x2_3x3']:.2f} | {ms['winograd_4x4_3x3']:.2f} | "
                     f"{ms['im2col'] / ms['winograd_2x2_3x3']:.2f}x | {ms['im2col'] / ms['winograd_4x4_3x3']:.2f}x | "
                     f"{best} |")
    return "\n".join(lines) + "\n"


def error_table(points: dict | None = None, n: int = 2) -> str:
    """Max relative error (max |y - y64| / max |y64|) of the forward of each algorithm against a
    float64 direct conv, fp32, standard normal data, for the ResNet-18 CIFAR shapes (p = 1);
    ``points``: extra F(4x4, 3x3) point sets to compare (name -> points)."""
    from tr_mlir.lowering.cpu import winograd as W

    rows = ["| layer | im2col | F(2x2,3x3) | F(4x4,3x3) " + "".join(f"| F4 {k} " for k in points or {}) + "|",
            "|---|---|---|---" + "|---" * len(points or {}) + "|"]
    for c, hw in SHAPES:
        g, x, w, _, ws = _setup(n, c, hw, seed=1)
        w = np.random.default_rng(2).standard_normal(w.shape).astype(np.float32)
        xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
        ref = sum(np.einsum("nhwc,kc->nhwk", xp[:, i:i + hw, j:j + hw], w[:, i, j].astype(np.float64))
                  for i in range(3) for j in range(3))
        cells = []
        for algo in ALGOS:
            y = np.empty(g.y_shape, np.float32)
            _call(g, x, w, None, ws, {"y": y}, algo, "fwd")()
            cells.append(np.abs(y - ref).max() / np.abs(ref).max())
        for pts in (points or {}).values():
            saved = W.POINTS[4]
            W.POINTS[4] = pts
            W.transform.cache_clear()
            try:
                y = np.empty(g.y_shape, np.float32)
                pl = W.fwd_plan(g, 4)
                u = np.empty(pl.u_shape, np.float32)
                W.numpy_weights(pl, w, u)
                W.numpy_forward(pl, x, u, y, np.empty(pl.slot_elements, np.float32))
                cells.append(np.abs(y - ref).max() / np.abs(ref).max())
            finally:
                W.POINTS[4] = saved
                W.transform.cache_clear()
        rows.append(f"| {c} @ {hw}x{hw} | " + " | ".join(f"{e:.1e}" for e in cells) + " |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    from fractions import Fraction as Fr

    p = argparse.ArgumentParser(prog="python -m bench.conv_algos", description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--out", type=Path, default=Path("bench/results") / f"conv-algos-{_dt.date.today()}")
    p.add_argument("--error", action="store_true", help="print the error table instead (module doc)")
    args = p.parse_args(argv)
    if args.error:
        print(error_table({"0,+-1,+-2": (Fr(0), Fr(1), Fr(-1), Fr(2), Fr(-2)),
                           "0,+-1,+-1/2": (Fr(0), Fr(1), Fr(-1), Fr(1, 2), Fr(-1, 2))}), end="")
        return 0
    res = measure(args.batch, args.threads, args.repeats)
    md = markdown(res)
    print(md, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(md, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
