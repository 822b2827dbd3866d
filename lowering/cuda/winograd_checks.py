"""Checks of the CUDA Winograd convolutions (:mod:`tr_mlir.lowering.cuda.winograd`) on a backend's device.

:func:`run` runs forward, weight gradient and input gradient of one conv as a Winograd variant through
a :class:`~tr_mlir.lowering.cuda.backend.CudaBackend` (a GPU, or the CPU emulator), with workspaces of
exactly the CUDA rule's sizes filled with NaN (a read of scratch never written shows), and checks
that the Winograd path ran. :func:`check` runs :data:`GEOMS` x variants x (fp32, fp16), and for fp32
the input gradient added into a random dx (``conv_bwd``'s ``dx_acc``), against the CPU im2col conv (:mod:`tr_mlir.lowering.cpu.conv`, fp32, on the fp16-rounded inputs for fp16) within
the CPU module's bound (:data:`tr_mlir.lowering.cpu.winograd.RTOL` of max |ref|, plus for fp16 the
fp16 rounding of each result, 2^-11 relative). Used by ``tests/test_gpu_winograd.py`` (emulator)
and ``scripts/gpu_smoke.py`` (a real GPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tr_mlir.lowering.cpu import conv as cpu_conv
from tr_mlir.lowering.cpu import winograd as cpu_winograd
from tr_mlir.lowering.cuda import winograd

GEOMS: tuple[tuple[int, int, int, int, int, int], ...] = (
    (2, 4, 4, 5, 8, 1),    # n, h, w, c, k, p: a 4x4 map, one F(4x4) tile per image
    (2, 7, 7, 5, 8, 0),    # 7x7 without padding: partial edge tiles
    (1, 7, 4, 3, 1, 1),    # non-square, one output channel
    (3, 6, 5, 1, 3, 1),    # one input channel
    (1, 8, 8, 64, 64, 1),  # 64 channels
)
"""Conv geometries (batch, height, width, in and out channels, padding) of :func:`check`."""


def on_device(backend: Any, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Copies of the host ``arrays`` in one new arena of ``backend``'s device (name -> device view)."""
    total = sum(-(-a.nbytes // 256) * 256 for a in arrays.values()) + 256
    arena = backend.allocate(total)
    out, off = {}, 0
    for k, a in arrays.items():
        v = backend.view(arena, off, a.dtype, a.shape)
        v[...] = a
        out[k] = v
        off += -(-a.nbytes // 256) * 256
    return out


def run(backend: Any, x: np.ndarray, w: np.ndarray, dy: np.ndarray, g: cpu_conv.ConvGeom, variant: str,
        out_dtype: Any = np.float32, dx0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host copies of y (N, Ho, Wo, K), dx (N, H, W, C), dw (K, 3, 3, C) of ``out_dtype`` from x, w, dy
    (NHWC / KRSC, fp32 or fp16) as ``variant`` on ``backend`` (``dx0``: dx accumulated onto it).
    Raises ``AssertionError`` when the Winograd path did not write its U / dU workspace."""
    ops = backend.ops
    arrays = {"x": x, "w": w, "dy": dy, "y": np.zeros(g.y_shape, out_dtype),
              "dx": np.zeros(g.x_shape, out_dtype) if dx0 is None else dx0.astype(out_dtype),
              "dw": np.zeros(g.w_shape, out_dtype)}
    arrays |= {f"ws_{k}": np.full(n, np.nan, np.float32) for k, n in winograd.workspace_sizes(g, variant).items()}
    d = on_device(backend, arrays)
    ws = {"wbuf": d["ws_wbuf"], "col": d["ws_col"]}
    ops.conv_forward(d["x"], d["w"], d["y"], g, ws, algo=variant)
    ops.conv_wgrad(d["dy"], d["x"], d["dw"], g, ws, algo=variant)
    ops.conv_dgrad(d["dy"], d["w"], d["dx"], g, ws, accumulate=dx0 is not None, algo=variant)
    if np.isnan(backend.to_host(d["ws_wbuf"])).any():
        raise AssertionError(f"the Winograd path ({variant}) did not run: U / dU not written")
    return tuple(backend.to_host(d[k]) for k in ("y", "dx", "dw"))  # type: ignore[return-value]


def reference(x: np.ndarray, w: np.ndarray, dy: np.ndarray, g: cpu_conv.ConvGeom
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """y, dx, dw of the CPU im2col conv in fp32 on the fp32 values of x, w, dy."""
    x32, w32, dy32 = (a.astype(np.float32) for a in (x, w, dy))
    sizes = cpu_conv.conv_workspace_sizes(g, x16=False, w16=False, y16=False)
    ws = {k: np.zeros(n, np.float32) for k, n in sizes.items()}
    y, dx, dw = np.empty(g.y_shape, np.float32), np.empty(g.x_shape, np.float32), np.empty(g.w_shape, np.float32)
    cpu_conv.conv_forward(x32, w32, y, g, ws)
    bws = {k: np.zeros(n, np.float32) for k, n in cpu_conv.conv_workspace_sizes(
        g, x16=False, w16=False, y16=False, phases=("wgrad", "dgrad")).items()}
    cpu_conv.conv_wgrad(dy32, x32, dw, g, bws)
    cpu_conv.conv_dgrad(dy32, w32, dx, g, bws)
    return y, dx, dw


def check(backend: Any, seed: int = 0) -> list[dict[str, Any]]:
    """One row per (geometry, variant, dtype, output): ``case`` (a label), ``error`` (the largest
    ratio of |got - ref| to its bound, module doc) and ``ok`` (error <= 1)."""
    rows = []
    rng = np.random.default_rng(seed)
    for geom in GEOMS:
        n, h, wd, c, k, p = geom
        x = rng.standard_normal((n, h, wd, c)).astype(np.float32)
        w = rng.standard_normal((k, 3, 3, c)).astype(np.float32)
        g = cpu_conv.conv_geom(x.shape, w.shape, 3, 1, p, 1)
        dy = rng.standard_normal(g.y_shape).astype(np.float32)
        for variant in sorted(cpu_winograd.VARIANTS):
            rtol = cpu_winograd.RTOL[cpu_winograd.VARIANTS[variant]]
            for dt in (np.dtype(np.float32), np.dtype(np.float16)):
                xs, ws_, dys = x.astype(dt), w.astype(dt), dy.astype(dt)
                got = run(backend, xs, ws_, dys, g, variant, dt)
                ref = reference(xs, ws_, dys, g)
                for name, a, b in zip(("y", "dx", "dw"), got, ref):
                    bound = rtol * np.abs(b).max() + (2.0 ** -11 * np.abs(b) if dt != np.float32 else 0.0)
                    err = float((np.abs(a.astype(np.float64) - b) / (bound * 1.001 + 1e-30)).max())
                    rows.append({"case": f"winograd {variant} n{n}h{h}w{wd}c{c}k{k}p{p} {dt.name} {name}",
                                 "error": err, "ok": bool(err <= 1.0)})
                if dt == np.float32:  # the input gradient added into dx (conv_bwd's dx_acc, memplan-fuse-grad-acc)
                    dx0 = rng.standard_normal(g.x_shape).astype(np.float32)
                    acc = run(backend, xs, ws_, dys, g, variant, dt, dx0)[1]
                    want = ref[1].astype(np.float64) + dx0
                    err = float((np.abs(acc - want) / (rtol * np.abs(ref[1]).max() * 1.001 + 2.0 ** -23 * np.abs(want)
                                                       + 1e-30)).max())
                    rows.append({"case": f"winograd {variant} n{n}h{h}w{wd}c{c}k{k}p{p} float32 dx+=",
                                 "error": err, "ok": bool(err <= 1.0)})
    return rows
