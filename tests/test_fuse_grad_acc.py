"""Residual gradients added by the Winograd input gradient: ``conv_bwd``'s ``dx_acc`` input (the
kernel adds its input gradient into dx, lowering/cpu/winograd.py and the generated output
transform of lowering/cpu/_cwinograd.py), the operand-row field behind it
(``Operands.adds_into``), the verifier check, and the pass ``memplan-fuse-grad-acc`` that uses it.

* The kernel: ``conv_bwd`` with ``dx_acc`` gives the bits of ``conv_bwd`` then ``grad_accum``, on
  the compiled and the NumPy Winograd paths, F(2x2, 3x3) and F(4x4, 3x3), one and two threads,
  partial edge tiles, and the 512-channel split-components path; the weight gradient unchanged.
  AMP's fp16 dx: the sum in fp32, rounded once. Anything but dx itself as ``dx_acc`` is refused.
* The pass on CIFAR ResNet-18: the five joins after a Winograd input gradient fused, the three
  after a strided (im2col) one not; ``conv_algo='im2col'`` and AMP fuse nothing.
* Whole training steps with and without the pass: bit-identical (1 and 2 threads), and the plan
  no larger. On the CUDA emulator: the fused plan trains as the unfused one.
* The verifier refuses a ``dx_acc`` that is not the conv's own dx.

The lit cases: lit_tests/memplan/memplan_fuse_grad_acc.mlir.
"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import tr_mlir
from tr_mlir import blueprint as bp
from tr_mlir.compile import compile as tr_compile
from tr_mlir.compile import make_context
from tr_mlir.dialects.memplan import ProgramOp
from tr_mlir.lowering.cpu import KERNELS, winograd
from tr_mlir.lowering.cpu.conv import conv_geom

F32, F16 = np.float32, np.float16

GEOMS = [  # n, h, w, c, k: partial edge tiles; ResNet-18's first stage (batch 2); 512 @ 4x4 (split components)
    (2, 9, 7, 5, 7), (2, 32, 32, 64, 64), (3, 4, 4, 512, 512)]


def _backward(dy, x, w, dx, algo, acc: bool):
    """``conv_bwd`` (3x3, stride 1, padding 1) through the registered kernel; returns dw."""
    spec = KERNELS["conv_bwd"]
    dw = np.full(w.shape, np.nan, w.dtype)
    arrays = {"dy": dy, "x": x, "w": w, "dw": dw, "dx": dx, **({"dx_acc": dx} if acc else {})}
    params = {"k": 3, "s": 1, "p": 1, "groups": 1, "algo_dgrad": algo, "algo_wgrad": algo}
    ws = {n: np.zeros(s, d) for n, (s, d) in spec.workspace_shapes(arrays, **params).items()}
    spec.bind({**arrays, **ws}, params)()
    return dw


def _data(geom, dtype=F32, seed=0):
    n, h, wd, c, k = geom
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, wd, c)).astype(dtype)
    w = rng.standard_normal((k, 3, 3, c)).astype(dtype)
    g = conv_geom(x.shape, w.shape, 3, 1, 1, 1)
    dy = rng.standard_normal(g.y_shape).astype(dtype)
    skip = rng.standard_normal(x.shape).astype(dtype)
    return x, w, dy, skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("path", ["c", "numpy"])
@pytest.mark.parametrize("algo", sorted(winograd.VARIANTS))
@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: "n{}h{}w{}c{}k{}".format(*g))
def test_dx_acc_gives_the_bits_of_grad_accum_after_the_conv(geom, algo, path, threads, monkeypatch):
    """dx = skip, then ``conv_bwd(dx_acc=dx)``: to the bit ``conv_bwd`` into a fresh dx and then
    ``grad_accum`` adding skip (one fp32 add of the same two values, commutative)."""
    if path == "numpy":
        monkeypatch.setenv("TR_MLIR_CC", "0")
    else:
        monkeypatch.delenv("TR_MLIR_CC", raising=False)
    x, w, dy, skip = _data(geom)
    with threadpool_limits(threads):
        fresh = np.full(x.shape, np.nan, F32)
        dw_plain = _backward(dy, x, w, fresh, algo, acc=False)
        want = skip.copy()
        KERNELS["grad_acc"].fn(fresh, want)  # dx += dy, as the unfused graph runs it
        got = skip.copy()
        dw_fused = _backward(dy, x, w, got, algo, acc=True)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert np.array_equal(dw_fused.view(np.int32), dw_plain.view(np.int32))


def test_dx_acc_with_fp16_dx_sums_in_fp32_and_rounds_once():
    """AMP's fp16 operands (the pass fuses fp32 graphs only; the kernel still takes them): dx is
    widened into the fp32 workspace, the input gradient added there, the sum rounded once."""
    x, w, dy, skip = _data(GEOMS[0], F16, seed=1)
    algo = "winograd_4x4_3x3"
    fresh = np.zeros(x.shape, F32)
    _backward(dy.astype(F32), x.astype(F32), w.astype(F32), fresh, algo, acc=False)
    got = skip.copy()
    _backward(dy, x, w, got, algo, acc=True)
    want = (skip.astype(F32) + fresh).astype(F16)
    np.testing.assert_array_equal(got, want)


def test_dx_acc_must_be_dx_itself():
    x, w, dy, skip = _data(GEOMS[0])
    spec = KERNELS["conv_bwd"]
    params = {"k": 3, "s": 1, "p": 1, "groups": 1, "algo_dgrad": "winograd_4x4_3x3",
              "algo_wgrad": "winograd_4x4_3x3"}
    dx, dw = np.zeros(x.shape, F32), np.zeros(w.shape, F32)
    arrays = {"dy": dy, "x": x, "w": w, "dw": dw, "dx": dx}
    ws = {n: np.zeros(s, d) for n, (s, d) in spec.workspace_shapes(arrays, **params).items()}
    with pytest.raises(ValueError, match="dx_acc must be dx itself"):
        spec.fn(**arrays, **ws, dx_acc=skip, **params)
    assert not dw.any() and not dx.any()  # refused before anything is written


def test_operand_rows_check_adds_into():
    """``Operands.adds_into`` maps an optional input to an output of the same row."""
    from tr_mlir.dialects.kernels import K, Operands, OperandsError

    assert K.CONV_BWD.operands.adds_into == {"dx_acc": "dx"}
    assert K.CONV_BWD.operands.required_ins == 3 and K.CONV_BWD.operands.overwrites("dx")
    with pytest.raises(OperandsError, match="must map a trailing optional input to an output"):
        Operands(("a", "b"), ("c",), adds_into={"b": "c"})
    with pytest.raises(OperandsError, match="must map a trailing optional input to an output"):
        Operands(("a", "b"), ("c",), optional=frozenset({"b"}), adds_into={"b": "d"})
    with pytest.raises(OperandsError, match="must map a trailing optional input to an output"):
        Operands(("a", "b", "e"), ("c",), optional=frozenset({"a"}), adds_into={"a": "c"})


def test_an_output_added_into_is_never_skipped():
    """memplan-skip-dead-outputs may leave out a conv's dead dx, but not one its dx_acc input has the
    kernel add into (the kernel would get dx None with dx_acc set)."""
    from tr_mlir.dialects.kernels import skippable_outputs

    assert 0 in skippable_outputs("CONV_FP32_BWD", 2, 3)
    assert 0 not in skippable_outputs("CONV_FP32_BWD", 2, 4)


def _resnet18_train_nodes(**options):
    from bench.models import THROUGHPUT_MODELS

    m = THROUGHPUT_MODELS["resnet18_cifar"]
    module = tr_compile(m.blueprint(), m.input_shape, num_classes=m.num_classes, batch_size=8,
                             train_size=16, val_size=8, fuse=True, **options)
    program = next(o for o in module.walk() if isinstance(o, ProgramOp))
    graph = next(g for g in program.graphs() if g.graph_name == "train")
    params = [dict(p.data) for p in graph.params.data]
    return [n for g in graph.buckets() for n in graph.nodes(g)], params, program


def test_pass_fuses_the_joins_after_winograd_input_gradients():
    """CIFAR ResNet-18 (fused blocks, the cost rule): the five joins whose main-path conv runs its
    input gradient as Winograd lose their grad_accum; the three after a strided conv (im2col)
    keep it. Each fused conv's fourth input is its own dx. Under im2col, and with AMP, nothing
    fuses; ``fuse_grad_acc=False`` keeps all eight."""
    nodes, params, _ = _resnet18_train_nodes()
    fused = [n for n in nodes if n.op == "CONV_FP32_BWD" and len(n.inputs) == 4]
    assert len(fused) == 5 and all(n.inputs[3] == n.outputs[0] for n in fused)
    assert all(params[n.param]["algo_dgrad"].data.startswith("winograd") for n in fused)
    assert sum(n.op == "GRAD_ACCUM_FP32" for n in nodes) == 3
    for options in ({"conv_algo": "im2col"}, {"fuse_grad_acc": False}, {"amp": True}):
        nodes, _, _ = _resnet18_train_nodes(**options)
        assert not [n for n in nodes if n.op.startswith("CONV_") and len(n.inputs) == 4], options
        assert sum(n.op.startswith("GRAD_ACCUM") for n in nodes) == 8, options
    with pytest.raises(tr_mlir.blueprint.BluePrintTypeError,
                       match="compile: fuse_grad_acc must be True or False, got int 1"):
        tr_compile(bp.seq(bp.fc(10, True)), (4, 4, 1), num_classes=10, batch_size=2, train_size=2, val_size=2,
                        fuse_grad_acc=1)


def test_plan_is_no_larger():
    """The skip gradient's DTensor goes unused: the plan's bytes do not grow (ResNet-18)."""
    sizes = {}
    for on in (True, False):
        _, _, program = _resnet18_train_nodes(fuse_grad_acc=on)
        sizes[on] = int(program.plans()[0].properties["total_bytes"].value.data)
    assert sizes[True] <= sizes[False], sizes


def _residual_net():
    return bp.seq(bp.cbr(16, 3, 1, 1), bp.block(16, bp.BlockStyle.RESNET_3_3),
                  bp.block(16, bp.BlockStyle.RESNET_3_3), bp.block(32, bp.BlockStyle.RESNET_3_3_DS),
                  bp.gap_fc(10, True))


def _three_steps(fused: bool, threads: int) -> tuple[list[float], list[np.ndarray], int]:
    task = tr_mlir.Task(_residual_net(), (8, 8, 3), 10, 8, optimizer=tr_mlir.optim.SGD(lr=0.05, momentum=0.9),
                        seed=3, fuse=True, conv_algo="winograd_4x4_3x3", fuse_grad_acc=fused).compile()
    rng = np.random.default_rng(5)
    with threadpool_limits(threads):
        losses = [task.train_step(rng.standard_normal((8, 8, 8, 3)).astype(F32),
                                  rng.integers(0, 10, 8).astype(np.int32)) for _ in range(3)]
    return losses, [a.copy() for _, a in task.parameters()], _fused_convs(task)


def _fused_convs(task) -> int:
    return sum(n.op == "CONV_FP32_BWD" and len(n.inputs) == 4 for g in task.exe.program.graphs()
               if g.graph_name == "train" for b in g.buckets() for n in g.nodes(b))


@pytest.mark.parametrize("threads", [1, 2])
def test_whole_steps_with_and_without_the_pass_are_bit_identical(threads):
    """Three SGD steps of a residual net, its stride-1 3x3 convs Winograd F(4x4, 3x3) (two
    identity joins fused, the projection block's not):
    the same losses and parameters to the bit with and without the pass (the memory plans differ;
    the verifier of every compile checks both)."""
    on, off = _three_steps(True, threads), _three_steps(False, threads)
    assert (on[2], off[2]) == (2, 0)
    assert on[0] == off[0]
    for i, (a, b) in enumerate(zip(on[1], off[1])):
        assert a.tobytes() == b.tobytes(), f"parameter #{i}"


def test_cuda_emulator_trains_the_fused_plan_as_the_unfused_one():
    """The CUDA backend's ``conv_bwd`` with ``dx_acc`` (the Winograd input gradient's accumulate
    form) on the kernel emulator: two steps of resnet_tiny, Winograd forced, with and without the
    pass, the same parameters to the bit (the emulator compiles the CUDA source for the host; on a
    GPU, nvcc may contract the add with a product of the transform, so scripts/gpu_smoke.py checks
    the ``dx+=`` rows against the bound instead)."""
    from tr_mlir.lowering.cuda import emulator as emu
    from tr_mlir.lowering.cuda.backend import CudaBackend

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    params = {}
    for fused in (True, False):
        task = tr_mlir.Task("resnet_tiny", (8, 8, 1), 10, 8, seed=1, fuse=True, conv_algo="winograd_4x4_3x3",
                            device=CudaBackend(emu.EmulatedDevice()), fuse_grad_acc=fused).compile()
        assert bool(_fused_convs(task)) == fused
        rng = np.random.default_rng(0)
        for _ in range(2):
            task.train_step(rng.standard_normal((8, 8, 8, 1)).astype(F32), rng.integers(0, 10, 8))
        params[fused] = [p.copy() for _, p in task.parameters()]
    for a, b in zip(params[True], params[False]):
        np.testing.assert_array_equal(a, b)


def test_the_task_option_is_checked_saved_and_recompiles(tmp_path):
    """``Task(fuse_grad_acc=...)``: a bool (else TaskError), kept by ``Task.save`` / ``Task.load``
    (on for a save that predates it), overridable at load, and a change recompiles."""
    import json

    with pytest.raises(tr_mlir.TaskError, match="Task: fuse_grad_acc must be a bool, got 1"):
        tr_mlir.Task(_residual_net(), (8, 8, 3), 10, 4, fuse_grad_acc=1)
    task = tr_mlir.Task(_residual_net(), (8, 8, 3), 10, 4, fuse=True, conv_algo="winograd_4x4_3x3",
                        fuse_grad_acc=False).compile()
    assert _fused_convs(task) == 0
    task.save(tmp_path / "t")
    config = tmp_path / "t" / "config.json"
    assert json.loads(config.read_text())["fuse_grad_acc"] is False
    loaded = tr_mlir.Task.load(tmp_path / "t")
    assert loaded.fuse_grad_acc is False and _fused_convs(loaded) == 0
    loaded.fuse_grad_acc = True
    assert _fused_convs(loaded.compile()) == 2
    assert _fused_convs(tr_mlir.Task.load(tmp_path / "t", fuse_grad_acc=True)) == 2
    cfg = json.loads(config.read_text())
    del cfg["fuse_grad_acc"]
    config.write_text(json.dumps(cfg))
    old = tr_mlir.Task.load(tmp_path / "t")  # a save from before the option: on
    assert old.fuse_grad_acc is True and _fused_convs(old) == 2
    config.write_text(json.dumps({**cfg, "fuse_grad_acc": "no"}))
    with pytest.raises(tr_mlir.TaskError, match="'fuse_grad_acc' is 'no', expected a bool"):
        tr_mlir.Task.load(tmp_path / "t")


def test_verifier_refuses_a_dx_acc_that_is_not_the_convs_dx():
    """A fused conv whose ``dx_acc`` input is another tensor is refused when the program is
    verified (every compile, tr-opt), naming the graph, bucket and node: the kernel would add
    into dx as if that tensor were its old value."""
    from dataclasses import replace

    from xdsl.rewriter import Rewriter
    from xdsl.utils.exceptions import VerifyException

    from tr_mlir.dialects.memplan import NodesOp

    module = tr_compile(_residual_net(), (8, 8, 3), num_classes=10, batch_size=4, train_size=8, val_size=4,
                        fuse=True, conv_algo="winograd_4x4_3x3")
    module.verify()
    program = next(o for o in module.walk() if isinstance(o, ProgramOp))
    graph = next(g for g in program.graphs() if g.graph_name == "train")
    gid, bucket = next((k, b) for k, b in graph.buckets().items()
                       if any(n.op == "CONV_FP32_BWD" and len(n.inputs) == 4 for n in b.nodes()))
    nodes = bucket.nodes()
    i = next(i for i, n in enumerate(nodes) if n.op == "CONV_FP32_BWD" and len(n.inputs) == 4)
    nodes[i] = replace(nodes[i], inputs=(*nodes[i].inputs[:3], nodes[i].inputs[2]))
    Rewriter.replace_op(bucket, NodesOp(gid, nodes))
    with pytest.raises(VerifyException, match=rf"node {i} 'CONV_FP32_BWD' gives {nodes[i].inputs[2]} as its "
                                              r"'dx_acc' input, expected its own 'dx' output"):
        module.verify()


def test_the_pass_runs_once_and_checks_its_place():
    """Running the pass on a compiled program (atlas built) is refused; running it twice changes
    nothing (the lit test checks the IR)."""
    from xdsl.utils.exceptions import DiagnosticException

    from tr_mlir.passes.memplan_fuse_grad_acc import MemplanFuseGradAccPass

    module = tr_compile(_residual_net(), (8, 8, 3), num_classes=10, batch_size=4, train_size=8, val_size=4,
                        fuse=True, conv_algo="winograd_4x4_3x3")
    compiled = str(module)
    with pytest.raises(DiagnosticException, match="runs before memplan-build-atlas"):
        MemplanFuseGradAccPass().apply(make_context(), module)
    assert str(module) == compiled


def _bucket(*extra: tuple[int, object]):
    """A bucket's nodes around one join: 0 writes the skip gradient T = 1 (a ReLU forward stands in
    for the join's backward), 1 the conv backward writing D = 2, 2 the grad_accum; ``extra``:
    (position, node) pairs inserted before the node at that position."""
    from tr_mlir.dialects.memplan import Node

    nodes = [Node("RELU_FP32_FWD", (10,), (1,)), Node("CONV_FP32_BWD", (20, 21, 22), (2, 23)),
             Node("GRAD_ACCUM_FP32", (1, 2), (2,))]
    for pos, node in sorted(extra, key=lambda e: -e[0]):
        nodes.insert(pos, node)
    return nodes


@pytest.mark.parametrize("extra,why", [
    ((), None),
    (((2, "RELU_FP32_FWD", (11,), (1,)),), "T written between the conv and the grad_accum"),
    (((2, "RELU_FP32_FWD", (1,), (30,)),), "T read between the conv and the grad_accum"),
    (((1, "RELU_FP32_FWD", (2,), (31,)),), "D read between the writer and the conv"),
    (((1, "RELU_FP32_FWD", (1,), (32,)),), "T read between the writer and the conv"),
    (((2, "RELU_FP32_FWD", (40,), (2,)),), "D's last writer is no conv"),
    (((0, "RELU_FP32_FWD", (12,), (50,)),), None),  # unrelated nodes do not matter
], ids=["fused", "t-written-after-conv", "t-read-after-conv", "d-read-before-conv", "t-read-before-conv",
        "d-written-after-conv", "unrelated"])
def test_triples_the_pass_refuses(extra, why):
    """``_triple`` finds the writer of T and the conv for a grad_accum, and refuses every bucket
    where moving the add to the conv, or writing T's value into D at its writer, could change a
    value some node reads."""
    from tr_mlir.dialects.memplan import Node
    from tr_mlir.passes.memplan_fuse_grad_acc import _triple

    nodes = _bucket(*((pos, Node(op, ins, outs)) for pos, op, ins, outs in extra))
    j = next(i for i, n in enumerate(nodes) if n.op == "GRAD_ACCUM_FP32")
    got = _triple(nodes, j, [], {})
    if why is None:
        k = next(i for i, n in enumerate(nodes) if n.outputs == (1,))
        assert got == (k, k + 1)
    else:
        assert got is None, why


def test_triples_need_a_fresh_conv_and_two_tensors():
    """A conv given its dx_acc already, a grad_accum adding a tensor to itself, a T with no writer
    in the bucket, and a writer that also reads T: no triple."""
    from dataclasses import replace

    from tr_mlir.passes.memplan_fuse_grad_acc import _triple

    nodes = _bucket()
    assert _triple(nodes, 2, [], {}) == (0, 1)
    assert _triple([nodes[0], replace(nodes[1], inputs=(20, 21, 22, 2)), nodes[2]], 2, [], {}) is None
    assert _triple([nodes[0], nodes[1], replace(nodes[2], inputs=(2, 2))], 2, [], {}) is None
    assert _triple(nodes[1:], 1, [], {}) is None
    assert _triple([replace(nodes[0], inputs=(1,)), *nodes[1:]], 2, [], {}) is None


# -- tr-train ------------------------------------------------------------------------------------

RESNET = '''
from tr_mlir.blueprint import BlockStyle, block, cbr, gap_fc, seq

def net():
    return seq(cbr(16, 3, 1, 1), block(16, BlockStyle.RESNET_3_3), gap_fc(10, True))
'''


def test_tr_train_no_fuse_grad_acc_compiles_without_the_pass_and_is_resumed(tmp_path, capsys):
    """``--no-fuse-grad-acc`` compiles without memplan-fuse-grad-acc (the pipeline line, the IR
    dump, the checkpoint's Task config and run state, a resumed run unless the flag is given); by
    default the pass runs and the dump's last IR has the fused conv."""
    import json

    from tr_mlir.tools.train_options import RESUMED_DEFAULTS
    from tr_mlir.tools.tr_train import build_parser, main

    assert build_parser().parse_args([]).fuse_grad_acc is True
    assert build_parser().parse_args(["--no-fuse-grad-acc"]).fuse_grad_acc is False
    assert "fuse_grad_acc" in RESUMED_DEFAULTS
    nets = tmp_path / "nets.py"
    nets.write_text(RESNET)

    def run(*args) -> str:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    def saved(save):
        last = save / "last"
        return (json.loads((last / "config.json").read_text())["fuse_grad_acc"],
                json.loads((last / "tr_train.json").read_text())["config"]["fuse_grad_acc"])

    def dumped(ir):
        names = sorted(p.name for p in ir.glob("[0-9]*-*.mlir"))
        return [n.split("-", 1)[1][:-len(".mlir")] for n in names[1:]], (ir / names[-1]).read_text()

    common = ["--device", "cpu", "--blueprint", f"{nets}:net", "--dataset", "synthetic", "--batch-size", "16",
              "--conv-algo", "winograd_2x2_3x3", "--epochs", "1", "--fuse"]
    out = run(*common, "--no-fuse-grad-acc", "--save-dir", tmp_path / "off", "--dump-ir", tmp_path / "ir_off")
    assert "fuse_grad_acc=false" in out
    passes, last = dumped(tmp_path / "ir_off")
    assert "memplan-fuse-grad-acc" not in passes and "GRAD_ACCUM_FP32" in last
    assert saved(tmp_path / "off") == (False, False)
    assert "fuse_grad_acc=false" in run("--device", "cpu", "--resume", tmp_path / "off", "--epochs", "2")
    assert saved(tmp_path / "off") == (False, False)
    out = run(*common, "--save-dir", tmp_path / "on", "--dump-ir", tmp_path / "ir_on")
    assert "fuse_grad_acc=false" not in out and saved(tmp_path / "on") == (True, True)
    passes, last = dumped(tmp_path / "ir_on")
    assert passes.index("memplan-fuse-grad-acc") == passes.index("memplan-fuse-bn-stats") + 1
    assert "GRAD_ACCUM_FP32" not in last
