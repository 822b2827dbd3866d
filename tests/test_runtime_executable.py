"""The lowering runtime: Executable (arena, views, init rules, capture), Runner sequencing, the
memory check, replay without allocations, reproducibility, learning, AMP loss scaling."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import tr_mlir
from tr_mlir import blueprint as bp
from tr_mlir import zoo
from tr_mlir.compile import compile as tr_compile
from tr_mlir.data import load_dataset
from tr_mlir.dialects.memplan import VARIANTS, GraphId, MemRegion
from tr_mlir.lowering.backend import ArenaTooLargeError, ClosureGraph, NumpyBackend
from tr_mlir.lowering.executable import Executable, ExecutableError
from tr_mlir.lowering.operands import OPERANDS, operands_for
from tr_mlir.lowering.runner import Runner


def _module(model=None, shape=(8, 8, 1), **kw):
    kw = {"num_classes": 10, "batch_size": 4, "train_size": 10, "val_size": 6, **kw}
    return tr_compile(model or zoo.resnet_tiny(10), shape, **kw)


@pytest.fixture(scope="module")
def exe():
    return Executable(_module(fuse=True), seed=0)


# --------------------------------------------------------------------------------------
# arena, views, init
# --------------------------------------------------------------------------------------


def test_arena_and_views_at_plan_offsets(exe):
    assert exe.arena.dtype == np.uint8 and exe.arena.size == exe.base.size
    base = exe.arena.__array_interface__["data"][0]
    for t in exe.tensors:
        if not t.slot:
            with pytest.raises(ExecutableError, match="has no bytes"):
                exe.view(t.id)
            continue
        for v in range(len(VARIANTS)):
            view = exe.view(t.id, v)
            assert view.__array_interface__["data"][0] - base == t.offset
            assert view.nbytes <= t.slot
            assert view is exe.view(t.id, v)  # created once
    # features have the variant's batch, parameters the same shape everywhere
    out = exe.ids["l3.fc_output"]
    assert exe.view(out, 0).shape[0] == 4 and exe.view(out, 1).shape[0] == 2
    w = exe.ids["l3.fc_weight"]
    assert exe.view(w, 0) is exe.view(w, 5)


def test_init_rules(exe):
    for t in exe.tensors:
        if not t.slot:
            continue
        v = np.asarray(exe.view(t.id), np.float64)
        if t.init == "ones":
            assert (v == 1).all(), t.name
        elif t.init == "zeros":
            assert (v == 0).all(), t.name
        elif t.init == "fill":
            assert (v == np.array(t.init_value, exe.view(t.id).dtype)).all(), t.name
        elif t.init == "kaiming_uniform":
            bound = 1 / np.sqrt(np.prod(t.shape[1:]))
            assert np.abs(v).max() <= bound and v.std() > bound / 3, t.name
        elif t.init == "trunc_normal":
            std = np.sqrt(2 / np.prod(t.shape[1:])) / 0.87962566103423978
            assert np.abs(v).max() <= 2 * std and 0.5 * std < v.std() < 1.5 * std, t.name
    assert exe.get_scalar("scaling") == 1.0 and exe.get_scalar("local_batch_size") == 4
    assert exe.get_scalar("last_train_batch_size") == 2 and exe.get_scalar("last_val_batch_size") == 2


def test_init_is_seeded_and_shared_by_fused_and_unfused():
    def weights(module, seed):
        e = Executable(module, seed=seed)
        return [np.array(e.view(t.id)) for t in e.tensors
                if t.slot and t.region in (MemRegion.W_FIRST_CONV, MemRegion.W_DEEP_CONV, MemRegion.W_FC_WEIGHT)]

    a, b = weights(_module(fuse=False), 0), weights(_module(fuse=True), 0)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    c = weights(_module(fuse=True), 1)
    assert not np.array_equal(a[0], c[0])


def test_every_atlas_key_is_captured_node_for_node(exe):
    assert len(exe.captured) == len(exe.keys)
    for key, graph in zip(exe.keys, exe.captured):
        assert isinstance(graph, ClosureGraph)
        assert len(graph) == len(exe.graphs[key.graph].nodes(key.gid))
    # shape-invariant graphs are shared by all variants, deep graphs per ShapeId
    assert exe.graph(0, GraphId.OPTIMIZER) is exe.graph(3, GraphId.OPTIMIZER)
    assert exe.graph(0, GraphId.DEEP_FWD_BWD) is not exe.graph(1, GraphId.DEEP_FWD_BWD)
    assert exe.graph(0, GraphId.DEEP_FWD_BWD) is exe.graph(2, GraphId.DEEP_FWD_BWD)  # same shape
    assert exe.graph(4, GraphId.DEEP_FWD_BWD) is None and exe.graph(0, GraphId.INF_MAIN_A) is None


def test_operand_table_names_real_kernel_arguments():
    from tr_mlir.lowering.cpu import KERNELS

    for name, ops in OPERANDS.items():
        spec = KERNELS[name]
        named = [a for a in (*ops.ins, *ops.outs, *ops.in_ranges, *ops.out_ranges, ops.host) if a]
        for arg in named:
            assert arg.rstrip("*") in spec.arrays, (name, arg)
    with pytest.raises(KeyError, match="no operand row for node op 'FOO_FWD'"):
        operands_for("FOO_FWD")


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "nesterov", "adam", "adamw", "lars", "lars-nesterov"])
@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_zoo_models_bind_with_every_optimizer(optimizer, amp):
    """Every node the compiler emits binds to a kernel (capture raises otherwise) and one
    training step runs: depthwise, inverted residuals, bottlenecks, dropout, tanh, flatten."""
    models = [(zoo.mobilenet_tiny(10), (8, 8, 3)), (zoo.depthwise_tiny(10), (8, 8, 1)),
              (zoo.lenet5(10), (32, 32, 1)),
              (bp.seq(bp.flatten(), bp.fc(16, True), bp.relu(), bp.dropout(0.5), bp.fc(10, False)), (4, 4, 2))]
    for model, shape in models:
        exe = Executable(_module(model, shape, optimizer=optimizer, amp=amp, fuse=True), seed=0)
        for name, value in dict(lr=0.01, beta=0.9, wd=1e-4, beta2=0.99, eps=1e-8, tc=1e-3).items():
            if exe.has(name):
                exe.set_scalar(name, value)
        runner = Runner(exe)
        runner.prepare_weights()
        x = np.random.default_rng(0).standard_normal((4, *shape)).astype(np.float32)
        w0 = np.array(exe.view("l0.conv_weight" if exe.has("l0.conv_weight") else "l1.fc_weight"))
        loss = runner.train_step(x, np.arange(4), 0.01)
        # the first step's cross-entropy of a freshly initialized 10-class net is near ln 10: a
        # broken kernel (a loss of 1e30, a NaN) fails here, not only an exception
        assert 0.5 < loss < 10.0, loss
        w1 = np.array(exe.view("l0.conv_weight" if exe.has("l0.conv_weight") else "l1.fc_weight"))
        assert not np.array_equal(w0, w1)
        assert np.abs(w1 - w0).max() < 0.5  # one step at lr 0.01 moves a weight by far less


def test_executable_errors():
    from xdsl.dialects.builtin import ModuleOp

    with pytest.raises(ExecutableError, match="expected one 'memplan.program'"):
        Executable(ModuleOp([]))
    with pytest.raises(ExecutableError, match="the plan targets 'cuda'"):
        Executable(_module(target="cuda"))


# --------------------------------------------------------------------------------------
# memory check
# --------------------------------------------------------------------------------------


def test_memory_check_names_bytes_and_a_batch_that_fits():
    model, shape = zoo.resnet_tiny(10), (8, 8, 1)
    need = Executable(_module(model, shape, batch_size=64, train_size=64, val_size=64)).bytes_needed
    limit = need // 3
    with pytest.raises(ArenaTooLargeError) as info:
        Executable(_module(model, shape, batch_size=64, train_size=64, val_size=64),
                   backend=NumpyBackend(memory_limit=limit))
    msg = str(info.value)
    assert f"{need:,} bytes" in msg and f"{limit:,} bytes" in msg and "batch size 64" in msg
    fits = int(msg.split("; batch size ")[1].split()[0])
    assert 1 <= fits < 64
    Executable(_module(model, shape, batch_size=fits, train_size=fits, val_size=fits),
               backend=NumpyBackend(memory_limit=limit))  # the suggestion really fits
    with pytest.raises(ArenaTooLargeError, match="even batch size 1 would not fit"):
        Executable(_module(model, shape), backend=NumpyBackend(memory_limit=1000))


# --------------------------------------------------------------------------------------
# replay allocates nothing
# --------------------------------------------------------------------------------------


def _step_peak(batch: int) -> tuple[int, int, int]:
    """(peak bytes traced during one replayed training step, bytes still held after it, the
    smallest spatial activation's bytes) for a small residual CNN at 32x32x3 and ``batch``."""
    model = bp.seq(bp.cbr(16, 3, 1, 1), bp.block(16, bp.BlockStyle.RESNET_3_3), bp.maxpool(2, 2, 0),
                   bp.conv(16, 3, 1, 1), bp.bn(), bp.relu(), bp.gap_fc(10, True))
    task = tr_mlir.Task(model, (32, 32, 3), 10, batch, fuse=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    task.train_step(x, y)
    task.train_step(x, y)  # warm: both input buffers, every cached view and window geometry
    exe = task.exe
    smallest = min(t.slot for t in exe.tensors if t.region is MemRegion.F_FEATURE_FP32 and t.shape[1] > 1)
    arena = exe.arena.__array_interface__["data"][0]
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    task.train_step(x, y)
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert exe.arena.__array_interface__["data"][0] == arena
    return peak - before, after - before, smallest


def test_training_step_replays_without_allocations():
    """A replayed training step allocates no memory of activation size.

    How it is checked: ``tracemalloc`` traces every NumPy data buffer (NumPy reports its
    allocations to it) and every Python object. After two warm-up steps (both A/B input buffers,
    the views and window geometries cached on first use) one full training step (staging, A/B
    transfer, zero-grad, first layer, deep forward/backward, first-layer backward, metrics, NaN
    check, BN statistics, optimizer) runs traced. What a step may allocate are the kernels'
    fixed-size chunk temporaries (``kernels._util.CHUNK`` = 16384 elements, 64 KiB of fp32; BN
    backward holds three or four at once) and small Python objects: so the traced peak is bounded
    by a constant, does not grow with the batch (activations grow 4x from batch 8 to 32), stays
    well below one activation (2 MiB at batch 32), and nothing stays allocated after the step."""
    chunk = 16384 * 4
    peak8, held8, _ = _step_peak(8)
    peak32, held32, smallest = _step_peak(32)
    assert smallest >= 512 * 1024
    assert peak32 <= 6 * chunk and peak32 < smallest // 2, f"a step allocated up to {peak32} bytes"
    assert peak32 <= peak8 + 16 * 1024, (peak8, peak32)
    # what stays allocated is a few KiB of small Python objects (kernel-thread hand-offs, the C
    # kernels' call arguments: 3-6.5 KiB measured, varying run to run), never a chunk or an activation
    assert held8 < 16 * 1024 and held32 < 16 * 1024, (held8, held32)


# --------------------------------------------------------------------------------------
# training behaviour
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def test_residual_network_learns(digits):
    """The fused residual blocks really train (the seed's were no-ops): resnet_tiny on digits."""
    task = tr_mlir.Task(zoo.resnet_tiny(10), (8, 8, 1), 10, 32, fuse=True,
                        optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=5e-4))
    hist = task.fit(digits, epochs=2)
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    assert hist[-1]["val_top1"] >= 0.93, hist


def test_same_seed_gives_bit_identical_parameters(digits):
    """Seeded init, seeded data order and the arena's dropout RNG: two runs of one epoch agree
    bit for bit; another seed does not."""
    model = bp.seq(bp.flatten(), bp.fc(32, True), bp.relu(), bp.dropout(0.2), bp.fc(10, True))
    x, y = digits.train_x[:300], digits.train_y[:300]

    def run(seed):
        task = tr_mlir.Task(model, (8, 8, 1), 10, 32, seed=seed, optimizer=tr_mlir.optim.Adam(lr=1e-2))
        task.fit((x, y), epochs=1)
        return task.parameters()

    a, b, c = run(0), run(0), run(1)
    assert all(np.array_equal(p, q) for (_, p), (_, q) in zip(a, b))
    assert not np.array_equal(a[0][1], c[0][1])


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "amp"])
def test_same_seed_gives_bit_identical_conv_bn_runs(digits, amp):
    """The same for a fused residual CNN (convolutions split across threads by the kernels, BN
    statistics, AMP loss scaling): parameters and BN buffers bit for bit after an epoch."""
    x, y = digits.train_x[:300], digits.train_y[:300]

    def run():
        task = tr_mlir.Task(zoo.resnet_tiny(10), (8, 8, 1), 10, 32, fuse=True, amp=amp, seed=0,
                            optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9, weight_decay=5e-4))
        task.fit((x, y), epochs=1)
        return task.parameters() + task.buffers()

    a, b = run(), run()
    for (name, p), (_, q) in zip(a, b):
        assert np.array_equal(p, q), name


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the overflows are the point
def test_amp_overflow_halves_the_scale_and_skips_the_update():
    """AMP loss scaling on the device (facts 12.4): a gradient overflow sets has_nan, the scale
    halves (floor 1) and every update kernel skips the step; no growth."""
    model = bp.seq(bp.cbr(8, 3, 1, 1), bp.gap_fc(10, True))
    task = tr_mlir.Task(model, (4, 4, 3), 10, 4, amp=True, fuse=True)
    x = np.random.default_rng(0).standard_normal((4, 4, 4, 3)).astype(np.float32)
    y = np.arange(4)
    assert task.loss_scale == 8192.0
    task.exe.set_scalar("scaling", 2.0 ** 40)  # the fp16 gradients overflow
    before = task.parameters()
    task.train_step(x, y)
    assert task.exe.get_scalar("has_nan") == 1 and task.loss_scale == 2.0 ** 39
    assert all(np.array_equal(p, q) for (_, p), (_, q) in zip(before, task.parameters()))
    task.exe.set_scalar("scaling", 8192.0)
    task.train_step(x, y)
    assert task.exe.get_scalar("has_nan") == 0 and task.loss_scale == 8192.0
    assert not np.array_equal(before[0][1], task.parameters()[0][1])
    task.exe.set_scalar("scaling", 1.0)
    bad = x.copy()
    bad[0, 0, 0, 0] = 1e6  # finite, but Inf once staged as fp16 (the Task refuses non-finite inputs)
    task.train_step(bad, y)
    assert task.exe.get_scalar("has_nan") == 1 and task.loss_scale == 1.0  # floor


