"""``arch-merge-triple`` (ArchPlan step 9): ``conv + bn2d + relu`` -> ``arch.cbr``.

Matches ``relu(bn2d(conv(x)))`` in a flat ``arch.model`` body where the conv is dense
(``groups = 1``) and the conv and bn2d results have no other users, and replaces it by
``arch.cbr %x {out_ch, k, s, p, eps, momentum}`` (conv geometry from the conv, ``eps`` and
``momentum`` from the bn2d). The fused op keeps the relu's result type.

Differences from the seed (facts sheet section 3.12, DESIGN section 7): the seed fuses any three
*adjacent* Conv, Bn2d, ReLU layers without checking consumers and only when the global AMP flag
is on; here the ops must form a single-use chain, and the pass is not gated on ``amp`` (fused
kernels exist in fp32 too). Like every fusion pass it fuses whenever it runs; the ``arch-plan``
pipeline runs it only for models with ``fuse`` set.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.dialects import arch
from tr_mlir.passes._fusion import Chain, ChainMatch, FuseChain, Link, rewrite_models

CONV_BN_RELU = Chain(
    Link(arch.ConvOp, lambda conv: conv.param("groups") == 1),
    Link(arch.Bn2dOp),
    Link(arch.ReluOp),
)
"""The matched chain: a dense conv, a 2-D batch norm, a ReLU."""


def build_cbr(match: ChainMatch) -> arch.CbrOp:
    """The ``arch.cbr`` replacing a matched conv/bn2d/relu chain."""
    conv, bn, _ = match.ops
    c = conv.params()
    return arch.CbrOp(
        match.input, match.result_type, out_ch=c["out_ch"], k=c["k"], s=c["s"], p=c["p"],
        eps=bn.param("eps"), momentum=bn.param("momentum"),
    )


@dataclass(frozen=True)
class ArchMergeTriplePass(ModulePass):
    """Fuse single-use ``conv(groups=1) -> bn2d -> relu`` chains into ``arch.cbr``."""

    name = "arch-merge-triple"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewrite_models(op, FuseChain(CONV_BN_RELU, build_cbr))
