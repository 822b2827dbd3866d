"""Decisions the compiler makes and the executable obeys (issue 14 item 6, issue 13 item 3).

* Dead optional outputs (``memplan-skip-dead-outputs``): the MLP's first FC after ``flatten``
  skips its input gradient in the IR (``skip_outputs``), the executable binds it as ``None``,
  training is bit-identical with and without the skip, and a skip of a required output is refused.
* ``decay_all`` (``memplan-build-graph``'s option): the optimizer graph runs the weight kernel with
  ``wd`` for the bias-like parameters; with ``weight_decay=0`` training is bit-identical to the
  graph without it (the decay term is the only difference), with a decay the bias-like parameters
  move differently and nothing else does in the step the decay first acts.
* The gradient clear (``memplan-narrow-grad-clear``): dropped where every gradient's first writer
  overwrites it, training bit-identical to the cleared graph (MLP, LeNet-5, ResNet fused and
  unfused, AMP, MobileNet with AdamW); an accumulating first writer (``Operands.accumulates``)
  keeps its region in the clear.
"""

from __future__ import annotations

import numpy as np
import pytest

from tr_mlir import Task
from tr_mlir.dialects.memplan import SKIP_OUTPUTS, GraphId, NodesOp, i64_array
from tr_mlir.lowering.executable import Executable, ExecutableError, find_program
from tr_mlir.optim import LARS, SGD, AdamW
from tr_mlir.passes.memplan_skip_dead_outputs import MemplanSkipDeadOutputsPass


