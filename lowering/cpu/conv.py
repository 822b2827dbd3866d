"""2-D convolution: NHWC activations, KRSC weights ``(K, k, k, C/groups)``, no bias.

Convolutions with few channels (LeNet's, a 3 -> 64 stem; the rule and its measured basis are
:func:`compiled` / :func:`cc_geometry`) run as C kernels generated for their exact shapes
(:mod:`._cconv`, through :mod:`._cc`; ``TR_MLIR_CC=0`` or no C compiler: the NumPy code below).
Depthwise convolutions in fp32 run as the compiled kernels of :mod:`._cdepthwise`, which give the
``depthwise`` NumPy method's bits. Everything else, and AMP's fp16 operands, use the NumPy methods.

Three NumPy methods, chosen from the geometry:

* ``pointwise`` (1x1, stride 1, no padding, dense): one GEMM on the NHWC matrix, no im2col;
* ``depthwise`` (``groups = C = K``): a multiply-add per tap over the output, using a ``tmp``
  workspace of the output's size instead of a k*k times larger im2col matrix (fp32: the compiled
  kernels of :mod:`._cdepthwise`, the same bits, whose scratch in ``tmp`` is k*k*C per thread);
* ``im2col`` (everything else, grouped included): the windows are copied into ``col`` laid out
  ``(G, n, Ho, Wo, k, k, C/G)`` by one NumPy copy from a strided window view of the input (of a
  zero-padded copy of it, kept in the tail of the ``col`` workspace, when p > 0), then one
  batched ``np.matmul(..., out=...)`` over the G groups writes straight into the NHWC output. The
  single strided copy is 3-20x faster than one copy per tap (small C worst). The batch
  is processed in chunks of ``n`` images (:func:`chunk_images`: about :data:`COL_CHUNK` elements
  of ``col``, at least :data:`COL_MIN_ROWS` GEMM rows), so ``col`` stays in the L2/L3 cache
  between its write and the GEMM's read instead of going through memory (1.3-1.8x faster on the
  large early layers of a ResNet, and the shared ``col`` workspace shrinks accordingly). The
  batch is cut into :data:`~._parallel.MAX_WORKERS` parts (:func:`part_images`), each chunked
  on its own and run by one kernel thread (:mod:`._parallel`) with its own slot of ``col`` (and
  partial sum in ``wbuf``), so the copies run in parallel too; one thread runs them in turn (the
  chunk list shared round-robin gave one thread 35 of 64 images).

Input gradient: for stride 1 without groups (:func:`dgrad_geom`), dX is itself a convolution:
``dy`` zero-padded by ``k - 1 - p``, with the weights rotated by 180 degrees and their channel
axes swapped (``(C, k, k, K)``, formed in ``wbuf``), through the same im2col + GEMM path. That
replaces ``dcol = dy @ w`` followed by the k*k strided scatter-adds of ``col2im``. Strided and
grouped convolutions keep ``col2im``. Convolutions with few input channels (:func:`dgrad_tap_major`,
C < 16: LeNet's) form dcol tap-major instead, ``(k*k, n*Ho*Wo, C)`` by k*k small GEMMs, so each
tap's scatter-add moves whole (Wo, C) rows rather than C floats at a time (1.8x on LeNet's second
conv).

Winograd: ``algo`` ``winograd_2x2_3x3`` / ``winograd_4x4_3x3`` runs a 3x3 stride-1 dense conv
through :mod:`.winograd` (2.25x / 4x fewer multiplications than im2col; workspaces of
:func:`.winograd.workspace_sizes` under the same names). The forward may also write its output's
batch-norm statistics (:mod:`.conv_stats`): Winograd in its output pass, the rest after it.

Precision: fp32 arrays compute directly. When any of x, w, y is fp16 (AMP), the fp16 operands
are cast into fp32 workspaces (``col`` for x, ``wbuf`` for w, ``ybuf`` for y or dy, ``xbuf`` for
the dX accumulator), the GEMM and every accumulation run in fp32, and the result is rounded to
fp16 once. The weight gradient may be formed transposed in ``wbuf`` (the fast GEMM
orientation), then copied into dw. :func:`conv_workspace_sizes` gives the sizes. (These are the
CPU kernels' workspaces; the CUDA kernels need only ``wbuf``, for an fp16 dw: :func:`ws_bwd_cuda`.)

Algorithm selection: the kernels' static params ``algo`` (``conv_fwd`` / ``conv_inf``) and
``algo_dgrad`` / ``algo_wgrad`` (``conv_bwd`` / ``conv_bwd_first_layer``) name the algorithm of
each direction, a compile-time choice (``memplan-select-conv-algo``). ``auto`` (the default) is
the run-time rule above (:func:`compiled`, then :attr:`ConvGeom.method`), bit for bit; the other
values are the entries of :data:`ALGORITHMS` (``im2col``, ``pointwise``, ``depthwise``,
``direct``) and run that algorithm only (``direct``: the C kernels, or the NumPy method of the
geometry where no C compiler works, as ``auto``); the workspace rules size for the chosen one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from tr_mlir.dialects.kernels import AlgorithmTable

from . import _cc, _cconv, _cdepthwise, _parallel, _prepared_conv, conv_stats, winograd
from ._util import F32, nhwc, take
from .transpose import sum_transposed
from ._util import as32 as _as32
from ._util import finish as _finish
from ._util import out32 as _out32
from .registry import CUDA, ArrayInfo, kernel
from .window import Window, window

WORKSPACES = ("col", "wbuf", "ybuf", "xbuf", "tmp")

COL_CHUNK = 1 << 20
"""Target elements of one im2col chunk (4 MiB of fp32: inside the L3 cache, mostly in L2)."""

COL_MIN_ROWS = 512
"""Fewest GEMM rows (output pixels) per chunk: below this the GEMM itself loses efficiency."""


@dataclass(frozen=True)
class ConvGeom:
    """Shapes of one conv: input (N, H, W, C), K output channels, window, G groups."""

    n: int
    c: int
    k_out: int
    groups: int
    win: Window

    @property
    def cg(self) -> int:
        return self.c // self.groups

    @property
    def kg(self) -> int:
        return self.k_out // self.groups

    @property
    def m(self) -> int:
        """Output pixels N*Ho*Wo (the GEMM's row count)."""
        return self.n * self.win.ho * self.win.wo

    @property
    def kkc(self) -> int:
        return self.win.k * self.win.k * self.cg

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.win.h, self.win.w, self.c)

    @property
    def y_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.win.ho, self.win.wo, self.k_out)

    @property
    def w_shape(self) -> tuple[int, int, int, int]:
        return (self.k_out, self.win.k, self.win.k, self.cg)

    @property
    def method(self) -> str:
        w = self.win
        if w.k == 1 and w.s == 1 and w.p == 0 and self.groups == 1:
            return "pointwise"
        if self.groups == self.c == self.k_out and self.groups > 1:
            return "depthwise"
        return "im2col"


