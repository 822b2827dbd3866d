"""The ``memplan`` dialect: memory plans and computation graphs of a compiled network.

This is the output of the Compiler phases (DESIGN section 4, facts sheet sections 1-11). Everything
lives in one ``memplan.program for @model`` op (a symbol table) next to the ``arch.model`` it was compiled from:

* ``memplan.spec``: the compile spec (batch size per process, dataset sizes, resolutions, world size,
  optimizer, target);
* six ``memplan.variant`` ops (``train_base, train_last, train_lowres, train_lowres_last, val_base,
  val_last``): batch, resolution, max resolution, channels, amp, and, after phase 5, links to their
  plan and graphs;
* ``memplan.descs``: phase 1/2 per-layer tensor descriptors (shapes of all six variants, max slots);
* six ``memplan.plan`` ops (phase 3): the region table and the DTensor table;
* ``memplan.graph @train`` / ``@infer`` (phase 4): one ``memplan.nodes`` op per non-empty GraphId;
* ``memplan.atlas``: (variant, GraphId) -> capture key.

Encoding (DESIGN section 4): a plan or a graph is a few ops carrying dense arrays (ids, offsets,
sizes, shapes), never one op per tensor or node: xDSL parses about 800 ops/s but ~90k array
elements/s. Shapes are NHWC, four entries per tensor; regions and dtypes are spelled by name.

Verifiers check what a backend relies on: ids unique and dense, 256-aligned non-overlapping
offsets inside their region, contiguous regions in the fixed order, W/G/M/V/A element
correspondence (the k-th parameter of a W range sits at the same element offset in the G, M, V and
A ranges), node ids defined in the plans, valid RANGE spans, val variants without a train graph,
identical ids/slots/offsets in the six plans.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BytesAttr,
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    UnitAttr,
    f64,
    i64,
)
from xdsl.dialects.utils import EnumAttribute, StrEnum
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SpacedOpaqueSyntaxAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    lazy_traits_def,
    opt_prop_def,
    prop_def,
    region_def,
    traits_def,
)
from xdsl.traits import HasParent, NoTerminator, SymbolOpInterface, SymbolTable
from xdsl.utils.exceptions import VerifyException

# --------------------------------------------------------------------------------------
# Regions, dtypes, slot sizes (facts sheet sections 4 and 5)
# --------------------------------------------------------------------------------------


class MemRegion(IntEnum):
    """The seed's 68 memory regions, in address order (facts sheet section 4).

    Laid out low to high in this order; a range op works on a closed interval of them.
    """

    B_PREV_MEAN = 0
    B_PREV_VAR = 1
    B_NEXT_MEAN = 2
    B_NEXT_VAR = 3
    W_EQ_BIAS = 4
    W_EQ_SCALE = 5
    W_BN_BIAS = 6
    W_BN_WEIGHT = 7
    W_FC_BIAS = 8
    W_FC_WEIGHT = 9
    W_FIRST_CONV = 10
    W_DEEP_CONV = 11
    E_BN_BIAS = 12
    E_BN_WEIGHT = 13
    E_FC_BIAS = 14
    E_FC_WEIGHT = 15
    E_FIRST_CONV = 16
    E_DEEP_CONV = 17
    E_FC_WEIGHT_FP16 = 18
    E_FIRST_CONV_FP16 = 19
    E_DEEP_CONV_FP16 = 20
    A_FC_WEIGHT = 21
    A_FIRST_CONV = 22
    A_DEEP_CONV = 23
    G_BN_BIAS = 24
    G_BN_WEIGHT = 25
    G_FC_BIAS = 26
    G_FC_WEIGHT = 27
    G_FIRST_CONV = 28
    G_DEEP_CONV = 29
    R_RESULT = 30
    G_FC_WEIGHT_FP16 = 31
    G_FIRST_CONV_FP16 = 32
    G_DEEP_CONV_FP16 = 33
    M_BN_BIAS = 34
    M_BN_WEIGHT = 35
    M_FC_BIAS = 36
    M_FC_WEIGHT = 37
    M_FIRST_CONV = 38
    M_DEEP_CONV = 39
    V_BN_BIAS = 40
    V_BN_WEIGHT = 41
    V_FC_BIAS = 42
    V_FC_WEIGHT = 43
    V_FIRST_CONV = 44
    V_DEEP_CONV = 45
    N_FC_WEIGHT = 46
    N_FIRST_CONV = 47
    N_DEEP_CONV = 48
    I_A_LABEL = 49
    I_A_DATA = 50
    I_B_LABEL = 51
    I_B_DATA = 52
    F_FEATURE_FP32 = 53
    F_GRAD_SLOT_FP32 = 54
    F_FEATURE_FP16 = 55
    F_GRAD_SLOT_FP16 = 56
    S_SCALAR_FP32 = 57
    S_SCALAR_FP16 = 58
    S_SCALAR_INT32 = 59
    S_SCALAR_INT8 = 60
    S_MASK = 61
    T_TEMP_FP32 = 62
    T_TEMP_FP16 = 63
    T_TEMP_INT32 = 64
    T_TEMP_INT8 = 65
    R_PREDICTED_LABEL = 66
    R_RESULT_ACCUMULATED = 67


TRANSIENT_REGIONS: frozenset[MemRegion] = frozenset({
    MemRegion.F_FEATURE_FP32, MemRegion.F_GRAD_SLOT_FP32, MemRegion.F_FEATURE_FP16, MemRegion.F_GRAD_SLOT_FP16,
    MemRegion.S_MASK, MemRegion.T_TEMP_FP32, MemRegion.T_TEMP_FP16, MemRegion.T_TEMP_INT32, MemRegion.T_TEMP_INT8,
})
"""Regions whose DTensors are recomputed every step (DESIGN section 4): features, gradient slots,
masks, temporaries and kernel workspaces. Their DTensors may share bytes when their lifetimes are
disjoint (:mod:`tr_mlir.dialects.lifetimes`); all other regions hold persistent state.
The region table's order does not depend on it."""

WORKSPACE_PREFIX = "ws_"
"""Name prefix of a kernel workspace DTensor (``ws_<kernel argument>``): call-scoped scratch memory,
whose value never outlives the node that writes it."""

NUM_REGIONS = len(MemRegion)
"""68: the seed's phantom 69th region is not reproduced (it is always empty)."""

DTYPE_BYTES: Mapping[str, int] = {"f32": 4, "f16": 2, "i32": 4, "i8": 1}
"""Element size in bytes of the four DTensor dtypes."""

ALIGN = 256
"""Every slot and offset is a multiple of 256 bytes."""


class Target(StrEnum):
    """Where the plan runs: channel padding of fp16 features and int8 masks differs (section 5)."""

    CPU = "cpu"
    CUDA = "cuda"


class OptimizerKind(StrEnum):
    """The optimizer kinds of the seed (facts sheet section 6), one spelling everywhere.

    ``momentum``, ``nesterov``, ``lars_nesterov`` are the seed's SGD_MOMENTUM, SGD_NESTEROV and
    LARS_NESTEROV (pass options also accept ``lars-nesterov``).
    """

    SGD = "sgd"
    MOMENTUM = "momentum"
    NESTEROV = "nesterov"
    ADAM = "adam"
    ADAMW = "adamw"
    LARS = "lars"
    LARS_NESTEROV = "lars_nesterov"

    @property
    def uses_momentum(self) -> bool:
        """M_* buffers: every kind but plain SGD (the seed's ``use_momentum``)."""
        return self is not OptimizerKind.SGD

    @property
    def uses_adam(self) -> bool:
        """V_* buffers and the Adam scalars."""
        return self in (OptimizerKind.ADAM, OptimizerKind.ADAMW)

    @property
    def uses_lars(self) -> bool:
        """N_* trust-ratio scalars and LARS partial-sum temporaries."""
        return self in (OptimizerKind.LARS, OptimizerKind.LARS_NESTEROV)

    @classmethod
    def parse(cls, text: str) -> OptimizerKind:
        """``'lars-nesterov'`` or ``'lars_nesterov'`` -> ``LARS_NESTEROV``; raises ``ValueError``."""
        try:
            return cls(text.replace("-", "_"))
        except ValueError:
            names = ", ".join(k.value.replace("_", "-") for k in cls)
            raise ValueError(f"unknown optimizer '{text}', expected one of {names}") from None


