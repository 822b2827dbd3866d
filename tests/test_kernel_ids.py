"""The node-op vocabulary (:mod:`tr_mlir.dialects.kernels`, issue 14 item 6).

* Every family's node ops are derived by :meth:`KernelId.op` and parsed back to the same family
  and precision (:func:`parse_node_op`, :func:`kernel_id`), in the seed's spelling.
* A node op spelt unlike its family, a kernel registered under a name outside the vocabulary and
  a CUDA launcher naming an argument its kernel does not have are refused when they are made,
  naming them; a misspelt constant is an ``AttributeError``.
* The CPU registry, the operand rows and the CUDA table all key on the vocabulary.
* A plugin adds a precision-free family; its node op binds through the family's row.
"""

from __future__ import annotations

import numpy as np
import pytest

from tr_mlir import extend
from tr_mlir.dialects.kernels import (
    KERNEL_IDS,
    OPERANDS,
    K,
    KernelId,
    KernelIdError,
    Operands,
    kernel_id,
    parse_node_op,
    register_kernel_id,
)
from tr_mlir.errors import PluginError
from tr_mlir.lowering.cpu import KERNELS, kernel


def test_every_node_op_round_trips():
    for kid in KERNEL_IDS.values():
        for prec in kid.precisions or (None,):
            op = kid.op(prec)
            assert parse_node_op(op) == (kid, prec), op
            assert kernel_id(op) is KERNEL_IDS[kid]
        assert kernel_id(kid.name) is KERNEL_IDS[kid]


def test_the_seed_spelling_is_kept():
    assert K.CONV_BWD_FIRST_LAYER.op("AMP") == "CONV_AMP_BWD_FIRST_LAYER"
    assert K.RELU_BWD_FROM_OUTPUT.op("FP32") == "RELU_FP32_BWD_FROM_OUTPUT"
    assert K.SOFTMAX_CE_FWD.op("FP32") == "SOFTMAX_CE_FP32_FWD"
    assert K.GRAD_ACCUM.op("AMP") == "GRAD_ACCUM_AMP"
    assert K.RANGE_CAST_FP32_TO_FP16.op() == "RANGE_CAST_FP32_TO_FP16"
    assert K.LARS_COMPUTE_TRUST_RATIO_DEEP.op() == "LARS_COMPUTE_TRUST_RATIO_DEEP"
    assert K.CONV_FWD == "conv_fwd" and KERNELS[K.CONV_FWD] is KERNELS["conv_fwd"]


def test_misspellings_are_refused_where_they_are_made():
    with pytest.raises(AttributeError, match="CONV_FWDD"):
        K.CONV_FWDD  # noqa: B018
    with pytest.raises(KernelIdError, match=r"'CONV_FWD_FP32' is not a spelling of kernel 'conv_fwd'.*CONV_FP32_FWD"):
        kernel_id("CONV_FWD_FP32")
    with pytest.raises(KernelIdError, match="precision-free"):
        K.RANGE_CLEAR.op("FP32")
    with pytest.raises(KernelIdError, match=r"not in 'FP16'"):
        K.CONV_FWD.op("FP16")
    with pytest.raises(KernelIdError, match="no kernel family 'conv_fwdd'"):
        kernel("conv_fwdd", writes=("y",))(lambda x, y: None)
    with pytest.raises(KernelIdError, match="snake_case"):
        KernelId("Conv-Fwd")
    with pytest.raises(KernelIdError, match="holds no precision token"):
        KernelId("conv_fp32_fwd")


def test_registries_key_on_the_vocabulary():
    from tr_mlir.lowering.cuda.impls import _IMPL_NAMES

    assert set(KERNELS) == set(KERNEL_IDS)
    assert all(type(k) is KernelId for k in KERNELS)
    assert set(OPERANDS) <= set(KERNEL_IDS) and all(KERNEL_IDS[n].operands is row for n, row in OPERANDS.items())
    assert set(_IMPL_NAMES) == set(KERNEL_IDS)


def test_register_kernel_id_rules():
    with extend.scoped():
        row = Operands(("x",), ("y",))
        kid = extend.register_kernel_id(KernelId("test_vocab_fwd", row))
        assert register_kernel_id(KernelId("test_vocab_fwd", row)) is kid  # the same family again: a no-op
        with pytest.raises(PluginError, match="already has an operand row"):
            register_kernel_id(KernelId("test_vocab_fwd", Operands(("a",), ("y",))))
        with pytest.raises(PluginError, match="already is a family with precisions"):
            register_kernel_id(KernelId("test_vocab_fwd", row, precisions=()))
        with pytest.raises(PluginError, match="expected a KernelId"):
            register_kernel_id("test_vocab_bwd")  # type: ignore[arg-type]
    assert "test_vocab_fwd" not in KERNEL_IDS  # scoped() undoes it


