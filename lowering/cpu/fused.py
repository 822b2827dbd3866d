"""Fused layers composed from the primitives: cbr, cbrp, gap_fc and the residual blocks.

A fused block is a chain of **stages** (conv -> batch norm -> optional ReLU) on the main branch,
a shortcut (none, identity, or a conv 1x1 + BN projection), an optional ReLU after the add and
(cbrp) a max pool. :data:`BLOCKS` describes each kind; one generic forward / backward /
inference routine runs them, so fused and unfused layers compute the same numbers.

Array names (stage ``i`` is ``1``, ``2``, ``3`` on the main branch and ``_sc`` for the projection,
giving ``w_sc``, ``c_sc``, ...):

===================== ===================================================================
``w{i}``               conv weight, KRSC (fp32, or the fp16 AMP copy)
``gamma{i} beta{i}``   BN parameters; ``mean{i} var{i}`` running statistics (updated in place)
``c{i}``               conv output (saved; the backward overwrites it with its gradient)
``a{i}``               stage output after BN (+ReLU) feeding the next stage (saved, then
                       overwritten by its gradient); the last main stage writes ``y`` instead
                       (cbrp: ``a1``, the pool input)
``mask{i}``            INT8 ReLU mask of a stage with ReLU
``save_mean{i} save_istd{i}``  BN batch mean and 1/sqrt(var + eps) (C-element fp32)
``dw{i} dgamma{i} dbeta{i}``   parameter gradients (overwritten)
``eq_scale{i} eq_bias{i}``     folded BN for inference
``mask_out``           INT8 mask of the ReLU after the add (bottleneck, basic block)
``pool_mask``          INT8 max-pool mask (cbrp)
===================== ===================================================================

Workspaces (flat, sizes from :meth:`KernelSpec.workspace_shapes`): the conv workspaces of
:mod:`.conv` (maximum over the stages), ``t`` (fp32, the projection BN output), ``eq`` / ``acc``
(cbrp pooling); on CUDA only ``t`` and, for an fp16 weight gradient, ``wbuf`` (the CUDA conv's
rule). The backward **overwrites ``dy``** (the gradient after the post-add ReLU is formed
in place), as well as ``c{i}`` and ``a{i}``; ``dx`` may be x's buffer (every read of x comes
first). ``dx`` None skips the input gradient (``*_bwd_first_layer``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._util import F32, take
from .conv import WORKSPACES as CONV_WS
from .conv import ConvGeom, conv_dgrad, conv_forward, conv_geom, conv_wgrad, conv_workspace_sizes, ws_bwd_cuda
from .dense import fc_backward, fc_forward
from .norm import bn_affine, bn_backward, bn_forward_train
from .pool import gap_backward, gap_forward, maxpool_bwd, maxpool_fwd, ws_maxpool_fwd
from .registry import CUDA, ArrayInfo, KernelSpec, kernel, register
from .window import window

I8 = np.dtype(np.int8)


@dataclass(frozen=True)
class Stage:
    """conv(k, s, p; depthwise or dense) with ``out_ch`` outputs -> BN -> ReLU if ``relu``."""

    tag: str
    out_ch: int
    k: int
    s: int
    p: int
    depthwise: bool = False
    relu: bool = True

    def geom(self, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> ConvGeom:
        return conv_geom(tuple(x_shape), tuple(w_shape), self.k, self.s, self.p,
                         int(x_shape[-1]) if self.depthwise else 1)

    def w_shape(self, c_in: int) -> tuple[int, int, int, int]:
        return (self.out_ch, self.k, self.k, 1 if self.depthwise else c_in)


@dataclass(frozen=True)
class Layout:
    """The stages of one block instance: ``main`` stages, the ``projection`` stage or None, and
    the ``pool`` window (k, s, p) or None."""

    main: tuple[Stage, ...]
    shortcut: str  # "none" | "identity" | "projection"
    projection: Stage | None
    post_relu: bool
    pool: tuple[int, int, int] | None = None

    @property
    def stages(self) -> tuple[Stage, ...]:
        return self.main + ((self.projection,) if self.projection else ())

    def out_name(self, i: int) -> str:
        """Where main stage ``i`` (0-based) writes: ``a{tag}``, or ``y`` for the last (no pool)."""
        st = self.main[i]
        return "y" if i == len(self.main) - 1 and self.pool is None else f"a{st.tag}"


@dataclass(frozen=True)
class BlockKind:
    """A fused kind: kernel stem, its static params (with defaults) and its layout rule."""

    name: str
    params: tuple[str, ...]
    defaults: Mapping[str, Any]
    layout: Callable[..., Layout]

    def make(self, c_in: int, **params: Any) -> Layout:
        full = {**self.defaults, **{k: params[k] for k in self.params if k in params}}
        return self.layout(c_in, **{k: full[k] for k in self.params})

    def tensors(self, x_shape: tuple[int, ...], feat_dtype: Any = F32, **params: Any) -> dict[str, ArrayInfo]:
        """Shapes and dtypes of every array of this kind for input ``x_shape`` (NHWC), except
        workspaces: parameters (fp32), saved intermediates and masks (``feat_dtype`` / INT8),
        gradients. A planner's layer descriptor takes these."""
        lay = self.make(int(x_shape[-1]), **params)
        fd = np.dtype(feat_dtype)
        out: dict[str, ArrayInfo] = {}
        h = tuple(int(d) for d in x_shape)

        def stage(st: Stage, h_in: tuple[int, ...]) -> tuple[int, ...]:
            ws = st.w_shape(h_in[-1])
            g = st.geom(h_in, ws)
            c = (st.out_ch,)
            out.update({f"w{st.tag}": (ws, F32), f"dw{st.tag}": (ws, F32), f"c{st.tag}": (g.y_shape, fd)})
            for n in ("gamma", "beta", "mean", "var", "save_mean", "save_istd", "dgamma", "dbeta",
                      "eq_scale", "eq_bias"):
                out[f"{n}{st.tag}"] = (c, F32)
            if st.relu:
                out[f"mask{st.tag}"] = (g.y_shape, I8)
            return g.y_shape

        for i, st in enumerate(lay.main):
            h = stage(st, h)
            if lay.out_name(i) != "y":
                out[f"a{st.tag}"] = (h, fd)
        y = h
        if lay.projection:
            stage(lay.projection, tuple(int(d) for d in x_shape))
        if lay.pool:
            k, s, p = lay.pool
            win = window(h[1], h[2], k, s, p)
            y = (h[0], win.ho, win.wo, h[3])
            out["pool_mask"] = (y, I8)
        if lay.post_relu:
            out["mask_out"] = (y, I8)
        out["y"] = (y, fd)
        return out


