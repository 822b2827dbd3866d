"""Emission of a BluePrint tree into an ``arch.model`` module (:func:`emit`), with the limits that
keep it parseable (:data:`MAX_NESTING`, :data:`MAX_EMITTED_OPS`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tr_mlir.dialects.arch import (
    ModelOp,
    OutputOp,
)

# --------------------------------------------------------------------------------------
# Emission
# --------------------------------------------------------------------------------------

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")

MAX_NESTING = 63
"""Deepest nesting of ``seq`` / ``add2`` / ``repeat`` that :func:`emit` accepts: each is a region,
and with the model body that makes 64, what ``tr-opt`` parses (``opt_parser.MAX_REGION_DEPTH``; xDSL's
recursive printer and parser fail not far beyond)."""

MAX_EMITTED_OPS = 100_000
"""Most ops :func:`emit` creates (``arch-expand`` caps a flat model at as many layers). A tree
that reuses a sub-layer at every level (``x = seq(x, x)``) doubles with each level."""
from tr_mlir.blueprint._layers import (
    BluePrintError,
    BluePrintTypeError,
    Emitter,
    Layer,
    Primitive,
    at_least,
    check_bool,
    child_layer,
)


def tree_size(model: Layer) -> tuple[int, int]:
    """``(ops, nesting)`` of a layer tree: the number of ops :func:`emit` creates for it (capped at
    ``MAX_EMITTED_OPS + 1``) and its deepest nesting of ``seq`` / ``add2`` / ``repeat``.

    Iterative and computed once per distinct layer object, so shared sub-layers and deep trees
    cost time linear in the number of distinct layers and no recursion.
    """
    memo: dict[int, tuple[int, int]] = {}
    stack: list[tuple[Layer, bool]] = [(model, False)]
    while stack:
        layer, ready = stack.pop()
        if id(layer) in memo:
            continue
        children = [] if isinstance(layer, Primitive) else [c for c in layer._args() if isinstance(c, Layer)]
        if not ready and any(id(c) not in memo for c in children):
            stack.append((layer, True))
            stack.extend((c, False) for c in children)
            continue
        ops = min(1 + sum(memo[id(c)][0] for c in children), MAX_EMITTED_OPS + 1)
        nesting = 0 if isinstance(layer, Primitive) else 1 + max((memo[id(c)][1] for c in children), default=0)
        memo[id(layer)] = (ops, nesting)
    return memo[id(model)]


def emit(
    model: Layer | None,
    input_shape: tuple[int, int, int],
    *,
    num_classes: int,
    amp: bool = False,
    fuse: bool = False,
    name: str = "model",
) -> ModuleOp:
    """Emit a BluePrint as a module holding one ``arch.model @name`` in tree form.

    ``input_shape`` is the (H, W, C) of one sample (NHWC, batch excluded); the model's block
    argument gets that static type, every other value ``tensor<?x?x?x?xf32>`` (shapes are
    deduced later by ``arch-deduce-shapes``). ``num_classes`` (required: the seed's
    ``build(num_classes)``), ``amp`` and ``fuse`` are recorded on the model. Unlike the
    seed, ``fuse`` does not require ``amp`` (DESIGN section 7). ``None`` emits an empty model.

    Mapping: ``seq`` -> ``arch.seq``, ``add2`` -> ``arch.add2`` (regions shortcut, main),
    ``repeat`` -> ``arch.repeat``, ``block``/``mbconv`` -> ``arch.block``,
    ``cbr``/``cbrp``/``gap_fc`` -> their macro ops, ``bn`` -> ``arch.bn``, ``conv_dw`` ->
    ``arch.conv`` with ``groups = out_ch = C`` entering it (the seed's running channel
    count), every other primitive -> its op.

    Raises :class:`BluePrintError` for a bad argument, a ``repeat`` whose body depends on
    the channels entering it, a tree nested deeper than :data:`MAX_NESTING` or one that would
    emit more than :data:`MAX_EMITTED_OPS` ops.
    """
    child_layer("emit", "model", model)
    if model is not None:
        ops, nesting = tree_size(model)
        if nesting > MAX_NESTING:
            raise BluePrintError(
                f"emit: the model nests seq/add2/repeat {nesting} levels deep, at most {MAX_NESTING} are "
                "supported; flatten the nesting, e.g. seq(a, b, c) instead of seq(a, seq(b, seq(c)))"
            )
        if ops > MAX_EMITTED_OPS:
            raise BluePrintError(
                f"emit: the model would emit more than {MAX_EMITTED_OPS} ops; a sub-layer reused at "
                "every level (x = seq(x, x)) doubles the tree each time, use repeat(x, n) instead"
            )
    if isinstance(input_shape, (str, bytes)) or not isinstance(input_shape, Sequence) or len(input_shape) != 3:
        raise BluePrintTypeError(f"emit: input_shape must be (H, W, C), got {input_shape!r}")
    hwc = tuple(at_least("emit", f"input_shape[{i}]", d, 1) for i, d in enumerate(input_shape))
    num_classes = at_least("emit", "num_classes", num_classes, 1)
    check_bool("emit", "amp", amp)
    check_bool("emit", "fuse", fuse)
    if not isinstance(name, str) or not _SYMBOL.fullmatch(name):
        raise BluePrintError(f"emit: name must be a symbol name like 'resnet50', got {name!r}")
    op = ModelOp(name, hwc, num_classes, amp=amp, fuse=fuse)
    body = op.body.block
    em = Emitter(body, hwc[2])
    value: SSAValue = op.input_value
    if model is not None:
        value = model._emit(em, value)
    body.add_op(OutputOp(value))
    return ModuleOp([op])
