"""``memplan-compile``: the five Compiler phases and the atlas as one pipeline.

Runs ``memplan-select-conv-algo`` (the conv algorithms, recorded on the layer ops before any
workspace is sized), ``memplan-derive-shapes`` (phase 1, with the compile-spec options), ``memplan-max-slots``
(2), ``memplan-create-plans`` (3), ``memplan-name-parameters`` (the names of the parameters and
BN buffers users see), ``memplan-build-graph`` (4), ``memplan-fuse-fc-relu`` (an FC and its
adjacent ReLU as one GEMM with a ReLU epilogue), ``memplan-narrow-grad-clear`` (the
gradient clear only where a gradient's first writer accumulates), ``memplan-share-variants`` (5),
``memplan-build-atlas`` and ``memplan-skip-dead-outputs`` (the optional outputs no node reads are
marked ``skip_outputs``), then places the transient DTensors by lifetime (``memplan-assign-offsets``),
verifying the module after each, on the flat ``arch.model`` that
``arch-plan`` produces (DESIGN section 1). The result is the self-contained memplan program: spec,
six variants, descriptors, six plans, the ``@train`` / ``@infer`` graphs and the atlas.

Options (MLIR syntax, e.g. ``memplan-compile{batch_size=256 train_size=1281167 val_size=50000}``):
the compile spec of ``memplan-derive-shapes``: ``batch_size`` (per process), ``train_size``,
``val_size`` (required unless the module already has a ``memplan.spec``), ``train_res``,
``train_res_end``, ``val_res`` (default: the model's input resolution), ``world_size`` (default
1), ``optimizer`` (sgd, momentum, nesterov, adam, adamw, lars, lars-nesterov; default momentum),
``target`` (cpu or cuda; default cpu). Each, when given, rewrites the spec field it names.
``reuse`` (default true) is ``memplan-assign-offsets``'s: ``reuse=false`` keeps the seed's
one-slot-per-tensor layout. ``ema`` (default false) is ``memplan-create-plans``'s: plan an EMA of
the parameters (its graphs follow in ``memplan-build-graph``). ``conv_algo`` (default ``auto``:
the cost rule; ``im2col``: today's rule; ``numpy``; or one algorithm where it applies) and
``conv_algo_fwd`` / ``conv_algo_dgrad`` / ``conv_algo_wgrad`` are ``memplan-select-conv-algo``'s.
``decay_all`` (default false) is ``memplan-build-graph``'s: bias-like parameters (BN gamma/beta, FC
biases) run the optimizer's weight update, with weight decay. ``fuse_fc_relu`` (default true)
runs ``memplan-fuse-fc-relu``; ``fuse_fc_relu=false`` keeps the FC and ReLU nodes apart (the same
bits). ``fuse_bn_stats`` (default true) runs ``memplan-fuse-bn-stats`` after it: Winograd convs write
the batch-norm statistics of their output; ``fuse_bn_stats=false`` leaves them to the BN (the
last bits of the statistics differ). ``fuse_grad_acc`` (default true) runs ``memplan-fuse-grad-acc``
after that: the Winograd input gradient at a residual join adds the skip's gradient in its output
transform instead of a ``grad_accum`` pass (the same bits).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.passes.memplan_assign_offsets import MemplanAssignOffsetsPass
from tr_mlir.passes.memplan_build_atlas import MemplanBuildAtlasPass
from tr_mlir.passes.memplan_build_graph import MemplanBuildGraphPass
from tr_mlir.passes.memplan_create_plans import MemplanCreatePlansPass
from tr_mlir.passes.memplan_derive_shapes import CompileSpecOptions, MemplanDeriveShapesPass
from tr_mlir.passes.memplan_fuse_bn_stats import MemplanFuseBnStatsPass
from tr_mlir.passes.memplan_fuse_fc_relu import MemplanFuseFcReluPass
from tr_mlir.passes.memplan_fuse_grad_acc import MemplanFuseGradAccPass
from tr_mlir.passes.memplan_max_slots import MemplanMaxSlotsPass
from tr_mlir.passes.memplan_name_parameters import MemplanNameParametersPass
from tr_mlir.passes.memplan_narrow_grad_clear import MemplanNarrowGradClearPass
from tr_mlir.passes.memplan_select_conv_algo import ConvAlgoOptions, MemplanSelectConvAlgoPass
from tr_mlir.passes.memplan_share_variants import MemplanShareVariantsPass
from tr_mlir.passes.memplan_skip_dead_outputs import MemplanSkipDeadOutputsPass

SPEC_OPTIONS: tuple[str, ...] = tuple(f.name for f in fields(CompileSpecOptions))
"""The compile-spec options (those of ``memplan-derive-shapes``)."""


@dataclass(frozen=True)
class MemplanCompilePass(CompileSpecOptions, ConvAlgoOptions, ModulePass):
    """Phases 1..5 and the atlas; see the module docstring for the options."""

    name = "memplan-compile"

    reuse: bool = True
    ema: bool = False
    decay_all: bool = False
    fuse_fc_relu: bool = True
    fuse_bn_stats: bool = True
    fuse_grad_acc: bool = True

    def phases(self) -> list[ModulePass]:
        """The passes this pipeline runs, in order, with the spec options on phase 1."""
        spec = {k: getattr(self, k) for k in SPEC_OPTIONS}
        return [MemplanSelectConvAlgoPass(**spec, **self.algo_options()), MemplanDeriveShapesPass(**spec),
                MemplanMaxSlotsPass(), MemplanCreatePlansPass(ema=self.ema), MemplanNameParametersPass(),
                MemplanBuildGraphPass(decay_all=self.decay_all), *([MemplanFuseFcReluPass()] if self.fuse_fc_relu else []),
                *([MemplanFuseBnStatsPass()] if self.fuse_bn_stats else []),
                *([MemplanFuseGradAccPass()] if self.fuse_grad_acc else []),
                MemplanNarrowGradClearPass(),
                MemplanShareVariantsPass(), MemplanBuildAtlasPass(),
                MemplanSkipDeadOutputsPass(), MemplanAssignOffsetsPass(reuse=self.reuse)]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for phase in self.phases():
            phase.apply(ctx, op)
            op.verify()
