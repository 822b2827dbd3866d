"""``tr-compile``: the whole compiler, ``arch-plan`` then ``memplan-compile``.

From a BluePrint module in tree form (``examples/*.mlir``) to the self-contained memplan program
(DESIGN section 1): ArchPlan normalization and fusion, then the five Compiler phases and the
atlas. Example (the done-when command of issue 4)::

    tr-opt --pass-pipeline='builtin.module(tr-compile{fuse=true amp=true num_classes=1000
        batch_size=256 train_size=1281167 val_size=50000})' examples/resnet50.mlir

Options: those of ``arch-plan`` (``fuse``, ``amp``, ``num_classes`` rewrite the model attributes
they name; ``cbrp`` adds the conv+bn+relu+maxpool merge) and those of ``memplan-compile`` (the
compile spec: ``batch_size``, ``train_size``, ``val_size``, ``train_res``, ``train_res_end``,
``val_res``, ``world_size``, ``optimizer``, ``target``; ``reuse``: place transient DTensors by
lifetime, default true; ``ema``; ``decay_all``: bias-like parameters decay too,
:mod:`tr_mlir.passes.memplan_build_graph`; ``conv_algo`` and ``conv_algo_fwd`` / ``_dgrad`` / ``_wgrad``: the
conv algorithms, :mod:`tr_mlir.passes.memplan_select_conv_algo`; ``fuse_fc_relu``: the FC+ReLU
GEMM epilogue, default true, :mod:`tr_mlir.passes.memplan_fuse_fc_relu`; ``fuse_bn_stats``: BN
statistics in the Winograd convs' output pass, default true, :mod:`tr_mlir.passes.memplan_fuse_bn_stats`;
``fuse_grad_acc``: residual gradients added by the Winograd input gradients, default true,
:mod:`tr_mlir.passes.memplan_fuse_grad_acc`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tr_mlir.passes.arch_plan import ArchPlanPass
from tr_mlir.passes.memplan_compile import SPEC_OPTIONS, MemplanCompilePass
from tr_mlir.passes.memplan_derive_shapes import CompileSpecOptions
from tr_mlir.passes.memplan_select_conv_algo import ConvAlgoOptions


@dataclass(frozen=True)
class TrCompilePass(CompileSpecOptions, ConvAlgoOptions, ModulePass):
    """``arch-plan`` + ``memplan-compile``; see the module docstring for the options."""

    name = "tr-compile"

    fuse: bool | None = None
    amp: bool | None = None
    num_classes: int | None = None
    cbrp: bool = False
    skip: str = ""
    extra: str = ""
    reuse: bool = True
    ema: bool = False
    decay_all: bool = False
    fuse_fc_relu: bool = True
    fuse_bn_stats: bool = True
    fuse_grad_acc: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        ArchPlanPass(fuse=self.fuse, amp=self.amp, num_classes=self.num_classes, cbrp=self.cbrp,
                     skip=self.skip, extra=self.extra).apply(ctx, op)
        op.verify()
        MemplanCompilePass(**{k: getattr(self, k) for k in SPEC_OPTIONS}, **self.algo_options(), reuse=self.reuse,
                           ema=self.ema, decay_all=self.decay_all, fuse_fc_relu=self.fuse_fc_relu,
                           fuse_bn_stats=self.fuse_bn_stats, fuse_grad_acc=self.fuse_grad_acc).apply(ctx, op)
