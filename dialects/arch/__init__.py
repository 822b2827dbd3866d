"""The ``arch`` dialect: a network as an SSA graph of layers over NHWC tensors.

Values are builtin tensors ``tensor<?xHxWxCxf32>`` in NHWC with a dynamic batch. Before
``arch-deduce-shapes`` H, W and C may be ``?``; afterwards they are static. The batch stays
``?`` (the memplan variants bind it).

The dialect has four families of ops (DESIGN section 3):

* primitives, one per LayerKind of the seed (``arch.conv``, ``arch.bn2d``, ``arch.relu`` ...);
* fused kinds produced by the ArchPlan fusion passes (``arch.cbr``, ``arch.bottleneck_identity`` ...);
* tree-form ops emitted from a BluePrint and removed by ``arch-expand`` (``arch.seq``,
  ``arch.add2``, ``arch.repeat``, ``arch.block``; ``cbr``/``cbrp``/``gap_fc`` double as macros);
* the model container ``arch.model`` with its terminator ``arch.output``.

Op knowledge lives on the op: every layer op has ``verify_params`` (the property rules) and
``infer_hwc`` (its NHWC shape rule, from the seed's ``recompute_shapes_from``, facts sheet
section 4, with geometry errors as diagnostics instead of clamping, DESIGN section 7), and a
``LAYER_KIND`` class attribute holding the seed's LayerKind name (used by the YAML export).
``arch.add`` shares that interface (:class:`ArchLayerOp`: ``layer_inputs``, ``infer_hwc``,
``channels_after`` over all its inputs). What a pass must know about an op beyond its shape
(bn1d/bn2d rule, flatten rule, AMP input alignment, tree form, ...) is an op trait declared in
the op's ``traits`` (section "Op traits"), so a new op, also one defined in a plugin outside
this package, declares it once and every pass learns it from the op.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation

from tr_mlir.dialects.arch._base import (  # noqa: F401 (the dialect's public names)
    DYN,
    HWC,
    AlignsAmpInput,
    ArchLayerOp,
    ArchOp,
    BlockStyle,
    BlockStyleAttr,
    BnRenameSeeThrough,
    FeatureProducer,
    IsActivation,
    IsFused,
    IsTreeForm,
    LayerOp,
    NeedsFlatInput,
    ReadsSpatialMap,
    conv_out,
    nhwc_type,
    static_hwc,
    unknown_nhwc,
)
from tr_mlir.dialects.arch._fused import (  # noqa: F401 (the dialect's public names)
    _FusedBnBase,  # the base of fused ops with batch norms, for plugins (docs/architecture.md)
    BasicBlockIdentityOp,
    BasicBlockProjectionOp,
    BottleneckIdentityOp,
    BottleneckProjectionOp,
    CbrOp,
    CbrpOp,
    GapFcOp,
    InvResidualIdentityOp,
    InvResidualNoShortcutOp,
    ResidualBlockOp,
    residual_spec,
)
from tr_mlir.dialects.arch._residual import IN, ConvStage, ResidualSpec, Shortcut  # noqa: F401
from tr_mlir.dialects.arch._layers import (  # noqa: F401 (the dialect's public names)
    AddOp,
    AvgPoolOp,
    Bn1dOp,
    Bn2dOp,
    BnOp,
    ChannelPaddingOp,
    ConvOp,
    DropoutOp,
    EluOp,
    FcOp,
    FlattenOp,
    GapOp,
    HardswishOp,
    IdentityOp,
    LeakyReluOp,
    MaxPoolOp,
    Relu6Op,
    ReluOp,
    SigmoidOp,
    SiluOp,
    SoftmaxCeOp,
    TanhOp,
)
from tr_mlir.dialects.arch._program import (  # noqa: F401 (the dialect's public names)
    Add2Op,
    BlockOp,
    ModelOp,
    OutputOp,
    RepeatOp,
    SeqOp,
    YieldOp,
)
from tr_mlir.errors import PluginError



# --------------------------------------------------------------------------------------
# Registries and the dialect
# --------------------------------------------------------------------------------------

PRIMITIVE_OPS: tuple[type[LayerOp], ...] = (
    ConvOp, BnOp, Bn1dOp, Bn2dOp, ReluOp, TanhOp, SiluOp, Relu6Op, LeakyReluOp, HardswishOp,
    EluOp, SigmoidOp, MaxPoolOp, AvgPoolOp, GapOp, FcOp, FlattenOp, ChannelPaddingOp, IdentityOp,
    SoftmaxCeOp, DropoutOp,
)
"""Single-input primitive layers (``arch.add`` is the two-input primitive)."""

ACTIVATION_OPS: tuple[type[LayerOp], ...] = (
    ReluOp, TanhOp, SiluOp, Relu6Op, LeakyReluOp, HardswishOp, EluOp, SigmoidOp,
)

FUSED_OPS: tuple[type[LayerOp], ...] = (
    CbrOp, CbrpOp, GapFcOp, BottleneckIdentityOp, BottleneckProjectionOp, BasicBlockIdentityOp,
    BasicBlockProjectionOp, InvResidualIdentityOp, InvResidualNoShortcutOp,
)

TREE_OPS: tuple[type[IRDLOperation], ...] = (SeqOp, RepeatOp, Add2Op, YieldOp, BlockOp)

BUILTIN_OPS: tuple[type[IRDLOperation], ...] = (
    *PRIMITIVE_OPS, AddOp, *FUSED_OPS, *TREE_OPS, ModelOp, OutputOp,
)
"""Every op the package defines, in the dialect's order."""

