"""The CUDA Winograd convolutions: F(2x2, 3x3) and F(4x4, 3x3) for 3x3, stride-1, dense convs, in all
three directions, as the CPU's :mod:`tr_mlir.lowering.cpu.winograd` (algorithm, transform matrices,
interpolation points, error bound: its module doc).

Each pass is a few launches over the whole batch, image chunk by image chunk (:func:`chunk_images`):

* forward (:func:`forward`): ``tr_wino_wt`` (U = G w G^T into ``wbuf``), then per chunk
  ``tr_wino_in`` (V = B^T d B into ``col``), alpha^2 GEMMs ``M[xi] (P x K) = V[xi] (P x C) @ U[xi]^T``
  (one batched ``tr_gemm`` launch, the backend's GEMM) and ``tr_wino_out`` (y = A^T M A);
* input gradient (:func:`dgrad`): the same on dy zero-padded by 2 - p with the filters rotated by
  180 degrees (``tr_wino_wt`` with ``flip``), ``M[xi] (P x C) = V[xi] (P x K) @ U[xi]``; reads only dy
  and w (dx may be x's buffer), and ``accumulate`` adds into dx (``tr_wino_out``'s beta);
* weight gradient (:func:`wgrad`): per chunk ``tr_wino_in`` of x and of dy in its adjoint mode
  (dM = A dy A^T), ``dU[xi] (K x C) += dM[xi]^T @ V[xi]`` (the GEMM's split-K atomic mode into a
  zeroed fp32 dU), then ``tr_wino_dwt`` (dw = G^T dU G).

Layouts as the CPU path: x (N, H, W, C), w / dw (K, 3, 3, C), y / dy (N, Ho, Wo, K); U / dU
(alpha^2, K, C) fp32 (the CPU forward stores its U as (alpha^2, C, K) for an NN GEMM; here every
direction keeps (K, C)), V (alpha^2, P, Cin) and M (alpha^2, P, Cout) fp32 for the P tiles of a chunk.
fp16 operands (AMP) are read and written in place by the transforms (``ldf`` / ``stf``): every
transform, GEMM and sum is fp32 and each result is rounded to fp16 once, so unlike the CPU path no
fp32 copies of x, w, y or dw are needed. Workspaces (:func:`workspace_sizes`, fp32 elements):
``wbuf`` holds U / dU, ``col`` one chunk's V then M (or dM).

Batch-norm statistics (``conv_fwd``'s ``sum`` / ``sq_sum`` under ``bn_stats``,
:mod:`tr_mlir.lowering.cpu.conv_stats`): the forward reduces each chunk's output right after its
``tr_wino_out``, while the chunk is in L2 (``tr_colstats_part``: per channel float64 sums shifted
by the chunk's first output pixel, a fixed number of parts per chunk, no atomics) into float64
{count, mean, M2} parts in the ``tmp`` workspace (:func:`stats_workspace`, planned for every
Winograd forward: :func:`ws_fwd_cuda`), and ``tr_colstats_merge`` merges them into one part per
chunk (Chan, Golub and LeVeque's pairwise update, a fixed order); after the last chunk it merges
the chunks' parts and rounds ``sum`` and ``sq_sum`` to fp32 once, so they are the same bits on
every run. The implicit-GEMM forward does the same over the whole y after the conv (one chunk;
:meth:`~tr_mlir.lowering.cuda.ops.GpuOps.output_stats`), a separate pass over y.

The kernels use no barriers (one thread per tile-channel or filter-channel pair), so the CPU emulator
(:class:`~tr_mlir.lowering.cuda.emulator.EmulatedDevice`) runs them directly; the weight gradient's
fp32 atomic adds make its last bits depend on the order of the GEMM's K-splits on a GPU, as the
implicit-GEMM weight gradient's do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tr_mlir.lowering.cpu import conv_stats
from tr_mlir.lowering.cpu._util import F32, take
from tr_mlir.lowering.cpu.conv import ConvGeom, conv_geom
from tr_mlir.lowering.cpu.conv import ws_bwd_cuda as implicit_ws_bwd
from tr_mlir.lowering.cpu.registry import ArrayInfo
from tr_mlir.lowering.cpu.winograd import VARIANTS, Plan, applicable, dgrad_plan, fwd_plan, variant_tile

if TYPE_CHECKING:
    from tr_mlir.lowering.cuda.ops import GpuOps

CUDA_CHUNK = 1 << 24
"""Target fp32 elements of one chunk's V and M (64 MiB): bounds ``col`` for large batches."""


