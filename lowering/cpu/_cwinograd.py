"""Winograd convolution kernels as C generated for their exact shapes (:mod:`._cc`).

The math and the data layouts are :mod:`.winograd`'s (read its module doc first); this module
turns one :class:`~.winograd.Plan` into C source and calls it. Every transform is a *sandwich*
``Y = L X R^T`` of small constant matrices (:func:`sandwich`) applied to one tile and one block
of up to :data:`CB` channels, with the channel loop innermost: NHWC (and the ``(alpha^2, P, C)``
layout of the transformed tiles) makes the channels contiguous, so the compiler vectorizes that
loop and every tile element is a vector register. The constant coefficients are written into the
source and zero coefficients dropped (``B^T`` of F(4x4, 3x3) is half zeros).

Functions of one plan (tiles ``t`` numbered ``(n * TH + ty) * TW + tx``):

* ``tr_wt``: the weight transform ``(G w[k, :, :, c] G^T)[xi]``. The input gradient's plan,
  ``tr_wt(w, U, k0, k1)``: ``U[xi, k, c]`` of the filter rotated by 180 degrees, for ``k`` in
  ``[k0, k1)``, vectorized over the channels. The forward's, ``tr_wt(wT, U, base, k0, k1)``:
  ``U[xi, c, k]`` (each component the GEMM's B operand as it is, :mod:`.winograd`) for the
  channels ``c`` in ``[k0, k1)``, vectorized over the filters, reading ``wT`` (channels from
  ``base``), which ``tr_wtrans(w, wT, c0, c1, k0, k1)`` fills: the channels ``[c0, c1)`` of w
  with the filter and channel axes swapped, for the filters ``[k0, k1)``. ``tr_wt_rows`` takes
  two more arguments, ``r0, r1``, and writes only the components of the rows ``[r0, r1)`` of the
  alpha x alpha grid (each row's code as ``tr_wt``'s, so the same bits);
* ``tr_fwd(x, U, y, scratch, t0, t1, sgemm, ilp64, st, acc)``: tiles ``[t0, t1)`` in chunks of ``P``:
  input transform into ``V`` (``scratch``), one GEMM per component into ``M`` (behind ``V``), and
  the output transform into y. The GEMMs are ``cblas_sgemm`` calls of NumPy's OpenBLAS (its
  address from :func:`._parallel.sgemm_address`), at one thread (the caller holds it there).
  ``st`` (NULL: none): also the batch-norm statistics of the output, summed by the output
  transform while each element is in a register (``out_tiles_st``, :func:`sandwich`'s
  ``stats``), after the first tile an ``st`` sees (``tile_stats``, below, which also sets the
  pivot). ``acc`` (non-zero, with ``st`` NULL): the output transform adds into y instead
  (``out_tiles_acc``, :func:`sandwich`'s ``accumulate``: an input gradient added to the one
  already in dx);
* ``tr_part(x, U, y, scratch, c0, c1, phase, lo, hi, sgemm, ilp64, st, acc)``: one phase of the
  chunk of tiles ``[c0, c1)`` when the threads split the components
  (:attr:`.winograd.Plan.split_components`): 0, the component rows ``[lo, hi)`` of the input
  transform of every tile of the chunk, then those rows' GEMMs (components ``[lo A, hi A)``, as
  ``tr_wgrad`` takes its rows); 1, the output transform of tiles ``[lo, hi)`` (and their
  statistics into ``st``, or added into y under ``acc``);
* ``tile_stats(y, t0, t1, st)``: per output channel, ``count``, the pivot ``p`` (the first pixel
  of the first tile this ``st`` sees), ``s1 = sum (y - p)`` and ``s2 = sum (y - p)^2`` in double
  over the pixels of tiles ``[t0, t1)`` inside y, read back from y and added into ``st = {count,
  p[CO], s1[CO], s2[CO]}`` (:mod:`.conv_stats` combines the parts' ``st`` with Chan's formula);
  ``out_tiles_st`` adds the same sums, row of a tile by row, from the transform's registers;
* ``tr_wgrad(x, dy, dU, scratch, ntiles, r0, r1, sgemm, ilp64)``: every tile, but only the
  component rows ``[r0, r1)`` of the transforms and GEMMs: ``dU[xi] = sum over chunks of
  dM[xi]^T V[xi]`` (the GEMM's beta is 1 after the first chunk, so nothing is summed outside it).
  Two threads take disjoint rows, so each dU element is summed by one thread in one fixed order;
* ``tr_dwt(dU, dw, k0, k1)``: ``dw[k, :, :, c] = G^T dU[:, k, c] G`` for ``k`` in ``[k0, k1)``.

Flags are :data:`._cc.FLAGS` (no ``-ffast-math``): the sums are evaluated in the written order.
Nothing is allocated per call: the transforms read the operands in place (a pointer to a zero
block stands for a tile element outside the input, a stack sink takes an output element outside
y) and write into the caller's ``scratch``.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from . import _cc

if TYPE_CHECKING:
    from .winograd import Plan

CB = 64
"""Channels per block of a transform loop (one tile's alpha^2 blocks stay in L1)."""

_VP = ctypes.c_void_p
_L = ctypes.c_long

_PRELUDE = """#include <stdint.h>
#include <string.h>
typedef void (*sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                          const float *, int64_t, float, float *, int64_t);
typedef void (*sgemm32_t)(int, int, int, int32_t, int32_t, int32_t, float, const float *, int32_t,
                          const float *, int32_t, float, float *, int32_t);
static void gemm(void *f, long ilp64, int ta, int tb, long m, long n, long k, const float *a, long lda,
                 const float *b, long ldb, float beta, float *c, long ldc) {
  if (m <= 0 || n <= 0) return;
  if (ilp64) ((sgemm64_t)f)(101, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else ((sgemm32_t)f)(101, ta, tb, (int32_t)m, (int32_t)n, (int32_t)k, 1.0f, a, (int32_t)lda, b, (int32_t)ldb,
                      beta, c, (int32_t)ldc);
}
#if defined(__clang__)
#define IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define IVDEP _Pragma("GCC ivdep")
#else
#define IVDEP
#endif
static inline long lmin(long a, long b) { return a < b ? a : b; }
static const float tr_zero[CB] __attribute__((aligned(64)));
"""


def _lit(v: float) -> str:
    """A C float literal of ``v`` rounded to fp32 (exactly representable: printed in full)."""
    return repr(float(np.float32(v))) + "f"


def _term(coef: float, expr: str) -> str:
    if coef == 1.0:
        return f"+ {expr}"
    if coef == -1.0:
        return f"- {expr}"
    return f"{'-' if coef < 0 else '+'} {_lit(abs(coef))} * {expr}"


def _sum(terms: list[tuple[float, str]]) -> str:
    parts = [_term(c, e) for c, e in terms if c != 0.0]
    if not parts:
        return "0.0f"
    s = " ".join(parts)
    return s[2:] if s.startswith("+ ") else "-" + s[2:]


def sandwich(lm: np.ndarray, rm: np.ndarray, src: str, dst: str, indent: str, guard: bool = False,
             stats: bool = False, accumulate: bool = False) -> list[str]:
    """C lines of ``Y = L X R^T`` for one channel block: ``Y[i][j][c] = sum_r sum_s L[i][r]
    X[r][s][c] R[j][s]``, X read through pointers named ``{src}{r}_{s}``, Y written through
    ``{dst}{i}_{j}``, over ``c < cn`` (``IVDEP``: the pointers never overlap, which the compiler
    cannot prove for offsets of one array, and would otherwise test at run time or not
    vectorize). One channel loop per row ``i`` of Y (the row transform
    ``t[s] = sum_r L[i][r] X[r][s]``, then ``Y[i][j] = sum_s t[s] R[j][s]``), so a row's
    temporaries fit in registers; ``guard``: row ``i`` only when ``r0 <= i < r1``. ``stats``:
    also sum the values less the pivot (fp32 ``pf``, an output value; 0 where ``in{i}_{j}`` says
    the element lies outside y, a select, so a discarded element cannot make the sums NaN) into the
    float64 sums ``s1`` and ``s2`` of channel ``c0 + c``, while they are in registers
    (``tile_stats`` does it from memory, all in float64), each as an fp32 partial per tile (at
    most m x m = 16 terms, row by row through the block arrays ``a1`` / ``a2``) added once per tile:
    a partial errs by at most about 16 units of 2^-24 relative (a few, typically; the errors of
    different tiles are independent). Summing the squares per row in float64 instead cost the
    ResNet-18 convs 2-4x more (0.44-0.53 against 0.11-0.34 ms on one thread) for about half the
    error. ``accumulate``: ``Y[i][j] = Y[i][j] + v`` with ``v`` the plain form's expression, kept
    in a variable of its own: the bits of the plain form's output added to Y by ``grad_acc`` (one
    fp32 add, commutative; the sum is not contracted with the expression under ``-std=c99``, and
    the expression itself is the plain form's either way)."""
    ni, nr = lm.shape
    nj, ns = rm.shape
    out = []
    for i in range(ni):
        rows = [r for r in range(nr) if lm[i, r] != 0.0]
        out.append(f"{indent}if ({i} >= r0 && {i} < r1) {{" if guard else indent + "{")
        out.append(f"{indent}IVDEP")
        out.append(indent + "for (long c = 0; c < cn; c++) {")
        for s in range(ns):
            out.append(f"{indent}  const float t{s} = {_sum([(lm[i, r], f'{src}{r}_{s}[c]') for r in rows])};")
        for j in range(nj):
            value = _sum([(rm[j, s], f"t{s}") for s in range(ns)])
            if accumulate:
                out.append(f"{indent}  const float v{j} = {value};")
                out.append(f"{indent}  {dst}{i}_{j}[c] = {dst}{i}_{j}[c] + v{j};")
                continue
            if not stats:
                out.append(f"{indent}  {dst}{i}_{j}[c] = {value};")
                continue
            out.append(f"{indent}  const float v{j} = {value};")
            out.append(f"{indent}  {dst}{i}_{j}[c] = v{j};")
        if stats:
            out.append(f"{indent}  const float p = pf[c0 + c];")
            out += [f"{indent}  const float e{j} = in{i}_{j} ? v{j} - p : 0.0f;" for j in range(nj)]
            r1 = " + ".join(f"e{j}" for j in range(nj))
            r2 = " + ".join(f"e{j} * e{j}" for j in range(nj))
            if i == 0:
                out += [f"{indent}  a1[c] = {r1};", f"{indent}  a2[c] = {r2};"]
            elif i < ni - 1:
                out += [f"{indent}  a1[c] += {r1};", f"{indent}  a2[c] += {r2};"]
            else:
                out += [f"{indent}  s1[c0 + c] += (double)(a1[c] + {r1});",
                        f"{indent}  s2[c0 + c] += (double)(a2[c] + {r2});"]
        out.append(indent + "}}")
    return out


def _decl(prefix: str, n1: int, n2: int, expr, const: bool = True) -> list[str]:
    q = "const float* restrict" if const else "float* restrict"
    return [f"      {q} {prefix}{a}_{b} = {expr(a, b)};" for a in range(n1) for b in range(n2)]


def _tile_function(signature: str, rows: str, channels: str, src: list[str], dst: list[str], body: list[str],
                   sink: bool = False, prologue: str = "", epilogue: str = "") -> str:
    """A C function looping over tiles ``[t0, t1)`` (``n, ty, tx`` and ``q = t - base``, the
    tile's row in the chunk), then over blocks of ``channels`` (``c0``, ``cn``): the per-tile
    ``rows`` declarations, the ``src`` / ``dst`` pointers, the transform ``body``; ``sink``: stack
    blocks for outputs outside the array (one per tile element: restrict pointers never share one);
    ``prologue`` / ``epilogue``: C lines before and after the tile loop."""
    nl = "\n"
    return f"""
static void {signature} {{
  GEO
{"  float sink[MT * MT][CB] __attribute__((aligned(64)));" + nl if sink else ""}{prologue}  for (long t = t0; t < t1; t++) {{
    const long n = t / TPI, ty = (t % TPI) / TW, tx = t % TW, q = t - base;
{rows}    for (long c0 = 0; c0 < {channels}; c0 += CB) {{
      const long cn = lmin(CB, {channels} - c0);
{nl.join(src)}
{nl.join(dst)}
{nl.join(body)}
    }}
  }}
{epilogue}}}
"""


def _weight_function(signature: str, src: list[str], dst: list[str], body: list[str], inner: str = "CW") -> str:
    """A C function over ``k`` in ``[k0, k1)`` (the filters; the channels in the forward's
    transform, which reads w transposed) and blocks of the ``inner`` axis, the one the transform
    is vectorized over (contiguous in its source and destination)."""
    nl = "\n"
    return f"""
void {signature} {{
  for (long k = k0; k < k1; k++)
    for (long c0 = 0; c0 < {inner}; c0 += CB) {{
      const long cn = lmin(CB, {inner} - c0);
{nl.join(src)}
{nl.join(dst)}
{nl.join(body)}
    }}
}}
"""


_WT_FORMS = (("tr_wt", ""), ("tr_wt_rows", ", long r0, long r1"))


def source(pl: Plan) -> str:
    """The C source of the kernels of ``pl`` (module doc)."""
    tf = pl.transform
    a, m = tf.alpha, tf.m
    bt, at, g = tf.bt, tf.at, tf.g
    consts = dict(A=a, MT=m, CI=pl.cin, CO=pl.cout, KW=pl.kw, CW=pl.cw, CB=CB)
    head = "".join(f"#define {k} {v}\n" for k, v in consts.items()) + GEO_MACRO
    rows_in = "".join(f"    const long ih{r} = ty * MT - PD + {r}; const int ok{r}r = ih{r} >= 0 && ih{r} < H;\n"
                      f"    const long iw{r} = tx * MT - PD + {r}; const int ok{r}c = iw{r} >= 0 && iw{r} < W;\n"
                      for r in range(a))
    rows_out = "".join(f"    const long oh{u} = ty * MT + {u}; const int ok{u}r = oh{u} < HO;\n"
                       f"    const long ow{u} = tx * MT + {u}; const int ok{u}c = ow{u} < WO;\n" for u in range(m))
    # input transform: V = B^T d B, d the alpha x alpha input tile at (ty*MT - PD, tx*MT - PD)
    f_in = _tile_function(
        "in_tiles(const long* geo, const float* restrict x, float* restrict V, long t0, long t1, long base, "
        "int r0, int r1)",
        rows_in, "CI",
        _decl("s", a, a, lambda r, s: f"(ok{r}r && ok{s}c) ? x + ((n * H + ih{r}) * W + iw{s}) * CI + c0 : tr_zero"),
        _decl("d", a, a, lambda i, j: f"V + (({i * a + j}L * P + q) * CI) + c0", const=False),
        sandwich(bt, bt, "s", "d", "      ", guard=True))
    # output transform: y tile = A^T M A (only the part inside y is stored)
    out_args = "const long* geo, const float* restrict Mb, float* restrict y, long t0, long t1, long base"
    m_src = _decl("s", a, a, lambda i, j: f"Mb + (({i * a + j}L * P + q) * CO) + c0")
    y_dst = _decl("d", m, m, lambda u, v: f"(ok{u}r && ok{v}c) ? y + ((n * HO + oh{u}) * WO + ow{v}) * CO + c0 "
                                          f": sink[{u * m + v}]", const=False)
    f_out = _tile_function(f"out_tiles({out_args})", rows_out, "CO", m_src, y_dst,
                           sandwich(at, at, "s", "d", "      "), sink=True)
    # the same adding into y (an input gradient added to the one already there: memplan-fuse-grad-acc);
    # the sink blocks zeroed first, as they are read too
    f_out_acc = _tile_function(
        f"out_tiles_acc({out_args})", rows_out, "CO", m_src, y_dst,
        sandwich(at, at, "s", "d", "      ", accumulate=True), sink=True,
        prologue="  for (long e = 0; e < MT * MT; e++) for (long c = 0; c < CB; c++) sink[e][c] = 0.0f;\n")
    # the same with the batch-norm statistics of the elements inside y (sandwich's stats)
    factors = "".join(f"    const int in{u}_{v} = ok{u}r && ok{v}c;\n" for u in range(m) for v in range(m))
    counted = " + ".join(f"in{u}_{v}" for u in range(m) for v in range(m))
    f_out_st = _tile_function(
        f"out_tiles_st({out_args}, double* restrict st)",
        rows_out + factors + f"    count += {counted};\n", "CO", m_src, y_dst,
        sandwich(at, at, "s", "d", "      ", stats=True), sink=True,
        prologue="  float pf[CO] __attribute__((aligned(64)));\n"
                 "  float a1[CB] __attribute__((aligned(64))), a2[CB] __attribute__((aligned(64)));\n"
                 "  for (long c = 0; c < CO; c++) pf[c] = (float)st[1 + c];\n"
                 "  double* restrict s1 = st + 1 + CO;\n"
                 "  double* restrict s2 = st + 1 + 2 * CO;\n  double count = 0.0;\n",
        epilogue="  st[0] += count;\n")
    # output-gradient transform of the weight gradient: dM = A dy A^T (dy zero outside HO x WO)
    f_dy = _tile_function(
        "dy_tiles(const long* geo, const float* restrict dy, float* restrict D, long t0, long t1, long base, "
        "int r0, int r1)",
        rows_out, "CO",
        _decl("s", m, m, lambda u, v: f"(ok{u}r && ok{v}c) ? dy + ((n * HO + oh{u}) * WO + ow{v}) * CO + c0 : tr_zero"),
        _decl("d", a, a, lambda i, j: f"D + (({i * a + j}L * P + q) * CO) + c0", const=False),
        sandwich(at.T, at.T, "s", "d", "      ", guard=True))
    # weight transform U = G w G^T (w rotated by 180 degrees when pl.flip), and dw = G^T dU G
    def tap(r: int) -> int:
        return 2 - r if pl.flip else r

    dsrc = _decl("s", a, a, lambda i, j: f"dU + (({i * a + j}L * KW + k) * CW) + c0")
    ddst = _decl("d", 3, 3, lambda r, s: f"dw + ((k * 3 + {r}) * 3 + {s}) * CW + c0", const=False)
    # tr_wt, and tr_wt_rows: only the component rows [r0, r1) of U (the same code per row, so the
    # same bits), for the plans whose threads split the components (module doc)
    if pl.flip:  # U (alpha^2, KW, CW) from w rotated, vectorized over the CW channels
        f_w = "".join(_weight_function(
            f"{name}(const float* restrict w, float* restrict U, long k0, long k1{rows})",
            _decl("s", 3, 3, lambda r, s: f"w + ((k * 3 + {tap(r)}) * 3 + {tap(s)}) * CW + c0"),
            _decl("d", a, a, lambda i, j: f"U + (({i * a + j}L * KW + k) * CW) + c0", const=False),
            sandwich(g, g, "s", "d", "      ", guard=bool(rows))) for name, rows in _WT_FORMS)
    else:  # U (alpha^2, CW, KW) from wT (CW, 3, 3, KW), vectorized over the KW filters
        f_w = "".join(_weight_function(
            f"{name}(const float* restrict wT, float* restrict U, long base, long k0, long k1{rows})",
            _decl("s", 3, 3, lambda r, s: f"wT + (((k - base) * 9 + {r * 3 + s}) * KW) + c0"),
            _decl("d", a, a, lambda i, j: f"U + (({i * a + j}L * CW + k) * KW) + c0", const=False),
            sandwich(g, g, "s", "d", "      ", guard=bool(rows)), inner="KW") for name, rows in _WT_FORMS) \
            + TRANSPOSE_SOURCE
    f_dwt = _weight_function("tr_dwt(const float* restrict dU, float* restrict dw, long k0, long k1)", dsrc, ddst,
                            sandwich(g.T, g.T, "s", "d", "      "))
    # U is (CI, CO) per component in both plans (the forward's CI is the conv's C, the input
    # gradient's its K): the GEMMs' B operand as it is (module doc: NN)
    tb, ldb = 111, "CO"
    f_drv = f"""
/* batch-norm statistics of the output tiles [t0, t1) into st (module doc) */
static void tile_stats(const long* geo, const float* restrict y, long t0, long t1, double* restrict st) {{
  GEO
  if (t0 >= t1) return;
  double* restrict pv = st + 1;
  double* restrict s1 = st + 1 + CO;
  double* restrict s2 = st + 1 + 2 * CO;
  if (st[0] == 0.0) {{
    const long n = t0 / TPI, ty = (t0 % TPI) / TW, tx = t0 % TW;
    const float* restrict first = y + ((n * HO + ty * MT) * WO + tx * MT) * CO;
    for (long c = 0; c < CO; c++) pv[c] = (double)first[c];
  }}
  long count = 0;
  for (long t = t0; t < t1; t++) {{
    const long n = t / TPI, ty = (t % TPI) / TW, tx = t % TW;
    for (long u = 0; u < MT && ty * MT + u < HO; u++)
      for (long v = 0; v < MT && tx * MT + v < WO; v++) {{
        const float* restrict yr = y + ((n * HO + ty * MT + u) * WO + tx * MT + v) * CO;
        IVDEP
        for (long c = 0; c < CO; c++) {{ const double d = (double)yr[c] - pv[c]; s1[c] += d; s2[c] += d * d; }}
        count++;
      }}
  }}
  st[0] += (double)count;
}}

/* the output transform of tiles [t0, t1) (chunk base `base`), and with st their statistics: the
   pivot from the first tile an st sees (written, then read back by tile_stats), then in registers;
   acc: added into y (no statistics) */
static void out_stats(const long* geo, const float* restrict Mb, float* restrict y, long t0, long t1, long base,
                      double* restrict st, long acc) {{
  if (acc) {{ out_tiles_acc(geo, Mb, y, t0, t1, base); return; }}
  if (!st) {{ out_tiles(geo, Mb, y, t0, t1, base); return; }}
  if (t0 < t1 && st[0] == 0.0) {{
    out_tiles(geo, Mb, y, t0, t0 + 1, base);
    tile_stats(geo, y, t0, t0 + 1, st);
    t0++;
  }}
  out_tiles_st(geo, Mb, y, t0, t1, base, st);
}}

void tr_fwd(const long* geo, const float* restrict x, const float* restrict U, float* restrict y,
            float* restrict scratch, long t0, long t1, void* sg, long ilp64, double* restrict st, long acc) {{
  GEO
  float* restrict V = scratch;
  float* restrict Mb = scratch + (long)A * A * P * CI;
  for (long c0 = t0; c0 < t1; c0 += P) {{
    const long c1 = lmin(c0 + P, t1);
    in_tiles(geo, x, V, c0, c1, c0, 0, A);
    for (int xi = 0; xi < A * A; xi++)
      gemm(sg, ilp64, 111, {tb}, c1 - c0, CO, CI, V + (long)xi * P * CI, CI, U + (long)xi * CO * CI, {ldb}, 0.0f,
           Mb + (long)xi * P * CO, CO);
    out_stats(geo, Mb, y, c0, c1, c0, st, acc);
  }}
}}

void tr_part(const long* geo, const float* restrict x, const float* restrict U, float* restrict y,
             float* restrict scratch, long c0, long c1, long phase, long lo, long hi, void* sg, long ilp64,
             double* restrict st, long acc) {{
  GEO
  float* restrict V = scratch;
  float* restrict Mb = scratch + (long)A * A * P * CI;
  if (phase == 0) {{
    in_tiles(geo, x, V, c0, c1, c0, (int)lo, (int)hi);
    for (long xi = lo * A; xi < hi * A; xi++)
      gemm(sg, ilp64, 111, {tb}, c1 - c0, CO, CI, V + xi * P * CI, CI, U + xi * CO * CI, {ldb}, 0.0f,
           Mb + xi * P * CO, CO);
  }}
  if (phase == 1) out_stats(geo, Mb, y, lo, hi, c0, st, acc);
}}

"""
    f_wgrad = """
void tr_wgrad(const long* geo, const float* restrict x, const float* restrict dy, float* restrict dU,
              float* restrict scratch, long ntiles, long r0, long r1, void* sg, long ilp64) {
  GEO
  float* restrict V = scratch;
  float* restrict D = scratch + (long)A * A * P * CI;
  for (long c0 = 0; c0 < ntiles; c0 += P) {
    const long c1 = lmin(c0 + P, ntiles);
    in_tiles(geo, x, V, c0, c1, c0, (int)r0, (int)r1);
    dy_tiles(geo, dy, D, c0, c1, c0, (int)r0, (int)r1);
    for (long xi = r0 * A; xi < r1 * A; xi++)
      gemm(sg, ilp64, 112, 111, CO, CI, c1 - c0, D + xi * P * CO, CO, V + xi * P * CI, CI, c0 ? 1.0f : 0.0f,
           dU + xi * CO * CI, CI);
  }
}
"""
    # the weight gradient's functions run on the forward's plan only (the input gradient's is flipped)
    grad = "" if pl.flip else f_dy + f_dwt + f_wgrad
    title = f"/* tr-mlir Winograd conv: F({m}x{m}, 3x3), {pl.cin} -> {pl.cout} channels, flip={pl.flip} */\n"
    return title + head + _PRELUDE + f_in + f_out + f_out_acc + f_out_st + f_w + f_drv + grad


TRANSPOSE_SOURCE = """
/* wT (c1 - c0, 3, 3, KW) = the channels [c0, c1) of w (KW, 3, 3, CW) with the filter and channel
   axes swapped, over the filters [k0, k1): per tap, a (KW, c1 - c0) block of row stride 9 CW
   transposed into one of row stride 9 KW, by tiles of TB x TB elements (both sides' lines used
   whole while in L1) */
#define TB 16
void tr_wtrans(const float* restrict w, float* restrict wT, long c0, long c1, long k0, long k1) {
  const long nc = c1 - c0;
  for (long tap = 0; tap < 9; tap++) {
    const float* restrict src = w + tap * CW + c0;
    float* restrict dst = wT + tap * KW;
    for (long i0 = k0; i0 < k1; i0 += TB)
      for (long j0 = 0; j0 < nc; j0 += TB) {
        const long i1 = lmin(i0 + TB, k1), j1 = lmin(j0 + TB, nc);
        if (i1 - i0 == TB && j1 - j0 == TB) {
          for (long j = 0; j < TB; j++)
            for (long i = 0; i < TB; i++) dst[(j0 + j) * 9 * KW + i0 + i] = src[(i0 + i) * 9 * CW + j0 + j];
        } else {
          for (long j = j0; j < j1; j++)
            for (long i = i0; i < i1; i++) dst[j * 9 * KW + i] = src[i * 9 * CW + j];
        }
      }
  }
}
"""
"""C source of ``tr_wtrans`` (in the forward plan's sources only). The forward's transform then
reads the nine taps of a channel from one contiguous run of 9 KW elements: with wT laid out
(3, 3, CW, KW) they were nine streams a whole (CW, KW) matrix apart, 1 MiB at 512 channels, all
in one set of the L1 cache, and the transform took 3.3 ms instead of 2.9. Blocks of 16 x 16: a
(512, 4608) matrix transposed in 0.52 ms on one thread on the Zen 5 host (2026-12-07; blocks of
8: 1.80 ms, of 32: 0.54 ms; NumPy's transposed copy by blocks of 32 rows: 1.22 ms)."""


GEO_MACRO = """#define GEO const long H = geo[0], W = geo[1], HO = geo[2], WO = geo[3], PD = geo[4], TH = geo[5], \\
  TW = geo[6], P = geo[7], TPI = TH * TW; \\
  (void)H; (void)W; (void)HO; (void)WO; (void)PD; (void)TH; (void)TW; (void)P; (void)TPI;
"""
"""The run-time sizes of a plan (:func:`geometry`): the kernels are compiled per tile size,
channel counts and direction only, so convs differing in batch or map size share them."""


_geometries: dict[tuple[int, ...], np.ndarray] = {}


def geometry(pl: Plan) -> np.ndarray:
    """The ``geo`` array the kernels read (:data:`GEO_MACRO`), int64, one read-only array per set
    of values: its address is part of every split's arguments, which :func:`._parallel.run_c`
    keeps its job pairs by, so a replayed step finds them. (Keyed by the values, not the plan:
    the chunk size also depends on module settings such as :data:`.winograd.CHUNK`.)"""
    key = (pl.h, pl.w, pl.ho, pl.wo, pl.pad, pl.th, pl.tw, pl.chunk_tiles)
    geo = _geometries.get(key)
    if geo is None:
        if len(_geometries) >= 1024:
            _geometries.clear()
        geo = _geometries[key] = np.array(key, np.int64)
        geo.flags.writeable = False
    return geo


class Kernels:
    """The compiled functions of one plan (``ctypes`` function pointers)."""

    def __init__(self, src: str):
        fwd = "tr_wtrans" in src  # the forward's transpose of w ahead of its transform
        self.wt = _cc.function(src, "tr_wt", [_VP, _VP] + [_L] * (3 if fwd else 2))
        self.wt_rows = _cc.function(src, "tr_wt_rows", [_VP, _VP] + [_L] * (5 if fwd else 4))
        self.wtrans = _cc.function(src, "tr_wtrans", [_VP, _VP, _L, _L, _L, _L]) if fwd else None
        self.fwd = _cc.function(src, "tr_fwd", [_VP, _VP, _VP, _VP, _VP, _L, _L, _VP, _L, _VP, _L])
        self.part = _cc.function(src, "tr_part", [_VP, _VP, _VP, _VP, _VP, _L, _L, _L, _L, _L, _VP, _L, _VP, _L])
        grad = "tr_wgrad" in src  # not in the input gradient's (flipped) plan
        self.dwt = _cc.function(src, "tr_dwt", [_VP, _VP, _L, _L]) if grad else None
        self.wgrad = _cc.function(src, "tr_wgrad", [_VP, _VP, _VP, _VP, _VP, _L, _L, _L, _VP, _L]) if grad else None


_compiled: dict[tuple, Kernels] = {}


def kernels(pl: Plan) -> Kernels:
    """The kernels of ``pl``, compiled (or loaded from the disk cache, :func:`._cc.load`) once per
    tile size, channel counts and direction: the rest of the plan is run-time (:func:`geometry`)."""
    key = (pl.m, pl.cin, pl.cout, pl.kw, pl.cw, pl.flip)
    if key not in _compiled:
        _compiled[key] = Kernels(source(pl))
    return _compiled[key]
