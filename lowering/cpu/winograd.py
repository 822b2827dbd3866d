"""Winograd minimal-filtering convolution (Lavin & Gray 2016) for 3x3, stride-1, dense convs.

Layouts as in :mod:`.conv`: x (N, H, W, C) NHWC, w (K, 3, 3, C) KRSC, y (N, Ho, Wo, K), padding
p in {0, 1}, any H, W (tiles reaching past the input or output are zero-padded). Two variants,
named as the algorithm-selection pass puts them in the kernel params (:data:`VARIANTS`):
``winograd_2x2_3x3`` (F(2x2, 3x3): 4x4 input tiles, 16 products per 2x2 output tile instead of
36) and ``winograd_4x4_3x3`` (F(4x4, 3x3): 6x6 tiles, 36 products per 4x4 tile instead of 144).

**The algorithm.** For F(m x m, 3x3) with alpha = m + 2, an output tile (m x m, at ``(m ty, m tx)``)
is ``y = A^T [sum_c U_c (.) V_c] A`` with ``U = G g G^T`` (the 3x3 filter of one (k, c) pair, alpha
x alpha) and ``V = B^T d B`` (the alpha x alpha input tile ``d`` at ``(m ty - p, m tx - p)``).
Gathering the P tiles of a chunk and the C channels, the sum over c is one GEMM per component
xi of the alpha^2: ``M[xi] (P x K) = V[xi] (P x C) @ U[xi] (C x K)``. The matrices come from the
Toom-Cook construction on the interpolation points :data:`POINTS` and infinity
(:func:`transform`: ``A^T`` rows are powers of the points, ``G`` rows the powers scaled by
``1 / prod_(j != i) (a_i - a_j)``, ``B^T`` rows the coefficients of ``prod_(j != i) (x - a_j)``
and, for the point at infinity, of ``prod_j (x - a_j)``); for F(2x2, 3x3) they are Lavin &
Gray's up to the signs and scales of matching rows of G and B^T.

* forward (:func:`forward`): transform w into U (``wbuf``), then chunk by chunk of tiles: input
  transform into V, the alpha^2 GEMMs into M, output transform into y. U is stored (C, K) per
  component, the GEMM's B operand as it is (:attr:`Plan.u_shape`): OpenBLAS's NN GEMM ran the
  ResNet-18 forwards 0.5-2.1 ms faster on one thread than the NT one on U stored (K, C) (Zen 5
  host, 2026-12-07: 64 @ 32x32 12.4 -> 10.5 ms, 128 @ 16x16 10.6 -> 9.0, 256 @ 8x8 11.6 -> 9.5,
  512 @ 4x4 13.4 -> 12.9, including the transpose of w the transform then reads, in ``col``);
* input gradient (:func:`dgrad`): the forward algorithm applied to dy zero-padded by 2 - p, with
  the filters rotated by 180 degrees and their channel axes swapped (the same identity conv.py's
  im2col input gradient uses; with U kept (K, C), which is its (CI, CO), the GEMM is NN too). It reads
  only dy and w, so dx may be x's buffer, and it writes every dx element once: no scatter-add of
  overlapping tiles, and the chunks of the two threads are independent;
* weight gradient (:func:`wgrad`): the adjoint, ``dU[xi] (K x C) = sum over tiles of dM[xi]^T
  V[xi]`` with ``dM = A dy_tile A^T`` (dy zero outside Ho x Wo), then ``dw = G^T dU G``.

**Threads and chunks.** The batch is cut into :data:`~._parallel.MAX_WORKERS` parts of
:attr:`Plan.part_images` images, and each part into chunks of :attr:`Plan.chunk_images` images
(alpha^2 x tiles x (C + K) fp32 elements, about :data:`CHUNK`, so the transformed tiles stay in
the L2/L3 cache between the transform and the GEMM that reads them), as even as whole images
allow. Forward and input gradient give each thread a part (on one thread, the parts in turn:
the same chunks), so the two threads get the same number of images. (Cutting the whole batch
into chunks and giving each thread half of them gave one thread 35 of ResNet-18's 64 images at
16x16x128, 7-image chunks, and 33 at 32x32 and 8x8: the other waited 6-20% of the pass.) The
part a thread gets is the half of the batch the split kernels before it (batch norm, ReLU,
residual adds) left in that core's cache. The exception is where U has :data:`U_UNCACHED`
elements or more (256 channels: 2.4M, 512: 9.4M; more than the share of the L3 cache a step leaves it, so each
thread's GEMMs would read all of U from memory for each of its chunks): there the chunk is the
whole batch (as many images as U has elements) and it runs in two phases: each thread takes a
block of the alpha rows of the components, transforms only those rows of every tile and runs
their GEMMs (so it reads its half of U, once, and only the V it wrote itself), then the output
transform is split by tiles. Against a chunk list per thread, the whole-batch chunk with its
components split (then in three phases: the input transform split by tiles, the GEMMs by
component, the output transform by tiles) took F(4x4, 3x3) forward plus input gradient of 512 @
4x4 from 168 to 124 ms (interleaved, load 5.8); 256 @ 8x8 was slower that way while the
forward's GEMMs were NT (120 -> 157 ms) and faster with NN ones (Zen 5 host, 2026-12-07, batch
64, one / two threads: forward 10.1 -> 8.8 / 5.1 -> 4.8 ms, input gradient 9.6 -> 8.4 / 4.9 ->
4.6 ms), and 128 @ 16x16 (U of 0.6M) is still much slower (two threads: 4.7 -> 8.0 ms). The
input transform split by tiles ran no faster on two threads than on one inside a step (each
thread's GEMMs then read V that the other core had written); transforming by rows instead took
these convs' forwards and input gradients from 67.5 to 66.8 ms on two threads in ResNet-18's
step and from 50.5 to 49.2 in ResNet-50's (per-kernel timing; the same bits: each GEMM and each
transformed row is the same computation). The weight gradient also gives each thread a block of
the alpha rows of the components: the thread transforms only its rows (the transforms are
separable, so that is half the work) and sums its components' GEMMs over all chunks, with
beta = 1 after the first: no partial sums, and each dU element is summed in one fixed order
whatever the thread count (the threads share one ``col`` slot: their rows are disjoint).
Chunk boundaries depend only on the shapes, so every result of the C path is the same bits
on one thread or two (the NumPy path's einsum follows OpenBLAS's threads). The transforms
are C generated for the plan (:mod:`._cwinograd`, through :mod:`._cc`), calling NumPy's
OpenBLAS ``cblas_sgemm`` for the GEMMs (:func:`._parallel.sgemm_address`); without a C
compiler (or ``TR_MLIR_CC=0``, or another BLAS) the same algorithm runs in NumPy
(:func:`numpy_forward`, :func:`numpy_wgrad`: the reference, one thread, per-chunk
temporaries). Both use the same workspaces.

**Precision.** fp32 operands compute directly. fp16 operands (AMP) are cast into fp32 workspaces
(``xbuf`` for x or dx, ``ybuf`` for y or dy, the tail of ``wbuf`` for w or dw), everything runs in
fp32, and the result is rounded to fp16 once, as in :mod:`.conv`.

**Numerical error.** A first-order bound in the style of Barabasz, Anderson, Soodhalter & Gregg
(2020, "Error analysis and improving the accuracy of Winograd convolution for deep neural
networks", ACM TOMS 46(4)), with u = 2^-24 and gamma_n = n u / (1 - n u): every stage is a
product of small matrices (``|fl(XY) - XY| <= gamma_n |X| |Y|`` for inner dimension n), so along a
path the errors add: the filter transform (two products of inner dimension 3, plus G's entries
rounded to fp32), the input transform (2 alpha), the product, the GEMM's sum over C and the
output transform (2 alpha). With ``|d| <= D`` and ``|g| <= w`` elementwise,

    |y_hat - y|[u, v] <= gamma_(C + 4 alpha + 9) * C D w * beta_u beta_v,
    beta_u = sum_i |A^T[u, i]| s_i r_i,  s = |G| 1 (row sums),  r = |B^T| 1,

because ``|G| 1 1^T |G|^T`` and ``|B^T| 1 1^T |B|`` are the outer products s s^T and r r^T. The
direct conv (im2col) has ``gamma_(9C) * 9 C D w``, so for large C the ratio of the bounds is
``max beta^2 / 81``: 64 / 81 for F(2x2, 3x3) (as accurate as im2col), and for F(4x4, 3x3) 876 / 81
with the points 0, -1, 1, 1/2, -2 against 2304 / 81 with Lavin & Gray's 0, +-1, +-2 (or 0, +-1,
+-1/2). Barabasz et al. list 0, -1, 1, 1/2, -2 among the best points for F(4, 3); it is
:data:`POINTS` (:func:`error_factor` computes beta). The bound is loose (random signs cancel),
so here is the measured error (``python -m bench.conv_algos --error``), max relative error
against a float64 direct conv, ``max |y - y64| / max |y64|``, standard normal x and w, fp32, batch
2, the ResNet-18 CIFAR shapes, p = 1 (the last two columns: the NumPy path on the other point
sets); it follows the bound's ratios:

===================  ========  ==========  ==========  ==============  ================
layer (C=K @ HxW)    im2col    F(2x2,3x3)  F(4x4,3x3)  F4 0, +-1, +-2  F4 0, +-1, +-1/2
===================  ========  ==========  ==========  ==============  ================
64 @ 32x32           6.1e-07   3.0e-07     2.0e-06     5.2e-06         5.3e-06
128 @ 16x16          5.5e-07   4.6e-07     3.1e-06     7.4e-06         8.5e-06
256 @ 8x8            4.7e-07   6.0e-07     2.9e-06     6.3e-06         6.3e-06
512 @ 4x4            4.1e-07   4.5e-07     3.2e-06     6.1e-06         4.9e-06
===================  ========  ==========  ==========  ==============  ================

The im2col path's error (one fp32 GEMM over 9C terms) is in the first column: F(2x2, 3x3) is as
accurate, F(4x4, 3x3) loses about one decimal digit; both are far inside AMP's fp16 rounding
(4.9e-4). Tests (``tests/test_winograd.py``) use a relative tolerance of :data:`RTOL` times the
maximum |y|.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from . import _cc, _cwinograd, _parallel, conv_stats
from ._util import F32, take
from ._util import as32 as _as32
from ._util import finish as _finish
from ._util import out32 as _out32

VARIANTS: dict[str, int] = {"winograd_2x2_3x3": 2, "winograd_4x4_3x3": 4}
"""Variant name (the kernel params' ``algo`` value) -> output tile size m of F(m x m, 3x3)."""

POINTS: dict[int, tuple[Fraction, ...]] = {
    2: (Fraction(0), Fraction(1), Fraction(-1)),
    4: (Fraction(0), Fraction(-1), Fraction(1), Fraction(1, 2), Fraction(-2)),
}
"""Finite interpolation points of F(m, 3) (the point at infinity is implicit); module doc."""

RTOL = {2: 5e-6, 4: 3e-5}
"""Relative error bound of the fp32 variants (max |error| / max |y|) used by the tests: the
module doc's measured maxima (up to 512 channels) with a margin of about 8x."""

CHUNK = 1 << 20
"""Target fp32 elements of one thread's transformed tiles (V and M of one chunk: 4 MiB)."""

U_UNCACHED = 1 << 21
"""Elements of U (8 MiB of fp32, a quarter of the L3 cache) from which it is read from memory by
every chunk's GEMMs, so the components are split instead and the chunk grows to the batch
(:attr:`Plan.chunk_images`; module doc: 256 channels and up, measured)."""


@dataclass(frozen=True)
class Transform:
    """The matrices of F(m x m, 3x3) (float64): ``at`` (m, alpha), ``g`` (alpha, 3), ``bt``
    (alpha, alpha); ``y = at @ ((g @ w @ g.T) * (bt @ d @ bt.T)) @ at.T`` for one tile."""

    m: int
    at: np.ndarray
    g: np.ndarray
    bt: np.ndarray

    @property
    def alpha(self) -> int:
        return self.m + 2


def _poly(roots: list[Fraction]) -> list[Fraction]:
    """Coefficients (increasing powers) of ``prod (x - r)``."""
    c = [Fraction(1)]
    for q in roots:
        nxt = [Fraction(0)] * (len(c) + 1)
        for i, v in enumerate(c):
            nxt[i + 1] += v
            nxt[i] -= q * v
        c = nxt
    return c


@functools.lru_cache(maxsize=8)
def transform(m: int, points: tuple[Fraction, ...] | None = None) -> Transform:
    """The Toom-Cook matrices of F(m, 3) on ``points`` (default :data:`POINTS`) and infinity
    (module doc), computed in exact rationals. Raises ``ValueError`` for a wrong point count."""
    pts = list(POINTS[m] if points is None else points)
    alpha = m + 2
    if len(pts) != alpha - 1 or len(set(pts)) != len(pts):
        raise ValueError(f"expected {alpha - 1} distinct finite points for F({m}, 3), got {pts}")
    at = [[p ** i for p in pts] + [Fraction(int(i == m - 1))] for i in range(m)]
    g = []
    bt = []
    for i, p in enumerate(pts):
        others = [q for j, q in enumerate(pts) if j != i]
        f = Fraction(1)
        for q in others:
            f *= p - q
        g.append([p ** j / f for j in range(3)])
        bt.append(_poly(others) + [Fraction(0)])
    g.append([Fraction(0), Fraction(0), Fraction(1)])
    bt.append(_poly(pts))
    return Transform(m, *(np.array([[float(v) for v in row] for row in mat]) for mat in (at, g, bt)))


def error_factor(m: int, points: tuple[Fraction, ...] | None = None) -> float:
    """``max_u beta_u^2`` of F(m x m, 3x3) on ``points`` (module doc: the error bound's factor;
    the direct conv's is 81)."""
    tf = transform(m, points)
    beta = (np.abs(tf.at) * (np.abs(tf.g).sum(1) * np.abs(tf.bt).sum(1))).sum(1)
    return float(beta.max() ** 2)


def variant_tile(variant: str) -> int:
    """The output tile size m of a variant name; ``ValueError`` naming the known ones."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown Winograd variant {variant!r}; expected one of {sorted(VARIANTS)}")
    return VARIANTS[variant]


def applicable(g) -> bool:
    """Whether conv geometry ``g`` (:class:`.conv.ConvGeom`) can run as Winograd: 3x3, stride 1,
    groups = 1, padding 0 or 1, a non-empty output."""
    win = g.win
    return g.groups == 1 and win.k == 3 and win.s == 1 and win.p in (0, 1) and win.ho >= 1 and win.wo >= 1


@dataclass(frozen=True)
class Plan:
    """One forward-style Winograd pass: input (n, h, w, cin) zero-padded by ``pad``, output
    (n, h + 2 pad - 2, w + 2 pad - 2, cout); the weights are (kw, 3, 3, cw) KRSC, rotated by
    180 degrees when ``flip`` (the input gradient's plan, cin = kw)."""

    m: int
    n: int
    h: int
    w: int
    cin: int
    cout: int
    pad: int
    kw: int
    cw: int
    flip: bool

    @property
    def transform(self) -> Transform:
        return transform(self.m)

    @property
    def alpha(self) -> int:
        return self.m + 2

    @property
    def ho(self) -> int:
        return self.h + 2 * self.pad - 2

    @property
    def wo(self) -> int:
        return self.w + 2 * self.pad - 2

    @property
    def th(self) -> int:
        return -(-self.ho // self.m)

    @property
    def tw(self) -> int:
        return -(-self.wo // self.m)

    @property
    def tiles(self) -> int:
        return self.n * self.th * self.tw

    @property
    def chunk_images(self) -> int:
        """Images per chunk (module doc): about :data:`CHUNK` transformed elements, cutting each
        of the :attr:`parts` into chunks as even as whole images allow; with
        :attr:`split_components`, as many images as U has elements (the whole batch of a
        ResNet's 512-channel layer)."""
        per = self.alpha ** 2 * self.th * self.tw * (self.cin + self.cout)
        if self.split_components:
            return max(1, min(self.n, self.u_elements // per))
        share = self.part_images
        n = max(1, min(share, CHUNK // per))
        return -(-share // -(-share // n))

    @property
    def part_images(self) -> int:
        """Images per part of the forward-style pass (module doc): a
        :data:`~._parallel.MAX_WORKERS`-th of the batch, rounded up."""
        return -(-self.n // _parallel.MAX_WORKERS)

    @property
    def parts(self) -> list[tuple[int, int]]:
        """The tile ranges ``[t0, t1)`` of the forward-style pass's parts (module doc): one per
        :data:`~._parallel.MAX_WORKERS` thread, :attr:`part_images` images each (the last may
        have fewer, none is empty)."""
        tpi, k = self.th * self.tw, self.part_images
        return [(s * tpi, min(s + k, self.n) * tpi) for s in range(0, self.n, k)]

    @property
    def u_elements(self) -> int:
        return self.alpha ** 2 * self.cin * self.cout

    @property
    def u_shape(self) -> tuple[int, int, int]:
        """The layout of U: (alpha^2, cin, cout), each component the B operand of its GEMM
        ``M[xi] = V[xi] @ U[xi]`` as it is (module doc)."""
        return self.alpha ** 2, self.cin, self.cout

    @property
    def split_components(self) -> bool:
        """Whether the forward-style pass splits the components among the threads rather than
        the chunks (module doc): U of :data:`U_UNCACHED` elements or more."""
        return self.u_elements >= U_UNCACHED

    def slots(self, phase: str) -> int:
        """Slots of ``col`` for ``phase``: one per thread, or one shared (the weight gradient's
        threads write disjoint component rows; :attr:`split_components` splits within a chunk)."""
        return 1 if phase == "wgrad" or self.split_components else _parallel.MAX_WORKERS

    @property
    def chunk_tiles(self) -> int:
        return self.chunk_images * self.th * self.tw

    @property
    def pad_elements(self) -> int:
        """The NumPy path's zero-padded copy of one chunk (the input, or dy in the weight gradient)."""
        ci = self.chunk_images
        return ci * max((self.th * self.m + 2) * (self.tw * self.m + 2) * self.cin,
                        self.th * self.m * self.tw * self.m * self.cout)

    @property
    def slot_elements(self) -> int:
        """One thread's slot of ``col``: V and M (or dM) of a chunk, then the NumPy path's padding."""
        return self.alpha ** 2 * self.chunk_tiles * (self.cin + self.cout) + self.pad_elements


def fwd_plan(g, m: int) -> Plan:
    """The plan of the forward (and weight gradient) of conv geometry ``g``."""
    win = g.win
    return Plan(m, g.n, win.h, win.w, g.c, g.k_out, win.p, g.k_out, g.c, False)


def dgrad_plan(g, m: int) -> Plan:
    """The plan of the input gradient: a conv of dy (padding 2 - p) giving (N, H, W, C)."""
    win = g.win
    return Plan(m, g.n, win.ho, win.wo, g.k_out, g.c, 2 - win.p, g.k_out, g.c, True)


def workspace_sizes(g, variant: str, *, x16: bool, w16: bool, y16: bool, dw16: bool = False,
                    phases: tuple[str, ...] = ("fwd", "wgrad", "dgrad")) -> dict[str, int]:
    """fp32 elements per workspace name for the ``phases`` of conv ``g`` as ``variant``:

    * ``wbuf``: U or dU (alpha^2 K C), then an fp32 copy of w (9 K C) when ``w16`` or of dw when ``dw16``;
    * ``col``: :meth:`Plan.slots` slots of :attr:`Plan.slot_elements` (the forward also transposes
      w there, as many channels at a time as fit, ahead of its weight transform);
    * ``xbuf``: x (fwd, wgrad) or dx (dgrad) in fp32 when ``x16``;
    * ``ybuf``: y or dy in fp32 when ``y16``.
    """
    m = variant_tile(variant)
    sizes: dict[str, int] = {}

    def need(name: str, n: int) -> None:
        sizes[name] = max(sizes.get(name, 0), n)

    a2kc = (m + 2) ** 2 * g.k_out * g.c
    for ph in phases:
        pl = dgrad_plan(g, m) if ph == "dgrad" else fwd_plan(g, m)
        cast = (w16 and ph != "wgrad") or (dw16 and ph == "wgrad")
        need("wbuf", a2kc + (9 * g.k_out * g.c if cast else 0))
        need("col", pl.slots(ph) * pl.slot_elements)
        if ph == "fwd":
            need("col", 9 * g.k_out)  # one channel of w transposed (:func:`_weights`; always less)
        if x16:
            need("xbuf", int(np.prod(g.x_shape)))
        if y16:
            need("ybuf", int(np.prod(g.y_shape)))
    return sizes


# --------------------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------------------


def compiled(*arrays: np.ndarray) -> bool:
    """Whether a pass over ``arrays`` (the fp32 operands after any cast) takes the C path (module
    doc): a C compiler (``TR_MLIR_CC`` not 0, re-read every call), NumPy's OpenBLAS GEMM found,
    and every array contiguous fp32. Otherwise the NumPy path runs."""
    if not all(a.dtype == F32 and a.flags.c_contiguous for a in arrays):
        return False
    return _cc.available() and _parallel.sgemm_address() is not None


def _wbuf(g, ws: dict[str, np.ndarray], m: int, cast: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """U / dU (alpha^2, K, C) and the fp32 copy of w or dw behind it (or None) in ``wbuf`` (the
    forward-style passes view U as their plan's :attr:`Plan.u_shape`)."""
    a2kc = (m + 2) ** 2 * g.k_out * g.c
    buf = take(ws.get("wbuf"), (a2kc + (9 * g.k_out * g.c if cast else 0),))
    return buf[:a2kc].reshape((m + 2) ** 2, g.k_out, g.c), (buf[a2kc:].reshape(g.w_shape) if cast else None)


def _weights(pl: Plan, w32: np.ndarray, u: np.ndarray, use_c: bool, scratch: np.ndarray | None = None) -> None:
    """U of plan ``pl`` (:attr:`Plan.u_shape`) from w32 (kw, 3, 3, cw): ``U[xi, c, k] = (G w[k, :, :, c]
    G^T)[xi]`` for the forward, ``U[xi, k, c]`` of w rotated by 180 degrees for the input
    gradient. The compiled forward transposes w into ``scratch`` (fp32, at least 9 kw elements:
    ``col``, free until the chunks start), as many channels at a time as it holds, so that its
    transform, like the input gradient's, reads and writes along the contiguous axis of U (module
    doc). Where the threads split the components (:attr:`Plan.split_components`) each transforms
    the component rows its GEMMs read next (``tr_wt_rows``, the blocks of :func:`_run_forward`'s
    phase 0), so U stays in that core's cache; the same bits (tests/test_winograd.py). Inside
    one process, 2 threads, 2026-12-07: 256 @ 8x8 forward 5.34 -> 5.18 ms, input gradient 4.84 ->
    4.68; 512 @ 4x4 6.76 -> 6.49 and 6.19 -> 5.95 (1 thread level). Raises ``ValueError`` for a
    missing or too small scratch."""
    if not use_c:
        numpy_weights(pl, w32, u)
        return
    kern = _kernels(pl)
    pw, pu = w32.ctypes.data, u.ctypes.data
    rows = pl.split_components  # each thread the component rows its GEMMs will read (_run_forward's phase 0)
    if pl.flip:
        if rows:
            _split_range(0, pl.alpha, kern.wt_rows, lambda lo, hi: (pw, pu, 0, pl.kw, lo, hi))
        else:
            _split_k(pl.kw, kern.wt, lambda lo, hi: (pw, pu, lo, hi), pl.cw)
        return
    per = 9 * pl.kw  # wT elements per channel
    wt = take(scratch, (per,))
    block = min(pl.cw, scratch.size // per)
    pt = wt.ctypes.data
    for c0 in range(0, pl.cw, block):
        c1 = min(c0 + block, pl.cw)
        # split along w's filters, then along U's channels: a thread's writes to a row of wT or
        # U (kw elements) lie in its own range, so the one-thread guard is on kw
        _split_k(pl.kw, kern.wtrans, lambda lo, hi, c0=c0, c1=c1: (pw, pt, c0, c1, lo, hi), pl.kw)
        if rows:
            _split_range(0, pl.alpha, kern.wt_rows, lambda lo, hi, c0=c0, c1=c1: (pt, pu, c0, c0, c1, lo, hi))
        else:
            _split_k(c1 - c0, kern.wt, lambda lo, hi, c0=c0: (pt, pu, c0, c0 + lo, c0 + hi), pl.kw)


def numpy_weights(pl: Plan, w32: np.ndarray, u: np.ndarray) -> None:
    """The NumPy weight transform of plan ``pl``: u (:attr:`Plan.u_shape`) from w32 (kw, 3, 3, cw), fp32."""
    gm = pl.transform.g.astype(np.float32)
    if pl.flip:
        np.copyto(u.reshape(pl.alpha, pl.alpha, pl.kw, pl.cw),
                  np.einsum("ir,krsc,js->ijkc", gm, w32[:, ::-1, ::-1, :], gm))
    else:
        np.copyto(u.reshape(pl.alpha, pl.alpha, pl.cw, pl.kw), np.einsum("ir,krsc,js->ijck", gm, w32, gm))


SPLIT_K_MIN_CHANNELS = 16
"""Fewest channels (``CW``) with which the weight transforms (``tr_wt``, ``tr_dwt``) are split
among the threads by filters. GCC's predictive commoning stored stale values past a filter
range (:data:`._cc.PRELUDE`, which now turns it off) and the other thread's writes were lost
with 1-4 channels, where a filter's row is under a cache line; this keeps such transforms,
which cost next to nothing, on one thread whatever a compiler does
(tests/test_winograd.py, ``test_weight_transforms_keep_every_write``)."""


def _split_k(k: int, fn, piece, channels: int) -> None:
    """The compiled kernel ``fn(*piece(lo, hi))`` over blocks of range(k), one per kernel thread
    when there are at least :data:`SPLIT_K_MIN_CHANNELS` ``channels``, else one call."""
    if channels < SPLIT_K_MIN_CHANNELS:
        with _parallel.one_thread():
            fn(*piece(0, k))
        return
    _split_range(0, k, fn, piece)


def _split_range(start: int, stop: int, fn, piece, fixed: int | None = None) -> None:
    """The compiled kernel ``fn(*piece(lo, hi))`` over contiguous blocks ``[lo, hi)`` of
    range(start, stop), one per kernel thread (:func:`_run_pieces`). ``fixed``: that many blocks
    whatever the thread count (one thread runs them in turn), and ``piece(lo, hi, i)`` with the
    block's index ``i``: blocks that keep partial sums of their own give the same bits on any
    thread count."""
    t = max(1, min(fixed or _parallel.workers(), stop - start))
    bounds = [start + (stop - start) * i // t for i in range(t + 1)]
    blocks = list(zip(bounds, bounds[1:]))
    pieces = [piece(lo, hi, i) if fixed else piece(lo, hi) for i, (lo, hi) in enumerate(blocks)]
    if _parallel.workers() >= len(pieces):
        _run_pieces(fn, pieces, [hi - lo for lo, hi in blocks])
        return
    with _parallel.one_thread():
        for p in pieces:
            fn(*p)


def _run_pieces(fn, pieces: list[tuple[int, ...]], work: list[int]) -> None:
    """The compiled kernel ``fn(*piece)`` for every piece at once, OpenBLAS at one thread (the
    kernels call ``cblas_sgemm`` themselves): two pieces on the calling thread and the C worker
    (:func:`._parallel.run_c`, no GIL; ``work``: each piece's amount for its balance check),
    otherwise, or while the threads are contended, on the Python kernel threads. Each piece
    writes only its own part of the result, so the thread that runs it does not change a bit.

    The C worker is the thread that ran the previous split kernel's second half (batch norm,
    ReLU, the element-wise kernels all split there), so a ResNet's conv finds its half of the
    batch in that core's cache; on the Python kernel threads, a third thread, the half moved."""
    with _parallel.one_thread():
        _parallel.run_c(fn, pieces, work=work)


def _kernels(pl: Plan) -> _cwinograd.Kernels:
    return _cwinograd.kernels(pl)


def _run_forward(pl: Plan, x32: np.ndarray, u: np.ndarray, y32: np.ndarray, ws: dict[str, np.ndarray],
                 use_c: bool, stats: tuple[np.ndarray, np.ndarray] | None = None, accumulate: bool = False) -> None:
    """y32 = the plan's conv of x32 with the transformed weights u, chunk by chunk (``accumulate``:
    y32 += it, each output value rounded to fp32 first, then one add); ``stats`` (``sum``,
    ``sq_sum``; not with ``accumulate``): also the batch-norm statistics of y32
    (:mod:`.conv_stats`), added per part as each chunk's output is written (compiled path) or
    summed over y32 after it (NumPy)."""
    if accumulate and stats is not None:
        raise ValueError("a Winograd pass writes batch-norm statistics or adds into its output, not both")
    slot = pl.slot_elements
    col = take(ws.get("col"), (pl.slots("fwd") * slot,))
    acc = int(accumulate)
    if not use_c:
        numpy_forward(pl, x32, u, y32, col[:slot], accumulate)
        if stats is not None:
            conv_stats.from_output(y32, *stats)
        return
    geo = _cwinograd.geometry(pl)
    pg = geo.ctypes.data
    sg, ilp = _parallel.sgemm_address()
    px, pu, py = x32.ctypes.data, u.ctypes.data, y32.ctypes.data
    if pl.split_components:
        part = _kernels(pl).part
        sts = conv_stats.partials(_parallel.MAX_WORKERS, pl.cout) if stats is not None else None
        for c0 in range(0, pl.tiles, pl.chunk_tiles):
            c1 = min(c0 + pl.chunk_tiles, pl.tiles)
            for phase, lo, hi in ((0, 0, pl.alpha), (1, c0, c1)):  # component rows, then tiles
                # the output transform with statistics in MAX_WORKERS fixed blocks, each with its own sums
                fixed = _parallel.MAX_WORKERS if sts is not None and phase == 1 else None
                _split_range(lo, hi, part, lambda a, b, w=0, phase=phase, c0=c0, c1=c1: (
                    pg, px, pu, py, col.ctypes.data, c0, c1, phase, a, b, sg, int(ilp),
                    sts[w].ctypes.data if sts is not None and phase == 1 else 0, acc), fixed)
        if sts is not None:
            conv_stats.combine(sts, *stats)
        return
    fn = _kernels(pl).fwd
    sts = conv_stats.partials(len(pl.parts), pl.cout) if stats is not None else [None] * len(pl.parts)
    pieces = [(pg, px, pu, py, col[w * slot:].ctypes.data, t0, t1, sg, int(ilp),
               0 if sts[w] is None else sts[w].ctypes.data, acc) for w, (t0, t1) in enumerate(pl.parts)]
    if _parallel.workers() >= len(pieces):
        _run_pieces(fn, pieces, [p[6] - p[5] for p in pieces])
    else:
        with _parallel.one_thread():  # one thread: the same parts, hence the same chunks and bits, in turn
            for p in pieces:
                fn(*p)
    if stats is not None:
        conv_stats.combine(sts, *stats)


def _pass(pl: Plan, src: np.ndarray, w: np.ndarray, dst: np.ndarray, ws: dict[str, np.ndarray],
          names: tuple[str, str], shapes: tuple[tuple[int, ...], tuple[int, ...]], g,
          stats: tuple[np.ndarray, np.ndarray] | None = None, accumulate: bool = False) -> None:
    """One forward-style pass of ``pl``: ``dst = conv(src, w)`` (``accumulate``: ``dst +=``; an
    fp16 dst read into its fp32 workspace first, the sum rounded once), src / dst cast through
    workspaces ``names`` (of ``shapes``) when fp16, w through the tail of ``wbuf``; ``stats``: also
    the batch-norm statistics of dst (:func:`_run_forward`; of the fp16 result after its rounding)."""
    src32 = _as32(src, ws, names[0], shapes[0])
    u, wcast = _wbuf(g, ws, pl.m, w.dtype != F32)
    w32 = w if wcast is None else wcast
    if wcast is not None:
        np.copyto(wcast, w)
    dst32 = _out32(dst, ws, names[1], shapes[1])
    if accumulate and dst.dtype != F32:
        np.copyto(dst32, dst.reshape(dst32.shape))
    use_c = compiled(src32, w32, dst32)
    u = u.reshape(pl.u_shape)
    _weights(pl, w32, u, use_c, ws.get("col"))  # col is free until the chunks: w transposed there
    in_place = dst.dtype == F32  # dst32 is dst (a view of it): the statistics of what is written
    _run_forward(pl, src32, u, dst32, ws, use_c, stats if in_place else None, accumulate)
    _finish(dst, dst32)
    if stats is not None and not in_place:
        conv_stats.from_output(dst, *stats)


def forward(x: np.ndarray, w: np.ndarray, y: np.ndarray, g, ws: dict[str, np.ndarray], variant: str,
            stats: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """y (N, Ho, Wo, K) = conv(x (N, H, W, C), w (K, 3, 3, C)) as ``variant`` for geometry ``g``
    (:func:`applicable` must hold), workspaces ``ws`` of :func:`workspace_sizes`. fp32, or fp16
    x / w / y with fp32 arithmetic. ``stats``: the fp32 (K,) ``sum`` and ``sq_sum`` of y to write
    as well (:mod:`.conv_stats`). Raises ``ValueError`` for an unknown variant or a too small
    workspace."""
    _pass(fwd_plan(g, variant_tile(variant)), x, w, y, ws, ("xbuf", "ybuf"), (g.x_shape, g.y_shape), g, stats)


def dgrad(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, g, ws: dict[str, np.ndarray], variant: str,
          accumulate: bool = False) -> None:
    """dx (N, H, W, C) = dL/dx from dy (N, Ho, Wo, K) and w, overwriting dx, as ``variant``
    (module doc: the forward algorithm on dy with rotated weights). Reads only dy and w, so dx
    may be x's buffer. ``accumulate``: ``dx += dL/dx``, each element of dL/dx rounded to fp32 as
    the overwriting form writes it, then one fp32 add: for fp32 dx the bits of this form followed
    by ``grad_acc`` (``memplan-fuse-grad-acc``). Dtypes and errors as :func:`forward`."""
    _pass(dgrad_plan(g, variant_tile(variant)), dy, w, dx, ws, ("ybuf", "xbuf"), (g.y_shape, g.x_shape), g,
          accumulate=accumulate)


def wgrad(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g, ws: dict[str, np.ndarray], variant: str) -> None:
    """dw (K, 3, 3, C) = dL/dw from dy (N, Ho, Wo, K) and x (N, H, W, C), overwriting dw, as
    ``variant`` (module doc). dw may be fp16 (the AMP copy): summed in fp32, rounded once."""
    m = variant_tile(variant)
    pl = fwd_plan(g, m)
    a = pl.alpha
    x32 = _as32(x, ws, "xbuf", g.x_shape)
    dy32 = _as32(dy, ws, "ybuf", g.y_shape)
    du, dwcast = _wbuf(g, ws, m, dw.dtype != F32 or not dw.flags.c_contiguous)
    dw32 = dw if dwcast is None else dwcast
    slot = pl.slot_elements
    col = take(ws.get("col"), (slot,))
    if compiled(x32, dy32, dw32):
        kern = _kernels(pl)
        sg, ilp = _parallel.sgemm_address()
        geo = _cwinograd.geometry(pl)
        pg = geo.ctypes.data
        t = max(1, min(_parallel.workers(), a))
        rows = [a * i // t for i in range(t + 1)]
        px, pdy, pdu = x32.ctypes.data, dy32.ctypes.data, du.ctypes.data
        pieces = [(pg, px, pdy, pdu, col.ctypes.data, pl.tiles, r0, r1, sg, int(ilp)) for r0, r1 in zip(rows, rows[1:])]
        _run_pieces(kern.wgrad, pieces, [r1 - r0 for r0, r1 in zip(rows, rows[1:])])
        _split_k(g.k_out, kern.dwt, lambda lo, hi: (pdu, dw32.ctypes.data, lo, hi), g.c)
    else:
        numpy_wgrad(pl, x32, dy32, du, col[:slot])
        gm = pl.transform.g.astype(np.float32)
        np.copyto(dw32, np.einsum("ir,ijkc,js->krsc", gm, du.reshape(a, a, g.k_out, g.c), gm))
    if dwcast is not None:
        np.copyto(dw, dw32, casting="same_kind")


# --------------------------------------------------------------------------------------
# the NumPy path (no C compiler): the same algorithm, one thread
# --------------------------------------------------------------------------------------


def _tiles_view(src: np.ndarray, pl: Plan, size: int, step: int) -> np.ndarray:
    """(n, TH, TW, size, size, C) overlapping tiles of a padded (n, Hq, Wq, C) array."""
    sn, sh, sw, sc = src.strides
    n = src.shape[0]
    return np.ndarray((n, pl.th, pl.tw, size, size, src.shape[3]), src.dtype, buffer=src,
                      strides=(sn, step * sh, step * sw, sh, sw, sc))


def _padded(a: np.ndarray, buf: np.ndarray, rows: int, cols: int, top: int) -> np.ndarray:
    """``a`` (n, h, w, C) zero-padded into ``buf`` as (n, rows, cols, C), ``top`` zero rows and
    columns before it."""
    n, h, w, c = a.shape
    dst = buf[:n * rows * cols * c].reshape(n, rows, cols, c)
    dst.fill(0)
    dst[:, top:top + h, top:top + w] = a
    return dst


def _sandwich(lm: np.ndarray, tiles: np.ndarray, rm: np.ndarray) -> np.ndarray:
    """``lm @ X @ rm.T`` for the tile matrices X of ``tiles`` (n, TH, TW, r, s, C) ->
    (i, j, n, TH, TW, C)."""
    t1 = np.tensordot(lm, tiles, axes=(1, 3))          # (i, n, TH, TW, s, C)
    t2 = np.tensordot(t1, rm, axes=(4, 1))             # (i, n, TH, TW, C, j)
    return t2.transpose(0, 5, 1, 2, 3, 4)


def _chunk_views(pl: Plan, scratch: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """V (alpha^2, P, cin), M (alpha^2, P, cout) and the padding scratch of an n-image chunk."""
    a2, p = pl.alpha ** 2, pl.chunk_tiles
    tiles = n * pl.th * pl.tw
    v = scratch[:a2 * p * pl.cin].reshape(a2, p, pl.cin)[:, :tiles]
    mm = scratch[a2 * p * pl.cin:a2 * p * (pl.cin + pl.cout)].reshape(a2, p, pl.cout)[:, :tiles]
    return v, mm, scratch[a2 * p * (pl.cin + pl.cout):]


def _input_chunk(pl: Plan, x32: np.ndarray, s: int, scratch: np.ndarray
                 ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Transform the input tiles of the chunk at image ``s`` into V: (images, V, M, padding)."""
    a, m = pl.alpha, pl.m
    bt = pl.transform.bt.astype(np.float32)
    xs = x32[s:s + pl.chunk_images]
    n = xs.shape[0]
    v, mm, pad = _chunk_views(pl, scratch, n)
    xp = _padded(xs, pad, pl.th * m + 2, pl.tw * m + 2, pl.pad)
    np.copyto(v.reshape(a, a, n, pl.th, pl.tw, pl.cin), _sandwich(bt, _tiles_view(xp, pl, a, m), bt))
    return n, v, mm, pad


def numpy_forward(pl: Plan, x32: np.ndarray, u: np.ndarray, y32: np.ndarray, scratch: np.ndarray,
                  accumulate: bool = False) -> None:
    """The NumPy forward of plan ``pl``: y32 (n, Ho, Wo, cout) from x32 (n, h, w, cin) and the
    transformed weights u (:attr:`Plan.u_shape`), fp32, chunk by chunk in ``scratch`` (one slot);
    ``accumulate``: added into y32."""
    a, m = pl.alpha, pl.m
    at = pl.transform.at.astype(np.float32)
    ub = u.reshape(pl.u_shape)
    for s in range(0, pl.n, pl.chunk_images):
        n, v, mm, pad = _input_chunk(pl, x32, s, scratch)
        np.matmul(v, ub, out=mm)
        yt = _sandwich(at, mm.reshape(a, a, n, pl.th, pl.tw, pl.cout).transpose(2, 3, 4, 0, 1, 5), at)
        full = yt.transpose(2, 3, 0, 4, 1, 5).reshape(n, pl.th * m, pl.tw * m, pl.cout)
        if accumulate:
            np.add(y32[s:s + n], full[:, :pl.ho, :pl.wo], out=y32[s:s + n])
        else:
            np.copyto(y32[s:s + n], full[:, :pl.ho, :pl.wo])


def numpy_wgrad(pl: Plan, x32: np.ndarray, dy32: np.ndarray, du: np.ndarray, scratch: np.ndarray) -> None:
    """The NumPy weight gradient in the transformed domain: du (alpha^2, cout, cin) = sum over
    tiles of dM^T V, dM = A dy_tile A^T, fp32, chunk by chunk in ``scratch`` (one slot)."""
    a, m = pl.alpha, pl.m
    at = pl.transform.at.astype(np.float32)
    for i, s in enumerate(range(0, pl.n, pl.chunk_images)):
        n, v, dm, pad = _input_chunk(pl, x32, s, scratch)
        dyp = _padded(dy32[s:s + n], pad, pl.th * m, pl.tw * m, 0)
        np.copyto(dm.reshape(a, a, n, pl.th, pl.tw, pl.cout), _sandwich(at.T, _tiles_view(dyp, pl, m, m), at.T))
        part = np.matmul(dm.transpose(0, 2, 1), v)
        if i == 0:
            np.copyto(du, part)
        else:
            np.add(du, part, out=du)
