"""Batch-norm statistics written by the conv: the ``conv_fwd`` kernel's ``sum`` / ``sq_sum``
outputs (lowering/cpu/conv_stats.py, the Winograd output pass of lowering/cpu/_cwinograd.py), the
BN forward kernels reading them, and the pass ``memplan-fuse-bn-stats`` that connects the two.

* The statistics against float64 sums of the conv's output, on every path that writes them: the
  compiled Winograd forward (F(2x2, 3x3) and F(4x4, 3x3), partial edge tiles, one and two threads,
  the split-components path of 512-channel layers), the NumPy Winograd (``TR_MLIR_CC=0``), AMP's
  fp16 output, and the other algorithms' pass after the conv; y itself unchanged to the bit.
* Accuracy far from zero: a mean of 10^4 standard deviations keeps the variance to fp32 rounding.
* The BN forward kernels from the conv's statistics against PyTorch's training-mode batch norm.
* Reruns bit-identical; the compiled path the same bits on one and two threads (the plan's parts,
  and fixed blocks on the split-components path).
* The pass in a compiled ResNet: which pairs it fuses, and a training step against PyTorch is
  covered by tests/test_runtime_torch.py (Winograd nets, fused by default).

Layouts NHWC, weights KRSC.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

import tr_mlir
from tr_mlir import blueprint as bp
from tr_mlir.compile import make_context
from tr_mlir.dialects.memplan import ProgramOp
from tr_mlir.lowering.cpu import KERNELS, conv_stats, winograd
from tr_mlir.lowering.cpu.conv import conv_geom

F32, F16 = np.float32, np.float16


def _conv(x, w, algo, stats: bool, p: int = 1):
    """``conv_fwd`` of x and w (k = 3 stride 1 unless w says otherwise) as ``algo``; returns
    (y, sum, sq_sum) (the last two None without ``stats``)."""
    spec = KERNELS["conv_fwd"]
    k = w.shape[1]
    g = conv_geom(x.shape, w.shape, k, 1, p, 1)
    y = np.full(g.y_shape, np.nan, x.dtype)
    arrays = {"x": x, "w": w, "y": y}
    if stats:
        arrays["sum"] = np.full((1, 1, 1, w.shape[0]), np.nan, F32)
        arrays["sq_sum"] = np.full((1, 1, 1, w.shape[0]), np.nan, F32)
    params = {"k": k, "s": 1, "p": p, "groups": 1, "algo": algo, "bn_stats": stats}
    ws = {n: np.zeros(s, d) for n, (s, d) in spec.workspace_shapes(arrays, **params).items()}
    spec.bind({**arrays, **ws}, params)()
    return y, arrays.get("sum"), arrays.get("sq_sum")


def _reference(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y64 = y.reshape(-1, y.shape[-1]).astype(np.float64)
    mean = y64.mean(axis=0)
    return y64.sum(axis=0), ((y64 - mean) ** 2).sum(axis=0)


def _check_stats(y, s, q, tol: float = 1.2e-6) -> None:
    """sum and sq_sum against float64 sums of y: the Winograd output transform's fp32 partial per
    tile (at most 16 terms: about 16 units of 2^-24 at worst) and the final fp32 rounding."""
    rs, rq = _reference(y)
    n = y.size // y.shape[-1]
    # sum: relative to the sum of magnitudes (the sum itself may be near 0)
    scale = np.abs(y.reshape(-1, y.shape[-1]).astype(np.float64)).sum(axis=0)
    assert np.all(np.abs(s.reshape(-1) - rs) <= tol * scale + 1e-30), "sum"
    assert np.all(np.abs(q.reshape(-1) - rq) <= tol * np.abs(rq) + 1e-12 * n), "sq_sum"


CASES = [  # (N, H, W, C, K, algo)
    (4, 8, 8, 16, 16, "winograd_2x2_3x3"),
    (3, 9, 7, 16, 24, "winograd_4x4_3x3"),  # partial edge tiles, both sides
    (1, 10, 8, 8, 64, "winograd_4x4_3x3"),  # one image: the sums of few tiles (a review's worst case)
    (5, 6, 6, 32, 40, "winograd_2x2_3x3"),  # odd batch: uneven parts
    (2, 4, 4, 512, 512, "winograd_2x2_3x3"),  # U of 4M elements: the split-components path
    (4, 8, 8, 16, 16, "im2col"),
    (3, 7, 7, 3, 8, "direct"),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[5]}-{c[0]}x{c[1]}x{c[2]}x{c[3]}-{c[4]}")
def test_conv_statistics_match_float64_and_leave_y_unchanged(case, threads):
    n, h, w_, c, k, algo = case
    rng = np.random.default_rng(len(algo) + c)
    x = (rng.standard_normal((n, h, w_, c)) + 0.5).astype(F32)
    w = (rng.standard_normal((k, 3, 3, c)) / np.sqrt(9 * c)).astype(F32)
    with threadpool_limits(threads):
        y0, _, _ = _conv(x, w, algo, False)
        y, s, q = _conv(x, w, algo, True)
    assert y.tobytes() == y0.tobytes()
    _check_stats(y, s, q)


@pytest.mark.parametrize("algo", ["winograd_2x2_3x3", "winograd_4x4_3x3"])
def test_numpy_winograd_and_fp16_output_statistics(algo, monkeypatch):
    """No C compiler (the NumPy Winograd, a pass after it), and AMP: the statistics of the fp16
    output as rounded (not of the fp32 values before the rounding)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 10, 10, 16)).astype(F32)
    w = (rng.standard_normal((16, 3, 3, 16)) / 12).astype(F32)
    y16, s16, q16 = _conv(x.astype(F16), w.astype(F16), algo, True)
    _check_stats(y16, s16, q16)
    monkeypatch.setenv("TR_MLIR_CC", "0")
    y, s, q = _conv(x, w, algo, True)
    _check_stats(y, s, q)