def _cbr(c, *, out_ch, k, s, p):
    return Layout((Stage("1", out_ch, k, s, p),), "none", None, False)


def _cbrp(c, *, out_ch, conv_k, conv_s, conv_p, pool_k, pool_s, pool_p):
    return Layout((Stage("1", out_ch, conv_k, conv_s, conv_p),), "none", None, False, (pool_k, pool_s, pool_p))


def _bottleneck_identity(c, *, bottleneck_ch):
    b = bottleneck_ch
    return Layout((Stage("1", b, 1, 1, 0), Stage("2", b, 3, 1, 1), Stage("3", c, 1, 1, 0, relu=False)),
                  "identity", None, True)


def _bottleneck_projection(c, *, bottleneck_ch, out_ch, stride):
    b = bottleneck_ch
    return Layout((Stage("1", b, 1, 1, 0), Stage("2", b, 3, stride, 1), Stage("3", out_ch, 1, 1, 0, relu=False)),
                  "projection", Stage("_sc", out_ch, 1, stride, 0, relu=False), True)


def _basic_identity(c, *, out_ch):
    return Layout((Stage("1", out_ch, 3, 1, 1), Stage("2", out_ch, 3, 1, 1, relu=False)), "identity", None, True)


def _basic_projection(c, *, out_ch, stride):
    return Layout((Stage("1", out_ch, 3, stride, 1), Stage("2", out_ch, 3, 1, 1, relu=False)),
                  "projection", Stage("_sc", out_ch, 1, stride, 0, relu=False), True)


def _inverted(expand_ch, out_ch, stride):
    return (Stage("1", expand_ch, 1, 1, 0), Stage("2", expand_ch, 3, stride, 1, depthwise=True),
            Stage("3", out_ch, 1, 1, 0, relu=False))


