"""Convolutions with few channels as C kernels generated for their exact shapes (:mod:`._cc`).

An im2col GEMM with 6 or 16 output columns (LeNet's convs) is bound by memory traffic and call
overhead, not by arithmetic. These kernels keep the output of a whole block of pixels in vector
registers instead and read their operands from small, cache-resident expanded copies. Every
shape (N excepted), the stride, the padding and the tile layout are compile-time constants, so
the compiler unrolls the register tiles fully.

Layouts: x (N, H, W, C) and y (N, Ho, Wo, K) NHWC, w (K, k, k, C) KRSC, fp32, groups = 1, any
k, stride s and padding p. Vectors are 16 floats (GCC/Clang vector extensions: one AVX-512
register, two AVX2 registers elsewhere).

**Forward, K not a multiple of 16: the expanded-weight formulation.** An output row
``y[n, oh]`` is one vector of ``L = Wo*K`` floats, ``q = ow*K + k``. For a tap ``(i, j)`` and
input channel ``c``, ``y_row[q] += xe[q + (j//s)*K] * we[q mod K]`` where ``xe`` is the
zero-padded input row ``oh*s + i``, channel ``c``, column phase ``j mod s``, with every value
repeated K times (``xe[u*K + k] = xpad[oh*s + i, u*s + j mod s, c]``), and
``we[q] = w[q mod K, i, j, c]`` (stored once for ``lcm(K, 16)`` lanes). So every multiply-add is
a whole 16-lane vector whatever K is (K = 6 wastes no lanes), the output row is written NHWC in
place, and a tile of up to :data:`TILE` vectors of the row stays in registers over all k*k*C
terms. The expanded input of one image is built per image in the thread's scratch (K times the
padded image), the expanded weights once per call. The shifted reads ``xe[q + (j//s)*K]`` are
unaligned; for stride 1 they are formed from two aligned loads by a constant shuffle instead
(:func:`_fwd_aligned_taps`: an unaligned 64-byte load splits across two cache lines).

**Forward, K a multiple of 16 (LeNet's K = 16): broadcast input.** Each 16-lane block of the
output row is one pixel's K-block, so the input operand is a broadcast scalar of the zero-padded
NHWC image (per image in the scratch) and ``we`` is w transposed to (k, k, C, K).

**Weight gradient**: the same products summed the other way: ``G[i, j, c][q mod lcm(K, 16)] +=
dy_row[q] * xe[q + (j//s)*K]`` (broadcast ``x`` when K is a multiple of 16) over images, rows
and 16-lane blocks, with up to :data:`TILE_W` accumulators (taps x lane patterns) in registers;
then the lanes with ``q mod K = k`` are summed into ``dw[k, i, j, c]`` (``tr_wfold``). Each
thread sums its images into its own ``G`` (in its scratch slot); the threads' partial sums are
added in thread order, so results are bit-identical run to run for a given thread count.

**Input gradient, K not a multiple of 16**: dx row ``h`` as a vector over ``(w, c)`` (length W*C;
for stride s > 1 one vector per column phase ``(w + p) mod s``, re-interleaved afterwards), a
gather over the output rows ``oh`` with ``oh*s + i = h + p`` and the taps ``j`` of that phase:
``dx_row[q] += dye[oh, k][q + shift(j)] * wd[i, j, k][q mod C]`` where ``dye`` repeats every
``dy`` value C times with zero columns on both sides. Tiles whose columns lie wholly in the
padding skip those taps (decided at generation time).

**Input gradient, K a multiple of 16: K-lane dot products.** One 16-lane accumulator per (dx
pixel, input channel) of a tile of pixels along the row (:data:`TILE_D` accumulators) sums
``dy[oh, ow, k-block] * w[k-block, i, j, c]`` over exactly the taps that reach the pixel (the
valid ``j`` per pixel is decided at generation time, the rows at run time); a 4-level shuffle
tree then turns 16 accumulators into their 16 totals, stored contiguously (NHWC). Both input
gradients read only dy and w, so dx may be x's own buffer (the caller computes the weight
gradient first) and dx is overwritten.

Threads: the batch is split into :func:`~._parallel.workers` contiguous image ranges, one per
thread (:func:`~._parallel.run_c`: the calling thread and the C worker thread, no GIL, or the
Python kernel threads without it), each
with its own scratch slot of :func:`slot_elements`
floats in the caller's ``tmp`` workspace (:func:`workspace_elements` for all slots). Nothing is
allocated per call beyond Python argument objects.

Vectors are GCC/Clang vector extensions of 16 floats (one AVX-512 register; the compiler splits
them where the CPU has AVX2 only); multiply-adds are contracted to FMA (the file enables
``fp-contract=fast``: results differ from NumPy's by float rounding only).

Measured (LeNet-5, batch 128, 2 threads, best of 24, interleaved with PyTorch 2.13 eager on the
same 2 threads): conv1 (32x32x1 -> 6) forward 0.36 ms, weight gradient 0.39 ms; conv2
(14x14x6 -> 16) forward 0.42 ms, weight + input gradient 0.97 ms; PyTorch 0.69 / 0.73 and
0.36 / 1.76 ms; the NumPy path 1.36 / 1.79 and 0.81 / 2.57 ms. Which convs take this path is
decided by :func:`.conv.compiled` (its docstring holds the measured basis).
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _cc, _parallel, _prepared
from ._util import take

VL = 16
"""Floats per vector (one 512-bit register)."""

TILE = 12
"""Most accumulator vectors of one forward / expanded input-gradient register tile (AVX-512 has
32 vector registers; the rest hold loaded operands)."""

TILE_B = 8
"""Most accumulator vectors of one broadcast-input forward tile (K a multiple of 16)."""

TILE_W = 16
"""Most accumulator vectors of one weight-gradient tile."""

_VP = ctypes.c_void_p
_L = ctypes.c_long


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
    """Compile-time constants of one conv geometry (sizes in floats)."""

    h: int
    w: int
    c: int
    kout: int
    k: int
    s: int
    p: int

    @property
    def hp(self) -> int:
        return self.h + 2 * self.p

    @property
    def wp(self) -> int:
        return self.w + 2 * self.p

    @property
    def ho(self) -> int:
        return (self.hp - self.k) // self.s + 1

    @property
    def wo(self) -> int:
        return (self.wp - self.k) // self.s + 1

    # forward / weight gradient: the expanded input -------------------------------------
    @property
    def ux(self) -> int:
        """Padded input columns per phase."""
        return _cdiv(self.wp, self.s)

    @property
    def lrow(self) -> int:
        """Floats of an output row (Wo*K)."""
        return self.wo * self.kout

    @property
    def nb(self) -> int:
        """16-lane blocks of an output row."""
        return _cdiv(self.lrow, VL)

    @property
    def pk(self) -> int:
        """Lane period of the expanded weights: lcm(K, 16)."""
        return math.lcm(self.kout, VL)

    @property
    def xr(self) -> int:
        """Floats per expanded input row (one channel, one phase), with slack for the last block."""
        shift = ((self.k - 1) // self.s) * self.kout
        need = max(self.ux * self.kout, shift + self.nb * VL, VL * (shift // VL + self.nb + 1))
        return _cdiv(need, VL) * VL

    @property
    def bcast(self) -> bool:
        """K a multiple of 16: every 16-lane block of an output row is one pixel, so the input
        operand is a broadcast scalar of the zero-padded NHWC image instead of an expanded row."""
        return self.kout % VL == 0

    @property
    def xe_size(self) -> int:
        """Floats of the per-image input copy: the padded image (HP, WP, C) when :attr:`bcast`,
        else the expanded rows (HP, C, s, XR)."""
        if self.bcast:
            return self.hp * self.wp * self.c
        return self.hp * self.c * self.s * self.xr

    @property
    def we_size(self) -> int:
        return self.k * self.k * self.c * self.pk

    # input gradient: the expanded output gradient --------------------------------------
    @property
    def upad(self) -> int:
        """Zero columns left of the expanded dy."""
        return (self.k - 1) // self.s

    def u_range(self, ph: int) -> tuple[int, int]:
        """Padded-input columns ``u*s + ph`` of phase ``ph`` inside the input: u in [u0, u1)."""
        return _cdiv(self.p - ph, self.s) if self.p >= ph else 0, _cdiv(self.p + self.w - ph, self.s)

    def ld(self, ph: int) -> int:
        u0, u1 = self.u_range(ph)
        return max(0, u1 - u0) * self.c

    @property
    def pc(self) -> int:
        """Lane period of the dgrad weights: lcm(C, 16)."""
        return math.lcm(self.c, VL)

    @property
    def dr(self) -> int:
        """Floats per expanded dy row (one output channel)."""
        need = (self.upad + self.wo) * self.c
        for ph in range(self.s):
            u0, _ = self.u_range(ph)
            need = max(need, (self.upad + u0) * self.c + _cdiv(self.ld(ph), VL) * VL)
        return _cdiv(need, VL) * VL

    @property
    def de_size(self) -> int:
        """Floats of the expanded dy of one image (none for the K-lane dgrad)."""
        return 0 if self.bcast else self.ho * self.kout * self.dr

    @property
    def wd_size(self) -> int:
        """Floats of the dgrad weights: (k, k, C, K) for the K-lane dgrad, else (k, k, K, lcm(C, 16))."""
        return self.k * self.k * self.c * self.kout if self.bcast else self.k * self.k * self.kout * self.pc

    @property
    def trow(self) -> int:
        """Temporary dx row of one phase (stride > 1 only)."""
        if self.bcast or self.s == 1:
            return 0
        return max(_cdiv(self.ld(ph), VL) * VL for ph in range(self.s))

    @property
    def g_size(self) -> int:
        return self.we_size

    @property
    def slot(self) -> int:
        """Scratch floats per thread: the largest of the three kernels' needs."""
        fwd = self.xe_size + self.we_size
        wgrad = self.xe_size + self.g_size
        dgrad = self.de_size + self.wd_size + self.trow
        return _cdiv(max(fwd, wgrad, dgrad), VL) * VL + VL  # + room to align the start to 64 bytes