def channel_align(dtype: str, region: MemRegion, target: Target) -> int:
    """Channel padding multiple of a tensor (facts sheet section 5).

    fp16 input data -> 4; fp16 features/grad slots and int8 masks -> 8 on CUDA, 1 on CPU; else 1.
    """
    if dtype == "f16" and region in (MemRegion.I_A_DATA, MemRegion.I_B_DATA):
        return 4
    if target is Target.CUDA:
        if dtype == "f16" and region in (MemRegion.F_FEATURE_FP16, MemRegion.F_GRAD_SLOT_FP16):
            return 8
        if dtype == "i8" and region is MemRegion.S_MASK:
            return 8
    return 1


def align256(x: int) -> int:
    """Round ``x`` bytes up to a multiple of 256."""
    return (x + ALIGN - 1) // ALIGN * ALIGN


def slot_bytes(shape: Sequence[int], dtype: str, region: MemRegion, target: Target) -> int:
    """Bytes of a DTensor slot (the seed's ``compute_slot_bytes``, facts sheet section 5).

    ``elems = N*H*W*padded_C``; fp16: ``align256(2*elems + 16)``; int8: ``align256(elems + 16)``;
    fp32/int32: ``2 * align256(2*elems + 16)``, so an fp32 slot holds exactly as many elements as
    the fp16 slot of the same shape and range casts line up element by element.
    """
    n, h, w, c = shape
    a = channel_align(dtype, region, target)
    elems = n * h * w * ((c + a - 1) // a * a)
    if dtype == "f16":
        return align256(2 * elems + 16)
    if dtype == "i8":
        return align256(elems + 16)
    return 2 * align256(2 * elems + 16)


def region_enabled(region: MemRegion, *, amp: bool, optimizer: OptimizerKind) -> bool:
    """Whether a region holds bytes under this configuration (facts sheet sections 4 and 6).

    A_* and the fp16 grads only in AMP; F_*_FP32 only without AMP, F_*_FP16 only with it; M_*
    with momentum-like optimizers; V_* with Adam; N_* with LARS; E_* never (EMA is not planned yet).
    """
    name = region.name
    if name.startswith("E_"):
        return False
    if name.startswith("A_") or (name.startswith("G_") and name.endswith("_FP16")):
        return amp
    if region in (MemRegion.F_FEATURE_FP32, MemRegion.F_GRAD_SLOT_FP32):
        return not amp
    if region in (MemRegion.F_FEATURE_FP16, MemRegion.F_GRAD_SLOT_FP16):
        return amp
    if name.startswith("M_"):
        return optimizer.uses_momentum
    if name.startswith("V_"):
        return optimizer.uses_adam
    if name.startswith("N_"):
        return optimizer.uses_lars
    return True


CORRESPONDING_SPANS: tuple[tuple[str, tuple[MemRegion, MemRegion], tuple[MemRegion, MemRegion], int], ...] = (
    ("G", (MemRegion.W_FC_WEIGHT, MemRegion.W_DEEP_CONV), (MemRegion.G_FC_WEIGHT, MemRegion.G_DEEP_CONV), 1),
    ("M", (MemRegion.W_FC_WEIGHT, MemRegion.W_DEEP_CONV), (MemRegion.M_FC_WEIGHT, MemRegion.M_DEEP_CONV), 1),
    ("V", (MemRegion.W_FC_WEIGHT, MemRegion.W_DEEP_CONV), (MemRegion.V_FC_WEIGHT, MemRegion.V_DEEP_CONV), 1),
    ("A", (MemRegion.W_FC_WEIGHT, MemRegion.W_DEEP_CONV), (MemRegion.A_FC_WEIGHT, MemRegion.A_DEEP_CONV), 2),
    ("G16", (MemRegion.W_FC_WEIGHT, MemRegion.W_DEEP_CONV),
     (MemRegion.G_FC_WEIGHT_FP16, MemRegion.G_DEEP_CONV_FP16), 2),
    ("G", (MemRegion.W_BN_BIAS, MemRegion.W_FC_BIAS), (MemRegion.G_BN_BIAS, MemRegion.G_FC_BIAS), 1),
    ("M", (MemRegion.W_BN_BIAS, MemRegion.W_FC_BIAS), (MemRegion.M_BN_BIAS, MemRegion.M_FC_BIAS), 1),
    ("V", (MemRegion.W_BN_BIAS, MemRegion.W_FC_BIAS), (MemRegion.V_BN_BIAS, MemRegion.V_FC_BIAS), 1),
)
"""(name, W span, partner span, W bytes per partner byte) pairs whose elements correspond: the
k-th parameter of the W span starts at the same element offset in the partner span, and the
partner span has the same number of tensors per region (checked only when it is populated)."""


# --------------------------------------------------------------------------------------
# Variants and GraphIds (facts sheet sections 1 and 10)
# --------------------------------------------------------------------------------------

VARIANTS: tuple[str, ...] = (
    "train_base", "train_last", "train_lowres", "train_lowres_last", "val_base", "val_last",
)
"""The six variants in the seed's fixed index order."""


def is_train_variant(name: str) -> bool:
    """``train_*`` variants run the train graph; ``val_*`` ones only inference."""
    return not name.startswith("val_")


class GraphId(StrEnum):
    """The 33 subgraph buckets of a ComputationGraph, in the seed's order (facts sheet section 10)."""

    TRANSFER_A = "transfer_a"
    TRANSFER_B = "transfer_b"
    FIRST_LAYER_FWD_A = "first_layer_fwd_a"
    FIRST_LAYER_FWD_B = "first_layer_fwd_b"
    DEEP_FWD_BWD = "deep_fwd_bwd"
    ZERO_GRAD = "zero_grad"
    FIRST_LAYER_BWD_A = "first_layer_bwd_a"
    FIRST_LAYER_BWD_B = "first_layer_bwd_b"
    FIRST_COMM = "first_comm"
    DEEP_COMM = "deep_comm"
    CAST_DEEP_GRAD_FP16_TO_FP32 = "cast_deep_grad_fp16_to_fp32"
    CAST_FIRST_GRAD_FP16_TO_FP32 = "cast_first_grad_fp16_to_fp32"
    NAN_CHECK_AND_GRAD_SCALING = "nan_check_and_grad_scaling"
    STATS_COMM = "stats_comm"
    UPDATE_STATS = "update_stats"
    OPTIMIZER = "optimizer"
    EMA_UPDATE = "ema_update"
    INF_MAIN_A = "inf_main_a"
    INF_MAIN_B = "inf_main_b"
    INF_EMA_A = "inf_ema_a"
    INF_EMA_B = "inf_ema_b"
    CAST_MAIN_FP32_TO_FP16 = "cast_main_fp32_to_fp16"
    CAST_EMA_FP32_TO_FP16 = "cast_ema_fp32_to_fp16"
    ACCUM_METRICS = "accum_metrics"
    ACCUM_METRICS_TRAIN_LAST = "accum_metrics_train_last"
    ACCUM_METRICS_VAL_LAST = "accum_metrics_val_last"
    VAL_RESULT_COMM = "val_result_comm"
    CLEAR_METRICS = "clear_metrics"
    SIMPLE_TASK_GRAPH = "simple_task_graph"
    LARS_FC_OPT = "lars_fc_opt"
    LARS_FIRST_CONV_OPT = "lars_first_conv_opt"
    LARS_DEEP_CONV_OPT = "lars_deep_conv_opt"
    UPDATE_BN_INF_PARAMS = "update_bn_inf_params"

    @property
    def index(self) -> int:
        """Position 0..32 in the seed's enum."""
        return _GRAPH_INDEX[self]

    @property
    def shape_invariant(self) -> bool:
        """22 ids are captured once for all variants; 11 depend on the variant's shapes.

        The seed also counts OPTIMIZER as shape-dependent (so it is captured per train shape);
        here it is invariant, as its content is (DESIGN section 7).
        """
        return self not in _SHAPE_DEPENDENT

    @property
    def is_inference(self) -> bool:
        """INF_MAIN_A/B and INF_EMA_A/B (the seed's ``is_inference_graph``)."""
        return self in (GraphId.INF_MAIN_A, GraphId.INF_MAIN_B, GraphId.INF_EMA_A, GraphId.INF_EMA_B)


_GRAPH_INDEX = {g: i for i, g in enumerate(GraphId)}
_SHAPE_DEPENDENT = frozenset({
    GraphId.FIRST_LAYER_FWD_A, GraphId.FIRST_LAYER_FWD_B, GraphId.DEEP_FWD_BWD,
    GraphId.FIRST_LAYER_BWD_A, GraphId.FIRST_LAYER_BWD_B, GraphId.INF_MAIN_A, GraphId.INF_MAIN_B,
    GraphId.INF_EMA_A, GraphId.INF_EMA_B, GraphId.SIMPLE_TASK_GRAPH,
})
NUM_GRAPH_IDS = len(GraphId)

RANGE_OPS: tuple[str, ...] = (
    "RANGE_H2D_COPY_A", "RANGE_H2D_COPY_B", "RANGE_H2D_COPY_DTENSOR", "RANGE_BN_STATS_ALLREDUCE",
    "RANGE_UPDATE_BIAS_SGD", "RANGE_UPDATE_BIAS_MOMENTUM", "RANGE_UPDATE_BIAS_NESTEROV",
    "RANGE_UPDATE_BIAS_ADAM", "RANGE_UPDATE_WEIGHT_SGD", "RANGE_UPDATE_WEIGHT_MOMENTUM",
    "RANGE_UPDATE_WEIGHT_NESTEROV", "RANGE_UPDATE_WEIGHT_ADAM", "RANGE_UPDATE_WEIGHT_ADAMW",
    "RANGE_EMA_PARAM_UPDATE", "RANGE_SEMA_SWITCH", "RANGE_CLEAR", "RANGE_D2D_COPY",
    "RANGE_CAST_FP32_TO_FP16", "RANGE_CAST_FP16_TO_FP32", "RANGE_SUM_ALLREDUCE",
    "RANGE_MEAN_ALLREDUCE", "RANGE_CHECK_NAN", "RANGE_GRAD_SCALING", "RANGE_ACCUM_METRICS",
)
"""The 24 range ops (facts sheet section 9). A node whose op is one of these is a RANGE node;
every other node is a COMPUTE node (its op name is checked against the kernel registry by the
backend, not here)."""


INIT_RULES: tuple[str, ...] = (
    "none", "zeros", "ones", "fill", "host", "trunc_normal", "kaiming_uniform",
)
"""DTensor init rules applied after the arena is zeroed: ``none`` (left as is: written by a kernel
or a transfer), ``zeros``, ``ones``, ``fill`` (the tensor's ``init_values`` entry), ``host``
(written by the runtime from task settings: lr, optimizer hyper-parameters, batch sizes, seed),
``trunc_normal`` (conv weights, MLPerf style), ``kaiming_uniform`` (FC weights, fan-in)."""


# --------------------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------------------


@irdl_attr_definition
class TargetAttr(EnumAttribute[Target], SpacedOpaqueSyntaxAttribute):
    """``#memplan<target cpu>``; bare ``cpu`` / ``cuda`` inside op formats."""

    name = "memplan.target"


@irdl_attr_definition
class OptimizerAttr(EnumAttribute[OptimizerKind], SpacedOpaqueSyntaxAttribute):
    """``#memplan<optimizer adamw>``; bare ``adamw`` inside op formats."""

    name = "memplan.optimizer"


@irdl_attr_definition
class GraphIdAttr(EnumAttribute[GraphId], SpacedOpaqueSyntaxAttribute):
    """``#memplan<graph_id deep_fwd_bwd>``; bare ``deep_fwd_bwd`` inside op formats."""

    name = "memplan.graph_id"


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------

_I64_ARRAY = DenseArrayBase.constr(i64)
_F64_ARRAY = DenseArrayBase.constr(f64)


def i64_array(values: Sequence[int]) -> DenseArrayBase:
    """``array<i64: ...>`` from Python ints (packed directly: xDSL's ``from_list`` normalizes one
    element at a time, which dominated building the plans of a large model). Raises
    ``OverflowError`` for a value outside the signed 64-bit range, as ``from_list`` refuses it."""
    values = list(values)
    try:
        data = struct.pack(f"<{len(values)}q", *values)
    except struct.error as e:
        raise OverflowError(f"a value of {values[:8]}... does not fit in i64: {e}") from None
    return DenseArrayBase(i64, BytesAttr(data))


def f64_array(values: Sequence[float]) -> DenseArrayBase:
    """``array<f64: ...>`` from Python floats."""
    return DenseArrayBase.from_list(f64, [float(v) for v in values])


def str_array(values: Sequence[str]) -> ArrayAttr[StringAttr]:
    """``["a", "b"]`` from Python strings."""
    return ArrayAttr([StringAttr(v) for v in values])


def _ints(attr: DenseArrayBase) -> tuple[int, ...]:
    return tuple(int(v) for v in attr.get_values())


def _strs(attr: ArrayAttr[StringAttr]) -> tuple[str, ...]:
    return tuple(s.data for s in attr.data)


def _fail(op: Operation, msg: str) -> VerifyException:
    return VerifyException(f"'{op.name}' op {msg}")


def _region_of(op: Operation, name: str, what: str) -> MemRegion:
    try:
        return MemRegion[name]
    except KeyError:
        raise _fail(op, f"expected {what} to be a region name such as W_DEEP_CONV, got '{name}'") from None


def _check_len(op: Operation, what: str, got: int, expected: int, hint: str = "") -> None:
    if got != expected:
        raise _fail(op, f"expected {expected} entries in '{what}'{hint}, got {got}")


# --------------------------------------------------------------------------------------
# Ops: spec and variants
# --------------------------------------------------------------------------------------


class _ProgramChild(IRDLOperation):
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp),))