def _inv_identity(c, *, expand_ch, out_ch):
    return Layout(_inverted(expand_ch, out_ch, 1), "identity", None, False)


def _inv_no_shortcut(c, *, expand_ch, out_ch, stride):
    return Layout(_inverted(expand_ch, out_ch, stride), "none", None, False)


BLOCKS: dict[str, BlockKind] = {
    b.name: b
    for b in (
        BlockKind("cbr", ("out_ch", "k", "s", "p"), {"s": 1, "p": 0}, _cbr),
        BlockKind("cbrp", ("out_ch", "conv_k", "conv_s", "conv_p", "pool_k", "pool_s", "pool_p"), {}, _cbrp),
        BlockKind("bottleneck_identity", ("bottleneck_ch",), {}, _bottleneck_identity),
        BlockKind("bottleneck_projection", ("bottleneck_ch", "out_ch", "stride"), {"stride": 1},
                  _bottleneck_projection),
        BlockKind("basic_block_identity", ("out_ch",), {}, _basic_identity),
        BlockKind("basic_block_projection", ("out_ch", "stride"), {"stride": 1}, _basic_projection),
        BlockKind("inv_residual_identity", ("expand_ch", "out_ch"), {}, _inv_identity),
        BlockKind("inv_residual_no_shortcut", ("expand_ch", "out_ch", "stride"), {"stride": 1}, _inv_no_shortcut),
    )
}
"""Fused block kinds by kernel stem (``<stem>_fwd`` / ``_bwd`` / ``_inf`` / ``_bwd_first_layer``);
the layouts follow ``arch-merge-blocks`` (see its docstring)."""


# --------------------------------------------------------------------------------------
# The generic routines
# --------------------------------------------------------------------------------------


def _relu_inplace(a: np.ndarray, mask: np.ndarray | None) -> None:
    if mask is not None:
        np.greater(a, 0, out=mask)
    np.maximum(a, 0, out=a)


def _geoms(lay: Layout, x_shape: tuple[int, ...], w: Callable[[str], tuple[int, ...]]) -> dict[str, ConvGeom]:
    out, h = {}, tuple(x_shape)
    for st in lay.main:
        g = st.geom(h, w(st.tag))
        out[st.tag] = g
        h = g.y_shape
    if lay.projection:
        out["_sc"] = lay.projection.geom(tuple(x_shape), w("_sc"))
    return out


def _pool_ws(arr: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: arr[k] for k in ("eq", "acc") if arr.get(k) is not None}


def block_forward(lay: Layout, arr: dict[str, np.ndarray], eps: float, momentum: float) -> None:
    """Training forward of a fused block (names in the module doc)."""
    x = arr["x"]
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    h = x
    for i, st in enumerate(lay.main):
        t = st.tag
        c, out = arr[f"c{t}"], arr[lay.out_name(i)]
        conv_forward(h, arr[f"w{t}"], c, geoms[t], ws)
        bn_forward_train(c, arr[f"gamma{t}"], arr[f"beta{t}"], arr[f"mean{t}"], arr[f"var{t}"], out,
                         arr[f"save_mean{t}"], arr[f"save_istd{t}"], eps, momentum)
        if st.relu:
            _relu_inplace(out, arr[f"mask{t}"])
        h = out
    y = arr["y"]
    if lay.shortcut == "identity":
        np.add(y, x, out=y)
    elif lay.shortcut == "projection":
        c = arr["c_sc"]
        conv_forward(x, arr["w_sc"], c, geoms["_sc"], ws)
        tb = take(arr.get("t"), y.shape)
        bn_forward_train(c, arr["gamma_sc"], arr["beta_sc"], arr["mean_sc"], arr["var_sc"], tb,
                         arr["save_mean_sc"], arr["save_istd_sc"], eps, momentum)
        np.add(y, tb, out=y, casting="same_kind")
    if lay.post_relu:
        _relu_inplace(y, arr["mask_out"])
    if lay.pool:
        k, s, p = lay.pool
        maxpool_fwd(h, y, arr["pool_mask"], arr["eq"], k=k, s=s, p=p)


