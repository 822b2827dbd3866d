"""``arch-merge-binary`` (ArchPlan step 10): ``gap + fc`` -> ``arch.gap_fc``.

Matches ``fc(gap(x))`` in a flat ``arch.model`` body where the gap result has no other user, and
replaces it by ``arch.gap_fc %x {out_features, bias}`` (the fc's parameters; the ``bias`` flag is
kept). The fused op keeps the fc's result type.

The seed fuses every adjacent GAP, FC pair without checking consumers and regardless of AMP
(facts sheet section 3.13); here the gap must have the fc as its only user. Like every fusion
pass it fuses whenever it runs; the ``arch-plan`` pipeline runs it only for models with ``fuse``.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.dialects import arch
from tr_mlir.passes._fusion import Chain, ChainMatch, FuseChain, rewrite_models

GAP_FC = Chain(arch.GapOp, arch.FcOp)
"""The matched chain: a global average pooling feeding a fully connected layer."""


def build_gap_fc(match: ChainMatch) -> arch.GapFcOp:
    """The ``arch.gap_fc`` replacing a matched gap/fc pair."""
    _, fc = match.ops
    return arch.GapFcOp(
        match.input, match.result_type, out_features=fc.param("out_features"), bias=fc.param("bias")
    )


@dataclass(frozen=True)
class ArchMergeBinaryPass(ModulePass):
    """Fuse ``gap -> fc`` (single-use gap) into ``arch.gap_fc``."""

    name = "arch-merge-binary"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewrite_models(op, FuseChain(GAP_FC, build_gap_fc))