def test_step_time_is_reported(digits, capsys):
    """Smoke: fit(verbose=True) prints one line per epoch with its metrics and seconds."""
    task = tr_mlir.Task("mlp_digits", (8, 8, 1), 10, 64)
    task.fit((digits.train_x[:256], digits.train_y[:256]), epochs=1, verbose=True)
    out = capsys.readouterr().out
    assert "train_loss" in out and "seconds" in out


def test_lowres_variants_run_at_their_resolution():
    """A progressive-resolution compile (train_res 8, train_res_end 4): an epoch on the lowres
    variants equals an epoch of the same network compiled for 4x4 inputs (same seeded init)."""
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((4, 4, 4, 1)).astype(np.float32), rng.integers(0, 10, 4)) for _ in range(3)]

    def epoch(module, lowres):
        exe = Executable(module, seed=0)
        exe.set_scalar("beta", 0.9)
        Runner(exe).train_epoch(iter(batches), 3, lambda b: 0.05, lowres=lowres)
        return [np.array(exe.view(t.id)) for t in exe.tensors if t.slot and t.region.name.startswith("W_")]

    kw = dict(batch_size=4, train_size=12, val_size=4, fuse=True)
    progressive = _module(shape=(8, 8, 1), train_res_end=4, **kw)
    assert [v.resolution for v in Executable(progressive).variants] == [8, 8, 4, 4, 8, 8]
    a, b = epoch(progressive, True), epoch(_module(shape=(4, 4, 1), **kw), False)
    assert len(a) == len(b) and all(np.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(a, b))