def block_backward(lay: Layout, arr: dict[str, np.ndarray]) -> None:
    """Backward of a fused block: parameter gradients, then dx (names in the module doc)."""
    x, dx = arr["x"], arr.get("dx")
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    g = arr["dy"]
    if lay.pool:
        k, s, p = lay.pool
        last = arr[f"a{lay.main[-1].tag}"]
        maxpool_bwd(g, arr["pool_mask"], last, arr["eq"], arr.get("acc"), k=k, s=s, p=p)
        g = last
    if lay.post_relu:
        np.multiply(g, arr["mask_out"], out=g)
    dz = g
    for i in reversed(range(len(lay.main))):
        st = lay.main[i]
        t = st.tag
        if st.relu:
            np.multiply(g, arr[f"mask{t}"], out=g)
        c = arr[f"c{t}"]
        bn_backward(g, c, arr[f"gamma{t}"], arr[f"save_mean{t}"], arr[f"save_istd{t}"], c,
                    arr[f"dgamma{t}"], arr[f"dbeta{t}"])
        h_in = x if i == 0 else arr[f"a{lay.main[i - 1].tag}"]
        conv_wgrad(c, h_in, arr[f"dw{t}"], geoms[t], ws)
        if i > 0:
            conv_dgrad(c, arr[f"w{t}"], h_in, geoms[t], ws)
            g = h_in
    if lay.shortcut == "projection":
        c = arr["c_sc"]
        bn_backward(dz, c, arr["gamma_sc"], arr["save_mean_sc"], arr["save_istd_sc"], c, arr["dgamma_sc"],
                    arr["dbeta_sc"])
        conv_wgrad(c, x, arr["dw_sc"], geoms["_sc"], ws)
    if dx is None:
        return
    first = lay.main[0].tag
    conv_dgrad(arr[f"c{first}"], arr[f"w{first}"], dx, geoms[first], ws)
    if lay.shortcut == "identity":
        np.add(dx, dz, out=dx)
    elif lay.shortcut == "projection":
        conv_dgrad(arr["c_sc"], arr["w_sc"], dx, geoms["_sc"], ws, accumulate=True)


def block_inference(lay: Layout, arr: dict[str, np.ndarray]) -> None:
    """Inference of a fused block with folded BN (``eq_scale{i}``, ``eq_bias{i}``)."""
    x = arr["x"]
    geoms = _geoms(lay, x.shape, lambda t: arr[f"w{t}"].shape)
    ws = {k: arr[k] for k in CONV_WS if arr.get(k) is not None}
    h = x
    for i, st in enumerate(lay.main):
        t = st.tag
        out = arr[lay.out_name(i)]
        conv_forward(h, arr[f"w{t}"], out, geoms[t], ws)
        bn_affine(out, arr[f"eq_scale{t}"], arr[f"eq_bias{t}"], out)
        if st.relu:
            _relu_inplace(out, None)
        h = out
    y = arr["y"]
    if lay.shortcut == "identity":
        np.add(y, x, out=y)
    elif lay.shortcut == "projection":
        c = arr["c_sc"]
        conv_forward(x, arr["w_sc"], c, geoms["_sc"], ws)
        bn_affine(c, arr["eq_scale_sc"], arr["eq_bias_sc"], c)
        np.add(y, c, out=y)
    if lay.post_relu:
        _relu_inplace(y, None)
    if lay.pool:
        k, s, p = lay.pool
        maxpool_fwd(h, y, arr["pool_mask"], arr["eq"], k=k, s=s, p=p)


# --------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------