def _train(task: Task, steps: int = 3, seed: int = 0) -> tuple[list[float], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(steps):
        x = rng.standard_normal((task.batch_size, *task.input_shape)).astype(np.float32)
        losses.append(task.train_step(x, rng.integers(0, task.num_classes, task.batch_size)))
    return losses, [v.copy() for _, v in task.parameters()]


def _train_graph(task: Task):
    return next(g for g in find_program(task.module)[1].graphs() if g.graph_name == "train")


def _skips(task: Task) -> list[tuple[str, int]]:
    """(node op, output position) of every skipped output of the train graph."""
    out = []
    for op in _train_graph(task).body.block.ops:
        nodes = op.nodes()
        out += [(nodes[k].op, p) for k, p in op.skip_pairs()]
    return out


# --------------------------------------------------------------------------------------
# dead outputs
# --------------------------------------------------------------------------------------


def test_mlp_first_fc_input_gradient_is_skipped_by_the_compiler():
    task = Task("mlp_digits", (8, 8, 1), 10, 8).compile()
    assert _skips(task) == [("FC_FP32_BWD", 0)]  # the first FC after flatten: dx, no other
    bwd = [launch for g in task.exe.captured for launch in g.launches
           if getattr(getattr(launch, "func", None), "__name__", "") == "fc_bwd"]
    assert bwd and sum(launch.keywords.get("dx", 0) is None for launch in bwd) >= 1


@pytest.mark.parametrize("model, shape, kw", [
    ("mlp_digits", (8, 8, 1), {}),
    ("lenet5", (32, 32, 1), {"amp": True}),
    ("resnet_tiny", (8, 8, 3), {"fuse": True}),
])
def test_skipping_dead_outputs_changes_no_bit(monkeypatch, model, shape, kw):
    skipped = _train(Task(model, shape, 10, 8, seed=3, **kw))
    monkeypatch.setattr(MemplanSkipDeadOutputsPass, "apply", lambda self, ctx, op: None)
    full_task = Task(model, shape, 10, 8, seed=3, **kw)
    full = _train(full_task)
    assert not _skips(full_task)
    assert skipped[0] == full[0]
    assert all(np.array_equal(a, b) for a, b in zip(skipped[1], full[1]))


def test_a_skipped_required_output_is_an_executable_error():
    task = Task("mlp_digits", (8, 8, 1), 10, 8).compile()
    bucket = next(op for op in _train_graph(task).body.block.ops
                  if isinstance(op, NodesOp) and op.gid is GraphId.DEEP_FWD_BWD)
    k = next(i for i, n in enumerate(bucket.nodes()) if n.op == "FC_FP32_BWD")
    bucket.attributes[SKIP_OUTPUTS] = i64_array([k, 1])  # dw: the kernel must write it
    with pytest.raises(ExecutableError, match="skips output 1 of 'FC_FP32_BWD'.*must write"):
        Executable(task.module)


# --------------------------------------------------------------------------------------
# decay_all
# --------------------------------------------------------------------------------------


def _optimizer_ops(task: Task) -> list[str]:
    return [n.op for n in _train_graph(task).nodes(GraphId.OPTIMIZER)]


def test_decay_all_is_in_the_graph():
    plain = Task("resnet_tiny", (8, 8, 3), 10, 8, fuse=True, optimizer=SGD(0.1, momentum=0.9)).compile()
    decay = Task("resnet_tiny", (8, 8, 3), 10, 8, fuse=True,
                 optimizer=SGD(0.1, momentum=0.9, decay_all=True)).compile()
    assert _optimizer_ops(plain) == ["RANGE_UPDATE_WEIGHT_MOMENTUM", "RANGE_UPDATE_BIAS_MOMENTUM"]
    assert _optimizer_ops(decay) == ["RANGE_UPDATE_WEIGHT_MOMENTUM"] * 2
    wd = decay.exe.ids["wd"]
    assert all(wd in n.inputs for n in _train_graph(decay).nodes(GraphId.OPTIMIZER))
    lars = Task("resnet_tiny", (8, 8, 3), 10, 8, fuse=True, optimizer=LARS(0.2, nesterov=True, decay_all=True))
    assert _optimizer_ops(lars.compile()) == ["RANGE_UPDATE_WEIGHT_NESTEROV"]


@pytest.mark.parametrize("make", [
    lambda d: SGD(0.05, momentum=0.9, weight_decay=0.0, decay_all=d),
    lambda d: AdamW(lr=0.01, weight_decay=0.0, decay_all=d),
    lambda d: LARS(0.2, weight_decay=0.0, decay_all=d),
], ids=["momentum", "adamw", "lars"])
def test_decay_all_without_decay_is_bit_identical(make):
    runs = [_train(Task("resnet_tiny", (8, 8, 3), 10, 8, fuse=True, seed=2, optimizer=make(d)))
            for d in (False, True)]
    assert runs[0][0] == runs[1][0]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


def test_decay_all_decays_only_the_bias_like_parameters():
    def run(d):
        task = Task("mlp_digits", (8, 8, 1), 10, 8, seed=2, init="torch",  # non-zero biases
                    optimizer=SGD(0.05, weight_decay=0.5, decay_all=d))
        return [n for n, _ in task.parameters()], _train(task, steps=1)[1]

    names, plain = run(False)
    _, decay = run(True)
    for name, a, b in zip(names, plain, decay):
        assert np.array_equal(a, b) != name.endswith("bias"), name


# --------------------------------------------------------------------------------------
# the gradient clear
# --------------------------------------------------------------------------------------


def _zero_grad(task: Task) -> list:
    return _train_graph(task).nodes(GraphId.ZERO_GRAD)


@pytest.mark.parametrize("model, shape, kw", [
    ("mlp_digits", (8, 8, 1), {}),
    ("lenet5", (32, 32, 1), {}),
    ("lenet5", (32, 32, 1), {"amp": True}),
    ("resnet_tiny", (8, 8, 3), {"fuse": True}),
    ("resnet_tiny", (8, 8, 3), {"fuse": False}),
    ("resnet_tiny", (8, 8, 3), {"fuse": True, "amp": True}),
    ("mobilenet_tiny", (8, 8, 3), {"fuse": True, "optimizer": AdamW(lr=0.01)}),
], ids=["mlp", "lenet5", "lenet5-amp", "resnet-fused", "resnet-unfused", "resnet-amp", "mobilenet-adamw"])
def test_dropping_the_gradient_clear_changes_no_bit(monkeypatch, model, shape, kw):
    from tr_mlir.passes.memplan_narrow_grad_clear import MemplanNarrowGradClearPass

    narrowed_task = Task(model, shape, 10, 8, seed=5, **kw)
    narrowed = _train(narrowed_task, steps=4)
    assert not _zero_grad(narrowed_task)  # every gradient's producer overwrites it
    monkeypatch.setattr(MemplanNarrowGradClearPass, "apply", lambda self, ctx, op: None)
    cleared_task = Task(model, shape, 10, 8, seed=5, **kw)
    cleared = _train(cleared_task, steps=4)
    assert [n.op for n in _zero_grad(cleared_task)] == ["RANGE_CLEAR"]
    assert narrowed[0] == cleared[0]
    assert all(np.array_equal(a, b) for a, b in zip(narrowed[1], cleared[1]))


def test_an_accumulating_first_writer_keeps_its_region_cleared(monkeypatch):
    """A GRAD_ACCUM into the FC bias gradient before its producer (the vocabulary's
    ``accumulates``) reads the cleared value: G_FC_BIAS stays in the clear, nothing else."""
    from tr_mlir.dialects.kernels import K
    from tr_mlir.dialects.memplan import MemRegion, Node
    from tr_mlir.passes import memplan_narrow_grad_clear as N

    monkeypatch.setattr(N.MemplanNarrowGradClearPass, "apply", lambda self, ctx, op: None)
    task = Task("mlp_digits", (8, 8, 1), 10, 8).compile()
    program = find_program(task.module)[1]
    graph, plan = _train_graph(task), program.plans()[0]
    assert N.needed_regions(plan, graph) == set()
    bias_grad = next(t.id for t in plan.tensors() if t.region is MemRegion.G_FC_BIAS and t.slot)
    deep = graph.buckets()[GraphId.DEEP_FWD_BWD]
    nodes = deep.nodes()
    accum = Node(K.GRAD_ACCUM.op("FP32"), (nodes[0].outputs[0], bias_grad), (bias_grad,))
    deep.detach()
    graph.body.block.add_op(NodesOp(GraphId.DEEP_FWD_BWD, [accum, *nodes]))
    assert N.needed_regions(plan, graph) == {MemRegion.G_FC_BIAS}
    N.narrow(program)
    assert [n.out_ranges for n in graph.nodes(GraphId.ZERO_GRAD)] == [((MemRegion.G_FC_BIAS,) * 2,)]


# --------------------------------------------------------------------------------------
# layering: the executable knows nothing of the step order
# --------------------------------------------------------------------------------------


def _imports(path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_executable_imports_neither_the_runner_nor_the_step_orders():
    """The runner drives the executable; the executable must not depend back on the runner or
    on the runner's step orders (``tr_mlir.dialects.lifetimes``): the decisions those fed (dead
    outputs) are the compiler's."""
    from pathlib import Path

    lowering = Path(__file__).resolve().parents[1] / "lowering"
    assert not _imports(lowering / "executable.py") & {"tr_mlir.lowering.runner", "tr_mlir.dialects.lifetimes"}
    assert "tr_mlir.lowering.executable" in _imports(lowering / "runner.py")
