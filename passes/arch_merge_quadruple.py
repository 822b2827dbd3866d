"""``arch-merge-quadruple`` (ArchPlan step 8): ``conv + bn2d + relu + maxpool`` -> ``arch.cbrp``.

Matches ``maxpool(relu(bn2d(conv(x))))`` in a flat ``arch.model`` body where the conv is dense
(``groups = 1``) and the conv, bn2d and relu results have no other users, and replaces it by
``arch.cbrp %x {out_ch, conv(k, s, p), pool(k, s, p), eps, momentum}``. The fused op keeps the
maxpool's result type.

The seed's step 8 does nothing (its quadruple fusion was removed, facts sheet section 3.11), so
the default ``arch-plan`` pipeline leaves this pass out (its ``cbrp`` option turns it on); run
alone, it fuses. It must run before ``arch-merge-triple``, which would otherwise take the
conv/bn2d/relu. A chain that reads the model input is left alone: a cbrp cannot be the first layer
(``memplan-derive-shapes`` refuses it), a conv (then a cbr) can.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.dialects import arch
from tr_mlir.passes._fusion import Chain, ChainMatch, FuseChain, Link, reads_model_input, rewrite_models

CONV_BN_RELU_MAXPOOL = Chain(
    Link(arch.ConvOp, lambda conv: conv.param("groups") == 1),
    Link(arch.Bn2dOp),
    Link(arch.ReluOp),
    Link(arch.MaxPoolOp),
)
"""The matched chain: a dense conv, a 2-D batch norm, a ReLU, a max pooling."""


def build_cbrp(match: ChainMatch) -> arch.CbrpOp | None:
    """The ``arch.cbrp`` replacing a matched conv/bn2d/relu/maxpool chain, or ``None`` when the
    chain reads the model input (a cbrp cannot be the first layer; the conv stays first, and
    ``arch-merge-triple`` makes it a cbr)."""
    if reads_model_input(match.input):
        return None
    conv, bn, _, pool = match.ops
    c, q = conv.params(), pool.params()
    return arch.CbrpOp(
        match.input, match.result_type, out_ch=c["out_ch"],
        conv_k=c["k"], conv_s=c["s"], conv_p=c["p"],
        pool_k=q["k"], pool_s=q["s"], pool_p=q["p"],
        eps=bn.param("eps"), momentum=bn.param("momentum"),
    )


@dataclass(frozen=True)
class ArchMergeQuadruplePass(ModulePass):
    """Fuse single-use ``conv(groups=1) -> bn2d -> relu -> maxpool`` chains into ``arch.cbrp``."""

    name = "arch-merge-quadruple"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewrite_models(op, FuseChain(CONV_BN_RELU_MAXPOOL, build_cbrp))