def test_statistics_far_from_zero_keep_the_variance():
    """A conv output whose mean is 10^4 of its standard deviations: the pivot (the part's first
    pixel) keeps the cancellation that of the spread, not of the mean."""
    rng = np.random.default_rng(7)
    x = (1.0 + 1e-4 * rng.standard_normal((4, 8, 8, 16))).astype(F32)
    w = (rng.standard_normal((16, 3, 3, 16)) / 12).astype(F32)
    y, s, q = _conv(x, w, "winograd_2x2_3x3", True, p=0)
    rs, rq = _reference(y)
    assert np.all(np.abs(q.reshape(-1) - rq) <= 1e-5 * rq), "variance lost to cancellation"


@pytest.mark.parametrize("shape", [(6, 16, 16, 32), (2, 4, 4, 512)], ids=["parts", "split-components"])
def test_bits_fixed_by_shapes_on_one_and_two_threads_and_reruns(shape):
    """The statistics' partial sums follow fixed parts (the plan's, or fixed blocks of the
    split-components output transform), so one and two threads give the same bits, as reruns do."""
    n, h, w_, c = shape
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(F32)
    w = (rng.standard_normal((c, 3, 3, c)) / np.sqrt(9 * c)).astype(F32)
    algo = "winograd_4x4_3x3" if h > 4 else "winograd_2x2_3x3"
    runs = []
    for threads in (1, 2, 2):
        with threadpool_limits(threads):
            runs.append(_conv(x, w, algo, True))
    for y, s, q in runs[1:]:
        assert y.tobytes() == runs[0][0].tobytes()
        assert s.tobytes() == runs[0][1].tobytes() and q.tobytes() == runs[0][2].tobytes()