def _names(lay: Layout, phase: str) -> tuple[list[str], set[str], set[str]]:
    """(array names, written names, optional names) of a phase, workspaces excluded."""
    arrays: list[str]
    writes: set[str] = set()
    optional: set[str] = set()
    if phase == "fwd":
        arrays = ["x", "y"]
        writes.add("y")
        for st in lay.stages:
            t = st.tag
            arrays += [f"w{t}", f"gamma{t}", f"beta{t}", f"mean{t}", f"var{t}", f"c{t}", f"save_mean{t}",
                       f"save_istd{t}"]
            writes |= {f"mean{t}", f"var{t}", f"c{t}", f"save_mean{t}", f"save_istd{t}"}
    elif phase == "bwd":
        arrays = ["dy", "x", "dx"]
        writes |= {"dy", "dx"}
        optional.add("dx")
        for st in lay.stages:
            t = st.tag
            arrays += [f"w{t}", f"gamma{t}", f"c{t}", f"save_mean{t}", f"save_istd{t}", f"dw{t}", f"dgamma{t}",
                       f"dbeta{t}"]
            writes |= {f"c{t}", f"dw{t}", f"dgamma{t}", f"dbeta{t}"}
    else:
        arrays = ["x", "y"]
        writes.add("y")
        for st in lay.stages:
            t = st.tag
            arrays += [f"w{t}", f"eq_scale{t}", f"eq_bias{t}"]
        if lay.projection:
            arrays.append("c_sc")
            writes.add("c_sc")
    for i, st in enumerate(lay.main):
        if lay.out_name(i) != "y":
            arrays.append(f"a{st.tag}")
            writes.add(f"a{st.tag}")
        if st.relu and phase != "inf":
            arrays.append(f"mask{st.tag}")
            if phase == "fwd":
                writes.add(f"mask{st.tag}")
    if lay.post_relu and phase != "inf":
        arrays.append("mask_out")
        if phase == "fwd":
            writes.add("mask_out")
    if lay.pool:
        arrays.append("pool_mask")
        if phase != "bwd":
            writes.add("pool_mask")
    return arrays, writes, optional


def _workspace_fn(kind: BlockKind, phase: str):
    def fn(arrays: dict[str, ArrayInfo], **params: Any) -> dict[str, ArrayInfo]:
        x_shape, x_dt = arrays["x"]
        lay = kind.make(int(x_shape[-1]), **params)
        geoms = _geoms(lay, x_shape, lambda t: arrays[f"w{t}"][0])
        x16 = x_dt != F32
        sizes: dict[str, int] = {}
        phases = {"fwd": ("fwd",), "inf": ("fwd",), "bwd": ("wgrad", "dgrad")}[phase]
        for st in lay.stages:
            t = st.tag
            w16 = arrays[f"w{t}"][1] != F32
            dw16 = phase == "bwd" and arrays.get(f"dw{t}", ((), F32))[1] != F32
            acc = phase == "bwd" and st is lay.projection
            for n, v in conv_workspace_sizes(geoms[t], x16=x16, w16=w16, y16=x16, dw16=dw16, phases=phases,
                                             accumulate=acc).items():
                sizes[n] = max(sizes.get(n, 0), v)
        out: dict[str, ArrayInfo] = {n: ((v,), F32) for n, v in sizes.items()}
        y_shape = kind.tensors(x_shape, x_dt, **params)["y"][0]
        if lay.projection and phase == "fwd":
            out["t"] = (y_shape, F32)
        if lay.pool and phase != "bwd":  # the max pool kernel's own rule
            k, s, pp = lay.pool
            out["eq"] = ws_maxpool_fwd({"y": (y_shape, x_dt)}, k=k, s=s, p=pp)["eq"]
        if lay.pool and phase == "bwd":
            out["eq"] = (y_shape, np.dtype(bool))
            k, s, _ = lay.pool
            if x16 and k > s:
                out["acc"] = (geoms[lay.main[-1].tag].y_shape, F32)
        return out

    return fn


def _cuda_workspace_fn(kind: BlockKind, phase: str):
    """The CUDA block routines' workspaces (``block_forward`` / ``block_backward`` of
    :mod:`tr_mlir.lowering.cuda.backend`): the projection's fp32 BN output ``t`` (forward) and
    the conv's own CUDA rule per stage (``wbuf`` for an fp16 weight gradient); pooling uses none."""
    def fn(arrays: dict[str, ArrayInfo], **params: Any) -> dict[str, ArrayInfo]:
        x_shape, x_dt = arrays["x"]
        lay = kind.make(int(x_shape[-1]), **params)
        sizes: dict[str, int] = {}
        for st in lay.stages if phase == "bwd" else ():
            stage = {"dw": arrays[f"dw{st.tag}"]} if f"dw{st.tag}" in arrays else {}
            for n, (shape, _) in ws_bwd_cuda(stage).items():
                sizes[n] = max(sizes.get(n, 0), int(np.prod(shape)))
        out: dict[str, ArrayInfo] = {n: ((v,), F32) for n, v in sizes.items()}
        if lay.projection and phase == "fwd":
            out["t"] = (kind.tensors(x_shape, x_dt, **params)["y"][0], F32)
        return out

    return fn