def test_random_initializers_draw_in_chunks_without_a_float64_copy():
    """The initializers draw in chunks the same stream as one whole-shape draw (so the same
    weights as before), and need no N-sized float64 temporary: a fresh process's peak memory was
    set by initialization (CIFAR ResNet-18: 40 MiB above its arena; VGG16-BN: 0.75 GiB)."""
    import tracemalloc

    from tr_mlir.lowering.executable import _fan_in, kaiming_uniform, trunc_normal

    shape = (512, 3, 3, 512)  # 2.36M elements: a float64 copy is 18.9 MB
    bound = 1.0 / np.sqrt(_fan_in(shape))
    want_u = np.random.default_rng([0, 1]).uniform(-bound, bound, shape).astype(np.float32)
    std = np.sqrt(2.0 / _fan_in(shape)) / 0.87962566103423978
    rng = np.random.default_rng([0, 2])
    x = rng.standard_normal(int(np.prod(shape)))
    bad = np.abs(x) > 2.0
    while bad.any():
        x[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(x) > 2.0
    want_t = (x * std).astype(np.float32).reshape(shape)
    for fn, seed, want in ((kaiming_uniform, 1, want_u), (trunc_normal, 2, want_t)):
        view = np.empty(shape, np.float32)
        tracemalloc.start()
        fn(view, np.random.default_rng([0, seed]))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert np.array_equal(view, want), fn.__name__
        assert np.abs(view).max() <= (bound if fn is kaiming_uniform else 2 * std)
        assert peak < 4 * 2**20, (fn.__name__, peak)  # chunks and the resampled indices only