@functools.lru_cache(maxsize=4096)
def conv_geom(x_shape: tuple[int, ...], w_shape: tuple[int, ...], k: int, s: int, p: int, groups: int) -> ConvGeom:
    """Validate and describe a conv. Raises ``ValueError`` naming the mismatch."""
    n, h, w, c = nhwc(x_shape, "conv input")
    if groups < 1 or c % groups:
        raise ValueError(f"expected input channels ({c}) divisible by groups ({groups})")
    kk = int(w_shape[0])
    if kk % groups:
        raise ValueError(f"expected out channels ({kk}) divisible by groups ({groups})")
    expect = (kk, k, k, c // groups)
    if tuple(w_shape) != expect:
        raise ValueError(f"expected conv weight of shape (K, k, k, C/groups) = {expect}, got {tuple(w_shape)}")
    return ConvGeom(n, c, kk, groups, window(h, w, k, s, p))


def part_images(g: ConvGeom) -> int:
    """Images per part of the batch (module doc): a :data:`~._parallel.MAX_WORKERS`-th, rounded up."""
    return -(-g.n // _parallel.MAX_WORKERS)

def chunk_images(g: ConvGeom) -> int:
    """Images per im2col chunk of ``g`` (module doc): :data:`COL_MIN_ROWS` output pixels, else as
    many as fit in :data:`COL_CHUNK` col elements, at most a part, parts cut evenly."""
    pixels = g.win.ho * g.win.wo
    rows = max(COL_MIN_ROWS, COL_CHUNK // max(g.groups * g.kkc, 1))
    share = part_images(g)
    n = max(1, min(share, rows // max(pixels, 1)))
    return -(-share // -(-share // n))


def col_slots(g: ConvGeom) -> int:
    """Slots of ``col`` (and weight-gradient partial sums) for ``g``: one per part."""
    return -(-g.n // part_images(g))


def pad_elements(g: ConvGeom, n: int) -> int:
    """fp32 elements of the zero-padded copy of ``n`` input images (0 when p = 0)."""
    win = g.win
    return n * (win.h + 2 * win.p) * (win.w + 2 * win.p) * g.c if win.p else 0


def col_elements(g: ConvGeom) -> int:
    """Elements of one worker's slot of the ``col`` workspace for ``g``: the column matrix of
    one chunk plus the padded input copy behind it."""
    n = chunk_images(g)
    return g.groups * n * g.win.ho * g.win.wo * g.kkc + pad_elements(g, n)


DGRAD_AS_CONV_MIN_PIXELS = 65
"""Smallest output map (Ho*Wo) whose dX runs as a convolution: below it the padded copy of dy and
the rotated weights cost more than col2im's scatter-adds (measured: 8x8 and 4x4 maps lose 10-20%,
16x16 and larger gain 5-25%)."""


def dgrad_tap_major(g: ConvGeom) -> bool:
    """Whether dX of ``g`` is formed tap-major (module doc): an im2col conv without groups and
    with fewer than 16 input channels."""
    return g.method == "im2col" and g.groups == 1 and g.c < 16


def dgrad_geom(g: ConvGeom) -> ConvGeom | None:
    """The forward geometry computing dX of ``g`` as a convolution (module doc), or ``None``
    where that does not apply (stride > 1, groups > 1, padding beyond k - 1) or does not pay
    (fewer than 4 input channels: a GEMM that narrow is memory-bound; small maps, see
    :data:`DGRAD_AS_CONV_MIN_PIXELS`)."""
    win = g.win
    if (win.s != 1 or g.groups != 1 or win.p > win.k - 1 or g.c < 4 or dgrad_tap_major(g)
            or win.ho * win.wo < DGRAD_AS_CONV_MIN_PIXELS):
        return None
    return ConvGeom(g.n, g.k_out, g.c, 1, window(win.ho, win.wo, win.k, 1, win.k - 1 - win.p))


CC_MAX_C = 32
"""Most input channels of a compiled conv (:func:`cc_geometry`)."""

CC_MAX_K_EXPANDED = 16
"""Most output channels of a compiled conv whose K is not a multiple of 16 (the expanded-weight
kernels of :mod:`._cconv`; K = 20 and 24 measured no faster than NumPy)."""

CC_MAX_CK = 512
"""Most C*K of a compiled conv whose K is a multiple of 16 and above 16 (the broadcast-input
kernels: 3 -> 64, 8 -> 64, 4 -> 48 and 16 -> 32 measured faster; 32 -> 32 no faster in its input
gradient, 16 -> 64 and 32 -> 48 slower)."""


def cc_geometry(g: ConvGeom) -> bool:
    """The geometric half of :func:`compiled`: an im2col conv (k > 1, or strided or padded;
    groups = 1) with few channels: C <= :data:`CC_MAX_C` and either K <= :data:`CC_MAX_K_EXPANDED`
    or K a multiple of 16 with C*K <= :data:`CC_MAX_CK`; and the per-thread scratch within
    :data:`COL_CHUNK` elements.

    Measured basis: NumPy path / compiled, ms for the batch and speed-up, 2 kernel threads, best
    of 12 per kernel, both interleaved in one process on the benchmark's 2-core AMD EPYC (Zen 4,
    AVX-512), with the final kernels (load average about 1.2-1.7: other jobs on the cores);
    N, H=W, C -> K, k, s, p:

    =====================================  ==============  ==============  ==============
    geometry                               forward         weight grad     input grad
    =====================================  ==============  ==============  ==============
    LeNet conv1 128, 32, 1 -> 6, 5, 1, 0   1.04/0.34 3.1x  1.63/0.35 4.6x  4.21/0.68 6.2x
    LeNet conv2 128, 14, 6 -> 16, 5, 1, 0  0.75/0.39 1.9x  0.78/0.36 2.2x  1.48/0.42 3.5x
    64, 32, 3 -> 16, 3, 1, 1               1.14/0.36 3.2x  1.86/0.35 5.3x  2.06/0.41 5.0x
    64, 32, 16 -> 16, 3, 1, 1              3.74/1.46 2.6x  3.86/1.44 2.7x  3.73/2.29 1.6x
    64, 16, 16 -> 6, 3, 1, 1               1.00/0.39 2.6x  1.01/0.63 1.6x  0.60/0.33 1.8x
    64, 16, 16 -> 12, 3, 1, 1              1.14/0.57 2.0x  1.20/1.03 1.2x  0.81/0.49 1.7x
    64, 16, 8 -> 8, 3, 1, 1                0.83/0.34 2.4x  0.88/0.36 2.4x  1.00/0.66 1.5x
    64, 16, 16 -> 16, 3, 2, 1              0.49/0.22 2.2x  0.52/0.23 2.3x  1.04/0.29 3.6x
    64, 32, 16 -> 16, 1, 2, 0              0.34/0.22 1.5x  0.36/0.22 1.7x  0.51/0.26 2.0x
    64, 32, 24 -> 16, 3, 1, 1              4.62/2.13 2.2x  4.72/2.10 2.2x  4.51/2.33 1.9x
    64, 32, 32 -> 16, 3, 1, 1              6.10/2.84 2.1x  6.49/2.84 2.3x  5.25/4.51 1.2x
    64, 32, 16 -> 32, 3, 1, 1              5.27/3.74 1.4x  5.58/2.82 2.0x  6.22/3.16 2.0x
    64, 32, 3 -> 64, 3, 1, 1               2.57/1.56 1.6x  3.54/1.96 1.8x  6.10/1.29 4.7x
    64, 32, 8 -> 64, 3, 1, 1               5.33/3.17 1.7x  5.64/3.40 1.7x  8.74/3.93 2.2x
    64, 32, 4 -> 48, 3, 1, 1               2.76/1.11 2.5x  3.14/1.22 2.6x  6.17/1.20 5.1x
    excluded: 64, 16, 16 -> 24, 3, 1, 1    1.28/1.40 0.9x  1.34/1.41 1.0x  1.30/1.33 1.0x
    excluded: 64, 16, 16 -> 20, 3, 1, 1    1.25/1.04 1.2x  1.21/1.58 0.8x  1.29/1.11 1.2x
    excluded: 64, 16, 32 -> 32, 3, 1, 1    4.47/3.55 1.3x  4.63/2.64 1.8x  4.46/5.21 0.9x
    excluded: 64, 32, 16 -> 64, 3, 1, 1    8.71/7.02 1.2x  9.24/9.40 1.0x  11.3/12.3 0.9x
    excluded: 64, 16, 64 -> 32, 3, 1, 1    8.75/3.83 2.3x  5.08/3.33 1.5x  7.76/10.3 0.8x
    excluded: 64, 32, 64 -> 64, 3, 1, 1    28.6/26.5 1.1x  29.4/37.3 0.8x  28.7/54.8 0.5x
    excluded: 64, 16, 16 -> 16, 1, 1, 0    0.16/0.13 1.2x  0.23/0.14 1.6x  0.16/0.23 0.7x
    =====================================  ==============  ==============  ==============

    The last row is a pointwise conv (1x1, stride 1, no padding): NumPy runs it as one GEMM
    without im2col, which the compiled input gradient does not beat; pointwise and depthwise
    convs keep their NumPy methods. An earlier run of the same table (first kernel version,
    while another job held one core, so both sides ran on about one core) gave the same picture
    up to 16 channels (1.0-9x) and 0.9-1.1x for 16 -> 32 and 32 -> 16: with one core free
    the NumPy path's BLAS and the compiled kernels gain alike, so these borderline cases are
    about even there.

    Memory bound (not a speed rule): a compiled kernel's scratch per thread
    (:func:`._cconv.slot_elements`: K copies of one padded image when K is not a multiple of 16)
    must fit in :data:`COL_CHUNK` elements, the budget of one im2col chunk, so large images with
    K = 6 or 12 stay on the NumPy path rather than growing the ``tmp`` workspace past ``col``'s.
    """
    if g.groups != 1 or g.method != "im2col" or g.c > CC_MAX_C:
        return False
    k = g.k_out
    if k > CC_MAX_K_EXPANDED and (k % 16 or g.c * k > CC_MAX_CK):
        return False
    return _cconv.slot_elements(g) <= COL_CHUNK


def compiled(g: ConvGeom, *arrays: np.ndarray, accumulate: bool = False) -> bool:
    """THE dispatch rule between the compiled kernels of :mod:`._cconv` and the NumPy code of this
    module, for every conv phase (forward, weight gradient, input gradient).

    The compiled path runs when all of these hold:

    * :func:`cc_geometry`: groups = 1 and few channels (see below for the measured basis);
    * every array is fp32 and C-contiguous (AMP's fp16 operands keep the NumPy path, which
      converts them into fp32 workspaces);
    * the input gradient overwrites dx (``accumulate`` adds into it: NumPy path);
    * :func:`._cc.available`: a working C compiler and ``TR_MLIR_CC`` not ``0`` (re-read on
      every call, so ``TR_MLIR_CC=0`` switches back to NumPy at once).

    Everything else runs exactly the NumPy code. The ``tmp`` workspace the compiled kernels use
    is requested by :func:`conv_workspace_sizes` for every geometry passing :func:`cc_geometry`
    (fp32), whether or not a compiler is there, so either path can run on the same plan.
    """
    if accumulate or not cc_geometry(g):
        return False
    if not all(a.dtype == F32 and a.flags.c_contiguous for a in arrays):
        return False
    return _cc.available()


# ---- Algorithms (the compile-time choice of the kernels' algo params) ----

AUTO = "auto"
"""The algorithm value that leaves the choice to the run-time rule (:func:`compiled`, then
:attr:`ConvGeom.method`): the kernels' default."""

WINOGRAD = tuple(winograd.VARIANTS)
"""Winograd variants F(2x2, 3x3) and F(4x4, 3x3) (:mod:`.winograd`), entries of :data:`ALGORITHMS`."""

DIRECTIONS = {"algo": "fwd", "algo_dgrad": "dgrad", "algo_wgrad": "wgrad"}
"""Kernel param -> the direction whose algorithm it names (forward / input / weight gradient)."""


@dataclass(frozen=True)
class Algorithm:
    """One conv algorithm: its name and ``applicable(g, fp16)``: whether it computes every
    direction of geometry ``g`` (``fp16``: some operand is fp16, AMP)."""

    name: str
    applicable: Callable[[ConvGeom, bool], bool]


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("im2col", lambda g, fp16: True),  # windows copied into col, then a GEMM (grouped too)
    Algorithm("pointwise", lambda g, fp16: g.method == "pointwise"),  # 1x1, stride 1, no padding, dense
    Algorithm("depthwise", lambda g, fp16: g.method == "depthwise"),  # groups = C = K
    Algorithm("direct", lambda g, fp16: g.groups == 1 and not fp16),  # the C kernels of ._cconv: fp32 only
    # Winograd minimal filtering (.winograd): 3x3, stride 1, dense, p in {0, 1}; fp16 operands cast to fp32
    *(Algorithm(v, lambda g, fp16: winograd.applicable(g)) for v in WINOGRAD),
)}
"""Every algorithm the kernels run."""


def check_algorithm(name: str, g: ConvGeom, fp16: bool) -> None:
    """Raise ``ValueError`` naming ``name`` when it is not ``auto`` or an algorithm of
    :data:`ALGORITHMS` applicable to geometry ``g`` (``fp16``: AMP operands); the one
    availability check of the Winograd names."""
    if name == AUTO:
        return
    alg = ALGORITHMS.get(name)
    if alg is None:
        if name in WINOGRAD:
            raise ValueError(f"conv algorithm '{name}' is not available: the Winograd kernels are not in this build")
        raise ValueError(f"unknown conv algorithm '{name}', expected one of {[AUTO, *ALGORITHMS, *WINOGRAD]}")
    if not alg.applicable(g, fp16):
        win = g.win
        raise ValueError(f"conv algorithm '{name}' does not apply to the conv {g.c} -> {g.k_out} channels, "
                         f"k = {win.k}, s = {win.s}, p = {win.p}, groups = {g.groups}"
                         f"{' with fp16 operands' if fp16 else ''}")


def rule_algorithm(g: ConvGeom, fp16: bool) -> str:
    """The algorithm the run-time rule (``auto``) picks for ``g`` where a C compiler works: ``direct``
    where :func:`cc_geometry` holds and every operand is fp32, else :attr:`ConvGeom.method`."""
    return "direct" if cc_geometry(g) and not fp16 else g.method


def dispatch_method(g: ConvGeom, algo: str, *arrays: np.ndarray, accumulate: bool = False) -> str:
    """The method one call runs: ``direct`` (the C kernels) or a NumPy method. ``auto``: the
    run-time rule; ``direct``: the C kernels where fp32, contiguous and compilable, else the
    geometry's NumPy method (as ``auto``); any other name: itself."""
    if algo == AUTO:
        return "direct" if compiled(g, *arrays, accumulate=accumulate) else g.method
    if algo == "direct":
        ok = not accumulate and all(a.dtype == F32 and a.flags.c_contiguous for a in arrays) and _cc.available()
        return "direct" if ok else g.method
    return algo


def conv_workspace_sizes(g: ConvGeom, *, x16: bool, w16: bool, y16: bool, dw16: bool = False,
                         phases: tuple[str, ...] = ("fwd",), accumulate: bool = False,
                         algo: str | Mapping[str, str] = AUTO) -> dict[str, int]:
    """fp32 workspace element counts for the phases ``fwd``, ``wgrad``, ``dgrad`` of one conv.

    ``x16``/``w16``/``y16``/``dw16``: whether x (and dx), w, y (and dy), dw are fp16.
    ``accumulate``: dgrad adds into dx instead of overwriting it. ``algo``: the algorithm of
    every phase, or phase -> algorithm (absent: ``auto``); ``auto`` and ``direct`` size for the
    C kernels' ``tmp`` (``auto``: where :func:`cc_geometry` holds and all is fp32) and for the
    geometry's NumPy method (their fallback), any other algorithm for itself only. ``depthwise``
    (fp32) sizes ``tmp`` for both its NumPy products and the compiled kernels' scratch
    (:func:`._cdepthwise.scratch_elements`), so either can run on the same plan.
    """
    sizes: dict[str, int] = {}

    def need(name: str, n: int) -> None:
        sizes[name] = max(sizes.get(name, 0), n)

    mc, mk, xs, ws = g.m * g.c, g.m * g.k_out, int(np.prod(g.x_shape)), int(np.prod(g.w_shape))
    fp16 = x16 or w16 or y16 or dw16
    for ph in phases:
        alg = algo if isinstance(algo, str) else algo.get(ph, AUTO)
        check_algorithm(alg, g, fp16)
        if alg in winograd.VARIANTS:
            for name, n in winograd.workspace_sizes(g, alg, x16=x16, w16=w16, y16=y16, dw16=dw16,
                                                    phases=(ph,)).items():
                need(name, n)
            continue
        if alg == "direct" or (alg == AUTO and cc_geometry(g) and not fp16):
            need("tmp", _cconv.workspace_elements(g))  # the compiled kernels' per-thread scratch
        meth = g.method if alg in (AUTO, "direct") else alg
        if w16 or (ph == "wgrad" and (dw16 or meth != "depthwise")):
            need("wbuf", ws)
        if y16:
            need("ybuf", mk)
        if meth == "pointwise":
            if x16 and ph in ("fwd", "wgrad"):
                need("col", mc)
            if ph == "dgrad" and (x16 or y16 or w16 or accumulate):
                need("col", mc)
        elif meth == "depthwise":
            # NumPy's products, or (fp32) the compiled kernels' scratch: k*k*C per thread
            need("tmp", mk if fp16 else max(mk, _cdepthwise.scratch_elements(g)))
            if ph == "dgrad" and x16:
                need("xbuf", xs)
        else:
            gd = dgrad_geom(g) if ph == "dgrad" and not accumulate else None
            if ph != "dgrad":
                need("col", col_slots(g) * col_elements(g))
            elif gd is None:
                need("col", col_slots(g) * col_elements(g))
                if dgrad_tap_major(g):
                    need("wbuf", ws)  # the weights reordered (k, k, K, C)
            else:
                need("col", col_slots(gd) * col_elements(gd))
                need("wbuf", ws)  # the rotated, channel-swapped weights
            if ph == "wgrad" and chunk_images(g) < g.n:
                need("wbuf", 2 * col_slots(g) * ws)  # per worker: the sum and one chunk's product
            if ph == "dgrad" and x16:
                need("xbuf", xs)
    return sizes


def tap_major(g: ConvGeom) -> bool:
    """Whether ``col`` is laid out tap-major, ``(k*k, n*Ho*Wo)``, for ``g``: for one input
    channel (an image's first conv), where the pixel-major layout would copy one float at a time
    (each window row is k floats) and tap-major copies whole output rows (2-3x faster)."""
    return g.c == 1 and g.groups == 1


def col_matrix(col: np.ndarray, g: ConvGeom) -> np.ndarray:
    """The column matrix of ``col`` as (G, n*Ho*Wo, kkc), a transposed view when tap-major."""
    if tap_major(g):
        return col.reshape(-1)[:g.kkc * g.m].reshape(g.kkc, g.m).T[None]
    return col.reshape(g.groups, g.m, g.kkc)


def im2col(x: np.ndarray, col: np.ndarray, g: ConvGeom, pad: np.ndarray | None = None) -> None:
    """Copy the windows of ``x`` (n, H, W, C) into ``col`` (G, n, Ho, Wo, k, k, C/G), zeros
    outside the input: one copy from a strided window view (module doc); tap-major
    (:func:`tap_major`) for one input channel, read it with :func:`col_matrix`. ``pad``: fp32
    scratch of :func:`pad_elements` elements for the zero-padded copy (needed when p > 0)."""
    win = g.win
    n = x.shape[0]
    src = x
    if win.p:
        if pad is None:
            raise ValueError(f"expected a padding buffer of {pad_elements(g, n)} elements for p = {win.p}")
        hp, wp, p = win.h + 2 * win.p, win.w + 2 * win.p, win.p
        src = pad[:n * hp * wp * g.c].reshape(n, hp, wp, g.c)
        src[:, :p].fill(0)
        src[:, hp - p:].fill(0)
        src[:, p:hp - p, :p].fill(0)
        src[:, p:hp - p, wp - p:].fill(0)
        np.copyto(src[:, p:hp - p, p:wp - p], x, casting="same_kind")
    sn, sh, sw, sc = src.strides
    s = win.s
    view = np.ndarray((g.groups, n, win.ho, win.wo, win.k, win.k, g.cg), src.dtype, buffer=src,
                      strides=(g.cg * sc, sn, s * sh, s * sw, sh, sw, sc))
    if tap_major(g):
        dst = col.reshape(-1)[:g.kkc * n * win.ho * win.wo].reshape(win.k, win.k, n, win.ho, win.wo)
        np.copyto(dst, view[0, ..., 0].transpose(3, 4, 0, 1, 2), casting="same_kind")
        return
    np.copyto(col, view, casting="same_kind")


def col2im(col: np.ndarray, acc: np.ndarray, g: ConvGeom) -> None:
    """Add the taps of ``col`` (G, N, Ho, Wo, k, k, C/G) into ``acc`` (N, H, W, C)."""
    win = g.win
    ag = acc.reshape(g.n, win.h, win.w, g.groups, g.cg).transpose(3, 0, 1, 2, 4)
    for tap in win.taps:
        if not tap.empty:
            dst = ag[:, :, tap.ih, tap.iw, :]
            np.add(dst, col[:, :, tap.oh, tap.ow, tap.i, tap.j, :], out=dst)


def _col(g: ConvGeom, ws: dict[str, np.ndarray], n: int | None = None) -> np.ndarray:
    """The col workspace as (G, n, Ho, Wo, k, k, C/G) for a chunk of ``n`` images (default all)."""
    win = g.win
    return take(ws.get("col"), (g.groups, g.n if n is None else n, win.ho, win.wo, win.k, win.k, g.cg))


def _col_pad(g: ConvGeom, gc: ConvGeom, ws: dict[str, np.ndarray], slot: int = 0
             ) -> tuple[np.ndarray, np.ndarray | None]:
    """The col matrix of chunk ``gc`` (of ``g``) in worker slot ``slot`` and the padding scratch
    behind it."""
    win = gc.win
    size = col_elements(g)
    m = gc.groups * gc.n * win.ho * win.wo * gc.kkc
    buf = take(ws.get("col"), ((slot + 1) * size,))[slot * size:]
    col = buf[:m].reshape(gc.groups, gc.n, win.ho, win.wo, win.k, win.k, gc.cg)
    return col, (buf[m:m + pad_elements(gc, gc.n)] if win.p else None)


def _chunks(g: ConvGeom) -> list[list[tuple[int, int, ConvGeom]]]:
    """Per part (:func:`part_images`), its chunks ``(start, count, chunk geometry)``."""
    step, share = chunk_images(g), part_images(g)
    parts = []
    for p0 in range(0, g.n, share):
        p1 = min(p0 + share, g.n)
        sizes = [(s, min(step, p1 - s)) for s in range(p0, p1, step)]
        parts.append([(s, n, g if n == g.n else ConvGeom(n, g.c, g.k_out, g.groups, g.win)) for s, n in sizes])
    return parts


def _for_chunks(g: ConvGeom, body) -> int:
    """``body(start, count, chunk geometry, slot, first)`` over the chunks of ``g``, part ``w`` on
    thread ``w`` in slot ``w`` (``first``: its first chunk), or the parts in turn on one thread
    (the same chunks and partial sums). Returns the number of parts."""
    parts = _chunks(g)

    def worker(w: int) -> None:
        for i, (s, n, gc) in enumerate(parts[w]):
            body(s, n, gc, w, i == 0)

    if _parallel.workers() >= len(parts):
        _parallel.run([lambda w=w: worker(w) for w in range(len(parts))])
    else:
        for w in range(len(parts)):
            worker(w)
    return len(parts)


def _im2col_gemm(x: np.ndarray, w3t: np.ndarray, y4: np.ndarray, g: ConvGeom, ws: dict[str, np.ndarray]) -> None:
    """``y4`` (N, Ho, Wo, K) fp32 = conv of ``x`` with ``w3t`` (G, kkc, K/G) fp32, chunk by chunk."""

    def body(s: int, n: int, gc: ConvGeom, slot: int, first: bool) -> None:
        col, pad = _col_pad(g, gc, ws, slot)
        im2col(x[s:s + n], col, gc, pad)
        _parallel.matmul(col_matrix(col, gc), w3t,
                         out=y4[s:s + n].reshape(gc.m, g.groups, g.kg).transpose(1, 0, 2))

    _for_chunks(g, body)


def conv_forward(x: np.ndarray, w: np.ndarray, y: np.ndarray, g: ConvGeom, ws: dict[str, np.ndarray],
                 algo: str = AUTO, stats: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """y = conv(x, w) for geometry ``g`` with workspaces ``ws`` by algorithm ``algo`` (see the
    module doc; the caller checked it: :func:`check_algorithm`); ``stats``: also y's batch-norm
    ``(sum, sq_sum)`` (:mod:`.conv_stats`: in Winograd's output pass, else one pass after)."""
    if algo in winograd.VARIANTS and winograd.applicable(g):
        winograd.forward(x, w, y, g, ws, algo, stats)
        return
    if stats is not None:
        conv_forward(x, w, y, g, ws, algo)
        conv_stats.from_output(y, *stats)
        return
    meth = dispatch_method(g, algo, x, w, y)
    if meth == "direct":
        _cconv.forward(x, w, y, g, ws.get("tmp"))
        return
    if meth == "pointwise":
        x2 = _as32(x, ws, "col", (g.m, g.c))
        w2 = _as32(w, ws, "wbuf", (g.k_out, g.c))
        y2 = _out32(y, ws, "ybuf", (g.m, g.k_out))
        _parallel.matmul(x2, w2.T, out=y2)
        _finish(y, y2)
    elif meth == "depthwise":
        if _cdepthwise.usable(g, ws.get("tmp"), x, w, y):
            _cdepthwise.forward(x, w, y, g, ws["tmp"])
            return
        win = g.win
        acc = _out32(y, ws, "ybuf", g.y_shape)
        tmp = take(ws.get("tmp"), g.y_shape)
        wt = _as32(w, ws, "wbuf", (g.c, win.k * win.k))
        acc.fill(0)
        for tap in win.taps:
            if tap.empty:
                continue
            tv = tmp[:, tap.oh, tap.ow, :]
            np.multiply(x[:, tap.ih, tap.iw, :], wt[:, tap.t], out=tv)
            a = acc[:, tap.oh, tap.ow, :]
            np.add(a, tv, out=a)
        _finish(y, acc)
    else:
        w3 = _as32(w, ws, "wbuf", (g.groups, g.kg, g.kkc)).transpose(0, 2, 1)
        y4 = _out32(y, ws, "ybuf", g.y_shape)
        _im2col_gemm(x, w3, y4, g, ws)
        _finish(y, y4)


def _gemm_tn(a: np.ndarray, b: np.ndarray, dw: np.ndarray, g: ConvGeom, ws: dict[str, np.ndarray]) -> None:
    """dw[g] = b[g].T @ a[g] for a (G, M, kkc), b (G, M, Kg): the weight-gradient GEMM.

    Both operands are transposed along the long M axis. OpenBLAS runs such a GEMM several
    times faster when the output has more rows than columns, so the larger of Kg and kkc is
    made the row count: dw directly, or dw.T in ``wbuf`` and a transposed copy (:mod:`.transpose`)."""
    if g.kg >= g.kkc and dw.dtype == F32:
        _parallel.matmul(b.transpose(0, 2, 1), a, out=dw.reshape(g.groups, g.kg, g.kkc))
        return
    wt = take(ws.get("wbuf"), (g.groups, g.kkc, g.kg))
    _parallel.matmul(a.transpose(0, 2, 1), b, out=wt)
    sum_transposed(dw.reshape(g.groups, g.kg, g.kkc), [wt])  # by tiles (a strided copy: 2.6 ms at 2048 x 512)


def conv_wgrad(dy: np.ndarray, x: np.ndarray, dw: np.ndarray, g: ConvGeom, ws: dict[str, np.ndarray],
               algo: str = AUTO) -> None:
    """dw = dL/dw from the output gradient ``dy`` and the input ``x`` (overwrites dw), by ``algo``."""
    if algo in winograd.VARIANTS and winograd.applicable(g):
        winograd.wgrad(dy, x, dw, g, ws, algo)
        return
    if not dw.flags.c_contiguous:  # the paths below write dw through reshapes (a copy, lost, if it is not)
        raise ValueError(f"expected a C-contiguous dw of conv {g.x_shape} -> {g.y_shape}, got strides {dw.strides}")
    meth = dispatch_method(g, algo, dy, x, dw)
    if meth == "direct":
        _cconv.wgrad(dy, x, dw, g, ws.get("tmp"))
        return
    if meth == "depthwise" and _cdepthwise.usable(g, ws.get("tmp"), dy, x, dw):
        _cdepthwise.wgrad(dy, x, dw, g, ws["tmp"])
        return
    dy2 = _as32(dy, ws, "ybuf", (g.m, g.k_out))
    if meth == "pointwise":
        x2 = _as32(x, ws, "col", (g.m, g.c))
        _gemm_tn(x2.reshape(1, g.m, g.c), dy2.reshape(1, g.m, g.k_out), dw, g, ws)
    elif meth == "depthwise":
        win = g.win
        dy4 = dy2.reshape(g.y_shape)
        tmp = take(ws.get("tmp"), g.y_shape)
        dwt = _out32(dw, ws, "wbuf", (g.c, win.k * win.k))
        for tap in win.taps:
            if tap.empty:
                dwt[:, tap.t] = 0
                continue
            tv = tmp[:, tap.oh, tap.ow, :]
            np.multiply(dy4[:, tap.oh, tap.ow, :], x[:, tap.ih, tap.iw, :], out=tv)
            np.add.reduce(tv, axis=(0, 1, 2), out=dwt[:, tap.t])
        _finish(dw, dwt)
    elif chunk_images(g) == g.n:
        col, pad = _col_pad(g, g, ws)
        im2col(x, col, g, pad)
        _gemm_tn(col_matrix(col, g), dy2.reshape(g.m, g.groups, g.kg).transpose(1, 0, 2), dw, g, ws)
    else:
        _wgrad_chunked(dy2.reshape(g.y_shape), x, dw, g, ws)


def _wgrad_chunked(dy4: np.ndarray, x: np.ndarray, dw: np.ndarray, g: ConvGeom, ws: dict[str, np.ndarray]) -> None:
    """im2col weight gradient over batch chunks: dw = sum over chunks of col.T @ dy. Each chunk's
    product is formed in the fast orientation of :func:`_gemm_tn` (more rows than columns).
    Worker ``w`` sums its chunks in its own pair of ``wbuf`` blocks (the sum, one chunk's
    product); worker 0 sums into dw itself when that is fp32 and in the same orientation. The
    workers' sums are added in worker order and copied into dw (transposed: by blocks of rows)."""
    wn = g.groups * g.kg * g.kkc
    slots = col_slots(g)
    buf = take(ws.get("wbuf"), (2 * slots * wn,))
    direct = g.kg >= g.kkc
    shape = (g.groups, g.kg, g.kkc) if direct else (g.groups, g.kkc, g.kg)
    in_place = direct and dw.dtype == F32
    accs = [dw.reshape(shape) if in_place and w == 0 else buf[2 * w * wn:(2 * w + 1) * wn].reshape(shape)
            for w in range(slots)]
    parts = [buf[(2 * w + 1) * wn:(2 * w + 2) * wn].reshape(shape) for w in range(slots)]

    def body(s: int, n: int, gc: ConvGeom, slot: int, first: bool) -> None:
        col, pad = _col_pad(g, gc, ws, slot)
        im2col(x[s:s + n], col, gc, pad)
        a = col_matrix(col, gc)
        b = dy4[s:s + n].reshape(gc.m, g.groups, g.kg).transpose(1, 0, 2)
        out = accs[slot] if first else parts[slot]
        if direct:
            _parallel.matmul(b.transpose(0, 2, 1), a, out=out)
        else:
            _parallel.matmul(a.transpose(0, 2, 1), b, out=out)
        if not first:
            np.add(accs[slot], parts[slot], out=accs[slot])

    used = _for_chunks(g, body)
    if not direct:
        sum_transposed(dw.reshape(g.groups, g.kg, g.kkc), accs[:used])
        return
    for w in range(1, used):
        np.add(accs[0], accs[w], out=accs[0])
    if not in_place:
        np.copyto(dw.reshape(g.groups, g.kg, g.kkc), accs[0], casting="same_kind")


def _dgrad_tap_major(dy4: np.ndarray, w: np.ndarray, acc: np.ndarray, g: ConvGeom, ws: dict[str, np.ndarray]) -> None:
    """acc += dX of ``g`` (module doc), chunk by chunk: ``dcol[t] = dy @ w[:, i, j, :]`` for every
    tap t = (i, j) in the chunk's ``col`` slot, then each tap's (n, Ho, Wo, C) block added into
    acc (through the zeroed padded copy behind dcol when p > 0)."""
    win = g.win
    kk, c, kout = win.k * win.k, g.c, g.k_out
    wt = take(ws.get("wbuf"), (kk, kout, c))
    np.copyto(wt.reshape(win.k, win.k, kout, c), w.transpose(1, 2, 0, 3), casting="same_kind")
    size = col_elements(g)
    hp, wp, p, s_ = win.h + 2 * win.p, win.w + 2 * win.p, win.p, win.s

    def body(s: int, n: int, gc: ConvGeom, slot: int, first: bool) -> None:
        m = n * win.ho * win.wo
        buf = take(ws.get("col"), ((slot + 1) * size,))[slot * size:]
        dcol = buf[:kk * m * c].reshape(kk, m, c)
        _parallel.matmul(dy4[s:s + n].reshape(1, m, kout), wt, out=dcol)
        if p:
            dst = buf[kk * m * c:kk * m * c + n * hp * wp * c].reshape(n, hp, wp, c)
            dst.fill(0)
        else:
            dst = acc[s:s + n]
        for tap in range(kk):
            i, j = divmod(tap, win.k)
            d = dst[:, i:i + s_ * (win.ho - 1) + 1:s_, j:j + s_ * (win.wo - 1) + 1:s_, :]
            np.add(d, dcol[tap].reshape(n, win.ho, win.wo, c), out=d)
        if p:
            a = acc[s:s + n]
            np.add(a, dst[:, p:p + win.h, p:p + win.w, :], out=a)

    _for_chunks(g, body)


def conv_dgrad(dy: np.ndarray, w: np.ndarray, dx: np.ndarray, g: ConvGeom, ws: dict[str, np.ndarray],
               accumulate: bool = False, algo: str = AUTO) -> None:
    """dx = dL/dx (``accumulate``: dx += dL/dx) by ``algo``; ``dx`` may be x's buffer (x is not read)."""
    if algo in winograd.VARIANTS and winograd.applicable(g):
        winograd.dgrad(dy, w, dx, g, ws, algo, accumulate)
        return
    meth = dispatch_method(g, algo, dy, w, dx, accumulate=accumulate)
    if meth == "direct":
        _cconv.dgrad(dy, w, dx, g, ws.get("tmp"))
        return
    if meth == "depthwise" and _cdepthwise.usable(g, ws.get("tmp"), dy, w, dx):
        _cdepthwise.dgrad(dy, w, dx, g, ws["tmp"], accumulate)
        return
    dy2 = _as32(dy, ws, "ybuf", (g.m, g.k_out))
    if meth == "pointwise":
        w2 = _as32(w, ws, "wbuf", (g.k_out, g.c))
        if dx.dtype == F32 and not accumulate:
            _parallel.matmul(dy2, w2, out=dx.reshape(g.m, g.c))
            return
        buf = take(ws.get("col"), (g.m, g.c))
        _parallel.matmul(dy2, w2, out=buf)
        d2 = dx.reshape(g.m, g.c)
        if accumulate:
            np.add(d2, buf, out=d2, casting="same_kind")
        else:
            np.copyto(d2, buf, casting="same_kind")
        return
    acc = _out32(dx, ws, "xbuf", g.x_shape)
    gd = None if accumulate or meth == "depthwise" else dgrad_geom(g)
    if accumulate and dx.dtype != F32:  # acc is the fp32 workspace
        np.copyto(acc, dx)
    elif not accumulate and gd is None and (meth == "depthwise" or dgrad_tap_major(g)):
        acc.fill(0)  # (col2im zeroes each chunk's images itself)
    if meth == "depthwise":
        win = g.win
        dy4 = dy2.reshape(g.y_shape)
        tmp = take(ws.get("tmp"), g.y_shape)
        wt = _as32(w, ws, "wbuf", (g.c, win.k * win.k))
        for tap in win.taps:
            if tap.empty:
                continue
            tv = tmp[:, tap.oh, tap.ow, :]
            np.multiply(dy4[:, tap.oh, tap.ow, :], wt[:, tap.t], out=tv)
            a = acc[:, tap.ih, tap.iw, :]
            np.add(a, tv, out=a)
    elif dgrad_tap_major(g):
        _dgrad_tap_major(dy2.reshape(g.y_shape), w, acc, g, ws)
    elif gd is not None:  # dX as a convolution (module doc); overwrites acc
        win = g.win
        wf = take(ws.get("wbuf"), (g.c, win.k, win.k, g.k_out))
        np.copyto(wf, w.transpose(3, 1, 2, 0)[:, ::-1, ::-1, :], casting="same_kind")
        _im2col_gemm(dy2.reshape(g.y_shape), wf.reshape(1, g.c, gd.kkc).transpose(0, 2, 1), acc, gd, ws)
    else:
        w3 = _as32(w, ws, "wbuf", (g.groups, g.kg, g.kkc))
        dy4 = dy2.reshape(g.y_shape)

        def body(s: int, n: int, gc: ConvGeom, slot: int, first: bool) -> None:
            col, _ = _col_pad(g, gc, ws, slot)
            _parallel.matmul(dy4[s:s + n].reshape(gc.m, g.groups, g.kg).transpose(1, 0, 2), w3,
                             out=col.reshape(g.groups, gc.m, g.kkc))
            if not accumulate:  # on this chunk's thread, just before its adds (no serial fill of dx)
                acc[s:s + n].fill(0)
            col2im(col, acc[s:s + n], gc)

        _for_chunks(g, body)
    _finish(dx, acc)


# ---- Registered kernels ----


def _geom_from(arrays: dict[str, ArrayInfo], k: int, s: int, p: int, groups: int) -> ConvGeom:
    return conv_geom(arrays["x"][0], arrays["w"][0], k, s, p, groups)


def _is16(arrays: dict[str, ArrayInfo], name: str) -> bool:
    return name in arrays and arrays[name][1] != F32


def _ws_fwd(arrays: dict[str, ArrayInfo], *, k: int, s: int, p: int, groups: int,
            algo: str = AUTO, **_: Any) -> dict[str, ArrayInfo]:
    g = _geom_from(arrays, k, s, p, groups)
    sizes = conv_workspace_sizes(g, x16=_is16(arrays, "x"), w16=_is16(arrays, "w"), y16=_is16(arrays, "y"),
                                 algo=algo)
    return {n: ((v,), F32) for n, v in sizes.items()}


def _ws_bwd(arrays: dict[str, ArrayInfo], *, k: int, s: int, p: int, groups: int, algo_dgrad: str = AUTO,
            algo_wgrad: str = AUTO) -> dict[str, ArrayInfo]:
    g = _geom_from(arrays, k, s, p, groups)
    phases = ("wgrad", "dgrad") if "dx" in arrays else ("wgrad",)
    sizes = conv_workspace_sizes(g, x16=_is16(arrays, "x"), w16=_is16(arrays, "w"), y16=_is16(arrays, "dy"),
                                 dw16=_is16(arrays, "dw"), phases=phases,
                                 algo={"wgrad": algo_wgrad, "dgrad": algo_dgrad})
    return {n: ((v,), F32) for n, v in sizes.items()}


def node_algorithms(arrays: Mapping[str, ArrayInfo], params: Mapping[str, Any]) -> tuple[ConvGeom, bool, list[str]]:
    """What a compiler needs to choose the algorithms of one conv node: its geometry (from the
    operands' ``(shape, dtype)`` and the params ``k``, ``s``, ``p``, ``groups``), whether an
    operand is fp16, and the kernel params naming the algorithms it runs (:data:`DIRECTIONS`:
    ``algo`` for a forward / inference node, ``algo_wgrad`` and, with a ``dx``, ``algo_dgrad``
    for a backward node). Raises ``ValueError`` on inconsistent shapes (:func:`conv_geom`)."""
    g = _geom_from(dict(arrays), params["k"], params.get("s", 1), params.get("p", 0), params.get("groups", 1))
    fp16 = any(name in arrays and arrays[name][1] != F32 for name in ("x", "w", "y", "dy", "dx", "dw"))
    names = ["algo"] if "dy" not in arrays else ["algo_wgrad", *(["algo_dgrad"] if "dx" in arrays else [])]
    return g, fp16, names


def ws_bwd_cuda(arrays: dict[str, ArrayInfo], **_: Any) -> dict[str, ArrayInfo]:
    """The CUDA backward's one workspace (``GpuOps.conv_wgrad`` of
    :mod:`tr_mlir.lowering.cuda.backend`): ``wbuf``, the fp32 accumulator of an fp16 dw (the AMP
    G16 copy). Its forward, input gradient and fp32 weight gradient are implicit GEMMs or direct
    kernels reading the operands in place: no columns, padded copies or fp32 casts."""
    return {"wbuf": (arrays["dw"][0], F32)} if _is16(arrays, "dw") else {}


def _ws(**kw: Any) -> dict[str, np.ndarray]:
    return {k: v for k, v in kw.items() if v is not None}


CONV_ALGORITHMS = AlgorithmTable(auto=AUTO, directions=DIRECTIONS, algorithms=ALGORITHMS, variants=WINOGRAD,
                                 rule=rule_algorithm, check=check_algorithm, geometry=node_algorithms)
"""The conv kernels' algorithms as the compiler's selection pass reads them (``memplan-select-conv-algo``,
through the kernel spec: :attr:`KernelSpec.algorithms`)."""


def _ws_fwd_on_cuda(arrays: dict[str, ArrayInfo], **params: Any) -> dict[str, ArrayInfo]:
    """The CUDA forward's workspaces: none for its implicit GEMM, the Winograd scratch when ``algo``
    selects it (:func:`tr_mlir.lowering.cuda.winograd.ws_fwd_cuda`; imported here, not at module
    load: that module builds on this one)."""
    from tr_mlir.lowering.cuda.winograd import ws_fwd_cuda

    return ws_fwd_cuda(arrays, **params)


def _ws_bwd_on_cuda(arrays: dict[str, ArrayInfo], **params: Any) -> dict[str, ArrayInfo]:
    """The CUDA backward's workspaces (:func:`tr_mlir.lowering.cuda.winograd.ws_bwd_cuda`: the fp16
    dw accumulator of :func:`ws_bwd_cuda`, and the Winograd scratch of the directions that run it)."""
    from tr_mlir.lowering.cuda.winograd import ws_bwd_cuda as rule

    return rule(arrays, **params)


@kernel("conv_fwd", writes=("y", "sum", "sq_sum"), workspaces=WORKSPACES, workspace_fn=_ws_fwd, also=("conv_inf",),
        target_workspace_fns={CUDA: _ws_fwd_on_cuda}, algorithms=CONV_ALGORITHMS, prepare=_prepared_conv.prepare_fwd)
def conv_fwd(x, w, y, col=None, wbuf=None, ybuf=None, xbuf=None, tmp=None, sum=None, sq_sum=None, *, k: int,
             s: int = 1, p: int = 0, groups: int = 1, algo: str = AUTO, bn_stats: bool = False) -> None:
    """Convolution forward (and inference): ``y = conv2d(x, w, stride s, padding p, groups)``.

    x (N, H, W, C), w (K, k, k, C/groups) KRSC, y (N, (H+2p-k)//s+1, (W+2p-k)//s+1, K); fp32, or
    fp16 x/w/y with fp32 accumulation. No bias (every conv is followed by BN or nothing).
    ``algo``: ``auto`` (the run-time rule) or an algorithm of :data:`ALGORITHMS`; ``ValueError``
    naming it when it does not apply (:func:`check_algorithm`). ``sum``, ``sq_sum``: y's batch-norm
    statistics, written too under ``bn_stats`` (:mod:`.conv_stats`)."""
    g = conv_geom(x.shape, w.shape, k, s, p, groups)
    if y.shape != g.y_shape:
        raise ValueError(f"expected conv output of shape {g.y_shape}, got {y.shape}")
    check_algorithm(algo, g, any(a.dtype != F32 for a in (x, w, y)))
    stats = conv_stats.check(sum, sq_sum, g.k_out)
    conv_forward(x, w, y, g, _ws(col=col, wbuf=wbuf, ybuf=ybuf, xbuf=xbuf, tmp=tmp), algo, stats)


@kernel("conv_bwd", writes=("dx", "dw"), workspaces=WORKSPACES, workspace_fn=_ws_bwd, also=("conv_bwd_first_layer",),
        target_workspace_fns={CUDA: _ws_bwd_on_cuda}, algorithms=CONV_ALGORITHMS, prepare=_prepared_conv.prepare_bwd)
def conv_bwd(dy, x, w, dw, dx=None, col=None, wbuf=None, ybuf=None, xbuf=None, tmp=None, dx_acc=None, *, k: int,
             s: int = 1, p: int = 0, groups: int = 1, algo_dgrad: str = AUTO, algo_wgrad: str = AUTO) -> None:
    """Convolution backward: ``dw`` (overwritten) from dy and x, then ``dx`` from dy and w.

    dW is computed first, so ``dx`` may be x's own buffer (the seed writes dX over X). ``dx``
    None (``conv_bwd_first_layer``): weight gradient only. dw may be fp16 (the AMP G16 copy).
    ``algo_wgrad`` / ``algo_dgrad``: the algorithms of the two gradients (as ``conv_fwd``'s ``algo``).
    ``dx_acc``: dx itself (else ``ValueError``): dx += the input gradient (``memplan-fuse-grad-acc``)."""
    g = conv_geom(x.shape, w.shape, k, s, p, groups)
    fp16 = any(a is not None and a.dtype != F32 for a in (dy, x, w, dw, dx))
    if dx_acc is not None and (dx is None or dx_acc.__array_interface__ != dx.__array_interface__):
        raise ValueError("conv_bwd: dx_acc must be dx itself (the input gradient is added into dx)")
    for algo in (algo_wgrad,) if dx is None else (algo_wgrad, algo_dgrad):
        check_algorithm(algo, g, fp16)
    ws = _ws(col=col, wbuf=wbuf, ybuf=ybuf, xbuf=xbuf, tmp=tmp)
    conv_wgrad(dy, x, dw, g, ws, algo_wgrad)
    if dx is not None:
        conv_dgrad(dy, w, dx, g, ws, dx_acc is not None, algo_dgrad)