def _register_block(kind: BlockKind) -> None:
    # The array names do not depend on channel counts: lay out a representative instance.
    probe = kind.make(8, **{p: kind.defaults.get(p, 1) for p in kind.params})
    keys = ("eps", "momentum")

    def split(kw: dict[str, Any]) -> tuple[Layout, dict[str, np.ndarray], dict[str, Any]]:
        params = {k: kw.pop(k) for k in (*kind.params, *keys) if k in kw}
        lay = kind.make(int(kw["x"].shape[-1]), **params)
        return lay, kw, params

    def fwd(**kw: Any) -> None:
        lay, arr, params = split(kw)
        block_forward(lay, arr, params.get("eps", 1e-5), params.get("momentum", 0.1))

    def bwd(**kw: Any) -> None:
        lay, arr, _ = split(kw)
        block_backward(lay, arr)

    def inf(**kw: Any) -> None:
        lay, arr, _ = split(kw)
        block_inference(lay, arr)

    docs = {
        "fwd": f"Fused ``{kind.name}`` training forward (BN batch statistics, running statistics updated "
               f"in place, intermediates saved). Names and layouts: :mod:`tr_mlir.lowering.cpu.fused`.",
        "bwd": f"Fused ``{kind.name}`` backward: parameter gradients, then dx (may be x's buffer; None: "
               f"skipped). Overwrites dy and the saved intermediates.",
        "inf": f"Fused ``{kind.name}`` inference with folded BN (eq_scale, eq_bias).",
    }
    for phase, fn in (("fwd", fwd), ("bwd", bwd), ("inf", inf)):
        fn.__doc__ = docs[phase]
        arrays, writes, optional = _names(probe, phase)
        ws = CONV_WS + (("t",) if probe.projection and phase == "fwd" else ()) \
            + (("eq",) if probe.pool else ()) + (("acc",) if probe.pool and phase == "bwd" else ())
        names = (f"{kind.name}_{phase}",) + ((f"{kind.name}_bwd_first_layer",) if phase == "bwd" else ())
        for name in names:
            register(KernelSpec(
                name=name, fn=fn, arrays=tuple(arrays) + ws, writes=frozenset(writes), workspaces=ws,
                optional=frozenset(optional) | frozenset(ws), params=(*kind.params, *keys),
                defaults={**kind.defaults, "eps": 1e-5, "momentum": 0.1}, kind="compute",
                workspace_fn=_workspace_fn(kind, phase),
                target_workspace_fns={CUDA: _cuda_workspace_fn(kind, phase)},
            ))


for _kind in BLOCKS.values():
    _register_block(_kind)


# --------------------------------------------------------------------------------------
# gap + fc
# --------------------------------------------------------------------------------------


def _ws_gap_fc(arrays: dict[str, ArrayInfo], **_: Any) -> dict[str, ArrayInfo]:
    from .dense import ws_fc

    sub = {"x": arrays["g"], "w": arrays["w"]}
    for ours, theirs in (("y", "y"), ("dy", "dy"), ("dw", "dw"), ("g", "dx")):
        if ours in arrays:
            sub[theirs] = arrays[ours]
    return ws_fc(sub)


@kernel("gap_fc_fwd", writes=("g", "y"), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=_ws_gap_fc,
        target_workspace_fns={CUDA: None}, also=("gap_fc_inf",))
def gap_fc_fwd(x, w, g, y, b=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """Fused global average pool + FC: ``g`` (N, 1, 1, C) = GAP(x) (saved), ``y = g @ w.T + b``."""
    gap_forward(x, g)
    fc_forward(g, w, b, y, {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None})


@kernel("gap_fc_bwd", writes=("g", "dw", "db", "dx"), workspaces=("xbuf", "wbuf", "ybuf"), workspace_fn=_ws_gap_fc,
        target_workspace_fns={CUDA: None})
def gap_fc_bwd(dy, w, g, dw, db=None, dx=None, xbuf=None, wbuf=None, ybuf=None) -> None:
    """Backward of gap_fc: dw, db from dy and the saved ``g``; then dg (over g) and dx (N, H, W, C)."""
    ws = {k: v for k, v in (("xbuf", xbuf), ("wbuf", wbuf), ("ybuf", ybuf)) if v is not None}
    fc_backward(dy, w, g, dw, db, None if dx is None else g, ws)
    if dx is not None:
        gap_backward(g, dx)
