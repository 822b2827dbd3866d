"""Memory reuse (``memplan-assign-offsets``) and its verifier.

* Training with ``reuse=true`` is bit-identical to ``reuse=false`` (the seed's one slot per
  DTensor): losses, parameters, buffers, metrics and predictions after several steps and an epoch,
  on every zoo model that trains in the suite, fp32 and fused AMP, several optimizers and dropout;
  on the NumPy path (``TR_MLIR_CC=0``) and on the CUDA emulator; and with every freshly written
  transient DTensor poisoned before its kernel runs, no node reading bytes another DTensor wrote since.
* The program verifier rejects a plan whose transient DTensors share bytes while both are live,
  naming both and the node; the packing is within 5% of the liveness lower bound; live-range
  splitting keeps the node arithmetic (only ids change).
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.utils.exceptions import VerifyException

import tr_mlir
from tr_mlir.blueprint import (
    Dropout,
    Fc,
    Relu,
    Seq,
    avgpool,
    bn,
    conv,
    dropout,
    fc,
    flatten,
    maxpool,
    relu,
    seq,
    tanh_act,
)
from tr_mlir.compile import compile as compile_model
from tr_mlir.compile import make_context
from tr_mlir.dialects.lifetimes import analyze, check_placement, lower_bound
from tr_mlir.dialects.memplan import TRANSIENT_REGIONS, PlanOp
from tr_mlir.lowering.executable import find_program
from tr_mlir.passes.memplan_assign_offsets import MemplanAssignOffsetsPass
from tr_mlir.zoo import MODELS


def _data(shape, n=24, k=10, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, k, n)


def _train(model, shape, reuse, *, device="cpu", steps=3, **kw):
    x, y = _data(shape)
    task = tr_mlir.Task(model, shape, 10, batch_size=8, device=device, seed=5, reuse=reuse, **kw)
    task.compile(24, 20)  # a last train batch of 8, a last val batch of 4: every variant runs
    losses = [task.train_step(x[8 * i:8 * i + 8], y[8 * i:8 * i + 8]) for i in range(steps)]
    hist = task.fit((x, y), (x[:20], y[:20]), epochs=1, shuffle=True)
    return (task, losses, task.parameters(), task.buffers(), task.evaluate(x[:20], y[:20]), task.predict(x[:11]),
            hist)


def _assert_identical(a, b):
    assert a[1] == b[1], "losses"
    for (na, pa), (nb, pb) in zip(a[2] + a[3], b[2] + b[3], strict=True):
        assert na == nb and np.array_equal(pa, pb), na
    assert a[4] == b[4]
    assert np.array_equal(a[5], b[5])
    drop = ("seconds", "images_per_second")
    assert [{k: v for k, v in e.items() if k not in drop} for e in a[6]] == \
        [{k: v for k, v in e.items() if k not in drop} for e in b[6]]


CONFIGS = [
    ("mlp_digits", "mlp_digits", (8, 8, 1), {}),
    ("lenet5 lars", "lenet5", (32, 32, 1), {"optimizer": tr_mlir.optim.LARS(lr=0.1, momentum=0.9, weight_decay=1e-4)}),
    ("resnet_tiny", "resnet_tiny", (8, 8, 1), {}),
    ("resnet_tiny fused amp", "resnet_tiny", (8, 8, 1), {"fuse": True, "amp": True}),
    ("depthwise_tiny adam", "depthwise_tiny", (8, 8, 1), {"optimizer": tr_mlir.optim.Adam(lr=1e-3, eps=1e-3)}),
    ("resnet8_cifar fused", "resnet8_cifar", (32, 32, 3), {"fuse": True}),
    ("mobilenet_tiny fused amp", "mobilenet_tiny", (32, 32, 3), {"fuse": True, "amp": True}),
    ("mlp dropout adamw", Seq((Fc(32, True), Relu(), Dropout(0.3), Fc(10, True))), (8, 8, 1),
     {"optimizer": tr_mlir.optim.AdamW(lr=1e-2, eps=1e-3, weight_decay=1e-2)}),
]


@pytest.mark.parametrize("label,model,shape,kw", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_reuse_trains_bit_identically(label, model, shape, kw):
    seed_layout = _train(model, shape, False, **kw)
    reused = _train(model, shape, True, **kw)
    assert reused[0].exe.base.transient_pool is not None and seed_layout[0].exe.base.transient_pool is None
    assert reused[0].exe.base.size < seed_layout[0].exe.base.size
    _assert_identical(seed_layout, reused)


def _poison_and_watch(monkeypatch) -> list[tuple[str, str, str]]:
    """Wrap every bound kernel call: before it, fill the bytes of each transient DTensor it writes
    without reading (a fresh web: the splitting assumes the kernel overwrites all of it, workspaces
    included) with 0xFF (NaN, -1); after it, record it as the owner of those bytes. A read of a
    transient DTensor whose bytes another DTensor wrote since is recorded as a violation
    ``(node, read, writer)``. Returns the violation list."""
    from tr_mlir.lowering import executable as exmod

    bind = exmod.Executable._bind
    violations: list[tuple[str, str, str]] = []

    def wrapped_bind(self, node, params, variant, where):
        fn = bind(self, node, params, variant, where)
        if not hasattr(self, "_test_owner"):
            self._test_owner = np.full(self.base.size // 256 + 1, -1, np.int64)
        table = self._tables[self.plans[variant].plan_name]
        ins = [table[i] for i in node.inputs if table[i].slot and table[i].region in TRANSIENT_REGIONS]
        outs = [table[i] for i in node.outputs if table[i].slot and table[i].region in TRANSIENT_REGIONS]
        fresh = [t for t in outs if t.id not in {u.id for u in ins}]
        arena, owner = self.arena, self._test_owner

        def call():
            for t in ins:
                held = owner[t.offset // 256:(t.offset + t.slot) // 256]
                for other in np.unique(held[(held != t.id) & (held >= 0)]):
                    violations.append((where, t.name, self.tensors[int(other)].name))
            for t in fresh:
                arena[t.offset:t.offset + t.slot] = 0xFF
            fn()
            for t in outs:
                owner[t.offset // 256:(t.offset + t.slot) // 256] = t.id

        return call

    monkeypatch.setattr(exmod.Executable, "_bind", wrapped_bind)
    return violations


POISONED = [
    ("resnet_tiny fused amp", "resnet_tiny", (8, 8, 1), {"fuse": True, "amp": True}),
    ("pools dropout tanh", seq(conv(8, 3, 1, 1), bn(), relu(), maxpool(3, 2, 1), conv(8, 3, 1, 0), tanh_act(),
                               avgpool(2, 2, 0), dropout(0.3), flatten(), fc(10, True)), (9, 9, 1), {}),
    ("lenet5 lars", "lenet5", (32, 32, 1), {"optimizer": tr_mlir.optim.LARS(lr=0.1, momentum=0.9)}),
]


@pytest.mark.parametrize("label,model,shape,kw", POISONED, ids=[c[0] for c in POISONED])
def test_poisoned_fresh_outputs_train_bit_identically(monkeypatch, label, model, shape, kw):
    """The reuse layout trained with every freshly written transient DTensor poisoned before its
    kernel runs is bit-identical to the seed's layout: no kernel reads the old contents of an output
    it does not list as an input, or leaves part of it unwritten; and no node reads bytes that
    another DTensor wrote since (the lifetimes match what the runner replays: train_step, fit with
    evaluation, predict on both input buffers)."""
    seed_layout = _train(model, shape, False, **kw)
    violations = _poison_and_watch(monkeypatch)
    reused = _train(model, shape, True, **kw)
    assert not violations, violations[:5]
    _assert_identical(seed_layout, reused)


@pytest.mark.parametrize("model,shape,kw", [("resnet_tiny", (8, 8, 1), {}),
                                            ("lenet5", (32, 32, 1), {"fuse": True, "amp": True})])
def test_reuse_is_bit_identical_on_the_numpy_path(monkeypatch, model, shape, kw):
    monkeypatch.setenv("TR_MLIR_CC", "0")
    _assert_identical(_train(model, shape, False, **kw), _train(model, shape, True, **kw))


def test_reuse_is_bit_identical_on_the_cuda_emulator():
    from tr_mlir.lowering.cuda import emulator as emu

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    for kw in ({}, {"fuse": True, "amp": True}):
        a = _train("resnet_tiny", (8, 8, 1), False, device=CudaBackend(emu.EmulatedDevice()), steps=2, **kw)
        b = _train("resnet_tiny", (8, 8, 1), True, device=CudaBackend(emu.EmulatedDevice()), steps=2, **kw)
        assert b[0].exe.base.transient_pool is not None
        _assert_identical(a, b)


# -- the verifier -------------------------------------------------------------------------


def _compiled(model="resnet_tiny", shape=(8, 8, 1), **kw):
    spec = MODELS[model]
    return compile_model(spec.blueprint(10), shape, num_classes=10, batch_size=4, train_size=10, val_size=6, **kw)


def _replace_offsets(program, change):
    """Rewrite the offsets of all six plans with ``change(list of DTensors) -> {id: offset}``."""
    from xdsl.rewriter import Rewriter

    for plan in program.plans():
        rows = sorted(plan.tensors(), key=lambda t: t.id)
        new = change(rows)
        rows = [t if t.id not in new else type(t)(**{**t.__dict__, "offset": new[t.id]}) for t in rows]
        bases = [plan.region_base(r) for r in range(68)]
        sizes = [plan.region_size(r) for r in range(68)]
        Rewriter.replace_op(plan, PlanOp(plan.plan_name, plan.target_kind, region_bases=bases, region_sizes=sizes,
                                         tensors=rows, pool=plan.transient_pool))


def test_verifier_names_both_tensors_and_the_node_where_they_collide():
    module = _compiled()
    _, program = find_program(module)
    life = analyze(program)
    rows = {t.id: t for t in program.plans()[0].tensors()}
    # two feature DTensors live at the same time (the first layer's output and a later feature)
    names = {t.name: t.id for t in rows.values()}
    a = names["l0.conv_output"]
    b = next(t.id for t in rows.values() if t.name.endswith("relu_output") and life.overlap(a, t.id) is not None
             and t.offset != rows[a].offset)
    when = life.overlap(a, b)
    assert when is not None
    _replace_offsets(program, lambda ts: {b: rows[a].offset})
    with pytest.raises(VerifyException) as e:
        module.verify()
    msg = str(e.value)
    assert "'l0.conv_output'" in msg and f"'{rows[b].name}'" in msg and "both live at @train" in msg
    assert "share bytes" in msg


def test_verifier_accepts_sharing_across_disjoint_lifetimes_only():
    module = _compiled()
    _, program = find_program(module)
    plan = program.plans()[0]
    life = analyze(program, plan)
    assert check_placement(program, plan, life) is None
    rows = sorted(plan.tensors(), key=lambda t: t.id)
    pairs_shared = pairs_apart = 0
    for t in rows:
        for u in rows:
            if t.id < u.id and t.id in life.transient and u.id in life.transient:
                share = t.offset < u.offset + u.slot and u.offset < t.offset + t.slot
                if share:
                    pairs_shared += 1
                    assert life.overlap(t.id, u.id) is None, (t.name, u.name)
                elif life.overlap(t.id, u.id) is not None:
                    pairs_apart += 1
    assert pairs_shared > 0 and pairs_apart > 0


def test_seed_layout_plan_is_checked_too():
    module = _compiled(reuse=False)
    _, program = find_program(module)
    plan = program.plans()[0]
    assert plan.transient_pool is None
    rows = {t.name: t for t in plan.tensors()}
    a, b = rows["l0.conv_output"], rows["l2.relu_output"]
    assert a.region is b.region
    # a hand-made seed-layout plan cannot overlap two slots of one region either
    _replace_offsets(program, lambda ts: {b.id: a.offset})
    with pytest.raises(VerifyException, match="non-overlapping DTensors"):
        module.verify()


@pytest.mark.parametrize("name", ["resnet_tiny", "mobilenet_tiny", "lenet5", "mlp"])
@pytest.mark.parametrize("fuse,amp", [(False, False), (True, True)])
def test_arena_is_within_5_percent_of_the_liveness_bound(name, fuse, amp):
    spec = MODELS[name]
    module = compile_model(spec.blueprint(spec.num_classes), spec.input_shape, num_classes=spec.num_classes,
                           batch_size=16, train_size=40, val_size=20, fuse=fuse, amp=amp)
    _, program = find_program(module)
    plan = program.plans()[0]
    life = analyze(program, plan)
    rows = sorted(plan.tensors(), key=lambda t: t.id)
    peak, _ = lower_bound(life, [t.slot for t in rows])
    bound = peak + sum(t.slot for t in rows if t.id not in life.transient)
    assert bound <= plan.size <= 1.05 * bound


def test_splitting_renames_ids_only():
    from tr_mlir.blueprint import emit
    from tr_mlir.passes.tr_compile import TrCompilePass

    mods = {}
    for reuse in (False, True):
        mods[reuse] = emit(MODELS["resnet_tiny"].blueprint(10), (8, 8, 1), num_classes=10, fuse=True)
        TrCompilePass(batch_size=4, train_size=10, val_size=6, reuse=reuse).apply(make_context(), mods[reuse])
    (_, seed), (_, reused) = find_program(mods[False]), find_program(mods[True])
    names = {t.id: t.name for t in reused.plans()[0].tensors()}
    seed_names = {t.id: t.name for t in seed.plans()[0].tensors()}
    split = {i: n for i, n in names.items() if i not in seed_names}
    assert split and all(n.rsplit(".v", 1)[0] in seed_names.values() for n in split.values())
    for g_seed, g_new in zip(seed.graphs(), reused.graphs(), strict=True):
        for gid, nodes in g_seed.buckets().items():
            for a, b in zip(nodes.nodes(), g_new.nodes(gid), strict=True):
                assert (a.op, a.param, a.in_ranges, a.out_ranges) == (b.op, b.param, b.in_ranges, b.out_ranges)
                assert [seed_names[i] for i in a.inputs] == [names[i].rsplit(".v", 1)[0] for i in b.inputs]
                assert [seed_names[i] for i in a.outputs] == [names[i].rsplit(".v", 1)[0] for i in b.outputs]
    # transient regions hold no bytes of their own in the reused plan: everything is in the pool
    plan = reused.plans()[0]
    assert all(plan.region_size(r) == 0 for r in TRANSIENT_REGIONS)
    lo, n = plan.transient_pool
    assert all(lo <= t.offset and t.offset + t.slot <= lo + n for t in plan.tensors() if t.region in TRANSIENT_REGIONS)


def test_pass_alone_is_idempotent_and_reuse_false_keeps_the_seed_layout():
    from tr_mlir.blueprint import emit
    from tr_mlir.passes.tr_compile import TrCompilePass

    module = emit(MODELS["resnet_tiny"].blueprint(10), (8, 8, 1), num_classes=10)
    TrCompilePass(batch_size=4, train_size=10, val_size=6, reuse=False).apply(make_context(), module)
    before = str(module)
    MemplanAssignOffsetsPass(reuse=False).apply(make_context(), module)
    assert str(module) == before
    MemplanAssignOffsetsPass().apply(make_context(), module)
    module.verify()
    placed = str(module)
    assert placed != before and "pool = " in placed
    MemplanAssignOffsetsPass().apply(make_context(), module)
    assert str(module) == placed


# -- RANGE nodes over transient regions ------------------------------------------------------


def _with_range_over_features(module):
    """Add a RANGE_CLEAR of the feature region after the first layer's forward (a node that works on
    the region's byte span: with the seed's layout it zeroes the features the deep graph reads)."""
    from xdsl.rewriter import Rewriter

    from tr_mlir.dialects.memplan import GraphId, GraphOp, MemRegion, Node

    _, program = find_program(module)
    graph = next(g for g in program.graphs() if g.graph_name == "train")
    buckets = {gid: list(nodes.nodes()) for gid, nodes in graph.buckets().items()}
    f = MemRegion.F_FEATURE_FP32
    for gid in (GraphId.FIRST_LAYER_FWD_A, GraphId.FIRST_LAYER_FWD_B):
        buckets[gid].append(Node("RANGE_CLEAR", out_ranges=((f, f),)))
    Rewriter.replace_op(graph, GraphOp(graph.graph_name, buckets, graph.params.data))
    return module


def test_a_range_node_over_a_transient_region_is_refused_not_silently_emptied():
    """A pooled plan gives the transient regions no bytes, so a RANGE node over one would work on an
    empty span (the clear above did nothing with reuse: other losses than the seed's layout)."""
    from xdsl.utils.exceptions import PassFailedException

    seed = _with_range_over_features(_compiled("mlp_digits", reuse=False))
    seed.verify()  # the seed's layout keeps the region contiguous: the node is fine there
    with pytest.raises(PassFailedException, match=r"memplan-assign-offsets cannot place the \d+ DTensors of "
                                                  r"F_FEATURE_FP32 by lifetime: @train first_layer_fwd_a node 2 "
                                                  r"\(RANGE_CLEAR\) works on the region's span.*reuse=false"):
        MemplanAssignOffsetsPass().apply(make_context(), seed)
    pooled = _with_range_over_features(_compiled("mlp_digits"))
    with pytest.raises(VerifyException, match=r"expected no RANGE node over a transient region in a program whose "
                                              r"plans have a transient pool .* got @train first_layer_fwd_a node 2 "
                                              r"\(RANGE_CLEAR\) over F_FEATURE_FP32; plan it with reuse=false"):
        pooled.verify()


def test_reuse_is_an_option_of_compile_not_of_arch_plan():
    from tr_mlir.blueprint import BluePrintTypeError
    from tr_mlir.compile import arch_plan

    spec = MODELS["mlp_digits"]
    with pytest.raises(BluePrintTypeError, match="compile: reuse must be True or False"):
        _compiled("mlp_digits", reuse="no")
    with pytest.raises(TypeError, match="reuse"):  # the ArchPlan plans no memory: it took reuse and ignored it
        arch_plan(spec.blueprint(10), (8, 8, 1), amp=False, fuse=False, num_classes=10, reuse=False)