@irdl_op_definition
class SpecOp(_ProgramChild):
    """The compile spec: the one source of truth for phases 1..5 (DESIGN section 1).

    ``batch_size`` is per process; ``train_size`` / ``val_size`` are dataset sizes (they decide the
    last-batch variants); ``train_res`` .. ``train_res_end`` the progressive train resolutions,
    ``val_res`` the validation one; ``world_size`` the number of processes.
    """

    name = "memplan.spec"
    batch_size = prop_def(IntegerAttr[I64])
    train_size = prop_def(IntegerAttr[I64])
    val_size = prop_def(IntegerAttr[I64])
    train_res = prop_def(IntegerAttr[I64])
    train_res_end = prop_def(IntegerAttr[I64])
    val_res = prop_def(IntegerAttr[I64])
    world_size = prop_def(IntegerAttr[I64])
    optimizer = prop_def(OptimizerAttr)
    target = prop_def(TargetAttr)
    assembly_format = (
        "`batch_size` `=` $batch_size `train_size` `=` $train_size `val_size` `=` $val_size "
        "`train_res` `=` $train_res `train_res_end` `=` $train_res_end `val_res` `=` $val_res "
        "`world_size` `=` $world_size `optimizer` $optimizer `target` $target attr-dict"
    )

    def __init__(self, *, batch_size: int, train_size: int, val_size: int, train_res: int,
                 train_res_end: int, val_res: int, world_size: int = 1,
                 optimizer: OptimizerKind = OptimizerKind.MOMENTUM, target: Target = Target.CPU):
        ints = dict(batch_size=batch_size, train_size=train_size, val_size=val_size,
                    train_res=train_res, train_res_end=train_res_end, val_res=val_res,
                    world_size=world_size)
        props: dict[str, Attribute] = {k: IntegerAttr(v, i64) for k, v in ints.items()}
        props["optimizer"] = OptimizerAttr(optimizer)
        props["target"] = TargetAttr(target)
        super().__init__(properties=props)

    def value(self, name: str) -> int:
        """An integer field as a Python int."""
        attr = self.properties[name]
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    @property
    def optimizer_kind(self) -> OptimizerKind:
        return self.optimizer.data

    @property
    def target_kind(self) -> Target:
        return self.target.data

    def verify_(self) -> None:
        for key in ("batch_size", "train_size", "val_size", "train_res", "train_res_end", "val_res",
                    "world_size"):
            v = self.value(key)
            if v <= 0:
                raise _fail(self, f"expected {key} > 0, got {v}")


