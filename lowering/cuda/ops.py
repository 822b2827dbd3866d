"""The kernel-launching primitives of the CUDA backend (:class:`GpuOps`, one per NumPy primitive of
:mod:`tr_mlir.lowering.cpu`, same argument conventions) and the launch helpers they share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tr_mlir.lowering.cpu import conv_stats
from tr_mlir.lowering.cpu._util import F32, nhwc, take
from tr_mlir.lowering.cpu.conv import ConvGeom
from tr_mlir.lowering.cpu.window import window
from tr_mlir.lowering.cuda import winograd
from tr_mlir.lowering.cuda.device import CudaDevice
from tr_mlir.lowering.cuda.sources import BLOCK, DTYPE_CODES


F16 = np.dtype(np.float16)
I8 = np.dtype(np.int8)
I32 = np.dtype(np.int32)
MAX_BLOCKS = 2048
"""Grid size cap of the grid-stride kernels (about 8 blocks of 256 threads per H200 SM)."""
TARGET_BLOCKS = 1024
"""Blocks a split reduction (weight gradients, column sums) aims for."""

ACT_CODES = {"relu": 0, "tanh": 1, "sigmoid": 2, "silu": 3, "relu6": 4, "leaky_relu": 5, "hardswish": 6, "elu": 7}
"""Activation name -> the ``act`` code of ``tr_act_fwd`` / ``tr_act_bwd``."""



# --------------------------------------------------------------------------------------
# Launch helpers
# --------------------------------------------------------------------------------------


def _dt(a: Any) -> np.int32:
    return np.int32(0 if a is None else DTYPE_CODES[np.dtype(a.dtype)])


def _grid(n: int) -> tuple[int]:
    return (max(1, min(-(-int(n) // BLOCK), MAX_BLOCKS)),)


@dataclass(frozen=True)
class StatsParts:
    """The float64 parts of a column-statistics reduction (``tr_colstats_part`` /
    ``tr_colstats_merge``, ``kernels/norm.cu``; :func:`.winograd.stats_layout`) in an fp32
    workspace ``buf``: parts of ``(3, cols)`` doubles (count, mean, M2 per column), the first
    ``splits`` those of the chunk of rows being reduced, then, with ``chunks`` > 1, one per chunk."""

    buf: Any
    cols: int
    splits: int
    chunks: int


class GpuOps:
    """The kernel-launching primitives the registry functions are made of (one per NumPy
    primitive of :mod:`tr_mlir.lowering.cpu`, same argument conventions)."""

    def __init__(self, dev: CudaDevice):
        self.dev = dev
        self.h2d_copies = 0  # host-to-device copies issued (the backend marks transfer graphs by it)

    # -- arguments -------------------------------------------------------------------

    def p(self, a: Any) -> np.uint64:
        return np.uint64(0 if a is None else self.dev.ptr(a))

    def s(self, a: Any) -> tuple[np.uint64, np.int32]:
        """A scalar operand (array or None) as its (pointer, dtype code) pair."""
        return self.p(a), _dt(a)

    def arr(self, a: Any) -> tuple[np.uint64, np.int32]:
        return self.p(a), _dt(a)

    def ext(self, *arrays: Any) -> list[tuple[int, int]]:
        return [(self.dev.ptr(a), int(a.nbytes)) for a in arrays if a is not None and not self.dev.is_host(a)]

    def ew(self, name: str, n: int, *args: Any, touch: Sequence[Any] = ()) -> None:
        """A grid-stride element-wise kernel over ``n`` elements."""
        if n > 0:
            self.dev.launch(name, _grid(n), (BLOCK,), args, self.ext(*touch))

    def one(self, name: str, *args: Any, touch: Sequence[Any] = ()) -> None:
        """A single-thread kernel (scalar bookkeeping)."""
        self.dev.launch(name, (1,), (32,), args, self.ext(*touch))

    # -- copies and fills --------------------------------------------------------------

    def same(self, a: Any, b: Any) -> bool:
        return self.dev.ptr(a) == self.dev.ptr(b) and a.nbytes == b.nbytes

    def zero(self, a: Any) -> None:
        if a is not None and a.size:
            self.dev.memset(self.dev.ptr(a), 0, int(a.nbytes))

    def fill(self, a: Any, value: float) -> None:
        if value == 0.0:
            self.zero(a)
        else:
            self.ew("tr_fill", a.size, *self.arr(a), np.int64(a.size), np.float32(value), touch=(a,))

    def convert(self, dst: Any, src: Any, n: int | None = None) -> None:
        """``dst[:n] = src[:n]`` over the flat arrays (cast when dtypes differ; skipped when both
        are one buffer of one dtype; a host ``src`` is an asynchronous host-to-device copy)."""
        n = min(dst.size, src.size) if n is None else n
        if n <= 0:
            return
        if self.dev.is_host(src):
            if np.dtype(src.dtype) != np.dtype(dst.dtype):
                raise ValueError(f"host-to-device copy from {src.dtype} into {dst.dtype}")
            self.dev.memcpy(self.dev.ptr(dst), self.dev.ptr(src), n * dst.itemsize, "h2d")
            self.h2d_copies += 1
            return
        if np.dtype(src.dtype) == np.dtype(dst.dtype):
            if self.dev.ptr(dst) != self.dev.ptr(src):
                self.dev.memcpy(self.dev.ptr(dst), self.dev.ptr(src), n * dst.itemsize, "d2d")
            return
        self.ew("tr_convert", n, *self.arr(src), *self.arr(dst), np.int64(n), touch=(src, dst))

    def copy_into(self, dst: Any, src: Any) -> None:
        """``dst[...] = src`` reshaped (the NumPy ``copy_into``)."""
        if src.size != dst.size:
            raise ValueError(f"cannot copy {src.shape} into {dst.shape}")
        if self.same(dst, src) and dst.dtype == src.dtype:
            return
        self.convert(dst, src)

    # -- element-wise --------------------------------------------------------------------

    def add(self, a: Any, b: Any, y: Any) -> None:
        self.ew("tr_add", y.size, *self.arr(a), *self.arr(b), *self.arr(y), np.int64(y.size), touch=(a, b, y))

    def mul_mask(self, dy: Any, mask: Any, dx: Any, scale: float = 1.0) -> None:
        if mask.dtype != I8:
            raise ValueError(f"expected an int8 mask, got {mask.dtype}")
        self.ew("tr_mul_mask", dx.size, *self.arr(dy), self.p(mask), *self.arr(dx), np.int64(dx.size),
                np.float32(scale), touch=(dy, mask, dx))

    def relu_bwd_from_output(self, dy: Any, y: Any, dx: Any) -> None:
        if not (dy.size == y.size == dx.size):
            raise ValueError(f"expected dy, y, dx of one size, got {dy.size}, {y.size}, {dx.size}")
        self.ew("tr_relu_bwd_y", dx.size, *self.arr(dy), *self.arr(y), *self.arr(dx), np.int64(dx.size),
                touch=(dy, y, dx))

    def act_fwd(self, act: str, x: Any, y: Any, mask: Any = None) -> None:
        if mask is not None and mask.dtype != I8:
            raise ValueError(f"expected an int8 mask, got {mask.dtype}")
        if x.size != y.size:
            raise ValueError(f"expected {act} output of {x.size} elements, got {y.shape}")
        self.ew("tr_act_fwd", x.size, np.int32(ACT_CODES[act]), *self.arr(x), *self.arr(y), self.p(mask),
                np.int64(x.size), touch=(x, y, mask))

    def act_bwd(self, act: str, dy: Any, x: Any, dx: Any) -> None:
        self.ew("tr_act_bwd", x.size, np.int32(ACT_CODES[act]), *self.arr(dy), *self.arr(x), *self.arr(dx),
                np.int64(x.size), touch=(dy, x, dx))

    # -- GEMM and convolution ------------------------------------------------------------

    def gemm(self, a: Any, sa: tuple[int, int, int], b: Any, sb: tuple[int, int, int], c: Any,
             sc: tuple[int, int, int], m: int, n: int, k: int, *, batch: int = 1, beta: float = 0.0,
             bias: Any = None, accumulate_atomic: bool = False, a_kfast: bool = True, b_kfast: bool = True,
             relu: bool = False, gate: Any = None) -> None:
        """``C(m, n) = sum_k A(m, k) B(k, n) (+ beta C) (+ bias(n))`` with element strides
        ``(row, col, batch)``; ``accumulate_atomic``: add into an fp32 C in K-splits. ``relu``:
        ``C = relu(...)`` after the bias; ``gate`` (C's layout): ``C *= gate > 0`` (the ReLU
        epilogues of a fused FC, ``kernels/gemm.cu``; not with ``accumulate_atomic``)."""
        if m <= 0 or n <= 0:
            return
        if accumulate_atomic and (relu or gate is not None):
            raise ValueError("a ReLU epilogue needs the whole K sum: not with accumulate_atomic")
        tiles = -(-m // 64) * -(-n // 64) * batch
        splits = 1
        if accumulate_atomic:
            splits = max(1, min(TARGET_BLOCKS // max(tiles, 1), -(-k // 512)))
        grid = (-(-m // 64), -(-n // 64), batch * splits)
        self.dev.launch("tr_gemm", grid, (BLOCK,), (
            *self.arr(a), np.int64(sa[0]), np.int64(sa[1]), np.int64(sa[2]),
            *self.arr(b), np.int64(sb[0]), np.int64(sb[1]), np.int64(sb[2]),
            *self.arr(c), np.int64(sc[0]), np.int64(sc[1]), np.int64(sc[2]),
            np.int64(m), np.int64(n), np.int64(k), np.float32(1.0), np.float32(beta), *self.arr(bias),
            np.int32(1 if accumulate_atomic else 0), np.int32(splits), np.int32(a_kfast), np.int32(b_kfast),
            np.int32(relu), *self.arr(gate)), self.ext(a, b, c, bias, gate))

    def _conv_args(self, g: ConvGeom) -> tuple:
        w = g.win
        return (np.int32(g.n), np.int32(w.h), np.int32(w.w), np.int32(g.c), np.int32(w.ho), np.int32(w.wo),
                np.int32(g.k_out), np.int32(w.k), np.int32(w.s), np.int32(w.p), np.int32(g.groups))

    def _dw_args(self, g: ConvGeom) -> tuple:
        w = g.win
        return (np.int32(g.n), np.int32(w.h), np.int32(w.w), np.int32(g.c), np.int32(w.ho), np.int32(w.wo),
                np.int32(w.k), np.int32(w.s), np.int32(w.p))

    def conv_forward(self, x: Any, w: Any, y: Any, g: ConvGeom, ws: Mapping[str, Any],
                     algo: str | None = None, stats: tuple[Any, Any] | None = None) -> None:
        """y (N, Ho, Wo, K) = conv(x (N, H, W, C), w (K, k, k, C/groups)) (geometry ``g``);
        workspaces unused (implicit GEMM), or, when ``algo`` selects Winograd
        (:func:`.winograd.variant_for`), ``wbuf`` and ``col`` (:mod:`.winograd`). ``stats``: also
        y's batch-norm ``(sum, sq_sum)`` (fp32, K elements each; :mod:`tr_mlir.lowering.cpu.conv_stats`)
        with their parts in ``tmp`` (:func:`.winograd.stats_workspace`): Winograd in its output
        pass, chunk by chunk, the implicit GEMM in one pass over y after the conv
        (:meth:`output_stats`). ``ValueError`` for a missing or too small workspace or statistics
        arrays of another dtype or size."""
        variant = winograd.variant_for(g, algo)
        if variant is not None:
            winograd.forward(self, x, w, y, g, ws, variant, stats)
            return
        stats = None if stats is None else conv_stats.check(*stats, g.k_out)
        self._conv_forward(x, w, y, g)
        if stats is not None:
            self.output_stats(y, *stats, ws)

    def _conv_forward(self, x: Any, w: Any, y: Any, g: ConvGeom) -> None:
        meth = g.method
        if meth == "pointwise":
            self.gemm(x, (g.c, 1, 0), w, (1, g.c, 0), y, (g.k_out, 1, 0), g.m, g.k_out, g.c)
        elif meth == "depthwise":
            self.ew("tr_dwconv_fwd", y.size, *self.arr(x), *self.arr(w), *self.arr(y), *self._dw_args(g),
                    touch=(x, w, y))
        else:
            grid = (-(-g.m // 64), -(-g.kg // 64), g.groups)
            self.dev.launch("tr_conv_fwd", grid, (BLOCK,), (*self.arr(x), *self.arr(w), *self.arr(y),
                                                            *self._conv_args(g)), self.ext(x, w, y))

    def conv_wgrad(self, dy: Any, x: Any, dw: Any, g: ConvGeom, ws: Mapping[str, Any],
                   algo: str | None = None) -> None:
        """dw = dL/dw (overwritten), accumulated in fp32 (dw itself, or the ``wbuf`` workspace);
        ``algo`` as in :meth:`conv_forward`."""
        variant = winograd.variant_for(g, algo)
        if variant is not None:
            winograd.wgrad(self, dy, x, dw, g, ws, variant)
            return
        acc = dw if dw.dtype == F32 else take(ws.get("wbuf"), g.w_shape)
        self.zero(acc)
        meth = g.method
        if meth == "pointwise":
            self.gemm(dy, (1, g.k_out, 0), x, (g.c, 1, 0), acc, (g.c, 1, 0), g.k_out, g.c, g.m,
                      accumulate_atomic=True, a_kfast=False, b_kfast=False)
        elif meth == "depthwise":
            kk = g.win.k * g.win.k
            cb = -(-g.c // 32)
            splits = max(1, min(TARGET_BLOCKS // max(cb * kk, 1), -(-g.m // 64), 65535))
            self.dev.launch("tr_dwconv_wgrad", (cb, kk, splits), (32, 8),
                            (*self.arr(dy), *self.arr(x), self.p(acc), *self._dw_args(g)), self.ext(dy, x, acc))
        else:
            tiles = -(-g.kg // 64) * -(-g.kkc // 64) * g.groups
            splits = max(1, min(TARGET_BLOCKS // max(tiles, 1), -(-g.m // 512)))
            grid = (-(-g.kg // 64), -(-g.kkc // 64), g.groups * splits)
            self.dev.launch("tr_conv_wgrad", grid, (BLOCK,), (*self.arr(dy), *self.arr(x), self.p(acc),
                                                              *self._conv_args(g), np.int32(splits)),
                            self.ext(dy, x, acc))
        if acc is not dw:
            self.convert(dw, acc)

    def conv_dgrad(self, dy: Any, w: Any, dx: Any, g: ConvGeom, ws: Mapping[str, Any],
                   accumulate: bool = False, algo: str | None = None) -> None:
        """dx = dL/dx (``accumulate``: dx += dL/dx); dx may be x's buffer (x is not read);
        ``algo`` as in :meth:`conv_forward`."""
        variant = winograd.variant_for(g, algo)
        if variant is not None:
            winograd.dgrad(self, dy, w, dx, g, ws, variant, accumulate)
            return
        beta = 1.0 if accumulate else 0.0
        meth = g.method
        if meth == "pointwise":
            self.gemm(dy, (g.k_out, 1, 0), w, (g.c, 1, 0), dx, (g.c, 1, 0), g.m, g.c, g.k_out, beta=beta,
                      b_kfast=False)
        elif meth == "depthwise":
            self.ew("tr_dwconv_dgrad", dx.size, *self.arr(dy), *self.arr(w), *self.arr(dx), *self._dw_args(g),
                    np.float32(beta), touch=(dy, w, dx))
        else:
            win = g.win
            grid = (-(-(g.n * win.h * win.w) // 64), -(-g.cg // 64), g.groups)
            self.dev.launch("tr_conv_dgrad", grid, (BLOCK,), (*self.arr(dy), *self.arr(w), *self.arr(dx),
                                                              *self._conv_args(g), np.float32(beta)),
                            self.ext(dy, w, dx))

    # -- dense ---------------------------------------------------------------------------

    @staticmethod
    def fc_dims(x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> tuple[int, int, int]:
        n = int(x_shape[0])
        f = int(np.prod(x_shape[1:], dtype=np.int64))
        o = int(w_shape[0])
        if int(np.prod(w_shape, dtype=np.int64)) != o * f:
            raise ValueError(f"expected fc weight of {o} x {f} (out x H*W*C of input {tuple(x_shape)}), "
                             f"got shape {tuple(w_shape)}")
        return n, f, o

    def fc_forward(self, x: Any, w: Any, b: Any, y: Any, relu: bool = False) -> None:
        """``y = x_flat @ w.T (+ b)``; ``relu``: ``relu(...)`` in the GEMM epilogue (``fc_relu_fwd``)."""
        n, f, o = self.fc_dims(x.shape, w.shape)
        if y.size != n * o:
            raise ValueError(f"expected fc output of {n} x {o} elements, got shape {y.shape}")
        self.gemm(x, (f, 1, 0), w, (1, f, 0), y, (o, 1, 0), n, o, f, bias=b, relu=relu)

    def _overlap(self, a: Any, b: Any) -> bool:
        """Whether device arrays ``a`` and ``b`` share a byte (their [pointer, pointer + nbytes)
        ranges intersect; the arrays of a plan are contiguous views of one arena)."""
        pa, pb = self.dev.ptr(a), self.dev.ptr(b)
        return pa < pb + b.nbytes and pb < pa + a.nbytes

    def fc_backward(self, dy: Any, w: Any, x: Any, dw: Any, db: Any, dx: Any, gate_input: bool = False) -> None:
        """dw, db, then dx = dy @ w; ``gate_input``: ``dx *= x > 0`` in the GEMM epilogue (x a ReLU's
        output, ``relu_fc_bwd``; dx must not share x's memory: ValueError)."""
        n, f, o = self.fc_dims(x.shape, w.shape)
        if gate_input and (dx is None or self._overlap(dx, x)):
            raise ValueError("an FC backward gated by its input's ReLU needs a dx apart from x")
        self.gemm(dy, (1, o, 0), x, (f, 1, 0), dw, (f, 1, 0), o, f, n, a_kfast=False, b_kfast=False)
        if db is not None:
            self.colsum(dy, db, rows=n, cols=o)
        if dx is not None:
            self.gemm(dy, (o, 1, 0), w, (f, 1, 0), dx, (f, 1, 0), n, f, o, b_kfast=False,
                      gate=x if gate_input else None)

    # -- reductions and batch norm ---------------------------------------------------------

    def _colgrid(self, rows: int, cols: int) -> tuple[int, int]:
        cb = -(-cols // 32)
        return cb, max(1, min(TARGET_BLOCKS // cb, -(-rows // 64), 65535))

    def stats_parts(self, ws: Mapping[str, Any], n: int, cols: int, images: int, pixels: int) -> StatsParts:
        """The statistics parts of an output of ``n`` images x ``pixels`` rows x ``cols`` channels
        reduced in chunks of ``images`` images (:func:`.winograd.stats_layout`), in workspace
        ``ws["tmp"]`` (fp32, at least :func:`.winograd.stats_workspace` elements). ``ValueError``
        when it is missing, too small, of another dtype or not 8-byte aligned."""
        splits, parts = winograd.stats_layout(n, cols, images, pixels)
        buf = take(ws.get("tmp"), (parts * 3 * cols * 2,))
        if self.dev.ptr(buf) % 8:
            raise ValueError("expected the statistics workspace 'tmp' 8-byte aligned (it holds float64 parts)")
        return StatsParts(buf, int(cols), splits, -(-int(n) // int(images)))

    def colstats_chunk(self, x: Any, r0: int, rows: int, parts: StatsParts, chunk: int) -> None:
        """Reduce chunk ``chunk``, the rows ``[r0, r0 + rows)`` of x (rows of ``parts.cols``
        elements, fp32 or fp16): per column count, mean and M2 in float64, shifted by row r0, into
        ``parts.splits`` parts (``tr_colstats_part``, no atomics), then, with several chunks,
        merged into the chunk's own part (``tr_colstats_merge``)."""
        c = parts.cols
        self.dev.launch("tr_colstats_part", (-(-c // 32), parts.splits), (32, 8),
                        (*self.arr(x), np.int64(r0), np.int64(rows), np.int32(c), self.p(parts.buf), np.int32(0)),
                        self.ext(x, parts.buf))
        if parts.chunks > 1:
            dst = np.uint64(self.dev.ptr(parts.buf) + 24 * c * (parts.splits + chunk))
            self._colstats_merge(parts, 0, parts.splits, dst, None, None)

    def colstats_final(self, parts: StatsParts, out_sum: Any, out_sq: Any) -> None:
        """After the last :meth:`colstats_chunk`: ``out_sum`` (fp32, cols) = the column sums and
        ``out_sq`` (fp32, cols) the sums of squared deviations from the column means, from the
        chunks' parts (``tr_colstats_merge``: Chan's pairwise merge in a fixed order, one fp32
        rounding)."""
        first, count = (parts.splits, parts.chunks) if parts.chunks > 1 else (0, parts.splits)
        self._colstats_merge(parts, first, count, np.uint64(0), out_sum, out_sq)

    def _colstats_merge(self, parts: StatsParts, first: int, count: int, dst: np.uint64, out_sum: Any,
                        out_sq: Any) -> None:
        self.dev.launch("tr_colstats_merge", (-(-parts.cols // 32),), (32, 8),
                        (self.p(parts.buf), np.int32(first), np.int32(count), np.int32(parts.cols), dst,
                         self.p(out_sum), self.p(out_sq)), self.ext(parts.buf, out_sum, out_sq))

    def output_stats(self, y: Any, out_sum: Any, out_sq: Any, ws: Mapping[str, Any]) -> None:
        """A conv output's batch-norm statistics by one pass over y (N, Ho, Wo, K) after the conv
        (the implicit GEMM's; :mod:`tr_mlir.lowering.cpu.conv_stats`): ``out_sum`` (fp32, K) the
        sums, ``out_sq`` (fp32, K) the sums of squared deviations from the means, deterministic
        (float64 parts in ``ws["tmp"]``, :meth:`stats_parts` for one chunk of the whole batch)."""
        n, k = int(y.shape[0]), int(y.shape[-1])
        pixels = y.size // max(n * k, 1)
        parts = self.stats_parts(ws, n, k, n, pixels)
        self.colstats_chunk(y, 0, n * pixels, parts, 0)
        self.colstats_final(parts, out_sum, out_sq)

    def colsum(self, x: Any, out: Any, *, rows: int, cols: int) -> None:
        """out (fp32, cols) = column sums of x (rows, cols)."""
        if out.dtype != F32:
            raise ValueError(f"expected an fp32 column-sum output, got {out.dtype}")
        self.zero(out)
        self.dev.launch("tr_colsum", self._colgrid(rows, cols), (32, 8),
                        (*self.arr(x), np.int64(rows), np.int32(cols), self.p(out)), self.ext(x, out))

    def bn_forward_train(self, x: Any, gamma: Any, beta: Any, rm: Any, rv: Any, y: Any, save_mean: Any,
                         save_istd: Any, eps: Any, momentum: Any, relu: bool = False, mask: Any = None,
                         skip: Any = None, stats: tuple[Any, Any] | None = None) -> None:
        """Training-mode batch norm (the NumPy ``bn_forward_train``) of x (N, H, W, C) into y; y
        may be x's buffer. ``eps`` / ``momentum``: scalar operand arrays or Python numbers.
        ``relu``: the fused epilogue ``y = relu(bn(x) + skip)`` (skip may be None) and the INT8
        ``mask`` of the pre-activation when given (the NumPy ``bn_relu_forward_train``).
        ``stats``: x's ``(sum, sq_sum)`` (fp32, C each) as the conv before it wrote them
        (:mod:`tr_mlir.lowering.cpu.conv_stats`): the batch mean is ``sum / M`` and the biased
        variance ``sq_sum / M`` (``tr_bn_given_stats``), no statistics pass over x. ``ValueError``
        for parameters, statistics, mask or residual of another dtype or size."""
        c = int(x.shape[-1])
        m = x.size // c
        for a in (gamma, beta, rm, rv, save_mean, save_istd):
            if a.dtype != F32 or a.size != c:
                raise ValueError(f"expected batch-norm parameters and statistics of {c} fp32 elements, "
                                 f"got {a.dtype} {a.shape}")
        given = None if stats is None else conv_stats.check(*stats, c)
        if given is not None:
            self.ew("tr_bn_given_stats", c, self.p(given[0]), self.p(given[1]), self.p(save_mean), self.p(save_istd),
                    np.int32(c), np.float64(m), touch=(*given, save_mean, save_istd))
        else:
            self.colsum(x, save_mean, rows=m, cols=c)
            self.ew("tr_scale_vec", c, self.p(save_mean), np.int32(c), np.float32(1.0 / m), touch=(save_mean,))
            self.zero(save_istd)
            self.dev.launch("tr_colsum_sq", self._colgrid(m, c), (32, 8),
                            (*self.arr(x), np.int64(m), np.int32(c), self.p(save_mean), self.p(save_istd)),
                            self.ext(x, save_mean, save_istd))
        e_ptr, e_val = (eps, 1e-5) if not isinstance(eps, (int, float)) else (None, float(eps))
        m_ptr, m_val = (momentum, 0.1) if not isinstance(momentum, (int, float)) else (None, float(momentum))
        self.ew("tr_bn_finalize", c, self.p(save_mean), self.p(save_istd), self.p(rm), self.p(rv), np.int32(c),
                np.float32(1.0 / m), np.float64(m / (m - 1) if m > 1 else 1.0), *self.s(e_ptr), np.float64(e_val),
                *self.s(m_ptr), np.float64(m_val), touch=(save_mean, save_istd, rm, rv))
        for a in (mask, skip):
            if a is not None and a.size != x.size:
                raise ValueError(f"expected a ReLU mask / residual operand of {x.size} elements, got {a.shape}")
        self.ew("tr_bn_apply", x.size, *self.arr(x), *self.arr(y), np.int64(m), np.int32(c), self.p(gamma),
                self.p(beta), self.p(save_mean), self.p(save_istd), np.int32(bool(relu)), *self.arr(skip),
                self.p(mask), touch=(x, y, skip, mask))

    def bn_backward(self, dy: Any, x: Any, gamma: Any, save_mean: Any, save_istd: Any, dx: Any, dgamma: Any,
                    dbeta: Any, gate: Any = None, dskip: Any = None) -> None:
        """Batch-norm backward (the NumPy ``bn_backward``); ``gate``: the ReLU after the BN (its
        INT8 mask or its output), read with dy (``dy * mask`` / ``dy * (y > 0)``), ``dskip``: also
        written with that gradient (a residual join's other operand)."""
        c = int(x.shape[-1])
        m = x.size // c
        self.zero(dgamma)
        self.zero(dbeta)
        self.dev.launch("tr_bn_bwd_sums", self._colgrid(m, c), (32, 8),
                        (*self.arr(dy), *self.arr(gate), *self.arr(x), np.int64(m), np.int32(c), self.p(save_mean),
                         self.p(save_istd), self.p(dgamma), self.p(dbeta)), self.ext(dy, gate, x, dgamma, dbeta))
        if dx is not None:
            self.ew("tr_bn_bwd_dx", x.size, *self.arr(dy), *self.arr(gate), *self.arr(x), *self.arr(dx),
                    *self.arr(dskip), np.int64(m), np.int32(c), self.p(gamma), self.p(save_mean), self.p(save_istd),
                    self.p(dgamma), self.p(dbeta), np.float32(1.0 / m), touch=(dy, gate, x, dx, dskip))

    def bn_affine(self, x: Any, scale: Any, bias: Any, y: Any) -> None:
        c = int(x.shape[-1])
        self.ew("tr_bn_affine", x.size, *self.arr(x), *self.arr(y), np.int64(x.size // c), np.int32(c),
                self.p(scale), self.p(bias), touch=(x, y, scale, bias))

    # -- pooling -----------------------------------------------------------------------------

    @staticmethod
    def pool_window(x_shape: tuple[int, ...], y_shape: tuple[int, ...], k: int, s: int, p: int, what: str):
        _, h, w, _ = nhwc(tuple(x_shape), what)
        if 2 * p > k:
            raise ValueError(f"expected pool padding ({p}) <= k/2 ({k}/2)")
        win = window(h, w, k, s, p)
        want = (x_shape[0], win.ho, win.wo, x_shape[3])
        if tuple(y_shape) != want:
            raise ValueError(f"expected pool output of shape {want}, got {tuple(y_shape)}")
        return win

    def _pool_args(self, x_shape: tuple[int, ...], win: Any, k: int, s: int, p: int) -> tuple:
        n, h, w, c = x_shape
        return (np.int32(n), np.int32(h), np.int32(w), np.int32(c), np.int32(win.ho), np.int32(win.wo),
                np.int32(k), np.int32(s), np.int32(p))

    def maxpool_fwd(self, x: Any, y: Any, mask: Any, k: int, s: int, p: int) -> None:
        win = self.pool_window(x.shape, y.shape, k, s, p, "maxpool input")
        if mask.dtype != I8 or mask.size != y.size:
            raise ValueError(f"expected an int8 pool mask of {y.size} elements, got {mask.dtype} {mask.shape}")
        self.ew("tr_maxpool_fwd", y.size, *self.arr(x), *self.arr(y), self.p(mask),
                *self._pool_args(x.shape, win, k, s, p), touch=(x, y, mask))

    def maxpool_bwd(self, dy: Any, mask: Any, dx: Any, k: int, s: int, p: int) -> None:
        win = self.pool_window(dx.shape, dy.shape, k, s, p, "maxpool input")
        self.ew("tr_maxpool_bwd", dx.size, *self.arr(dy), self.p(mask), *self.arr(dx),
                *self._pool_args(dx.shape, win, k, s, p), touch=(dy, mask, dx))

    def avgpool(self, name: str, src: Any, dst: Any, x_shape: tuple[int, ...], y_shape: tuple[int, ...], k: int,
                s: int, p: int) -> None:
        win = self.pool_window(x_shape, y_shape, k, s, p, "avgpool input")
        self.ew(name, dst.size, *self.arr(src), *self.arr(dst), *self._pool_args(x_shape, win, k, s, p),
                np.float32(1.0 / (k * k)), touch=(src, dst))

    def gap_forward(self, x: Any, y: Any) -> None:
        n, h, w, c = nhwc(x.shape, "gap input")
        if y.size != n * c:
            raise ValueError(f"expected gap output of shape ({n}, 1, 1, {c}), got {y.shape}")
        self.ew("tr_gap_fwd", n * c, *self.arr(x), *self.arr(y), np.int32(n), np.int32(h * w), np.int32(c),
                np.float32(1.0 / (h * w)), touch=(x, y))

    def gap_backward(self, dy: Any, dx: Any) -> None:
        n, h, w, c = nhwc(dx.shape, "gap input")
        self.ew("tr_gap_bwd", dx.size, *self.arr(dy), *self.arr(dx), np.int32(n), np.int32(h * w), np.int32(c),
                np.float32(1.0 / (h * w)), touch=(dy, dx))