def plan(g) -> Plan:
    """The :class:`Plan` of a :class:`~.conv.ConvGeom` (groups must be 1)."""
    if g.groups != 1:
        raise ValueError(f"expected groups = 1 for a compiled conv, got {g.groups}")
    win = g.win
    return Plan(win.h, win.w, g.c, g.k_out, win.k, win.s, win.p)


def slots(g) -> int:
    """Thread scratch slots for ``g``: one per kernel thread, at most one per image."""
    return max(1, min(_parallel.MAX_WORKERS, g.n))


@functools.lru_cache(maxsize=4096)
def slot_elements(g) -> int:
    """fp32 scratch elements of one thread (:class:`Plan.slot`; cached: the dispatch rule asks on
    every call)."""
    return plan(g).slot


def workspace_elements(g) -> int:
    """fp32 elements of the ``tmp`` workspace the compiled kernels of ``g`` need (all slots)."""
    return slots(g) * slot_elements(g)


# ------------------------------------------------------------------------------------------
# C source generation
# ------------------------------------------------------------------------------------------

_PRELUDE = r"""
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=fast")
#endif
#include <stdint.h>
#include <string.h>
typedef float vf __attribute__((vector_size(64)));
static inline vf ld(const float* p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void st(float* p, vf v) { memcpy(p, &v, sizeof v); }
static inline vf ldn(const float* p, int n) { vf v = {0}; memcpy(&v, p, (size_t)n * 4); return v; }
static inline void stn(float* p, vf v, int n) { memcpy(p, &v, (size_t)n * 4); }
static inline vf bc(const float* p) {
  const float s = *p;
  return (vf){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
}
typedef int vi __attribute__((vector_size(64)));
#if defined(__clang__)
#define SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUF(a, b, ...) __builtin_shuffle(a, b, (vi){__VA_ARGS__})
#endif
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int imin(int a, int b) { return a < b ? a : b; }
"""