def test_combine_merges_parts_as_one_pass():
    """Chan's pairwise merge of per-part (pivot-shifted) sums equals the float64 statistics of the
    whole, parts of any sizes and pivots; no part with pixels is a ValueError."""
    rng = np.random.default_rng(11)
    c = 5
    data = rng.standard_normal((37, c)) * 3 + 100
    parts = []
    for lo, hi in ((0, 1), (1, 20), (20, 20), (20, 37)):
        st = np.zeros(1 + 3 * c)
        if hi > lo:
            piv = data[lo]
            st[0], st[1:1 + c] = hi - lo, piv
            st[1 + c:1 + 2 * c] = (data[lo:hi] - piv).sum(0)
            st[1 + 2 * c:] = ((data[lo:hi] - piv) ** 2).sum(0)
        parts.append(st)
    s, q = np.empty(c, F32), np.empty(c, F32)
    conv_stats.combine(parts, s, q)
    np.testing.assert_allclose(s, data.sum(0), rtol=1e-6)
    np.testing.assert_allclose(q, ((data - data.mean(0)) ** 2).sum(0), rtol=1e-6)
    with pytest.raises(ValueError, match="no pixels"):
        conv_stats.combine([np.zeros(1 + 3 * c)], s, q)


def test_kernel_refuses_one_statistic_or_wrong_dtype():
    x = np.zeros((1, 4, 4, 3), F32)
    w = np.zeros((4, 3, 3, 3), F32)
    y = np.zeros((1, 4, 4, 4), F32)
    fwd = KERNELS["conv_fwd"].fn
    with pytest.raises(ValueError, match="both 'sum' and 'sq_sum'"):
        fwd(x, w, y, sum=np.zeros(4, F32), k=3, p=1)
    with pytest.raises(ValueError, match="'sq_sum' of 4 fp32"):
        fwd(x, w, y, sum=np.zeros(4, F32), sq_sum=np.zeros(4, np.float64), k=3, p=1)


@pytest.mark.parametrize("kind", ["bn2d_fwd", "bn2d_relu_fwd", "bn2d_add_relu_fwd"])
def test_bn_forward_from_conv_statistics_matches_torch(kind):
    """The three BN forwards given the conv's statistics: output, saved mean and inv_std, running
    statistics against torch's training-mode ``batch_norm`` (+ ReLU, + the residual add)."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 8, 8, 16)).astype(F32)
    w = (rng.standard_normal((16, 3, 3, 16)) / 12).astype(F32)
    y, s, q = _conv(x, w, "winograd_2x2_3x3", True)
    c = 16
    gamma, beta = (rng.standard_normal(c) * 0.5 + 1).astype(F32), rng.standard_normal(c).astype(F32)
    rm, rv = rng.standard_normal(c).astype(F32), (rng.random(c) + 0.5).astype(F32)
    skip = rng.standard_normal(y.shape).astype(F32)
    out = np.empty_like(y)
    sm, si = np.empty(c, F32), np.empty(c, F32)
    rm2, rv2 = rm.copy(), rv.copy()
    args = dict(x=y, gamma=gamma, beta=beta, running_mean=rm2, running_var=rv2, y=out, save_mean=sm,
                save_istd=si, eps=1e-5, momentum=0.1, sum=s, sq_sum=q)
    if kind == "bn2d_add_relu_fwd":
        args["skip"] = skip
    KERNELS[kind].fn(**args)
    t_rm, t_rv = torch.tensor(rm), torch.tensor(rv)
    ref = torch.nn.functional.batch_norm(torch.tensor(y).permute(0, 3, 1, 2), t_rm, t_rv, torch.tensor(gamma),
                                         torch.tensor(beta), training=True, momentum=0.1, eps=1e-5)
    ref = ref.permute(0, 2, 3, 1)
    if kind == "bn2d_add_relu_fwd":
        ref = ref + torch.tensor(skip)
    if kind != "bn2d_fwd":
        ref = torch.relu(ref)
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-5, atol=1e-5)
    y64 = y.reshape(-1, c).astype(np.float64)
    np.testing.assert_allclose(sm, y64.mean(0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(si, 1 / np.sqrt(y64.var(0) + 1e-5), rtol=1e-6)
    np.testing.assert_allclose(rm2, t_rm.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rv2, t_rv.numpy(), rtol=1e-6)


def _train_graph_params(task) -> tuple[list, list[dict]]:
    prog = next(o for o in task.module.walk() if isinstance(o, ProgramOp))
    graph = next(g for g in prog.graphs() if g.graph_name == "train")
    nodes = [n for b in graph.buckets().values() for n in b.nodes()]
    params = [{k: v for k, v in d.data.items()} for d in graph.params.data]
    return nodes, params


def test_pass_fuses_the_winograd_convs_of_a_residual_net():
    """A CIFAR-style residual net under the cost rule: every conv whose forward runs Winograd and
    whose output a BN forward reads next gets ``bn_stats``; its BN takes the two extra inputs; the
    strided and 1x1 convs (im2col, pointwise) keep their BN's own pass. ``conv_algo='im2col'``
    fuses nothing."""
    net = bp.seq(bp.cbr(64, 3, 1, 1), bp.block(64, bp.BlockStyle.RESNET_3_3),
                 bp.block(128, bp.BlockStyle.RESNET_3_3_DS), bp.gap_fc(10, True))
    counts = {}
    for algo in ("auto", "im2col"):
        task = tr_mlir.Task(net, (8, 8, 3), 10, 4, conv_algo=algo).compile()
        nodes, params = _train_graph_params(task)
        fused = [n for n in nodes if n.param >= 0 and "bn_stats" in params[n.param]]
        stats_bns = [n for n in nodes if n.op.startswith("BN2D") and n.op.endswith("FWD")
                     and len(n.inputs) in (9, 10)]
        assert all(params[n.param]["algo"].data.startswith("winograd") for n in fused)
        assert len(fused) == len(stats_bns)
        for conv in fused:
            assert any(b.inputs[0] == conv.outputs[0] and b.inputs[-2:] == conv.outputs[1:3] for b in stats_bns)
        counts[algo] = len(fused)
    assert counts == {"auto": 3, "im2col": 0}, counts



def _lit_model_program():
    """The lit test's first model compiled (memplan-compile, Winograd forced): (module, program)."""
    from pathlib import Path

    from xdsl.parser import Parser

    from tr_mlir.passes.memplan_compile import MemplanCompilePass

    text = (Path(__file__).parent.parent / "lit_tests/memplan/memplan_fuse_bn_stats.mlir").read_text()
    module = Parser(make_context(), text.split("// -----")[0]).parse_module()
    MemplanCompilePass(batch_size=4, train_size=8, val_size=4, conv_algo="winograd_2x2_3x3").apply(
        make_context(), module)
    return module, next(o for o in module.walk() if isinstance(o, ProgramOp))


