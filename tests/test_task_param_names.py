"""Parameter names are a compile decision (issue 14, item 6): ``memplan-name-parameters`` writes
them on the ``memplan.descs`` ops, the verifier checks them, and the Task only reads them."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import ArrayAttr, StringAttr
from xdsl.utils.exceptions import VerifyException

from tr_mlir import blueprint as bp
from tr_mlir.task import Task, TaskError

MODEL = bp.seq(bp.cbr(8, 3, 1, 1), bp.block(8, bp.BlockStyle.RESNET_3_3), bp.gap_fc(10, True))


def _task(**kw) -> Task:
    return Task(MODEL, (8, 8, 3), 10, 4, **kw).compile()


def _names_in_ir(task: Task) -> list[str]:
    return [n for d in task.exe.program.descs() for n in d.tensor_param_names if n]


def test_task_names_are_the_names_in_the_ir():
    """Task.parameters() + buffers() are exactly the IR's names (same set, plan order), for fused,
    unfused and AMP compiles alike."""
    for kw in ({"fuse": False}, {"fuse": True}, {"fuse": True, "amp": True}):
        task = _task(**kw)
        ir = _names_in_ir(task)
        shown = [n for n, _ in task.parameters()] + [n for n, _ in task.buffers()]
        assert sorted(ir) == sorted(shown) and len(ir) == len(set(ir))
        assert [n for n in ir if "running" not in n] == [n for n, _ in task.parameters()]
        assert ir[0] == "conv0.weight" and "bn2.running_var" in ir and ir[-2:] == ["fc0.weight", "fc0.bias"]


def test_renaming_in_the_ir_renames_the_task_view():
    """The Task makes no naming decision of its own: a name changed in the IR is the name it shows,
    loads and exports, with the same values."""
    task = _task()
    before = dict(task.parameters())
    descs = task.exe.program.descs()[0]
    names = ["stem.weight" if n == "conv0.weight" else n for n in descs.tensor_param_names]
    descs.properties["param_names"] = ArrayAttr([StringAttr(n) for n in names])
    task.module.verify()
    task._entries()
    after = dict(task.parameters())
    assert "conv0.weight" not in after and np.array_equal(after["stem.weight"], before["conv0.weight"])
    task.load_parameters({**after, "stem.weight": np.zeros_like(after["stem.weight"])})
    assert not dict(task.parameters())["stem.weight"].any()


def test_a_program_without_names_is_a_task_error_that_says_recompile():
    task = _task()
    for d in task.exe.program.descs():
        d.properties.pop("param_names")
    with pytest.raises(TaskError, match=r"no parameter names .*recompile it with memplan-compile"):
        task._entries()


def test_the_verifier_rejects_a_name_used_twice_across_layers():
    task = _task()
    descs = task.exe.program.descs()
    bn = next(d for d in descs if "bn1.weight" in d.tensor_param_names)
    names = ["bn0.weight" if n == "bn1.weight" else n for n in bn.tensor_param_names]
    bn.properties["param_names"] = ArrayAttr([StringAttr(n) for n in names])
    with pytest.raises(VerifyException, match=r"unique parameter names across layers, got 'bn0.weight'"):
        task.module.verify()


def test_a_prefixed_fused_chain_keeps_its_fc_bias():
    """A plugin chain registered with ``prefixes`` renames the FC's ``bias`` (``lin_bias``): the
    pass asks the fused op which chain member owns the tensor (``tensor_params``), so the bias is
    still ``fc0.bias``, as in the unfused model, with the same values (it was left out before)."""
    from tr_mlir import extend
    from tr_mlir.dialects import arch

    net = bp.seq(bp.cbr(4, 3, 1, 1), bp.gap(), bp.relu(), bp.fc(8, True), bp.relu(), bp.fc(10, True))
    plain = Task(net, (4, 4, 3), 10, 4, fuse=False).compile()
    with extend.scoped():
        extend.register_fused_chain("arch.test_fc_relu", [arch.FcOp, arch.ReluOp], layer_kind="TestFcRelu",
                                    pass_name="arch-merge-test-fc-relu", prefixes=("lin", "act"))
        fused = Task(net, (4, 4, 3), 10, 4, fuse=True).compile()
        assert any(d.op.data == "arch.test_fc_relu" for d in fused.exe.program.descs())
        got = dict(fused.parameters())
    want = dict(plain.parameters())
    assert list(got) == list(want) and "fc0.bias" in got
    assert all(np.array_equal(got[k], want[k]) for k in want)