@irdl_op_definition
class VariantOp(_ProgramChild):
    """One of the six variants: its batch, resolution, max resolution (sizes the input buffers),
    input channels, amp; after phase 5 the links to its plan and graphs.

    ``res`` / ``max_res`` are heights; a model with a non-square input (H != W) also records the
    widths ``width`` / ``max_width`` (absent: the width equals the height). Val variants have no
    train graph.
    """

    name = "memplan.variant"
    sym_name = prop_def(SymbolNameConstraint())
    batch = prop_def(IntegerAttr[I64])
    res = prop_def(IntegerAttr[I64])
    max_res = prop_def(IntegerAttr[I64])
    width = opt_prop_def(IntegerAttr[I64])
    max_width = opt_prop_def(IntegerAttr[I64])
    channels = prop_def(IntegerAttr[I64])
    amp = opt_prop_def(UnitAttr)
    plan = opt_prop_def(SymbolRefAttr)
    train = opt_prop_def(SymbolRefAttr)
    infer = opt_prop_def(SymbolRefAttr)
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp), SymbolOpInterface()))
    assembly_format = (
        "$sym_name `batch` `=` $batch `res` `=` $res (`width` `=` $width^)? `max_res` `=` $max_res "
        "(`max_width` `=` $max_width^)? `channels` `=` $channels "
        "(`amp` $amp^)? (`plan` $plan^)? (`train` $train^)? (`infer` $infer^)? attr-dict"
    )

    def __init__(self, name: str, *, batch: int, res: int, max_res: int, channels: int,
                 amp: bool = False, width: int | None = None, max_width: int | None = None):
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "batch": IntegerAttr(batch, i64),
            "res": IntegerAttr(res, i64),
            "max_res": IntegerAttr(max_res, i64),
            "channels": IntegerAttr(channels, i64),
        }
        if (width is not None and width != res) or (max_width is not None and max_width != max_res):
            props["width"] = IntegerAttr(res if width is None else width, i64)
            props["max_width"] = IntegerAttr(max_res if max_width is None else max_width, i64)
        if amp:
            props["amp"] = UnitAttr()
        super().__init__(properties=props)

    @property
    def variant_name(self) -> str:
        return self.sym_name.data

    @property
    def batch_size(self) -> int:
        return self.batch.value.data

    @property
    def resolution(self) -> int:
        return self.res.value.data

    @property
    def max_resolution(self) -> int:
        return self.max_res.value.data

    @property
    def hw(self) -> tuple[int, int]:
        """``(H, W)`` of the variant's input (its resolution; W = H for a square input)."""
        h = self.resolution
        return h, (self.width.value.data if self.width is not None else h)

    @property
    def max_hw(self) -> tuple[int, int]:
        """``(H, W)`` of the input buffers (the largest resolution of the six variants)."""
        h = self.max_resolution
        return h, (self.max_width.value.data if self.max_width is not None else h)

    @property
    def num_channels(self) -> int:
        return self.channels.value.data

    @property
    def is_amp(self) -> bool:
        return self.amp is not None

    def verify_(self) -> None:
        if self.variant_name not in VARIANTS:
            raise _fail(self, f"expected a variant name in {', '.join(VARIANTS)}, got '{self.variant_name}'")
        for key, v in (("batch", self.batch_size), ("res", self.resolution),
                       ("max_res", self.max_resolution), ("channels", self.num_channels)):
            if v <= 0:
                raise _fail(self, f"expected {key} > 0, got {v}")
        if self.max_resolution < self.resolution:
            raise _fail(self, f"expected max_res >= res, got max_res = {self.max_resolution} < "
                              f"res = {self.resolution}")
        if (self.width is None) != (self.max_width is None):
            raise _fail(self, "expected width and max_width together (a non-square input) or neither")
        (_, w), (_, mw) = self.hw, self.max_hw
        if w <= 0 or mw < w:
            raise _fail(self, f"expected 0 < width <= max_width, got width = {w}, max_width = {mw}")
        if not is_train_variant(self.variant_name) and self.train is not None:
            raise _fail(self, f"expected no train graph on validation variant '{self.variant_name}' "
                              f"(val variants only run inference), got {self.train}")


# --------------------------------------------------------------------------------------
# Ops: per-layer descriptors (phases 1 and 2)
# --------------------------------------------------------------------------------------


@irdl_op_definition
class DescsOp(_ProgramChild):
    """Phase 1/2 tensor descriptors of one layer (the ``layer``-th op of the ``arch.model``).

    Per tensor: ``names``, ``regions``, ``dtypes``; ``shapes`` holds NHWC shapes for the six
    variants in order (``6 * 4 * n`` ints, variant-major); ``slots`` (phase 2) the max slot bytes
    over the variants. ``shared`` lists indices of workspace tensors that phase 3 allocates once
    for all layers (a slot of the largest size).
    """

    name = "memplan.descs"
    layer = prop_def(IntegerAttr[I64])
    op = prop_def(StringAttr)
    names = prop_def(ArrayAttr[StringAttr])
    mem_regions = prop_def(ArrayAttr[StringAttr])
    dtypes = prop_def(ArrayAttr[StringAttr])
    shapes = prop_def(_I64_ARRAY)
    shared = opt_prop_def(_I64_ARRAY)
    slots = opt_prop_def(_I64_ARRAY)
    assembly_format = (
        "$layer $op `names` `=` $names `regions` `=` $mem_regions `dtypes` `=` $dtypes "
        "`shapes` `=` $shapes (`shared` `=` $shared^)? (`slots` `=` $slots^)? attr-dict"
    )

    def __init__(self, layer: int, op_name: str, names: Sequence[str], regions: Sequence[str],
                 dtypes: Sequence[str], shapes: Sequence[int], shared: Sequence[int] = (),
                 slots: Sequence[int] | None = None):
        props: dict[str, Attribute] = {
            "layer": IntegerAttr(layer, i64), "op": StringAttr(op_name),
            "names": str_array(names), "mem_regions": str_array(regions), "dtypes": str_array(dtypes),
            "shapes": i64_array(shapes),
        }
        if shared:
            props["shared"] = i64_array(shared)
        if slots is not None:
            props["slots"] = i64_array(slots)
        super().__init__(properties=props)

    @property
    def layer_index(self) -> int:
        return self.layer.value.data

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return _strs(self.names)

    @property
    def tensor_regions(self) -> tuple[MemRegion, ...]:
        return tuple(MemRegion[r] for r in _strs(self.mem_regions))

    @property
    def tensor_dtypes(self) -> tuple[str, ...]:
        return _strs(self.dtypes)

    @property
    def shared_indices(self) -> tuple[int, ...]:
        return () if self.shared is None else _ints(self.shared)

    def shape(self, variant: int, t: int) -> tuple[int, int, int, int]:
        """NHWC shape of tensor ``t`` in variant ``variant`` (0..5)."""
        flat = self.shapes.get_values()
        n = len(self.names.data)
        base = (variant * n + t) * 4
        return tuple(int(v) for v in flat[base:base + 4])  # type: ignore[return-value]

    @property
    def slot_bytes(self) -> tuple[int, ...] | None:
        return None if self.slots is None else _ints(self.slots)

    def verify_(self) -> None:
        n = len(self.names.data)
        if self.layer_index < 0:
            raise _fail(self, f"expected layer >= 0, got {self.layer_index}")
        _check_len(self, "regions", len(self.mem_regions.data), n, " (one per name)")
        _check_len(self, "dtypes", len(self.dtypes.data), n, " (one per name)")
        _check_len(self, "shapes", len(self.shapes.get_values()), 4 * n * len(VARIANTS),
                   " (4 per tensor per variant)")
        for r in _strs(self.mem_regions):
            _region_of(self, r, "regions")
        for d in _strs(self.dtypes):
            if d not in DTYPE_BYTES:
                raise _fail(self, f"expected a dtype in {', '.join(DTYPE_BYTES)}, got '{d}'")
        for v in _ints(self.shapes):
            if v <= 0:
                raise _fail(self, f"expected positive shape dims, got {v}")
        for i in self.shared_indices:
            if not 0 <= i < n:
                raise _fail(self, f"expected shared indices in [0, {n}), got {i}")
        if self.slots is not None:
            slots = _ints(self.slots)
            _check_len(self, "slots", len(slots), n, " (one per name)")
            for s in slots:
                if s < 0 or s % ALIGN:
                    raise _fail(self, f"expected slot bytes to be non-negative multiples of {ALIGN}, got {s}")