def _tiles(nb: int, most: int) -> list[tuple[int, int]]:
    """Split ``nb`` blocks into balanced contiguous tiles of at most ``most`` blocks."""
    if nb == 0:
        return []
    t = _cdiv(nb, most)
    bounds = [nb * i // t for i in range(t + 1)]
    return list(zip(bounds, bounds[1:]))


def _store(dst: str, b: int, acc: str, length: int) -> str:
    """Store of block ``b`` of a row of ``length`` floats (masked for the tail)."""
    rem = length - b * VL
    if rem >= VL:
        return f"st({dst} + {b * VL}, {acc});"
    return f"stn({dst} + {b * VL}, {acc}, {rem});"


def _valid_j_fwd(pl: Plan, b0: int, b1: int) -> tuple[int, int]:
    """Taps j whose input columns are inside the image for some pixel of blocks [b0, b1)."""
    ow0, ow1 = (b0 * VL) // pl.kout, min(pl.wo, _cdiv(b1 * VL, pl.kout))
    js = [j for j in range(pl.k) if any(pl.p <= ow * pl.s + j < pl.p + pl.w for ow in range(ow0, ow1))]
    return (js[0], js[-1] + 1) if js else (0, 0)


def _shifted(row: str, shift: int, b: int) -> str:
    """C expression: the 16 floats at ``row + shift + b*16``, ``row`` 64-byte aligned: one aligned
    load, or two combined by a constant two-vector shuffle."""
    q, r = divmod(shift, VL)
    base = f"{row} + {(q + b) * VL}"
    if r == 0:
        return f"ld({base})"
    return f"SHUF(ld({base}), ld({base} + {VL}), {', '.join(str(r + l) for l in range(VL))})"


def _fwd_aligned_taps(pl: Plan, accs: list[str], blocks: list[int], jlo: int, jhi: int) -> str:
    """The tap loops of an expanded-path forward tile with stride 1: the taps j unrolled, the
    shifted input rows read as aligned loads combined by a constant shuffle (:func:`_shifted`;
    an unaligned 64-byte load splits across two cache lines). Measured on one thread: LeNet conv1
    0.58 -> 0.51 ms, 64x16x16x16 -> 6 or 12 channels 10-15% faster; a stride-2 conv
    (64x32x32x3 -> 8) 12% slower, so strided convs keep the unaligned loads."""
    body = []
    for j in range(jlo, jhi):
        body.append(f"              {{ const float* xp = xr + (long)(c * S + {j % pl.s}) * XR;")
        body.append(f"                const float* wp = wr + (long)({j} * C + c) * PK;")
        body += [f"                {a} += {_shifted('xp', (j // pl.s) * pl.kout, b)} * ld(wp + {(b * VL) % pl.pk});"
                 for a, b in zip(accs, blocks)]
        body.append("              }")
    taps = "\n".join(body)
    return f"""        for (int i = ilo; i < ihi; i++) {{
          const float* xr = xe + (long)(oh * S + i) * C * S * XR;
          const float* wr = we + (long)i * KS * C * PK;
          for (int c = 0; c < C; c++) {{
{taps}
          }}
        }}"""


def _fwd_source(pl: Plan) -> str:
    out = []
    for b0, b1 in _tiles(pl.nb, TILE_B if pl.bcast else TILE):
        accs = [f"a{b}" for b in range(b0, b1)]
        jlo, jhi = _valid_j_fwd(pl, b0, b1)
        lines = ["      {", "        " + " ".join(f"vf {a} = {{0}};" for a in accs)]
        if jhi > jlo:
            if pl.bcast:
                kv = pl.kout // VL
                fma = "\n".join(f"              {a} += bc(xp + {(b // kv) * pl.s * pl.c}) * ld(wp + {(b % kv) * VL});"
                                for a, b in zip(accs, range(b0, b1)))
                xrow = "xe + (long)(oh * S + i) * WP * C"
                xptr = "xr + j * C + c"
            else:
                fma = "\n".join(f"              {a} += ld(xp + {b * VL}) * ld(wp + {(b * VL) % pl.pk});"
                                for a, b in zip(accs, range(b0, b1)))
                xrow = "xe + (long)(oh * S + i) * C * S * XR"
                xptr = "xr + (long)(c * S + j % S) * XR + (j / S) * K"
            if not pl.bcast and pl.s == 1:
                lines.append(_fwd_aligned_taps(pl, accs, list(range(b0, b1)), jlo, jhi))
            else:
                lines.append(f"""        for (int i = ilo; i < ihi; i++) {{
          const float* xr = {xrow};
          const float* wr = we + (long)i * KS * C * PK;
          for (int j = {jlo}; j < {jhi}; j++) {{
            for (int c = 0; c < C; c++) {{
              const float* xp = {xptr};
              const float* wp = wr + (long)(j * C + c) * PK;
{fma}
            }}
          }}
        }}""")
        lines += ["        " + _store("yr", b, a, pl.lrow) for a, b in zip(accs, range(b0, b1))]
        lines.append("      }")
        out.append("\n".join(lines))
    tiles = "\n".join(out)
    if pl.bcast:
        expand = """
static void expand_x(const float* restrict xn, float* restrict xe) {
  /* the zero-padded image (HP, WP, C); the padding is zeroed once per call (clear_xe) */
  for (int h = 0; h < H; h++) memcpy(xe + ((long)(h + PD) * WP + PD) * C, xn + (long)h * W * C, sizeof(float) * W * C);
}
"""
    else:
        expand = """
static void expand_x(const float* restrict xn, float* restrict xe) {
  /* every value repeated K times, by column phase; the padding is zeroed once per call (clear_xe) */
  for (int h = 0; h < H; h++)
    for (int col = 0; col < W; col++) {
      const int u = (col + PD) / S, ph = (col + PD) % S;
      for (int c = 0; c < C; c++) {
        const float v = xn[((long)h * W + col) * C + c];
        float* d = xe + ((long)((h + PD) * C + c) * S + ph) * XR + u * K;
        for (int kk = 0; kk < K; kk++) d[kk] = v;
      }
    }
}
"""
    return expand + f"""
static void clear_xe(float* restrict xe) {{
  memset(xe, 0, sizeof(float) * (size_t)XE_SIZE);
}}

void tr_fwd(const float* restrict x, const float* restrict w, float* restrict y, float* restrict scratch,
            long n0, long n1) {{
  float* restrict xe = (float*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  float* restrict we = xe + XE_SIZE;
  for (int t = 0; t < KS * KS; t++)
    for (int c = 0; c < C; c++)
      for (int q = 0; q < PK; q++) we[((long)t * C + c) * PK + q] = w[((long)(q % K) * KS * KS + t) * C + c];
  clear_xe(xe);
  for (long n = n0; n < n1; n++) {{
    expand_x(x + n * H * W * C, xe);
    for (int oh = 0; oh < HO; oh++) {{
      float* yr = y + (n * HO + oh) * (long)(WO * K);
      const int ilo = imax(0, PD - oh * S), ihi = imin(KS, PD + H - oh * S);
{tiles}
    }}
  }}
}}
"""


def _wgrad_source(pl: Plan) -> str:
    npat = pl.pk // VL
    nf, rem = divmod(pl.lrow, VL)
    members = [(j, c) for j in range(pl.k) for c in range(pl.c)]
    per = max(1, TILE_W // npat)
    chunks = [members[i:i + per] for i in range(0, len(members), per)]
    nfl = (nf // npat) * npat
    out = []
    for chunk in chunks:
        acc = {(j, c, t): f"g{j}_{c}_{t}" for j, c in chunk for t in range(npat)}
        gp = {(j, c, t): f"G + {((j * pl.c + c) * pl.pk) + t * VL} + gi" for j, c, t in acc}

        def xv(j: int, c: int, b: str) -> str:
            """The expanded input at lane offset (j//s)*K of block b: one aligned load, or two
            combined by a constant two-vector shuffle (unaligned loads split across cache lines)."""
            q, r = divmod((j // pl.s) * pl.kout, VL)
            row = f"xr + {(c * pl.s + j % pl.s) * pl.xr + q * VL}"
            if r == 0:
                return f"ld({row} + {b})"
            return (f"SHUF(ld({row} + {b}), ld({row} + {VL} + {b}), "
                    f"{', '.join(str(r + l) for l in range(VL))})")

        def block(b: str, t: int, load: str) -> str:
            body = [f"            {{ const vf d = {load};"]
            body += [f"              {acc[j, c, t]} += d * {xv(j, c, b)};" for j, c in chunk]
            body.append("            }")
            return "\n".join(body)

        lines = ["      {"]
        lines += [f"        vf {a} = ld({gp[key]});" for key, a in acc.items()]
        lines.append("        for (int oh = 0; oh < HO; oh++) {")
        lines.append("          const int rp = oh * S + i;")
        lines.append("          if (rp < PD || rp >= PD + H) continue;")
        lines.append("          const float* dr = dyn + (long)oh * WO * K;")
        if pl.bcast:
            lines.append("          const float* xr = xe + (long)rp * WP * C;")
            lines.append("          for (int ow = 0; ow < WO; ow++) {")
            lines.append("            const float* xo = xr + ow * S * C;")
            lines.append("            const float* d0 = dr + ow * K;")
            for t in range(npat):
                lines.append(f"            {{ const vf d = ld(d0 + {t * VL});")
                lines += [f"              {acc[j, c, t]} += d * bc(xo + {j * pl.c + c});" for j, c in chunk]
                lines.append("            }")
            lines.append("          }")
        else:
            lines.append("          const float* xr = xe + (long)rp * C * S * XR;")
        if pl.bcast:
            pass
        elif nfl:
            lines.append(f"          for (int bb = 0; bb < {nfl * VL}; bb += {npat * VL}) {{")
            for t in range(npat):
                lines.append(block(f"bb + {t * VL}", t, f"ld(dr + bb + {t * VL})"))
            lines.append("          }")
        for b in (range(nfl, nf) if not pl.bcast else ()):
            lines.append(block(str(b * VL), b % npat, f"ld(dr + {b * VL})"))
        if rem:
            lines.append(block(str(nf * VL), nf % npat, f"ldn(dr + {nf * VL}, {rem})"))
        lines.append("        }")
        lines += [f"        st({gp[key]}, {a});" for key, a in acc.items()]
        lines.append("      }")
        out.append("\n".join(lines))
    chunk_code = "\n".join(out)
    return f"""
void tr_wgrad(const float* restrict dy, const float* restrict x, float* restrict scratch, long n0, long n1) {{
  float* restrict xe = (float*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  float* restrict G = xe + XE_SIZE;
  memset(G, 0, sizeof(float) * (size_t)G_SIZE);
  clear_xe(xe);
  for (long n = n0; n < n1; n++) {{
    expand_x(x + n * H * W * C, xe);
    const float* dyn = dy + n * HO * WO * K;
    for (int i = 0; i < KS; i++) {{
      const long gi = (long)i * KS * C * PK;
{chunk_code}
    }}
  }}
}}

void tr_wfold(const float* restrict G, long stride, long nslots, float* restrict dw) {{
  for (int t = 0; t < KS * KS; t++)
    for (int c = 0; c < C; c++)
      for (int kk = 0; kk < K; kk++) {{
        float sum = 0.0f;
        for (int q = kk; q < PK; q += K) {{
          const long e = ((long)t * C + c) * PK + q;
          float v = G[e];
          for (long s = 1; s < nslots; s++) v += G[s * stride + e];
          sum += v;
        }}
        dw[((long)kk * KS * KS + t) * C + c] = sum;
      }}
}}
"""


_DX_ROW = """    for (int h = 0; h < H; h++) {
      const int rp = h + PD;
      const int ohlo = rp - KS + 1 <= 0 ? 0 : (rp - KS + S) / S;
      const int ohhi = imin(HO - 1, rp / S);
      float* xr = dx + (n * H + h) * (long)(W * C);
"""
"""C head of an input-gradient row loop (both dgrad forms): input row h of image n, its padded
row rp, and the output rows ohlo..ohhi whose windows reach it."""


def _dgrad_source(pl: Plan) -> str:
    phases = []
    for ph in range(pl.s):
        u0, u1 = pl.u_range(ph)
        ldl = pl.ld(ph)
        if ldl == 0:
            continue
        nbd = _cdiv(ldl, VL)
        dst = "xr" if pl.s == 1 else "tr"
        tiles = []
        for b0, b1 in _tiles(nbd, TILE):
            accs = [f"a{b}" for b in range(b0, b1)]
            ul, uh = u0 + (b0 * VL) // pl.c, u0 + _cdiv(min(b1 * VL, ldl), pl.c)
            js = [j for j in range(ph, pl.k, pl.s)
                  if any(0 <= u - j // pl.s < pl.wo for u in range(ul, uh))]
            lines = ["        {", "          " + " ".join(f"vf {a} = {{0}};" for a in accs)]
            if js:
                fma = "\n".join(f"                {a} += ld(dp + {b * VL}) * ld(wp + {(b * VL) % pl.pc});"
                                for a, b in zip(accs, range(b0, b1)))
                lines.append(f"""          for (int oh = ohlo; oh <= ohhi; oh++) {{
            const int i = rp - oh * S;
            for (int j = {js[0]}; j <= {js[-1]}; j += S) {{
              const float* drow = de + (long)oh * K * DR + (UPAD + {u0} - j / S) * C;
              const float* wrow = wd + (long)(i * KS + j) * K * PC;
              for (int kk = 0; kk < K; kk++) {{
                const float* dp = drow + (long)kk * DR;
                const float* wp = wrow + (long)kk * PC;
{fma}
              }}
            }}
          }}""")
            lines += ["          " + _store(dst, b, a, ldl) for a, b in zip(accs, range(b0, b1))]
            lines.append("        }")
            tiles.append("\n".join(lines))
        body = "\n".join(tiles)
        if pl.s > 1:
            body += f"""
        for (int u = {u0}; u < {u1}; u++)
          for (int c = 0; c < C; c++) xr[(long)(u * S + {ph} - PD) * C + c] = tr[(u - {u0}) * C + c];"""
        phases.append(f"      {{ /* column phase {ph}: u in [{u0}, {u1}) */\n{body}\n      }}")
    phase_code = "\n".join(phases)
    return f"""
void tr_dgrad(const float* restrict dy, const float* restrict w, float* restrict dx, float* restrict scratch,
              long n0, long n1) {{
  float* restrict de = scratch;
  float* restrict wd = scratch + DE_SIZE;
  float* restrict tr = wd + WD_SIZE;
  (void)tr;
  for (int t = 0; t < KS * KS; t++)
    for (int kk = 0; kk < K; kk++)
      for (int q = 0; q < PC; q++) wd[((long)t * K + kk) * PC + q] = w[((long)kk * KS * KS + t) * C + q % C];
  memset(de, 0, sizeof(float) * (size_t)DE_SIZE);
  for (long n = n0; n < n1; n++) {{
    const float* dyn = dy + n * HO * WO * K;
    for (int oh = 0; oh < HO; oh++)
      for (int ow = 0; ow < WO; ow++)
        for (int kk = 0; kk < K; kk++) {{
          const float v = dyn[((long)oh * WO + ow) * K + kk];
          float* d = de + ((long)oh * K + kk) * DR + (UPAD + ow) * C;
          for (int c = 0; c < C; c++) d[c] = v;
        }}
{_DX_ROW}{phase_code}
    }}
  }}
}}
"""


def _reduce_tree() -> tuple[list[tuple[list[int], list[int]]], list[int]]:
    """Shuffle masks of a 4-level tree that sums 16 vectors lane-wise into one vector of their
    16 totals, and ``slot[l]``: the input position whose total lands in lane ``l``."""
    levels = []
    for h in (8, 4, 2, 1):
        lo = [(16 if (l // h) % 2 else 0) + ((l // h) // 2) * 2 * h + l % h for l in range(VL)]
        levels.append((lo, [v + h for v in lo]))
    owners = [[s] * VL for s in range(VL)]
    for lo, hi in levels:
        nxt = []
        for a, b in zip(owners[::2], owners[1::2]):
            cat = a + b
            assert all(cat[x] == cat[y] for x, y in zip(lo, hi))
            nxt.append([cat[x] for x in lo])
        owners = nxt
    return levels, owners[0]


def _reduce_code(accs: list[str], dst: str, indent: str, tag: str) -> list[str]:
    """C lines storing the 16-lane totals of ``accs`` (at most 16) contiguously at ``dst``."""
    levels, slot = _reduce_tree()
    vecs = ["zero"] * VL
    for lane, acc in enumerate(accs):
        vecs[slot[lane]] = acc
    lines, n = [], 0
    for lo, hi in levels:
        nxt = []
        for a, b in zip(vecs[::2], vecs[1::2]):
            if a == "zero" and b == "zero":
                nxt.append("zero")
                continue
            name = f"r{tag}_{n}"
            n += 1
            lines.append(f"{indent}const vf {name} = SHUF({a}, {b}, {', '.join(map(str, lo))}) + "
                         f"SHUF({a}, {b}, {', '.join(map(str, hi))});")
            nxt.append(name)
        vecs = nxt
    store = f"st({dst}, {vecs[0]});" if len(accs) == VL else f"stn({dst}, {vecs[0]}, {len(accs)});"
    return lines + [indent + store]


TILE_D = 24
"""Most accumulators (pixels x input channels) of a K-lane input-gradient tile."""


def _dgrad_klane_source(pl: Plan) -> str:
    """Input gradient for K a multiple of 16: one 16-lane accumulator per (dx pixel, channel)
    summing ``dy[oh, ow, k-block] * w[k-block, i, j, c]`` over the taps that reach it, then a
    shuffle tree turns 16 accumulators into 16 totals stored contiguously (NHWC dx)."""
    if pl.c <= TILE_D:
        groups = [(w0, w1, 0, pl.c) for w0, w1 in _tiles(pl.w, max(1, TILE_D // pl.c))]
    else:
        groups = [(w, w + 1, c0, min(pl.c, c0 + VL)) for w in range(pl.w) for c0 in range(0, pl.c, VL)]
    out = []
    for w0, w1, c0, c1 in groups:
        pix = list(range(w0, w1))
        accs = {(x, c): f"a{x - w0}_{c}" for x in pix for c in range(c0, c1)}
        lines = ["      {", "        " + " ".join(f"vf {a} = {{0}};" for a in accs.values())]
        body = []
        for j in range(pl.k):
            valid = [(x, (x + pl.p - j) // pl.s) for x in pix
                     if (x + pl.p - j) % pl.s == 0 and 0 <= (x + pl.p - j) // pl.s < pl.wo]
            if not valid:
                continue
            body.append("            {")
            body += [f"              const vf d{x - w0} = ld(dr + {ow * pl.kout} + kb);" for x, ow in valid]
            body.append(f"              const float* wj = wr + {j * pl.c * pl.kout} + kb;")
            for c in range(c0, c1):
                body.append(f"              {{ const vf wv = ld(wj + {c * pl.kout});")
                body += [f"                {accs[x, c]} += d{x - w0} * wv;" for x, _ in valid]
                body.append("              }")
            body.append("            }")
        if body:
            lines.append("""        for (int oh = ohlo; oh <= ohhi; oh++) {
          const int i = rp - oh * S;
          const float* dr = dyn + (long)oh * WO * K;
          const float* wr = wd + (long)i * KS * C * K;
          for (int kb = 0; kb < K; kb += 16) {""")
            lines += body
            lines.append("          }\n        }")
        names = list(accs.values())
        for g0 in range(0, len(names), VL):
            lines += _reduce_code(names[g0:g0 + VL], f"xr + {w0 * pl.c + c0 + g0}", "        ", str(g0 // VL))
        lines.append("      }")
        out.append("\n".join(lines))
    tiles = "\n".join(out)
    return f"""
void tr_dgrad(const float* restrict dy, const float* restrict w, float* restrict dx, float* restrict scratch,
              long n0, long n1) {{
  float* restrict wd = scratch;
  const vf zero = {{0}};
  for (int t = 0; t < KS * KS; t++)
    for (int c = 0; c < C; c++)
      for (int kk = 0; kk < K; kk++) wd[((long)t * C + c) * K + kk] = w[((long)kk * KS * KS + t) * C + c];
  for (long n = n0; n < n1; n++) {{
    const float* dyn = dy + n * HO * WO * K;
{_DX_ROW}{tiles}
    }}
  }}
}}
"""


def source(pl: Plan) -> str:
    """The C source of the forward, weight-gradient (+ fold) and input-gradient kernels of ``pl``."""
    consts = dict(H=pl.h, W=pl.w, C=pl.c, K=pl.kout, KS=pl.k, S=pl.s, PD=pl.p, HP=pl.hp, WP=pl.wp, HO=pl.ho,
                  WO=pl.wo, UX=pl.ux, XR=pl.xr, PK=pl.pk, XE_SIZE=pl.xe_size, G_SIZE=pl.g_size, UPAD=pl.upad,
                  DR=pl.dr, PC=pl.pc, DE_SIZE=pl.de_size, WD_SIZE=pl.wd_size)
    head = "".join(f"#define {k} {v}\n" for k, v in consts.items())
    return "/* tr-mlir compiled conv: " + repr(pl) + " */\n" + _PRELUDE + head + _fwd_source(pl) \
        + _wgrad_source(pl) + (_dgrad_klane_source(pl) if pl.bcast else _dgrad_source(pl))


@dataclass(frozen=True)
class Kernels:
    """The compiled functions of one geometry (``ctypes`` function pointers)."""

    plan: Plan
    fwd: ctypes._CFuncPtr
    wgrad: ctypes._CFuncPtr
    wfold: ctypes._CFuncPtr
    dgrad: ctypes._CFuncPtr


@functools.lru_cache(maxsize=256)
def kernels(pl: Plan) -> Kernels:
    """Compile (or load from the disk cache, :func:`._cc.load`) the kernels of ``pl``."""
    src = source(pl)
    return Kernels(pl,
                   _cc.function(src, "tr_fwd", [_VP, _VP, _VP, _VP, _L, _L]),
                   _cc.function(src, "tr_wgrad", [_VP, _VP, _VP, _L, _L]),
                   _cc.function(src, "tr_wfold", [_VP, _L, _L, _VP]),
                   _cc.function(src, "tr_dgrad", [_VP, _VP, _VP, _VP, _L, _L]))


# ------------------------------------------------------------------------------------------
# Python entry points (called by .conv when its dispatch rule picks the compiled path)
# ------------------------------------------------------------------------------------------


def _split(g, tmp: np.ndarray | None) -> tuple[list[tuple[int, int]], int, np.ndarray]:
    """Image ranges of the threads, the slot size and the scratch (:func:`._util.take` checks that
    ``tmp`` is a large enough contiguous fp32 workspace, raising ``ValueError`` otherwise)."""
    t = max(1, min(_parallel.workers(), slots(g)))
    size = slot_elements(g)
    if tmp is None:
        raise ValueError(f"expected a workspace of >= {t * size} float32 elements (tmp) for a compiled conv, got None")
    flat = take(tmp, (t * size,))
    bounds = [g.n * i // t for i in range(t + 1)]
    return list(zip(bounds, bounds[1:])), size, flat


def _addr(a: np.ndarray) -> int:
    return a.ctypes.data


def _check(g, **arrays: tuple[np.ndarray, tuple[int, ...]]) -> None:
    """Raise ``ValueError`` unless every array ``name=(array, shape)`` is fp32, C-contiguous and
    of exactly ``shape`` (the kernels index raw pointers with ``g``'s compile-time sizes: an
    array of another shape would be read or written out of bounds)."""
    for name, (a, shape) in arrays.items():
        if a.shape != shape or a.dtype != np.float32 or not a.flags.c_contiguous:
            raise ValueError(f"expected {name} of the compiled conv to be a C-contiguous float32 array of shape "
                             f"{shape}, got {a.dtype} {a.shape}{'' if a.flags.c_contiguous else ' (strided)'}")


def _forward_pieces(x: np.ndarray, w: np.ndarray, y: np.ndarray, g, tmp: np.ndarray):
    _check(g, x=(x, g.x_shape), w=(w, g.w_shape), y=(y, g.y_shape))
    kern = kernels(plan(g))
    ranges, size, flat = _split(g, tmp)
    px, pw, py, pt = _addr(x), _addr(w), _addr(y), _addr(flat)
    return kern.fwd, [(px, pw, py, pt + 4 * s * size, lo, hi) for s, (lo, hi) in enumerate(ranges)]


def forward(x: np.ndarray, w: np.ndarray, y: np.ndarray, g, tmp: np.ndarray) -> None:
    """y (N, Ho, Wo, K) = conv(x (N, H, W, C), w (K, k, k, C)), all fp32 contiguous; ``tmp``: fp32
    scratch of :func:`workspace_elements` elements. Raises ``ValueError`` when an array does not
    have ``g``'s shape (:func:`_check`) or ``tmp`` is too small."""
    _parallel.run_c(*_forward_pieces(x, w, y, g, tmp))


def forward_call(x: np.ndarray, w: np.ndarray, y: np.ndarray, g, tmp: np.ndarray) -> Callable[[], None]:
    """:func:`forward` on these arrays as a ready zero-argument call (:func:`._prepared.c_call`:
    the checks and pieces made now, for the thread count in force now); ``ValueError`` as
    :func:`forward`."""
    return _prepared.c_call(*_forward_pieces(x, w, y, g, tmp))


def _wgrad_pieces(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g, tmp: np.ndarray):
    _check(g, dy=(dy, g.y_shape), x=(x, g.x_shape), dw=(dw, g.w_shape))
    kern = kernels(plan(g))
    ranges, size, flat = _split(g, tmp)
    pdy, px, pt = _addr(dy), _addr(x), _addr(flat)
    base = (pt + 63) & ~63  # tr_wgrad aligns each slot's start to 64 bytes (slots are 64-byte multiples)
    fold = (base + 4 * kern.plan.xe_size, size, len(ranges), _addr(dw))
    return kern.wgrad, [(pdy, px, pt + 4 * s * size, lo, hi) for s, (lo, hi) in enumerate(ranges)], kern.wfold, fold


def wgrad(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g, tmp: np.ndarray) -> None:
    """dw (K, k, k, C) = dL/dw (overwritten) from dy (N, Ho, Wo, K) and x (N, H, W, C), fp32
    (``ValueError`` as :func:`forward`)."""
    fn, pieces, wfold, fold = _wgrad_pieces(dy, x, dw, g, tmp)
    _parallel.run_c(fn, pieces)
    wfold(*fold)


def wgrad_call(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g, tmp: np.ndarray) -> Callable[[], None]:
    """:func:`wgrad` on these arrays as a ready call (as :func:`forward_call`)."""
    fn, pieces, wfold, fold = _wgrad_pieces(dy, x, dw, g, tmp)
    return _prepared.sequence(_prepared.c_call(fn, pieces), _prepared.c_call(wfold, [fold]))  # per image, then the slots summed


def _dgrad_pieces(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, g, tmp: np.ndarray):
    _check(g, dy=(dy, g.y_shape), w=(w, g.w_shape), dx=(dx, g.x_shape))
    kern = kernels(plan(g))
    ranges, size, flat = _split(g, tmp)
    pdy, pw, pdx, pt = _addr(dy), _addr(w), _addr(dx), _addr(flat)
    return kern.dgrad, [(pdy, pw, pdx, pt + 4 * s * size, lo, hi) for s, (lo, hi) in enumerate(ranges)]


def dgrad(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, g, tmp: np.ndarray) -> None:
    """dx (N, H, W, C) = dL/dx (overwritten) from dy and w, fp32; dx may be x's buffer
    (``ValueError`` as :func:`forward`)."""
    _parallel.run_c(*_dgrad_pieces(dy, w, dx, g, tmp))


def dgrad_call(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, g, tmp: np.ndarray) -> Callable[[], None]:
    """:func:`dgrad` on these arrays as a ready call (as :func:`forward_call`)."""
    return _prepared.c_call(*_dgrad_pieces(dy, w, dx, g, tmp))
