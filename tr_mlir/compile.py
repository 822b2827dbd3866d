"""The compile API: BluePrint -> flat ArchPlan module, and BluePrint -> memplan program.

Each function emits the BluePrint into the ``arch`` dialect (:func:`tr_mlir.blueprint.emit`)
and runs the named pass pipeline on it, so the Python API and ``tr-opt`` share one
implementation: ``arch_plan(...)`` is ``tr-opt -p 'arch-plan{...}'`` and ``compile(...)`` is
``tr-opt -p 'tr-compile{...}'`` on the emitted module.
"""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp

from tr_mlir.dialects import get_all_dialects


def make_context() -> Context:
    """An xDSL ``Context`` with ``builtin`` and every tr-mlir dialect loaded."""
    ctx = Context()
    ctx.load_dialect(Builtin)
    for factory in get_all_dialects().values():
        ctx.load_dialect(factory())
    return ctx


def arch_plan(
    model,
    input_shape: tuple[int, int, int],
    *,
    amp: bool,
    fuse: bool,
    num_classes: int,
    cbrp: bool = False,
    name: str = "model",
) -> ModuleOp:
    """Compile a BluePrint to the flat, shape-deduced, verified ArchPlan module.

    Args:
        model: a BluePrint layer (``tr_mlir.blueprint``).
        input_shape: (H, W, C) of one sample, NHWC.
        amp: fp16 storage with fp32 accumulation; aligns the first conv's input C to 4.
        fuse: run the fusion steps (blocks, conv+bn+relu, gap+fc).
        num_classes: logits of the classifier head (``arch.softmax_ce``).
        cbrp: also fuse conv+bn+relu+maxpool (off by default, as in the seed).
        name: symbol name of the ``arch.model``.

    Returns:
        A ``builtin.module`` holding one flat ``arch.model``.

    Raises:
        tr_mlir.blueprint.BluePrintError: invalid BluePrint or arguments.
        xdsl.utils.exceptions.DiagnosticException: a pass rejected the network (bad
            geometry, a softmax_ce / class-count mismatch, ...); the message names the op.
    """
    from tr_mlir.blueprint import check_bool, emit
    from tr_mlir.passes.arch_plan import ArchPlanPass

    check_bool("arch_plan", "cbrp", cbrp)
    module = emit(model, input_shape, amp=amp, fuse=fuse, num_classes=num_classes, name=name)
    ArchPlanPass(cbrp=cbrp).apply(make_context(), module)
    module.verify()
    return module


