"""Regions, dtypes, slot sizes, variants, GraphIds and the attributes of the ``memplan`` dialect (:mod:`tr_mlir.dialects.memplan`)."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from enum import IntEnum

from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    DenseArrayBase,
    StringAttr,
    f64,
    i64,
)
from xdsl.dialects.utils import EnumAttribute, StrEnum
from xdsl.ir import (
    Operation,
    SpacedOpaqueSyntaxAttribute,
)
from xdsl.irdl import (
    irdl_attr_definition,
)
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

STATE_REGIONS: frozenset[MemRegion] = frozenset({
    MemRegion.W_BN_BIAS, MemRegion.W_BN_WEIGHT, MemRegion.W_FC_BIAS, MemRegion.W_FC_WEIGHT,
    MemRegion.W_FIRST_CONV, MemRegion.W_DEEP_CONV, MemRegion.B_NEXT_MEAN, MemRegion.B_NEXT_VAR,
})
"""Regions whose DTensors are the model's state as PyTorch's ``state_dict`` holds it: the trained
parameters (``W_*`` but the BN-folded ``W_EQ_*`` of inference) and the BN running statistics
(``B_NEXT_*``; ``B_PREV_*`` is the copy the NaN-gated step restores). Only these may carry a
parameter name (``memplan.descs``'s ``param_names``, ``memplan-name-parameters``)."""

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

RANGE_PREFIX = "RANGE_"
"""A node whose op name starts with this is a RANGE node: it works on closed intervals of memory
regions (the seed's 24 range ops, facts sheet section 9, and any a plugin registers, e.g.
``RANGE_TEST_SCALE``); every other node is a COMPUTE node over DTensor ids. Which arguments of a
range op take spans is its operand row's (:class:`tr_mlir.dialects.kernels.Operands`)."""


def is_range_op(op: str) -> bool:
    """Whether node op ``op`` is a RANGE node (:data:`RANGE_PREFIX`)."""
    return op.startswith(RANGE_PREFIX)


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