def test_a_cuda_launcher_gets_only_what_it_names():
    from tr_mlir.lowering.cuda.impls import _adapt

    spec = KERNELS["conv_bwd"]
    calls = []
    launch = _adapt(spec, lambda dy, x, w, dw, dx=None, wbuf=None, dx_acc=None, *, k, s=1, p=0, groups=1:
                    calls.append(k))
    launch(dy=1, x=2, w=3, dw=4, dx=5, col=None, wbuf=None, ybuf=None, xbuf=None, tmp=None, k=3, s=1, p=1, groups=1)
    assert calls == [3]
    with pytest.raises(ValueError, match="uses no workspace 'col', yet one is planned"):
        launch(dy=1, x=2, w=3, dw=4, dx=5, col=np.zeros(4), k=3)
    with pytest.raises(ValueError, match=r"\['bogus'\] are no arguments of the kernel"):
        _adapt(spec, lambda dy, x, w, dw, dx=None, bogus=None, *, k: None)
    with pytest.raises(ValueError, match=r"every array argument but the workspaces, not \['dx', 'dx_acc'\]"):
        _adapt(spec, lambda dy, x, w, dw, *, k: None)


def test_a_precision_free_plugin_family_binds():
    """A plugin range-style op: ``RANGE_TEST_SCALE`` (no precision token) through
    :func:`extend.kernel` with ``precisions=()``; the node binds by its family's operand row."""
    from tr_mlir.lowering.operands import operands_for

    with extend.scoped():
        @extend.kernel("range_test_scale", writes=("y",), operands=Operands(("x",), ("y",)), precisions=())
        def range_test_scale(x, y):
            y[...] = 2 * x

        kid = kernel_id("RANGE_TEST_SCALE")
        assert kid.precisions == () and kid.op() == "RANGE_TEST_SCALE"
        assert operands_for("RANGE_TEST_SCALE").named((7,), (8,), {}) == ({"x": 7, "y": 8}, ())
        y = np.zeros(3, np.float32)
        KERNELS[kid].bind({"x": np.ones(3, np.float32), "y": y})()
        assert y.tolist() == [2, 2, 2]
    assert "range_test_scale" not in KERNEL_IDS and "range_test_scale" not in KERNELS


SEED_RANGE_OPS = (
    "RANGE_H2D_COPY_A", "RANGE_H2D_COPY_B", "RANGE_H2D_COPY_DTENSOR", "RANGE_BN_STATS_ALLREDUCE",
    "RANGE_UPDATE_BIAS_SGD", "RANGE_UPDATE_BIAS_MOMENTUM", "RANGE_UPDATE_BIAS_NESTEROV",
    "RANGE_UPDATE_BIAS_ADAM", "RANGE_UPDATE_WEIGHT_SGD", "RANGE_UPDATE_WEIGHT_MOMENTUM",
    "RANGE_UPDATE_WEIGHT_NESTEROV", "RANGE_UPDATE_WEIGHT_ADAM", "RANGE_UPDATE_WEIGHT_ADAMW",
    "RANGE_EMA_PARAM_UPDATE", "RANGE_SEMA_SWITCH", "RANGE_CLEAR", "RANGE_D2D_COPY",
    "RANGE_CAST_FP32_TO_FP16", "RANGE_CAST_FP16_TO_FP32", "RANGE_SUM_ALLREDUCE",
    "RANGE_MEAN_ALLREDUCE", "RANGE_CHECK_NAN", "RANGE_GRAD_SCALING", "RANGE_ACCUM_METRICS",
)
"""The seed's 24 range ops (facts sheet section 9; this project's update variants included)."""


def test_range_nodes_are_the_range_kernels():
    """What makes a node a RANGE node (:func:`memplan.is_range_op`, the ``RANGE_`` prefix) agrees
    with the kernel library: every one of the seed's range ops is a precision-free family with a
    range kernel, every range kernel a node can bind is named as a RANGE op, and no compute kernel
    is; the graph verifier asks for spans exactly where the operand row names span arguments."""
    from tr_mlir.dialects.memplan import is_range_op
    from tr_mlir.dialects.memplan._graphs import _takes_spans

    for op in SEED_RANGE_OPS:
        kid = kernel_id(op)
        assert is_range_op(op) and kid.precisions == () and KERNELS[kid].kind == "range", op
    for k, spec in KERNELS.items():
        if KERNEL_IDS[k].operands is None:
            continue
        op = k.op(k.precisions[0]) if k.precisions else k.op()
        assert is_range_op(op) == (spec.kind == "range"), op
    without = {op for op in SEED_RANGE_OPS if not _takes_spans(op)}
    # scalars and DTensors only; the last two have no operand row (no node binds them)
    assert without == {"RANGE_GRAD_SCALING", "RANGE_ACCUM_METRICS", "RANGE_H2D_COPY_DTENSOR", "RANGE_SEMA_SWITCH"}