# --------------------------------------------------------------------------------------
# Ops: memory plans (phase 3)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DTensor:
    """One row of a plan's DTensor table (a Python view; the IR holds columns)."""

    id: int
    name: str
    region: MemRegion
    dtype: str
    shape: tuple[int, int, int, int]
    slot: int
    offset: int
    init: str
    init_value: float


def linear_layout(regions: Sequence[MemRegion], slots: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """The seed's ``finalize`` (facts sheet section 5): one pass over the regions in address order,
    tensors of a region in allocation (list) order. Returns (offsets, region bases, region sizes)."""
    members: list[list[int]] = [[] for _ in MemRegion]
    for i, r in enumerate(regions):
        members[r].append(i)
    offsets = [0] * len(regions)
    bases, sizes = [], []
    cursor = 0
    for r in MemRegion:
        bases.append(cursor)
        for i in members[r]:
            offsets[i] = cursor
            cursor += slots[i]
        sizes.append(cursor - bases[-1])
    return offsets, bases, sizes


@irdl_op_definition
class PlanOp(_ProgramChild):
    """A MemoryPlan of one variant: the region table and the DTensor table (facts section 5).

    Regions: ``region_bases`` / ``region_sizes`` for all 68 regions in address order. DTensors, one
    column per field: ``ids``, ``names``, ``regions``, ``dtypes``, ``shapes`` (NHWC, 4 per tensor),
    ``slots`` and ``offsets`` (bytes), ``inits`` (see :data:`INIT_RULES`) and ``init_values``.
    ``total_bytes`` is the arena size; ``target`` decides channel padding.
    """

    name = "memplan.plan"
    sym_name = prop_def(SymbolNameConstraint())
    target = prop_def(TargetAttr)
    total_bytes = prop_def(IntegerAttr[I64])
    region_bases = prop_def(_I64_ARRAY)
    region_sizes = prop_def(_I64_ARRAY)
    ids = prop_def(_I64_ARRAY)
    names = prop_def(ArrayAttr[StringAttr])
    mem_regions = prop_def(ArrayAttr[StringAttr])
    dtypes = prop_def(ArrayAttr[StringAttr])
    shapes = prop_def(_I64_ARRAY)
    slots = prop_def(_I64_ARRAY)
    offsets = prop_def(_I64_ARRAY)
    inits = prop_def(ArrayAttr[StringAttr])
    init_values = prop_def(_F64_ARRAY)
    pool = opt_prop_def(_I64_ARRAY)
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp), SymbolOpInterface()))
    assembly_format = (
        "$sym_name `target` $target `total_bytes` `=` $total_bytes "
        "`region_bases` `=` $region_bases `region_sizes` `=` $region_sizes (`pool` `=` $pool^)? "
        "`ids` `=` $ids `names` `=` $names `regions` `=` $mem_regions `dtypes` `=` $dtypes "
        "`shapes` `=` $shapes `slots` `=` $slots `offsets` `=` $offsets `inits` `=` $inits "
        "`init_values` `=` $init_values attr-dict"
    )

    def __init__(self, name: str, target: Target, *, region_bases: Sequence[int],
                 region_sizes: Sequence[int], tensors: Sequence[DTensor],
                 pool: tuple[int, int] | None = None):
        total = (region_bases[-1] + region_sizes[-1]) if region_bases else 0
        if pool is not None:
            total = pool[0] + pool[1]
        props: dict[str, Attribute] = {
            "sym_name": StringAttr(name), "target": TargetAttr(target),
            "total_bytes": IntegerAttr(total, i64),
            "region_bases": i64_array(region_bases), "region_sizes": i64_array(region_sizes),
            "ids": i64_array([t.id for t in tensors]),
            "names": str_array([t.name for t in tensors]),
            "mem_regions": str_array([t.region.name for t in tensors]),
            "dtypes": str_array([t.dtype for t in tensors]),
            "shapes": i64_array([d for t in tensors for d in t.shape]),
            "slots": i64_array([t.slot for t in tensors]),
            "offsets": i64_array([t.offset for t in tensors]),
            "inits": str_array([t.init for t in tensors]),
            "init_values": f64_array([t.init_value for t in tensors]),
        }
        if pool is not None:
            props["pool"] = i64_array(pool)
        super().__init__(properties=props)

    @property
    def transient_pool(self) -> tuple[int, int] | None:
        """``(offset, bytes)`` of the transient pool (``memplan-assign-offsets`` with reuse), or ``None``
        for the seed's layout (every DTensor in its own slot inside its region)."""
        if self.pool is None:
            return None
        a, b = _ints(self.pool)
        return a, b

    @property
    def plan_name(self) -> str:
        return self.sym_name.data

    @property
    def target_kind(self) -> Target:
        return self.target.data

    @property
    def size(self) -> int:
        """Arena bytes (``total_bytes``)."""
        return self.total_bytes.value.data

    def __len__(self) -> int:
        return len(self.ids.get_values())

    def region_base(self, r: MemRegion) -> int:
        return int(self.region_bases.get_values()[r])

    def region_size(self, r: MemRegion) -> int:
        return int(self.region_sizes.get_values()[r])

    def span(self, first: MemRegion, last: MemRegion) -> tuple[int, int]:
        """(offset, bytes) of the closed region interval ``[first .. last]`` (range ops)."""
        start = self.region_base(first)
        return start, self.region_base(last) + self.region_size(last) - start

    def tensors(self) -> Iterator[DTensor]:
        """The DTensor rows in table order."""
        ids, slots, offsets = _ints(self.ids), _ints(self.slots), _ints(self.offsets)
        shapes = _ints(self.shapes)
        names, regions, dtypes, inits = (_strs(self.names), _strs(self.mem_regions), _strs(self.dtypes),
                                         _strs(self.inits))
        values = self.init_values.get_values()
        for i, tid in enumerate(ids):
            yield DTensor(tid, names[i], MemRegion[regions[i]], dtypes[i],
                          shapes[4 * i:4 * i + 4], slots[i], offsets[i], inits[i], float(values[i]))  # type: ignore[arg-type]

    def by_id(self) -> dict[int, DTensor]:
        """id -> DTensor."""
        return {t.id: t for t in self.tensors()}

    # -- verification ------------------------------------------------------------------

    def verify_(self) -> None:
        n = len(self.ids.get_values())
        for what, attr, per in (("names", self.names, 1), ("regions", self.mem_regions, 1),
                                ("dtypes", self.dtypes, 1), ("inits", self.inits, 1)):
            _check_len(self, what, len(attr.data), n, " (one per id)")
        for what, attr, per in (("shapes", self.shapes, 4), ("slots", self.slots, 1),
                                ("offsets", self.offsets, 1), ("init_values", self.init_values, 1)):
            _check_len(self, what, len(attr.get_values()), per * n,
                       " (4 per id)" if per == 4 else " (one per id)")
        if self.pool is not None:
            _check_len(self, "pool", len(self.pool.get_values()), 2, " (offset and bytes)")
        self._verify_regions()
        ids = _ints(self.ids)
        if sorted(ids) != list(range(n)):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            missing = sorted(set(range(n)) - set(ids))
            detail = f"duplicate ids {dup[:5]}" if dup else f"missing ids {missing[:5]}"
            raise _fail(self, f"expected ids to be unique and dense (0..{n - 1}), got {detail}")
        for r in _strs(self.mem_regions):
            _region_of(self, r, "regions")
        for d in _strs(self.dtypes):
            if d not in DTYPE_BYTES:
                raise _fail(self, f"expected a dtype in {', '.join(DTYPE_BYTES)}, got '{d}'")
        for rule in _strs(self.inits):
            if rule not in INIT_RULES:
                raise _fail(self, f"expected an init rule in {', '.join(INIT_RULES)}, got '{rule}'")
        for v in _ints(self.shapes):
            if v <= 0:
                raise _fail(self, f"expected positive shape dims, got {v}")
        self._verify_layout()
        self._verify_correspondence()

    def _verify_regions(self) -> None:
        bases, sizes = _ints(self.region_bases), _ints(self.region_sizes)
        _check_len(self, "region_bases", len(bases), NUM_REGIONS, " (one per region)")
        _check_len(self, "region_sizes", len(sizes), NUM_REGIONS, " (one per region)")
        cursor = 0
        for r in MemRegion:
            if bases[r] != cursor:
                raise _fail(self, f"expected regions contiguous and in order: region {r.name} "
                                  f"should start at {cursor}, got {bases[r]}")
            if sizes[r] < 0 or sizes[r] % ALIGN:
                raise _fail(self, f"expected region sizes to be non-negative multiples of {ALIGN}, "
                                  f"got {sizes[r]} for {r.name}")
            cursor += sizes[r]
        pool = self.transient_pool
        if pool is not None:
            if pool[0] != cursor or pool[1] < 0 or pool[1] % ALIGN:
                raise _fail(self, f"expected the transient pool to start at the end of the last region ({cursor}) "
                                  f"with a non-negative multiple of {ALIGN} bytes, got pool = [{pool[0]}, {pool[1]}]")
            for r in TRANSIENT_REGIONS:
                if sizes[r]:
                    raise _fail(self, f"expected transient region {r.name} to have no bytes of its own in a plan "
                                      f"with a transient pool, got {sizes[r]}")
            cursor += pool[1]
        if self.size != cursor:
            what = "end of the transient pool" if pool is not None else "end of the last region"
            raise _fail(self, f"expected total_bytes = {what} = {cursor}, got {self.size}")

    def _verify_layout(self) -> None:
        bases, sizes = _ints(self.region_bases), _ints(self.region_sizes)
        pool = self.transient_pool
        by_region: dict[MemRegion, list[tuple[int, int, int]]] = {}
        for t in self.tensors():
            if t.offset % ALIGN or t.slot % ALIGN or t.slot < 0:
                raise _fail(self, f"expected 256-aligned offsets and slots, got offset {t.offset} and "
                                  f"slot {t.slot} for DTensor {t.id} '{t.name}'")
            if t.slot and t.slot < slot_bytes(t.shape, t.dtype, t.region, self.target_kind):
                need = slot_bytes(t.shape, t.dtype, t.region, self.target_kind)
                raise _fail(self, f"expected DTensor {t.id} '{t.name}' slot to hold its shape "
                                  f"{list(t.shape)} {t.dtype} ({need} bytes), got {t.slot}")
            r = t.region
            if pool is not None and r in TRANSIENT_REGIONS:
                if t.offset < pool[0] or t.offset + t.slot > pool[0] + pool[1]:
                    raise _fail(self, f"expected DTensor {t.id} '{t.name}' [{t.offset}, {t.offset + t.slot}) "
                                      f"inside the transient pool [{pool[0]}, {pool[0] + pool[1]})")
                continue  # pooled DTensors may share bytes: the program verifier checks their lifetimes
            if t.offset < bases[r] or t.offset + t.slot > bases[r] + sizes[r]:
                raise _fail(self, f"expected DTensor {t.id} '{t.name}' [{t.offset}, {t.offset + t.slot}) "
                                  f"inside its region {r.name} [{bases[r]}, {bases[r] + sizes[r]})")
            by_region.setdefault(r, []).append((t.offset, t.slot, t.id))
        for r, rows in by_region.items():
            rows.sort()
            for (o1, s1, i1), (o2, _s2, i2) in zip(rows, rows[1:]):
                if o1 + s1 > o2:
                    raise _fail(self, f"expected non-overlapping DTensors, got {i1} [{o1}, {o1 + s1}) "
                                      f"and {i2} starting at {o2} in {r.name}")

    def _verify_correspondence(self) -> None:
        bases, sizes = _ints(self.region_bases), _ints(self.region_sizes)
        members: dict[MemRegion, list[DTensor]] = {}
        for t in self.tensors():
            if t.slot:
                members.setdefault(t.region, []).append(t)
        for rows in members.values():
            rows.sort(key=lambda t: t.offset)
        for partner, w_span, p_span, ratio in CORRESPONDING_SPANS:
            w_regions = [MemRegion(i) for i in range(w_span[0], w_span[1] + 1)]
            p_regions = [MemRegion(i) for i in range(p_span[0], p_span[1] + 1)]
            if not any(members.get(r) for r in p_regions):
                continue
            w_start, p_start = bases[w_span[0]], bases[p_span[0]]
            for wr, pr in zip(w_regions, p_regions):
                ws, ps = members.get(wr, []), members.get(pr, [])
                if len(ws) != len(ps):
                    raise _fail(self, f"expected {pr.name} to mirror {wr.name} ({partner} element "
                                      f"correspondence), got {len(ps)} tensors for {len(ws)} weights")
                for w, p in zip(ws, ps):
                    if w.shape != p.shape or (w.offset - w_start) != (p.offset - p_start) * ratio:
                        raise _fail(self, f"expected {p.name} (DTensor {p.id}, {pr.name}) at the element "
                                          f"offset and shape of {w.name} (DTensor {w.id}, {wr.name}), got "
                                          f"shape {list(p.shape)} vs {list(w.shape)}, element offset "
                                          f"{(p.offset - p_start) * ratio // 4} vs {(w.offset - w_start) // 4}")