@pytest.mark.parametrize("edit,message", [
    (lambda ins: ins[:-1], "has 8 inputs, expected 7 or 9 (sum and sq_sum come together)"),
    (lambda ins: (*ins[:-2], ins[-1], ins[-2]), "expected the sum and sq_sum outputs of the conv"),
    (lambda ins: (*ins[:-2], ins[1], ins[2]), "expected the sum and sq_sum outputs of the conv"),
], ids=["one-statistic", "swapped", "other-tensors"])
def test_verifier_refuses_statistics_not_from_the_conv(edit, message):
    """A program whose BN forward reads statistics that are not its conv's bound sum / sq_sum is
    refused when verified (every compile, tr-opt), naming the graph, bucket and node: it would
    train on stale values without an error."""
    from dataclasses import replace

    from xdsl.rewriter import Rewriter
    from xdsl.utils.exceptions import VerifyException

    from tr_mlir.dialects.memplan import NodesOp

    module, program = _lit_model_program()
    module.verify()
    graph = next(g for g in program.graphs() if g.graph_name == "train")
    gid, bucket = next((k, b) for k, b in graph.buckets().items() if k.value == "first_layer_fwd_a")
    nodes = bucket.nodes()
    assert nodes[2].op == "BN2D_RELU_FP32_FWD" and len(nodes[2].inputs) == 9
    nodes[2] = replace(nodes[2], inputs=tuple(edit(nodes[2].inputs)))
    Rewriter.replace_op(bucket, NodesOp(gid, nodes))
    with pytest.raises(VerifyException, match=r"@train \(first_layer_fwd_a\): node 2 'BN2D_RELU_FP32_FWD'") as e:
        program.verify()
    assert message in str(e.value)