def variant_for(g: ConvGeom, algo: str | None) -> str | None:
    """The Winograd variant conv ``g`` runs as on CUDA for kernel param ``algo`` (an entry of
    :data:`~tr_mlir.lowering.cpu.winograd.VARIANTS` on a conv it applies to), else None (the
    implicit-GEMM path: any other value, ``"auto"`` and None included)."""
    return algo if algo in VARIANTS and applicable(g) else None


def pick(specific: str | None, general: str | None) -> str | None:
    """A direction's algorithm: its own param (``algo_dgrad`` / ``algo_wgrad``) unless absent or
    ``"auto"``, else the conv's ``algo``."""
    return specific if specific not in (None, "auto") else general


def chunk_images(pl: Plan) -> int:
    """Images per chunk of plan ``pl``: alpha^2 * tiles * (cin + cout) elements of V and M at most
    :data:`CUDA_CHUNK` (at least one image)."""
    per = pl.alpha ** 2 * pl.th * pl.tw * (pl.cin + pl.cout)
    return max(1, min(pl.n, CUDA_CHUNK // per))


def _col_elements(pl: Plan) -> int:
    return pl.alpha ** 2 * chunk_images(pl) * pl.th * pl.tw * (pl.cin + pl.cout)


def workspace_sizes(g: ConvGeom, variant: str, phases: tuple[str, ...] = ("fwd", "wgrad", "dgrad")
                    ) -> dict[str, int]:
    """fp32 elements per workspace name of the CUDA ``phases`` of conv ``g`` as ``variant``:
    ``wbuf`` U or dU (alpha^2 K C), ``col`` one chunk's V and M (:func:`chunk_images`). Independent
    of the dtypes (fp16 operands are read in place). ``ValueError`` for an unknown variant."""
    m = variant_tile(variant)
    col = max(_col_elements(dgrad_plan(g, m) if ph == "dgrad" else fwd_plan(g, m)) for ph in phases)
    return {"wbuf": (m + 2) ** 2 * g.k_out * g.c, "col": col}


STATS_BLOCKS = 256
"""Blocks one ``tr_colstats_part`` launch (one chunk of output) aims for: about two per H100 SM."""


def stats_layout(n: int, k: int, images: int, pixels: int) -> tuple[int, int]:
    """``(parts per chunk, parts)`` of the batch-norm statistics of an output of ``n`` images of
    ``pixels`` pixels and ``k`` channels reduced in chunks of ``images`` images (module doc): per
    chunk :data:`STATS_BLOCKS` ``tr_colstats_part`` blocks in all (32 channels each), at least 64
    rows (8 per thread) a part, written to the first parts; with more than one chunk, each chunk's
    parts merged into one part of its own after them."""
    cb = -(-int(k) // 32)
    splits = max(1, min(-(-STATS_BLOCKS // cb), -(-int(images) * int(pixels) // 64), 65535))
    chunks = -(-int(n) // int(images))
    return splits, splits + (chunks if chunks > 1 else 0)


def stats_workspace(g: ConvGeom, variant: str | None) -> int:
    """fp32 elements of the ``tmp`` workspace holding the statistics parts of conv ``g``'s output
    (:func:`stats_layout`; per part ``{count, mean, M2}`` float64 for each of the K channels, two
    fp32 elements each): chunks of :func:`chunk_images` for a Winograd ``variant``, one chunk of
    the whole batch for None (the implicit GEMM). ``ValueError`` for an unknown variant."""
    images = g.n if variant is None else chunk_images(fwd_plan(g, variant_tile(variant)))
    return stats_layout(g.n, g.k_out, images, g.win.ho * g.win.wo)[1] * 3 * g.k_out * 2


def _merge(into: dict[str, int], sizes: Mapping[str, int]) -> None:
    for k, v in sizes.items():
        into[k] = max(into.get(k, 0), v)


def ws_fwd_cuda(arrays: dict[str, ArrayInfo], *, k: int, s: int = 1, p: int = 0, groups: int = 1,
                algo: str | None = None, bn_stats: bool = False, **_: Any) -> dict[str, ArrayInfo]:
    """The CUDA forward's workspaces (a ``target_workspace_fns[CUDA]`` rule of ``conv_fwd``): none
    for the implicit GEMM, :func:`workspace_sizes` when ``algo`` selects Winograd; and ``tmp`` for
    the parts of the output's batch-norm statistics (:func:`stats_workspace`) for every Winograd
    forward and for an implicit-GEMM one that writes them (``bn_stats``, or ``sum`` among
    ``arrays``). The Winograd forward plans ``tmp`` whether or not it writes statistics: the
    planner sizes a node's workspaces before ``memplan-fuse-bn-stats`` sets ``bn_stats`` on the
    Winograd convs it pairs with a BN (a few MiB at most, next to ``col``'s up to 64 MiB). Shapes
    (N, H, W, C) / (K, k, k, C/groups) in ``arrays``; sizes in fp32 elements."""
    g = conv_geom(arrays["x"][0], arrays["w"][0], k, s, p, groups)
    v = variant_for(g, algo)
    out = {} if v is None else {n: ((e,), F32) for n, e in workspace_sizes(g, v, ("fwd",)).items()}
    if v is not None or bn_stats or arrays.get("sum") is not None:
        out["tmp"] = ((stats_workspace(g, v),), F32)
    return out


def ws_bwd_cuda(arrays: dict[str, ArrayInfo], *, k: int, s: int = 1, p: int = 0, groups: int = 1,
                algo: str | None = None, algo_dgrad: str | None = None, algo_wgrad: str | None = None,
                **_: Any) -> dict[str, ArrayInfo]:
    """The CUDA backward's workspaces (a ``target_workspace_fns[CUDA]`` rule of ``conv_bwd``):
    ``wbuf`` for the implicit-GEMM weight gradient's fp32 accumulator of an fp16 dw (as
    :func:`tr_mlir.lowering.cpu.conv.ws_bwd_cuda`), and :func:`workspace_sizes` of each direction
    whose algorithm (:func:`pick`) is Winograd (the phases run one after another: the maximum)."""
    g = conv_geom(arrays["x"][0], arrays["w"][0], k, s, p, groups)
    vw = variant_for(g, pick(algo_wgrad, algo))
    vd = variant_for(g, pick(algo_dgrad, algo)) if "dx" in arrays else None
    if vw is None and vd is None:
        return implicit_ws_bwd(arrays)
    sizes: dict[str, int] = {}
    if vw is not None:
        _merge(sizes, workspace_sizes(g, vw, ("wgrad",)))
    else:
        _merge(sizes, {n: int(np.prod(shape)) for n, (shape, _) in implicit_ws_bwd(arrays).items()})
    if vd is not None:
        _merge(sizes, workspace_sizes(g, vd, ("dgrad",)))
    return {n: ((e,), F32) for n, e in sizes.items()}


# --------------------------------------------------------------------------------------
# passes
# --------------------------------------------------------------------------------------


def _forward_pass(ops: GpuOps, pl: Plan, src: Any, w: Any, dst: Any, ws: Mapping[str, Any], beta: float,
                  stats: tuple[Any, Any] | None = None) -> None:
    """dst (n, ho, wo, cout) [= beta dst +] the plan's conv of src (n, h, w, cin) with w (K, 3, 3, C);
    ``stats``: also dst's ``(sum, sq_sum)``, chunk by chunk into the ``tmp`` parts (module doc)."""
    a2, m = pl.alpha ** 2, pl.m
    parts = None if stats is None else ops.stats_parts(ws, pl.n, pl.cout, chunk_images(pl), pl.ho * pl.wo)
    u = take(ws.get("wbuf"), (a2 * pl.kw * pl.cw,))
    col = take(ws.get("col"), (_col_elements(pl),))
    ops.ew("tr_wino_wt", pl.kw * pl.cw, *ops.arr(w), ops.p(u), np.int32(pl.kw), np.int32(pl.cw), np.int32(m),
           np.int32(pl.flip), touch=(w, u))
    ci = chunk_images(pl)
    per = pl.th * pl.tw
    for n0 in range(0, pl.n, ci):
        nimg = min(ci, pl.n - n0)
        tiles = nimg * per
        v = col[:a2 * tiles * pl.cin]
        mm = col[a2 * tiles * pl.cin:a2 * tiles * (pl.cin + pl.cout)]
        ops.ew("tr_wino_in", tiles * pl.cin, *ops.arr(src), ops.p(v), np.int32(n0), np.int32(nimg), np.int32(pl.h),
               np.int32(pl.w), np.int32(pl.cin), np.int32(pl.pad), np.int32(pl.th), np.int32(pl.tw), np.int32(m),
               np.int32(0), touch=(src, v))
        if pl.flip:  # U (K = cin, C = cout) as is
            sb, b_kfast = (pl.cout, 1, pl.cin * pl.cout), False
        else:  # U (K = cout, C = cin) transposed
            sb, b_kfast = (1, pl.cin, pl.cin * pl.cout), True
        ops.gemm(v, (pl.cin, 1, tiles * pl.cin), u, sb, mm, (pl.cout, 1, tiles * pl.cout), tiles, pl.cout, pl.cin,
                 batch=a2, b_kfast=b_kfast)
        ops.ew("tr_wino_out", tiles * pl.cout, ops.p(mm), *ops.arr(dst), np.int32(n0), np.int32(nimg),
               np.int32(pl.ho), np.int32(pl.wo), np.int32(pl.cout), np.int32(pl.th), np.int32(pl.tw), np.int32(m),
               np.float32(beta), touch=(mm, dst))
        if parts is not None:
            ops.colstats_chunk(dst, n0 * pl.ho * pl.wo, nimg * pl.ho * pl.wo, parts, n0 // ci)
    if parts is not None:
        ops.colstats_final(parts, *stats)  # type: ignore[misc]


def forward(ops: GpuOps, x: Any, w: Any, y: Any, g: ConvGeom, ws: Mapping[str, Any], variant: str,
            stats: tuple[Any, Any] | None = None) -> None:
    """y (N, Ho, Wo, K) = conv(x (N, H, W, C), w (K, 3, 3, C)) as ``variant`` on ``ops``' device;
    fp32 or fp16 operands (fp32 arithmetic), workspaces of :func:`workspace_sizes` (``wbuf``, ``col``).
    ``stats``: also y's batch-norm ``(sum, sq_sum)`` (fp32, K elements each: sum of y and sum of
    squared deviations from the mean per channel, of the values y holds), fused into the output
    pass chunk by chunk (module doc; ``tmp`` of :func:`stats_workspace`). ``ValueError`` for an
    unknown variant, a conv Winograd does not apply to (:func:`variant_for`) or a missing or too
    small workspace, or statistics arrays that are not both fp32 of K elements."""
    _check(g, variant)
    if stats is not None:
        stats = conv_stats.check(*stats, g.k_out)
    _forward_pass(ops, fwd_plan(g, variant_tile(variant)), x, w, y, ws, 0.0, stats)


def dgrad(ops: GpuOps, dy: Any, w: Any, dx: Any, g: ConvGeom, ws: Mapping[str, Any], variant: str,
          accumulate: bool = False) -> None:
    """dx (N, H, W, C) = dL/dx from dy (N, Ho, Wo, K) and w (``accumulate``: dx += dL/dx) as
    ``variant``; reads only dy and w, so dx may be x's buffer. Dtypes, workspaces, errors as
    :func:`forward`."""
    _check(g, variant)
    _forward_pass(ops, dgrad_plan(g, variant_tile(variant)), dy, w, dx, ws, 1.0 if accumulate else 0.0)


def wgrad(ops: GpuOps, dy: Any, x: Any, dw: Any, g: ConvGeom, ws: Mapping[str, Any], variant: str) -> None:
    """dw (K, 3, 3, C) = dL/dw from dy (N, Ho, Wo, K) and x (N, H, W, C), overwritten, as
    ``variant``; dw fp32 or fp16 (summed in fp32, rounded once). Workspaces, errors as :func:`forward`."""
    _check(g, variant)
    pl = fwd_plan(g, variant_tile(variant))
    a2, m, kk, c = pl.alpha ** 2, pl.m, g.k_out, g.c
    du = take(ws.get("wbuf"), (a2 * kk * c,))
    col = take(ws.get("col"), (_col_elements(pl),))
    ops.zero(du)
    ci = chunk_images(pl)
    per = pl.th * pl.tw
    for n0 in range(0, pl.n, ci):
        nimg = min(ci, pl.n - n0)
        tiles = nimg * per
        v = col[:a2 * tiles * c]
        dm = col[a2 * tiles * c:a2 * tiles * (c + kk)]
        ops.ew("tr_wino_in", tiles * c, *ops.arr(x), ops.p(v), np.int32(n0), np.int32(nimg), np.int32(pl.h),
               np.int32(pl.w), np.int32(c), np.int32(pl.pad), np.int32(pl.th), np.int32(pl.tw), np.int32(m),
               np.int32(0), touch=(x, v))
        ops.ew("tr_wino_in", tiles * kk, *ops.arr(dy), ops.p(dm), np.int32(n0), np.int32(nimg), np.int32(pl.ho),
               np.int32(pl.wo), np.int32(kk), np.int32(0), np.int32(pl.th), np.int32(pl.tw), np.int32(m),
               np.int32(1), touch=(dy, dm))
        ops.gemm(dm, (1, kk, tiles * kk), v, (c, 1, tiles * c), du, (c, 1, kk * c), kk, c, tiles, batch=a2,
                 accumulate_atomic=True, a_kfast=False, b_kfast=False)
    ops.ew("tr_wino_dwt", kk * c, ops.p(du), *ops.arr(dw), np.int32(kk), np.int32(c), np.int32(m), touch=(du, dw))


def _check(g: ConvGeom, variant: str) -> None:
    variant_tile(variant)
    if not applicable(g):
        win = g.win
        raise ValueError(f"Winograd {variant} needs a 3x3 stride-1 dense conv with padding 0 or 1, got k={win.k} "
                         f"s={win.s} p={win.p} groups={g.groups}")