# --------------------------------------------------------------------------------------
# Ops: computation graphs (phase 4)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """One graph node (a Python view). COMPUTE nodes have no ranges; RANGE nodes' ``op`` is in
    :data:`RANGE_OPS`, ranges are closed region intervals, ids are scalar operands. ``param`` indexes
    the graph's ``params`` table (-1: none)."""

    op: str
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    in_ranges: tuple[tuple[MemRegion, MemRegion], ...] = ()
    out_ranges: tuple[tuple[MemRegion, MemRegion], ...] = ()
    param: int = -1

    @property
    def is_range(self) -> bool:
        return self.op in RANGE_OPS


@irdl_op_definition
class NodesOp(IRDLOperation):
    """The nodes of one GraphId bucket, in execution order, as columns.

    ``ops``: op names; ``ins`` / ``outs``: DTensor ids, ``in_counts`` / ``out_counts`` per node;
    ``in_ranges`` / ``out_ranges``: (first, last) region index pairs, ``in_range_counts`` /
    ``out_range_counts`` per node; ``params``: index into the graph's param table or -1.
    """

    name = "memplan.nodes"
    graph_id = prop_def(GraphIdAttr)
    ops = prop_def(ArrayAttr[StringAttr])
    ins = prop_def(_I64_ARRAY)
    in_counts = prop_def(_I64_ARRAY)
    outs = prop_def(_I64_ARRAY)
    out_counts = prop_def(_I64_ARRAY)
    in_ranges = prop_def(_I64_ARRAY)
    in_range_counts = prop_def(_I64_ARRAY)
    out_ranges = prop_def(_I64_ARRAY)
    out_range_counts = prop_def(_I64_ARRAY)
    params = prop_def(_I64_ARRAY)
    traits = lazy_traits_def(lambda: (HasParent(GraphOp),))
    assembly_format = (
        "$graph_id `ops` `=` $ops `ins` `=` $ins `in_counts` `=` $in_counts `outs` `=` $outs "
        "`out_counts` `=` $out_counts `in_ranges` `=` $in_ranges `in_range_counts` `=` $in_range_counts "
        "`out_ranges` `=` $out_ranges `out_range_counts` `=` $out_range_counts `params` `=` $params attr-dict"
    )

    def __init__(self, graph_id: GraphId, nodes: Sequence[Node]):
        super().__init__(properties={
            "graph_id": GraphIdAttr(graph_id),
            "ops": str_array([n.op for n in nodes]),
            "ins": i64_array([i for n in nodes for i in n.inputs]),
            "in_counts": i64_array([len(n.inputs) for n in nodes]),
            "outs": i64_array([i for n in nodes for i in n.outputs]),
            "out_counts": i64_array([len(n.outputs) for n in nodes]),
            "in_ranges": i64_array([int(r) for n in nodes for pair in n.in_ranges for r in pair]),
            "in_range_counts": i64_array([len(n.in_ranges) for n in nodes]),
            "out_ranges": i64_array([int(r) for n in nodes for pair in n.out_ranges for r in pair]),
            "out_range_counts": i64_array([len(n.out_ranges) for n in nodes]),
            "params": i64_array([n.param for n in nodes]),
        })

    @property
    def gid(self) -> GraphId:
        return self.graph_id.data

    def nodes(self) -> list[Node]:
        """The bucket's nodes as :class:`Node` views (the op must verify)."""
        ops = _strs(self.ops)
        ins, outs = _ints(self.ins), _ints(self.outs)
        rin, rout = _ints(self.in_ranges), _ints(self.out_ranges)
        cin, cout = _ints(self.in_counts), _ints(self.out_counts)
        crin, crout = _ints(self.in_range_counts), _ints(self.out_range_counts)
        params = _ints(self.params)
        out: list[Node] = []
        a = b = c = d = 0
        for k, op in enumerate(ops):
            node_rin = tuple((MemRegion(rin[2 * j]), MemRegion(rin[2 * j + 1])) for j in range(c, c + crin[k]))
            node_rout = tuple((MemRegion(rout[2 * j]), MemRegion(rout[2 * j + 1]))
                              for j in range(d, d + crout[k]))
            out.append(Node(op, ins[a:a + cin[k]], outs[b:b + cout[k]], node_rin, node_rout, params[k]))
            a, b, c, d = a + cin[k], b + cout[k], c + crin[k], d + crout[k]
        return out

    def verify_(self) -> None:
        n = len(self.ops.data)
        counts = {}
        for what, attr in (("in_counts", self.in_counts), ("out_counts", self.out_counts),
                           ("in_range_counts", self.in_range_counts),
                           ("out_range_counts", self.out_range_counts), ("params", self.params)):
            values = _ints(attr)
            _check_len(self, what, len(values), n, " (one per op)")
            if what != "params" and any(v < 0 for v in values):
                raise _fail(self, f"expected non-negative {what}, got {min(values)}")
            counts[what] = values
        for what, attr, key, per in (("ins", self.ins, "in_counts", 1), ("outs", self.outs, "out_counts", 1),
                                     ("in_ranges", self.in_ranges, "in_range_counts", 2),
                                     ("out_ranges", self.out_ranges, "out_range_counts", 2)):
            _check_len(self, what, len(attr.get_values()), per * sum(counts[key]),
                       f" (the sum of {key}{' times 2' if per == 2 else ''})")
        for i in _ints(self.ins) + _ints(self.outs):
            if i < 0:
                raise _fail(self, f"expected DTensor ids >= 0, got {i}")
        for what, attr in (("in_ranges", self.in_ranges), ("out_ranges", self.out_ranges)):
            flat = _ints(attr)
            for first, last in zip(flat[::2], flat[1::2]):
                if not 0 <= first <= last < NUM_REGIONS:
                    raise _fail(self, f"expected {what} spans (first, last) with 0 <= first <= last < "
                                      f"{NUM_REGIONS}, got ({first}, {last})")
        for k, op in enumerate(_strs(self.ops)):
            if not op:
                raise _fail(self, "expected non-empty op names")
            has_ranges = counts["in_range_counts"][k] or counts["out_range_counts"][k]
            if op in RANGE_OPS:
                if not has_ranges and op not in _RANGE_OPS_WITHOUT_RANGES:
                    raise _fail(self, f"expected RANGE node {k} ({op}) to cover at least one region span")
            elif has_ranges:
                raise _fail(self, f"expected COMPUTE node {k} ({op}) to have no region spans "
                                  f"(only the {len(RANGE_OPS)} RANGE_* ops take spans)")


