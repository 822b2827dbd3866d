"""Conv algorithm selection: the kernels' ``algo`` / ``algo_dgrad`` / ``algo_wgrad`` params
(lowering/cpu/conv.py) and the pass that chooses them (``memplan-select-conv-algo``).

What is checked: each explicit algorithm computes the same bits as ``auto`` where ``auto`` runs it;
an inapplicable or unavailable algorithm is refused by the kernel and at compile time; the
workspaces follow the choice (per kernel and in a compiled plan); training with ``conv_algo="im2col"``
(today's rule) is bit-identical to ``auto`` (no Winograd yet), ``direct`` on LeNet-5 changes nothing,
``numpy`` equals ``auto`` with the C compiler switched off; a resolution schedule that crosses the
direct kernels' scratch bound keeps ``auto``; the cost rule picks a Winograd variant once one is
registered; the choice survives a Task save / load; the summary reports the mix.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from xdsl.utils.exceptions import DiagnosticException, PassFailedException

from tr_mlir import Task
from tr_mlir.compile import make_context
from tr_mlir.errors import TrMlirError
from tr_mlir.lowering.cpu import KERNELS
from tr_mlir.lowering.cpu import conv as C
from tr_mlir.lowering.cpu._cc import ENV_SWITCH, available
from tr_mlir.lowering.executable import find_program
from tr_mlir.memplan_summary import conv_algorithms
from tr_mlir.passes import memplan_select_conv_algo as S
from tr_mlir.passes.memplan_select_conv_algo import MemplanSelectConvAlgoPass

needs_cc = pytest.mark.skipif(not available(), reason="no working C compiler: the direct kernels fall back to NumPy")

# N, H, C -> K, k, s, p, groups; the algorithm auto runs (with a C compiler)
GEOMETRIES = {
    "lenet_conv2": ((4, 14, 6), (16, 5, 1, 0, 1), "direct"),
    "3x3_32_to_48": ((2, 8, 32), (48, 3, 1, 1, 1), "im2col"),
    "strided_grouped": ((2, 9, 8), (8, 3, 2, 1, 2), "im2col"),
    "pointwise": ((2, 6, 24), (40, 1, 1, 0, 1), "pointwise"),
    "depthwise": ((2, 7, 16), (16, 3, 1, 1, 16), "depthwise"),
}


def _arrays(case: str, seed: int = 0):
    (n, h, c), (k_out, k, s, p, groups) = GEOMETRIES[case][:2]
    rng = np.random.default_rng(seed)
    g = C.conv_geom((n, h, h, c), (k_out, k, k, c // groups), k, s, p, groups)
    x = rng.standard_normal(g.x_shape).astype(np.float32)
    w = rng.standard_normal(g.w_shape).astype(np.float32)
    dy = rng.standard_normal(g.y_shape).astype(np.float32)
    return g, x, w, dy, {"k": k, "s": s, "p": p, "groups": groups}


def _run(case: str, fwd_algo: str, bwd_algo: str, dx: bool = True):
    """(y, dw, dx) of one conv by the given algorithms (workspaces from the kernels' own rules)."""
    g, x, w, dy, kp = _arrays(case)
    y = np.empty(g.y_shape, np.float32)
    fwd, bwd = KERNELS["conv_fwd"], KERNELS["conv_bwd"]
    ws = fwd.allocate_workspaces({"x": x, "w": w, "y": y}, **kp, algo=fwd_algo)
    fwd(x=x, w=w, y=y, **ws, **kp, algo=fwd_algo)
    dw = np.empty_like(w)
    dxa = np.empty_like(x) if dx else None
    arrays = {"dy": dy, "x": x, "w": w, "dw": dw, "dx": dxa}
    algos = {"algo_wgrad": bwd_algo, "algo_dgrad": bwd_algo}
    ws = bwd.allocate_workspaces(arrays, **kp, **algos)
    bwd(**arrays, **ws, **kp, **algos)
    return y, dw, dxa


@pytest.mark.parametrize("case", sorted(GEOMETRIES))
def test_the_algorithm_auto_runs_gives_the_same_bits_explicitly(case):
    rule = GEOMETRIES[case][2]
    if rule == "direct" and not available():
        pytest.skip("no C compiler")
    g = _arrays(case)[0]
    assert C.rule_algorithm(g, False) == rule
    for a, b in zip(_run(case, "auto", "auto"), _run(case, rule, rule)):
        assert np.array_equal(a, b)


@needs_cc
def test_explicit_im2col_on_a_few_channel_conv_is_the_numpy_path(monkeypatch):
    explicit = _run("lenet_conv2", "im2col", "im2col")
    direct = _run("lenet_conv2", "direct", "direct")
    monkeypatch.setenv(ENV_SWITCH, "0")  # auto without a compiler: the NumPy method
    numpy_auto = _run("lenet_conv2", "auto", "auto")
    direct_without_cc = _run("lenet_conv2", "direct", "direct")  # direct falls back to NumPy, as auto
    for a, b, c, d in zip(explicit, numpy_auto, direct_without_cc, direct):
        assert np.array_equal(a, b) and np.array_equal(a, c)
        np.testing.assert_allclose(d, a, rtol=1e-4, atol=1e-4)  # the C kernels: float rounding only
    assert not all(np.array_equal(a, d) for a, d in zip(explicit, direct))  # really another algorithm


@pytest.mark.parametrize("case", ["pointwise", "depthwise", "3x3_32_to_48"])
def test_im2col_computes_every_geometry(case):
    """im2col applies to all convs (grouped im2col for depthwise, a 1x1 window for pointwise) and
    direct to every dense one: the same result up to float rounding."""
    ref = _run(case, GEOMETRIES[case][2], GEOMETRIES[case][2])
    others = ["im2col"] + (["direct"] if available() and GEOMETRIES[case][1][4] == 1 else [])
    for algo in others:
        for a, b in zip(_run(case, algo, algo), ref):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_the_kernels_refuse_an_algorithm_that_does_not_apply():
    g, x, w, dy, kp = _arrays("3x3_32_to_48")
    y = np.empty(g.y_shape, np.float32)
    fwd = KERNELS["conv_fwd"]
    with pytest.raises(ValueError, match="conv algorithm 'pointwise' does not apply to the conv 32 -> 48"):
        fwd(x=x, w=w, y=y, **kp, algo="pointwise")
    gs, xs, ws_, _, kps = _arrays("strided_grouped")
    with pytest.raises(ValueError, match="'winograd_4x4_3x3' does not apply"):
        fwd(x=xs, w=ws_, y=np.empty(gs.y_shape, np.float32), **kps, algo="winograd_4x4_3x3")
    with pytest.raises(ValueError, match="unknown conv algorithm 'gemm'"):
        KERNELS["conv_bwd"](dy=dy, x=x, w=w, dw=np.empty_like(w), **kp, algo_wgrad="gemm")
    h = [a.astype(np.float16) for a in (x, w, np.zeros_like(y))]
    with pytest.raises(ValueError, match="'direct' does not apply .* with fp16 operands"):
        fwd(x=h[0], w=h[1], y=h[2], **kp, algo="direct")
    with pytest.raises(ValueError, match="'depthwise' does not apply"):  # the workspace rule checks too
        fwd.workspace_shapes({"x": x, "w": w, "y": y}, **kp, algo="depthwise")


def test_workspaces_follow_the_algorithm():
    lenet = _arrays("lenet_conv2")[0]
    both = ("fwd", "wgrad", "dgrad")
    sizes = {a: C.conv_workspace_sizes(lenet, x16=False, w16=False, y16=False, phases=both, algo=a)
             for a in ("auto", "direct", "im2col")}
    assert sizes["auto"] == sizes["direct"] and "tmp" in sizes["direct"]  # the C kernels' scratch
    assert "tmp" not in sizes["im2col"] and sizes["im2col"]["col"] == sizes["direct"]["col"]  # + NumPy fallback
    pw = _arrays("pointwise")[0]
    assert C.conv_workspace_sizes(pw, x16=False, w16=False, y16=False, algo="pointwise") == {}
    assert "col" in C.conv_workspace_sizes(pw, x16=False, w16=False, y16=False, algo="im2col")
    per_phase = C.conv_workspace_sizes(lenet, x16=False, w16=False, y16=False, phases=("wgrad", "dgrad"),
                                       algo={"wgrad": "direct", "dgrad": "im2col"})
    assert "tmp" in per_phase and "col" in per_phase


# -- compiled models ----------------------------------------------------------------------


def _digest(task: Task) -> str:
    h = hashlib.sha256()
    for _, p in task.parameters():
        h.update(np.ascontiguousarray(p).tobytes())
    return h.hexdigest()


def _trained(name: str, shape, steps: int = 2, **kw) -> Task:
    task = Task(name, shape, 10, 8, seed=1, **kw)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        task.train_step(rng.standard_normal((8, *shape)).astype(np.float32), rng.integers(0, 10, 8))
    return task


def _records(task: Task) -> list[str]:
    model, _ = find_program(task.module)
    return [str(op.attributes.get("conv_algo")) for op in model.body.block.ops]


MODELS = [("lenet5", (32, 32, 1), {}), ("resnet_tiny", (8, 8, 1), {"fuse": True})]


@pytest.mark.parametrize("name,shape,kw", MODELS, ids=[m[0] for m in MODELS])
def test_im2col_trains_bit_identically_to_auto(name, shape, kw):
    """Before the Winograd kernels are in, auto (the cost rule) and im2col (the run-time rule of
    the kernels before the pass existed) choose alike, and train to the same bits."""
    auto, im2col = _trained(name, shape, **kw), _trained(name, shape, conv_algo="im2col", **kw)
    assert _records(auto) == _records(im2col)
    assert _digest(auto) == _digest(im2col)


def test_direct_on_lenet_changes_nothing_and_numpy_only_the_choice():
    auto = _trained("lenet5", (32, 32, 1))
    direct = _trained("lenet5", (32, 32, 1), conv_algo="direct")
    assert str(auto.module) == str(direct.module) and _digest(auto) == _digest(direct)
    numpy = _trained("lenet5", (32, 32, 1), conv_algo="numpy")
    text = str(numpy.module)
    assert '"direct"' in str(auto.module) and '"direct"' not in text
    # the IR differs only in the choices and the workspaces that follow them: ws_tmp is gone
    _, program = find_program(numpy.module)
    assert not any(t.name == "ws_tmp" for t in program.plans()[0].tensors())
    _, program = find_program(auto.module)
    assert any(t.name == "ws_tmp" for t in program.plans()[0].tensors())


def test_numpy_trains_as_auto_without_a_compiler(monkeypatch):
    monkeypatch.setenv(ENV_SWITCH, "0")
    auto = _trained("resnet_tiny", (8, 8, 1), fuse=True)
    numpy = _trained("resnet_tiny", (8, 8, 1), fuse=True, conv_algo="numpy")
    assert _digest(auto) == _digest(numpy)


@needs_cc
def test_forcing_direct_plans_the_direct_scratch():
    """resnet_tiny's 32 -> 32 convs run im2col by the rule; forced direct they take the C kernels'
    scratch (K copies of a padded image per thread) in ws_tmp, and still train like the rule's to
    float rounding."""
    def ws(task: Task, name: str) -> int:
        _, program = find_program(task.module)
        return next((t.slot for t in program.plans()[0].tensors() if t.name == name), 0)

    auto = _trained("resnet_tiny", (8, 8, 1), steps=1, fuse=True)
    direct = _trained("resnet_tiny", (8, 8, 1), steps=1, fuse=True, conv_algo="direct")
    assert conv_algorithms(find_program(auto.module)[1])["fwd"]["im2col"] > 0
    assert set(conv_algorithms(find_program(direct.module)[1])["fwd"]) == {"direct"}
    assert ws(direct, "ws_tmp") > ws(auto, "ws_tmp")
    for (_, a), (_, b) in zip(auto.parameters(), direct.parameters()):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_the_choice_is_kept_in_the_task_config(tmp_path):
    task = _trained("lenet5", (32, 32, 1), steps=1, conv_algo="numpy")
    assert task.config()["conv_algo"] == "numpy"
    task.save(tmp_path / "t")
    back = Task.load(tmp_path / "t")
    assert back.conv_algo == "numpy"
    with pytest.raises(TrMlirError, match="conv_algo: unknown conv algorithm 'fast'"):
        Task("lenet5", (32, 32, 1), 10, 8, conv_algo="fast")


# -- the pass -----------------------------------------------------------------------------

SCHEDULE = """
arch.model @big input(384, 384, 1) num_classes = 6 first_layer = 0 {
^bb0(%x: tensor<?x384x384x1xf32>):
  %0 = arch.conv %x out_ch = 6 k = 5 : tensor<?x384x384x1xf32> -> tensor<?x380x380x6xf32>
  %1 = arch.gap %0 : tensor<?x380x380x6xf32> -> tensor<?x1x1x6xf32>
  %2 = arch.softmax_ce %1 num_classes = 6 : tensor<?x1x1x6xf32> -> tensor<?x1x1x6xf32>
  arch.output %2 : tensor<?x1x1x6xf32>
}
"""


def _select(text: str, **options):
    from xdsl.parser import Parser

    module = Parser(make_context(), text).parse_module()
    MemplanSelectConvAlgoPass(batch_size=2, train_size=4, val_size=2, **options).apply(make_context(), module)
    model = next(op for op in module.walk() if op.name == "arch.model")
    return {w: {k: v.data for k, v in d.data.items()}
            for op in model.body.block.ops if "conv_algo" in op.attributes
            for w, d in op.attributes["conv_algo"].data.items()}


def test_variants_that_disagree_keep_auto():
    """Training at 256 (its direct scratch fits the bound of cc_geometry), validating at 512 (it
    does not): the rule's choice differs between variants, so the conv keeps auto (the kernel
    decides per call, as before); one resolution: direct."""
    big = SCHEDULE.replace("384", "512").replace("380", "508")
    assert _select(big, train_res=256)["conv_weight"] == {"algo": "auto", "algo_wgrad": "direct"}
    assert _select(SCHEDULE)["conv_weight"] == {"algo": "direct", "algo_wgrad": "direct"}
    text = big.replace("out_ch = 6 k = 5 :", 'out_ch = 6 k = 5 {conv_algo_request = "pointwise"} :')
    with pytest.raises((PassFailedException, DiagnosticException), match="'pointwise' does not apply"):
        _select(text, train_res=256)


def test_the_cost_rule_takes_winograd_where_measured():
    """Winograd F(4x4, 3x3) for dense stride-1 3x3 convs of 64+ channels on maps of 4x4 and up
    (the measured range, bench/results/conv-algos-2026-12-02); im2col elsewhere."""
    g64 = C.conv_geom((8, 16, 16, 64), (64, 3, 3, 64), 3, 1, 1, 1)
    g4x4 = C.conv_geom((8, 4, 4, 512), (512, 3, 3, 512), 3, 1, 1, 1)
    g2x2 = C.conv_geom((8, 2, 2, 512), (512, 3, 3, 512), 3, 1, 1, 1)
    g32 = C.conv_geom((8, 16, 16, 32), (32, 3, 3, 32), 3, 1, 1, 1)
    s2 = C.conv_geom((8, 16, 16, 64), (128, 3, 3, 64), 3, 2, 1, 1)
    assert S.cost_rule(g64, False, "fwd") == "winograd_4x4_3x3"
    assert S.cost_rule(g4x4, False, "dgrad") == "winograd_4x4_3x3"
    assert S.cost_rule(g64, True, "wgrad") == "winograd_4x4_3x3"  # AMP: fp16 operands cast, fp32 math
    assert S.cost_rule(g2x2, False, "fwd") == "im2col"  # below WINOGRAD_MIN_PIXELS
    assert S.cost_rule(s2, False, "fwd") == "im2col"  # stride 2
    assert S.cost_rule(g32, False, "fwd") == "im2col"  # below WINOGRAD_MIN_CHANNELS
    assert S.cost_rule(g64, False, "fwd", winograd=False) == "im2col"  # the im2col value: today's rule
    assert S.check_value("winograd_2x2_3x3") is None


def test_a_request_in_the_ir_overrides_the_option():
    text = SCHEDULE.replace("out_ch = 6 k = 5 :", 'out_ch = 6 k = 5 {conv_algo_request = "numpy"} :')
    assert _select(text, conv_algo="direct")["conv_weight"] == {"algo": "im2col", "algo_wgrad": "im2col"}


def test_tr_train_passes_conv_algo_on():
    from tr_mlir.tools.train_options import TRAINING_KEYS, build_parser, training_options

    args = build_parser().parse_args(["--conv-algo", "numpy"])
    assert training_options(args)["conv_algo"] == "numpy"
    assert "conv_algo" not in training_options(build_parser().parse_args([]))
    assert "conv_algo" in TRAINING_KEYS  # a resumed run keeps the checkpoint's


def test_a_cuda_plan_records_auto_and_its_kernels_accept_it():
    from tr_mlir.lowering.cuda import emulator as emu
    from tr_mlir.lowering.cuda.backend import CudaBackend

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    task = _trained("resnet_tiny", (8, 8, 1), steps=1, fuse=True, device=CudaBackend(emu.EmulatedDevice()))
    mix = conv_algorithms(find_program(task.module)[1])
    assert set(mix["fwd"]) == {"auto"} and set(mix["wgrad"]) == {"auto"}
    assert all(np.isfinite(p).all() for _, p in task.parameters())
    with pytest.raises(TrMlirError, match="selects CPU kernels; target cuda has its implicit GEMM"):
        Task("resnet_tiny", (8, 8, 1), 10, 8, fuse=True, conv_algo="direct",
             device=CudaBackend(emu.EmulatedDevice())).compile()
    # a forced Winograd variant runs the CUDA Winograd kernels (lowering/cuda/winograd.py) with
    # their planned scratch, and trains like the CPU's Winograd (fp32 rounding apart)
    gpu = _trained("resnet_tiny", (8, 8, 1), steps=2, fuse=True, conv_algo="winograd_4x4_3x3",
                   device=CudaBackend(emu.EmulatedDevice()))
    mix = conv_algorithms(find_program(gpu.module)[1])
    assert "winograd_4x4_3x3" in mix["fwd"] and "winograd_4x4_3x3" in mix["wgrad"]
    cpu = _trained("resnet_tiny", (8, 8, 1), steps=2, fuse=True, conv_algo="winograd_4x4_3x3")
    for (name, a), (_, b) in zip(gpu.parameters(), cpu.parameters()):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4, err_msg=name)