_REGISTERED: list[type[LayerOp]] = []
"""Layer ops added by plugins (:func:`register_op`), in registration order."""


class OpRegistrationError(PluginError):
    """An op class :func:`register_op` cannot add; the message names the class and the rule."""


def register_op(cls: type[LayerOp]) -> type[LayerOp]:
    """Add a plugin's layer op class to the ``arch`` dialect; returns ``cls`` (usable as a decorator
    above ``@irdl_op_definition``).

    The class must be an IRDL op definition subclassing :class:`LayerOp` (one NHWC input, one NHWC
    output, ``verify_params`` / ``infer_hwc`` / ``channels_after`` as the built-in layers), named
    ``arch.<name>`` with a name and a ``LAYER_KIND`` no other arch op has. Registering the same class
    twice is a no-op. Contexts that load the dialect afterwards (:func:`arch_dialect`, ``tr-opt``,
    ``xdsl-opt`` through the ``xdsl.universe`` entry point) know the op.

    Raises :class:`OpRegistrationError` naming the class and what is wrong.
    """
    what = getattr(cls, "__qualname__", repr(cls))
    if not (isinstance(cls, type) and issubclass(cls, LayerOp)):
        raise OpRegistrationError(f"register_op({what}): an arch op must subclass tr_mlir.dialects.arch.LayerOp "
                                  "(one NHWC input, one NHWC output)")
    if cls in _REGISTERED:
        return cls
    try:
        cls.get_irdl_definition()
    except Exception:  # noqa: BLE001 - a class without its IRDL definition
        raise OpRegistrationError(f"register_op({what}): not an IRDL op definition; decorate the class with "
                                  "@irdl_op_definition (below @register_op)") from None
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name.startswith("arch.") or len(name) <= len("arch."):
        raise OpRegistrationError(f"register_op({what}): its name must be 'arch.<name>', got {name!r}")
    if not cls.LAYER_KIND:
        raise OpRegistrationError(f"register_op({what}): set LAYER_KIND (the LayerKind name the ArchPlan YAML "
                                  "writes, e.g. 'ConvRelu')")
    for other in (*BUILTIN_OPS, *_REGISTERED):
        if other.name == name:
            raise OpRegistrationError(f"register_op({what}): the arch dialect already has an op '{name}' "
                                      f"({other.__module__}.{other.__qualname__})")
        if getattr(other, "LAYER_KIND", "") == cls.LAYER_KIND and other is not BnOp:
            raise OpRegistrationError(f"register_op({what}): LAYER_KIND '{cls.LAYER_KIND}' is already the kind "
                                      f"of '{other.name}'")
    _REGISTERED.append(cls)
    return cls


def registered_ops() -> tuple[type[LayerOp], ...]:
    """The layer ops plugins added (:func:`register_op`), in registration order."""
    return tuple(_REGISTERED)


def arch_dialect() -> Dialect:
    """The ``arch`` dialect with the package's ops and every op registered so far (one object
    until another op is registered: a context built after a plugin loaded knows its ops)."""
    global _DIALECT
    if _DIALECT is None or _DIALECT[0] != tuple(_REGISTERED):
        ops = tuple(_REGISTERED)
        _DIALECT = (ops, Arch if not ops else Dialect("arch", [*BUILTIN_OPS, *ops], [BlockStyleAttr]))
    return _DIALECT[1]


_DIALECT: tuple[tuple[type[LayerOp], ...], Dialect] | None = None


Arch = Dialect("arch", list(BUILTIN_OPS), [BlockStyleAttr])
"""The ``arch`` dialect of the package's own ops (plugins' ops: :func:`arch_dialect`)."""


def ops_by_layer_kind() -> Mapping[str, type[ArchOp]]:
    """Seed LayerKind name -> op class, plugin ops included (``Bn2d`` maps to ``arch.bn2d``)."""
    return {op.LAYER_KIND: op for op in layer_ops() if op is not BnOp}


def layer_ops() -> Sequence[type[ArchOp]]:
    """Every op class that is a layer of a flat ArchPlan (primitives, ``add``, fused kinds, and the
    layer ops plugins registered)."""
    return (*PRIMITIVE_OPS, AddOp, *FUSED_OPS, *_REGISTERED)