_RANGE_OPS_WITHOUT_RANGES = frozenset({"RANGE_GRAD_SCALING", "RANGE_ACCUM_METRICS", "RANGE_H2D_COPY_DTENSOR"})


@irdl_op_definition
class GraphOp(IRDLOperation):
    """A ComputationGraph (``@train`` or ``@infer``): one ``memplan.nodes`` per non-empty GraphId
    (the other buckets of the 33 are empty). ``params`` is the table of op parameters the nodes
    index (layer properties such as ``k``, ``s``, ``eps``). Graphs hold ids, never shapes."""

    name = "memplan.graph"
    sym_name = prop_def(SymbolNameConstraint())
    params = prop_def(ArrayAttr[DictionaryAttr])
    body = region_def("single_block")
    traits = lazy_traits_def(lambda: (HasParent(ProgramOp), SymbolOpInterface(), NoTerminator()))
    assembly_format = "$sym_name `params` `=` $params attr-dict-with-keyword $body"

    def __init__(self, name: str, buckets: Mapping[GraphId, Sequence[Node]],
                 params: Sequence[DictionaryAttr] = ()):
        block = Block()
        for gid in GraphId:
            if buckets.get(gid):
                block.add_op(NodesOp(gid, buckets[gid]))
        super().__init__(properties={"sym_name": StringAttr(name), "params": ArrayAttr(list(params))},
                         regions=[Region(block)])

    @property
    def graph_name(self) -> str:
        return self.sym_name.data

    def buckets(self) -> dict[GraphId, NodesOp]:
        """GraphId -> its ``memplan.nodes`` op (empty buckets are absent)."""
        return {op.gid: op for op in self.body.block.ops if isinstance(op, NodesOp)}

    def nodes(self, gid: GraphId) -> list[Node]:
        """The nodes of bucket ``gid`` (empty list for an empty bucket)."""
        op = self.buckets().get(gid)
        return [] if op is None else op.nodes()

    def verify_(self) -> None:
        seen: set[GraphId] = set()
        n_params = len(self.params.data)
        for op in self.body.block.ops:
            if not isinstance(op, NodesOp):
                raise _fail(self, f"expected only 'memplan.nodes' ops in the body, got '{op.name}'")
            if op.gid in seen:
                raise _fail(self, f"expected one 'memplan.nodes' per GraphId, got {op.gid.value} twice")
            seen.add(op.gid)
            for p in _ints(op.params):
                if not -1 <= p < n_params:
                    raise _fail(self, f"expected node params in [-1, {n_params}) (the params table), got {p}")


# --------------------------------------------------------------------------------------
# Ops: the atlas
# --------------------------------------------------------------------------------------


@irdl_op_definition
class AtlasOp(_ProgramChild):
    """The GraphAtlas (facts sheet section 11): for each (variant, GraphId) the capture key.

    ``slots``: 6 x 33 ints, variant-major, the key index or -1 (no graph). Key k is
    (``key_graphs[k]``, ``key_gids[k]``, ``key_shapes[4k:4k+4]``, ``key_plans[k]``); shape-invariant
    graphs use the shape (0, 0, 0, 0) and the base plan, so they are captured once.
    """

    name = "memplan.atlas"
    slots = prop_def(_I64_ARRAY)
    key_graphs = prop_def(ArrayAttr[SymbolRefAttr])
    key_gids = prop_def(_I64_ARRAY)
    key_shapes = prop_def(_I64_ARRAY)
    key_plans = prop_def(ArrayAttr[SymbolRefAttr])
    assembly_format = (
        "`slots` `=` $slots `key_graphs` `=` $key_graphs `key_gids` `=` $key_gids "
        "`key_shapes` `=` $key_shapes `key_plans` `=` $key_plans attr-dict"
    )

    def __init__(self, slots: Sequence[int], keys: Sequence[tuple[str, GraphId, tuple[int, int, int, int], str]]):
        super().__init__(properties={
            "slots": i64_array(slots),
            "key_graphs": ArrayAttr([SymbolRefAttr(k[0]) for k in keys]),
            "key_gids": i64_array([k[1].index for k in keys]),
            "key_shapes": i64_array([d for k in keys for d in k[2]]),
            "key_plans": ArrayAttr([SymbolRefAttr(k[3]) for k in keys]),
        })

    def slot(self, variant: int, gid: GraphId) -> int:
        """Capture key index of (variant, gid), or -1."""
        return int(self.slots.get_values()[variant * NUM_GRAPH_IDS + gid.index])

    def keys(self) -> list[tuple[str, GraphId, tuple[int, ...], str]]:
        """(graph, GraphId, shape id, plan) of every capture key."""
        gids = list(GraphId)
        shapes = _ints(self.key_shapes)
        return [(g.root_reference.data, gids[k], shapes[4 * i:4 * i + 4], p.root_reference.data)
                for i, (g, k, p) in enumerate(zip(self.key_graphs.data, _ints(self.key_gids), self.key_plans.data))]

    def verify_(self) -> None:
        slots = _ints(self.slots)
        _check_len(self, "slots", len(slots), len(VARIANTS) * NUM_GRAPH_IDS, " (6 variants x 33 GraphIds)")
        k = len(self.key_graphs.data)
        _check_len(self, "key_gids", len(self.key_gids.get_values()), k, " (one per key)")
        _check_len(self, "key_plans", len(self.key_plans.data), k, " (one per key)")
        _check_len(self, "key_shapes", len(self.key_shapes.get_values()), 4 * k, " (4 per key)")
        for s in slots:
            if not -1 <= s < k:
                raise _fail(self, f"expected slots in [-1, {k}) (a key index or -1), got {s}")
        for g in _ints(self.key_gids):
            if not 0 <= g < NUM_GRAPH_IDS:
                raise _fail(self, f"expected key GraphIds in [0, {NUM_GRAPH_IDS}), got {g}")
        for v, name in enumerate(VARIANTS):
            for gid in GraphId:
                s = slots[v * NUM_GRAPH_IDS + gid.index]
                if s >= 0 and _ints(self.key_gids)[s] != gid.index:
                    raise _fail(self, f"expected slot ({name}, {gid.value}) to point at a key of that "
                                      f"GraphId, got key {s} of GraphId {list(GraphId)[_ints(self.key_gids)[s]].value}")