def compile(  # noqa: A001 - the API name of the issue; shadows the builtin only inside this module
    model,
    input_shape: tuple[int, int, int],
    *,
    num_classes: int,
    batch_size: int,
    train_size: int,
    val_size: int,
    amp: bool = False,
    fuse: bool = False,
    optimizer: str = "momentum",
    target: str = "cpu",
    train_res: int | None = None,
    train_res_end: int | None = None,
    val_res: int | None = None,
    world_size: int = 1,
    cbrp: bool = False,
    name: str = "model",
    reuse: bool = True,
    conv_algo: str = "auto",
    decay_all: bool = False,
    fuse_fc_relu: bool = True,
    fuse_bn_stats: bool = True,
    fuse_grad_acc: bool = True,
) -> ModuleOp:
    """Compile a BluePrint to its memplan program (``tr-compile``: ArchPlan, phases 1..5, atlas).

    Args:
        model: a BluePrint layer (``tr_mlir.blueprint``).
        input_shape: (H, W, C) of one sample, NHWC.
        num_classes: logits of the classifier head.
        batch_size: samples per step and process.
        train_size, val_size: dataset sizes (they decide the last-batch variants).
        amp: fp16 features and working weights with fp32 master weights.
        fuse: fuse residual blocks, conv+bn+relu and gap+fc.
        optimizer: ``sgd``, ``momentum``, ``nesterov``, ``adam``, ``adamw``, ``lars`` or
            ``lars-nesterov`` (decides the M/V/N buffers and the optimizer graphs).
        target: ``cpu`` or ``cuda`` (channel padding of fp16 features and masks).
        train_res, train_res_end, val_res: resolutions of the train_* / train_lowres_* / val_*
            variants (default: the input resolution; ``train_res_end`` defaults to ``train_res``).
        world_size: number of data-parallel processes (each gets ``ceil(size / world_size)``
            samples per epoch).
        cbrp: also fuse conv+bn+relu+maxpool.
        name: symbol name of the ``arch.model``.
        reuse: place transient DTensors by lifetime (``memplan-assign-offsets``); ``False``
            keeps the seed's one slot per DTensor.
        conv_algo: the convolution algorithms (``memplan-select-conv-algo``): ``auto`` (its cost
            rule, Winograd included), ``im2col`` (the rule before it, same numerics), ``numpy``, or
            one algorithm forced where it applies.
        decay_all: bias-like parameters (BN gamma/beta, FC biases) get the weight update with
            weight decay (``memplan-build-graph``'s option; ``tr_mlir.optim``'s ``decay_all``).
        fuse_fc_relu: run an FC and its adjacent ReLU as one GEMM with a ReLU epilogue
            (``memplan-fuse-fc-relu``; the same bits either way).
        fuse_bn_stats: let each Winograd conv write the batch-norm statistics of its output for
            the BN after it (``memplan-fuse-bn-stats``; the statistics' last bits differ).
        fuse_grad_acc: let the Winograd input gradient at a residual join add the skip's
            gradient in its output transform (``memplan-fuse-grad-acc``; the same bits).

    Returns:
        A verified ``builtin.module`` with the flat ``arch.model`` and its ``memplan.program``
        (spec, six variants, descriptors, six plans, the ``@train`` / ``@infer`` graphs, the
        atlas): everything the runtime needs.

    Raises:
        tr_mlir.blueprint.BluePrintError: invalid BluePrint or arguments (a
            ``BluePrintTypeError``, also a ``TypeError``, for an argument of the wrong type).
        xdsl.utils.exceptions.DiagnosticException: a pass rejected the network or the spec (bad
            geometry, a first layer that cannot read the input buffers, bad spec values, an
            unknown optimizer or target, ...); the message names the op.
    """
    from tr_mlir.blueprint import BluePrintTypeError, check_bool, check_int, emit
    from tr_mlir.passes.tr_compile import TrCompilePass

    # Python types here (the passes check the values and report them as diagnostics)
    for key, value in (("batch_size", batch_size), ("train_size", train_size), ("val_size", val_size),
                       ("world_size", world_size), ("train_res", train_res),
                       ("train_res_end", train_res_end), ("val_res", val_res)):
        if value is not None or key in ("batch_size", "train_size", "val_size", "world_size"):
            check_int("compile", key, value)
    for key, value in (("optimizer", optimizer), ("target", target), ("conv_algo", conv_algo)):
        if not isinstance(value, str):
            raise BluePrintTypeError(f"compile: {key} must be a str, got {type(value).__name__} {value!r}")
    check_bool("compile", "cbrp", cbrp)
    check_bool("compile", "reuse", reuse)
    check_bool("compile", "decay_all", decay_all)
    check_bool("compile", "fuse_fc_relu", fuse_fc_relu)
    check_bool("compile", "fuse_bn_stats", fuse_bn_stats)
    check_bool("compile", "fuse_grad_acc", fuse_grad_acc)
    module = emit(model, input_shape, amp=amp, fuse=fuse, num_classes=num_classes, name=name)
    TrCompilePass(
        cbrp=cbrp, batch_size=batch_size, train_size=train_size, val_size=val_size, train_res=train_res,
        train_res_end=train_res_end, val_res=val_res, world_size=world_size, optimizer=optimizer,
        target=target, reuse=reuse, conv_algo=conv_algo, decay_all=decay_all, fuse_fc_relu=fuse_fc_relu,
        fuse_bn_stats=fuse_bn_stats, fuse_grad_acc=fuse_grad_acc,
    ).apply(make_context(), module)
    module.verify()
    return module