# --------------------------------------------------------------------------------------
# The program container
# --------------------------------------------------------------------------------------


@irdl_op_definition
class ProgramOp(IRDLOperation):
    """A compiled network: spec, variants, descriptors, plans, graphs and atlas of the
    ``arch.model`` named ``model`` (``memplan.program for @resnet50 {...}``, next to the model). A
    symbol table for the variant/plan/graph symbols.

    Cross-op checks: variant names unique and complete once plans exist; the six plans share ids,
    names, regions, slots and offsets; every node id is a DTensor of the plans; variant links
    resolve; the atlas keys name existing graphs and plans.
    """

    name = "memplan.program"
    model = prop_def(SymbolRefAttr)
    body = region_def("single_block")
    traits = traits_def(SymbolTable(), NoTerminator())
    assembly_format = "`for` $model attr-dict-with-keyword $body"

    def __init__(self, model: str, ops: Sequence[Operation] = ()):
        super().__init__(properties={"model": SymbolRefAttr(model)}, regions=[Region(Block(ops))])

    @property
    def model_name(self) -> str:
        return self.model.root_reference.data

    def ops_of(self, cls: type[Operation]) -> list:
        """The body ops of one class, in order."""
        return [op for op in self.body.block.ops if isinstance(op, cls)]

    @property
    def spec(self) -> SpecOp | None:
        found = self.ops_of(SpecOp)
        return found[0] if found else None

    def variants(self) -> list[VariantOp]:
        return self.ops_of(VariantOp)

    def plans(self) -> list[PlanOp]:
        return self.ops_of(PlanOp)

    def graphs(self) -> list[GraphOp]:
        return self.ops_of(GraphOp)

    def descs(self) -> list[DescsOp]:
        return self.ops_of(DescsOp)

    def lookup(self, name: str) -> Operation | None:
        """The body op with symbol ``name``."""
        for op in self.body.block.ops:
            sym = op.properties.get("sym_name")
            if isinstance(sym, StringAttr) and sym.data == name:
                return op
        return None

    def verify_(self) -> None:
        if len(self.ops_of(SpecOp)) > 1:
            raise _fail(self, "expected at most one 'memplan.spec'")
        if len(self.ops_of(AtlasOp)) > 1:
            raise _fail(self, "expected at most one 'memplan.atlas'")
        variants = self.variants()
        names = [v.variant_name for v in variants]
        if variants and names != list(VARIANTS):
            raise _fail(self, f"expected the six variants {', '.join(VARIANTS)} in this order, got "
                              f"{', '.join(names)}")
        if variants and len({v.is_amp for v in variants}) > 1:
            raise _fail(self, "expected amp to be the same in all six variants")
        self._verify_plans()
        self._verify_graphs()
        self._verify_links()
        self._verify_lifetimes()

    def _verify_lifetimes(self) -> None:
        """No two transient DTensors share a byte while both are live (:mod:`tr_mlir.dialects.lifetimes`).

        Runs once the program has plans, graphs and an atlas (the lifetimes follow the atlas); a plan
        with a transient pool needs all three."""
        plans = self.plans()
        if not plans:
            return
        ready = bool(self.graphs()) and bool(self.ops_of(AtlasOp))
        if not ready:
            if plans[0].transient_pool is not None:
                raise _fail(self, "expected graphs and an atlas in a program whose plans have a transient pool "
                                  "(the placement follows the lifetimes of the atlas's graphs)")
            return
        from tr_mlir.dialects.lifetimes import analyze, check_placement, transient_span

        if plans[0].transient_pool is not None:
            spanned = transient_span(self, plans[0].tensors())
            if spanned is not None:
                step, region, ids = spanned
                raise _fail(self, f"expected no RANGE node over a transient region in a program whose plans have a "
                                  f"transient pool (the region has no bytes: its {len(ids)} DTensors are placed by "
                                  f"lifetime), got {step.where} over {region.name}; plan it with reuse=false")

        try:
            life = analyze(self, plans[0])
        except (KeyError, IndexError, ValueError) as e:  # ids or graphs the other checks reject
            raise _fail(self, f"cannot compute the DTensor lifetimes: {e}") from None
        collision = check_placement(self, plans[0], life)
        if collision is not None:
            raise _fail(self, f"expected DTensors live at the same time not to share bytes, got "
                              f"{collision.message()} in @{plans[0].plan_name}")

    def _verify_plans(self) -> None:
        plans = self.plans()
        if not plans:
            return
        base = plans[0]
        for other in plans[1:]:
            for field in ("ids", "names", "mem_regions", "dtypes", "slots", "offsets", "region_bases",
                          "region_sizes", "target", "total_bytes", "pool"):
                if base.properties.get(field) != other.properties.get(field):
                    raise _fail(self, f"expected plan @{other.plan_name} to share {field} with "
                                      f"@{base.plan_name} (one arena serves every variant)")

    def _verify_graphs(self) -> None:
        plans = self.plans()
        n = len(plans[0]) if plans else None
        for graph in self.graphs():
            for gid, nodes_op in graph.buckets().items():
                for i in _ints(nodes_op.ins) + _ints(nodes_op.outs):
                    if n is None or i >= n:
                        raise _fail(self, f"expected every node id of @{graph.graph_name} ({gid.value}) to be "
                                          f"a DTensor of the plans ({n or 0} ids), got {i}")

    def _verify_links(self) -> None:
        for v in self.variants():
            for key, cls in (("plan", PlanOp), ("train", GraphOp), ("infer", GraphOp)):
                ref = v.properties.get(key)
                if ref is None:
                    continue
                assert isinstance(ref, SymbolRefAttr)
                target = self.lookup(ref.root_reference.data)
                if not isinstance(target, cls):
                    raise _fail(self, f"expected {key} of variant @{v.variant_name} to name a "
                                      f"'{cls.name}', got {ref}")
        for atlas in self.ops_of(AtlasOp):
            for g, gid, _shape, p in atlas.keys():
                graph = self.lookup(g)
                if not isinstance(graph, GraphOp):
                    raise _fail(self, f"expected atlas key graphs to name a 'memplan.graph', got @{g}")
                if gid not in graph.buckets():
                    raise _fail(self, f"expected atlas key ({g}, {gid.value}) to name a non-empty bucket")
                if not isinstance(self.lookup(p), PlanOp):
                    raise _fail(self, f"expected atlas key plans to name a 'memplan.plan', got @{p}")


def _parse_with_entry_block(op_cls: type[IRDLOperation]) -> None:
    """Give an op whose single-block body is written ``{}`` its empty block when parsed.

    MLIR does this for no-terminator single-block regions; xDSL 0.74's format parser returns a
    region without blocks, which the ``single_block`` constraint then rejects, so an empty graph
    (or program) would print but not parse back.
    """
    parse = op_cls.parse.__func__  # type: ignore[attr-defined]

    def parse_with_block(cls, parser):  # type: ignore[no-untyped-def]
        op = parse(cls, parser)
        if not op.body.blocks:
            op.body.add_block(Block())
        return op

    op_cls.parse = classmethod(parse_with_block)  # type: ignore[method-assign, assignment]


_parse_with_entry_block(GraphOp)
_parse_with_entry_block(ProgramOp)


Memplan = Dialect(
    "memplan",
    [ProgramOp, SpecOp, VariantOp, DescsOp, PlanOp, GraphOp, NodesOp, AtlasOp],
    [TargetAttr, OptimizerAttr, GraphIdAttr],
)
"""The ``memplan`` dialect object (registered by ``tr-opt`` and the ``xdsl.universe`` entry point)."""
