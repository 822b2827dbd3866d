"""Fuzzing of the BluePrint front end and the compiler (issue 15), with ``hypothesis``.

Every example is a random BluePrint written as DSL source (``seq(conv(8, 3, 1, 1), relu(), ...)``,
printed with a failing example, so it can be pasted into a test): every factory of
:mod:`tr_mlir.blueprint`, nested ``seq`` / ``add2`` / ``repeat`` / ``block`` / ``mbconv``, ``None``
children, arguments mostly in range and sometimes not (0, negative, a bool or a float where an int
is expected, values beyond 64 bits), a random input shape (square or not, 1 to 16 pixels a side),
class count, ``fuse`` and ``amp``. Then:

* building the BluePrint and compiling it (:func:`tr_mlir.compile.compile`: ArchPlan, memory plan,
  the module verifier, which checks the plan) either succeeds or raises a clean error: a
  :class:`~tr_mlir.blueprint.BluePrintError` or an xDSL diagnostic naming the op, never another
  exception;
* a compiled ArchPlan reads back from its ArchPlan YAML as the same YAML;
* for a sample of the compiled ones (:data:`TRAIN_SHARE`), one :meth:`tr_mlir.Task.train_step`
  (same seed, same parameters, same batch) gives a finite loss, and the fused fp32 model the unfused
  fp32 model's loss and parameters to :data:`FP32_TOL`, the AMP model (fused or not) its loss to
  :data:`AMP_TOL`.

Modes: CI runs :data:`CI_EXAMPLES` examples, derandomized (the same examples every run);
``TR_MLIR_FUZZ_EXAMPLES=N`` runs N random examples instead (a failure prints the
``@reproduce_failure`` blob to replay it). Every failure found became a named regression test
below the fuzz test.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import event as _event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from xdsl.utils.exceptions import DiagnosticException

import tr_mlir
from tr_mlir import blueprint
from tr_mlir.archplan_yaml import from_yaml, to_yaml
from tr_mlir.blueprint import BluePrintError
from tr_mlir.compile import arch_plan, compile

EXAMPLES_ENV = "TR_MLIR_FUZZ_EXAMPLES"
CI_EXAMPLES = 100
"""Examples in CI (about 15 s); ``TR_MLIR_FUZZ_EXAMPLES`` overrides."""

_LONG = os.environ.get(EXAMPLES_ENV)
FUZZ = settings(max_examples=int(_LONG) if _LONG else CI_EXAMPLES, derandomize=not _LONG, deadline=None,
                database=None, print_blob=True, phases=[p for p in Phase if p is not Phase.explain],
                suppress_health_check=[HealthCheck.too_slow])

TRAIN_SHARE = 4
"""One compiled example in TRAIN_SHARE (as drawn) also trains one step, fused, unfused and AMP."""

FP32_TOL = 1e-5
"""Fused vs unfused fp32: loss and parameters after one step, relative (designed bit-identical)."""

AMP_TOL = 2e-2
"""AMP vs fp32: the loss of the first step, relative (fp16 features and weights)."""

BATCH = 3
"""Samples per step (and the dataset sizes the examples compile for)."""

NAMESPACE = {name: getattr(blueprint, name) for name in blueprint.__all__}


# --------------------------------------------------------------------------------------
# Random BluePrints, as DSL source
# --------------------------------------------------------------------------------------

BAD_INTS = [0, -1, True, 2.0, 2 ** 70]
"""Arguments that a factory refuses where it expects a size (one draw in ten)."""

def event(what: str) -> None:
    """hypothesis' ``event`` (the statistics of ``--hypothesis-show-statistics``), also callable
    from the regression tests."""
    if currently_in_test_context():
        _event(what)



def size(lo: int, hi: int, clean: bool) -> st.SearchStrategy:
    """An int in [lo, hi]; unless ``clean``, one time in ten a value the factories reject or an
    absurd one."""
    if clean:
        return st.integers(lo, hi)
    return st.one_of(*[st.integers(lo, hi)] * 9, st.sampled_from([*BAD_INTS, hi * 1000]))


def call(name: str, *args) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


STYLES2 = ["RESNET_3_3", "RESNET_3_3_DS", "MB_E1_K3", "MB_E1_K3_DS", "MB_E6_K3", "MB_E6_K3_DS"]
STYLES3 = ["RESNET_1_3_1", "RESNET_1_3_1_DS"]


FIRST = ["conv", "cbr", "conv_bn_relu", "cbrp", "fc", "block2", "group_conv"]
"""Layers that may come first (the seed's first-layer rule), one of which starts most networks."""


@st.composite
def leaf(draw, clean: bool, kinds: list[str] | None = None) -> str:
    """One non-container layer (or ``None``), as DSL source; ``clean``: arguments in range."""
    kind = draw(st.sampled_from(kinds or [
        "conv", "conv", "conv_dw", "group_conv", "bn", "relu", "relu", "tanh_act", "silu", "relu6", "leaky_relu",
        "hardswish", "elu", "sigmoid", "dropout", "flatten", "channel_padding", "maxpool", "avgpool", "gap", "fc",
        "identity", "cbr", "cbr", "conv_bn_relu", "cbrp", "gap_fc", "block2", "block2", "block3", "mbconv", "None",
    ]), label="layer")
    def size(lo: int, hi: int) -> st.SearchStrategy:
        return globals()["size"](lo, hi, clean)

    ch, k, s, p = size(1, 12), size(1, 4), size(1, 2), size(0, 2)
    if kind == "conv":
        args = draw(st.tuples(ch, k, s, p))
        return call("conv", *args[:draw(st.integers(2, 4))])
    if kind == "conv_dw":
        return call("conv_dw", *draw(st.tuples(k, s, p)))
    if kind == "group_conv":
        groups, per = draw(size(1, 4)), draw(st.integers(1, 4))
        out = groups * per if isinstance(groups, int) and not isinstance(groups, bool) and groups < 100 else per
        return call("group_conv", out, groups, *draw(st.tuples(k, s, p)))
    if kind == "bn":
        if draw(st.booleans()):
            return "bn()"
        bad = [] if clean else [1.5, -0.1, 0.0, -1e-5, float("inf")]
        return call("bn", draw(st.sampled_from([0.0, 0.1, 0.5, 1.0, *bad[:2]])),
                    draw(st.sampled_from([1e-5, 1e-3, 0.1, *bad[2:]])))
    if kind == "dropout":
        return call("dropout", draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, *([] if clean else [1.0, -0.1])])))
    if kind in ("maxpool", "avgpool"):
        return call(kind, *draw(st.tuples(size(1, 3), size(1, 2), size(0, 1))))
    if kind == "fc" or kind == "gap_fc":
        return call(kind, draw(size(1, 12)), draw(st.booleans()))
    if kind in ("cbr", "conv_bn_relu"):
        args = draw(st.tuples(ch, k, s, p))
        if draw(st.integers(0, 3)) == 0:
            args += (draw(st.sampled_from([0.1, 0.9])), draw(st.sampled_from([1e-5, 1e-3])))
        return call(kind, *args)
    if kind == "cbrp":
        return call("cbrp", *draw(st.tuples(ch, k, s, p, size(1, 3), size(1, 2), size(0, 1))))
    if kind == "block2":
        return f"block({draw(ch)!r}, BlockStyle.{draw(st.sampled_from(STYLES2 + STYLES3[:1]))})"
    if kind == "block3":
        return f"block({draw(ch)!r}, {draw(ch)!r}, BlockStyle.{draw(st.sampled_from(STYLES3 + STYLES2[:1]))})"
    if kind == "mbconv":
        return call("mbconv", draw(st.sampled_from([1, 6] if clean else [1, 6, 2])), draw(ch),
                    draw(st.sampled_from([1, 2] if clean else [1, 2, 3])))
    if kind == "None":
        return "None"
    return f"{kind}()"


def layers(depth: int, clean: bool) -> st.SearchStrategy[str]:
    """A layer tree at most ``depth`` containers deep, as DSL source."""
    if depth == 0:
        return leaf(clean)
    sub = layers(depth - 1, clean)
    return st.one_of(
        leaf(clean), leaf(clean),
        st.lists(sub, min_size=1 if clean else 0, max_size=4).map(lambda xs: f"seq({', '.join(xs)})"),
        st.tuples(st.one_of(sub, st.sampled_from(["None", "identity()"])), sub)
        .map(lambda xs: f"add2({xs[0]}, {xs[1]})"),
        st.tuples(sub, st.sampled_from([1, 2, 3] if clean else [1, 2, 0])).map(lambda x: f"repeat({x[0]}, {x[1]})"),
    )


@st.composite
def network(draw) -> tuple[str, tuple[int, int, int], int, bool, bool]:
    """(BluePrint source, input (H, W, C), num_classes, fuse, amp)."""
    h, w = draw(st.integers(1, 12), label="H"), draw(st.one_of(st.integers(1, 16), st.just(0)), label="W")
    shape = (h, w or h, draw(st.integers(1, 4), label="C"))
    classes = draw(st.integers(1, 10), label="num_classes")
    clean = draw(st.integers(0, 3), label="clean") > 0
    body = draw(st.lists(layers(3, clean), min_size=1, max_size=5), label="body")
    if draw(st.integers(0, 3), label="first") > 0:
        body.insert(0, draw(leaf(clean, FIRST), label="first layer"))
    head = draw(st.sampled_from(["gap_fc", "flatten_fc", "fc", "none"]), label="head")
    if head == "gap_fc":
        body.append(f"gap_fc({classes}, True)")
    elif head == "flatten_fc":
        body += ["flatten()", f"fc({classes}, {draw(st.booleans())})"]
    elif head == "fc":
        body.append(f"fc({classes}, False)")
    fuse, amp = draw(st.booleans(), label="fuse"), draw(st.booleans(), label="amp")
    return f"seq({', '.join(body)})", shape, classes, fuse, amp


# --------------------------------------------------------------------------------------
# The fuzz test
# --------------------------------------------------------------------------------------


def build(source: str):
    """The BluePrint of ``source`` (raises what the factories raise)."""
    return eval(source, dict(NAMESPACE))  # noqa: S307 - our own generated DSL text


def compile_or_refuse(source: str, shape, classes: int, fuse: bool, amp: bool):
    """The compiled module, or ``None`` after a clean refusal (a BluePrintError or a diagnostic)."""
    try:
        net = build(source)
        module = compile(net, shape, num_classes=classes, batch_size=BATCH, train_size=BATCH, val_size=BATCH,
                         fuse=fuse, amp=amp)
    except BluePrintError as e:
        assert str(e), "a BluePrintError without a message"
        event(f"BluePrintError: {str(e).split(':')[0]}")
        return None
    except DiagnosticException as e:
        assert str(e).strip(), "a diagnostic without a message"
        event("diagnostic: " + " ".join(str(e).split()[:4])[:50])
        return None
    event("compiled")
    return net, module


def yaml_round_trip(net, shape, classes: int, fuse: bool, amp: bool) -> None:
    """The ArchPlan of ``net`` reads back from its YAML as the same YAML."""
    plan = arch_plan(net, shape, amp=amp, fuse=fuse, num_classes=classes)
    text = to_yaml(plan)
    again = from_yaml(text, num_classes=classes, amp=amp, fuse=fuse)
    assert to_yaml(again) == text


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference relative to the largest magnitude (1 at least)."""
    scale = max(float(np.max(np.abs(b), initial=0.0)), 1.0)
    return float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0)) / scale


def one_step(net, shape, classes: int, *, fuse: bool, amp: bool, start=None):
    """(loss, parameters after the step, parameters before) of one train_step on a fixed batch."""
    task = tr_mlir.Task(net, shape, classes, BATCH, fuse=fuse, amp=amp, seed=0)
    task.compile(BATCH, BATCH)
    if start is not None:
        mine = task.parameters()
        assert [a.shape for _, a in mine] == [a.shape for _, a in start], "parameters differ in shape"
        task.load_parameters([(n, a) for (n, _), (_, a) in zip(mine, start)])
    before = task.parameters()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, *shape)).astype(np.float32)
    y = rng.integers(0, classes, BATCH)
    loss = task.train_step(x, y)
    return loss, task.parameters(), before


def train_and_compare(net, shape, classes: int) -> None:
    """One step unfused fp32, fused fp32, unfused and fused AMP, from the same parameters."""
    ref_loss, ref_params, start = one_step(net, shape, classes, fuse=False, amp=False)
    assert math.isfinite(ref_loss), f"loss {ref_loss}"
    loss, params, _ = one_step(net, shape, classes, fuse=True, amp=False, start=start)
    assert abs(loss - ref_loss) <= FP32_TOL * max(abs(ref_loss), 1.0), f"fused loss {loss} vs unfused {ref_loss}"
    for (name, a), (_, b) in zip(params, ref_params):
        assert rel(a, b) <= FP32_TOL, f"fused parameter {name} differs from unfused after one step: {rel(a, b):.2e}"
    for fuse in (False, True):
        try:
            loss, _, _ = one_step(net, shape, classes, fuse=fuse, amp=True, start=start)
        except tr_mlir.TaskError as e:  # AMP's own rules (e.g. BN channels a multiple of 8)
            assert "the compiler rejected the model" in str(e), e
            event("AMP refused: " + str(e).split("model: ")[-1][:40])
            continue
        assert math.isfinite(loss), f"AMP loss {loss}"
        assert abs(loss - ref_loss) <= AMP_TOL * max(abs(ref_loss), 1.0), f"AMP loss {loss} vs fp32 {ref_loss}"
    event("trained")


@FUZZ
@given(case=network(), train=st.integers(0, TRAIN_SHARE - 1))
def test_fuzz_blueprints(case, train):
    source, shape, classes, fuse, amp = case
    done = compile_or_refuse(source, shape, classes, fuse, amp)
    if done is None:
        return
    net, _ = done
    yaml_round_trip(net, shape, classes, fuse, amp)
    if train == 0:
        train_and_compare(net, shape, classes)


# --------------------------------------------------------------------------------------
# Regression tests: each failure the fuzzer found
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["seq(mbconv(1, 1, 2), gap_fc(3, True))",
                                    "seq(mbconv(6, 4, 2), mbconv(6, 4, 1), gap_fc(3, True))"])
def test_mbconv_first_trains_fused_as_unfused(source):
    """Found by test_fuzz_blueprints: with an inverted residual without shortcut first (``mbconv``
    on the model input), the unfused model compiled and trained while the fused one was refused
    ("'arch.inv_residual_no_shortcut' op cannot be the first layer"): arch-expand (and
    arch-merge-blocks) fused the first layer into a block. Now its conv stays the first layer."""
    net = build(source)
    module = compile(net, (4, 6, 1), num_classes=3, batch_size=BATCH, train_size=BATCH, val_size=BATCH, fuse=True)
    first = next(iter(module.ops.first.body.block.ops))
    assert first.name in ("arch.cbr", "arch.conv")
    train_and_compare(net, (4, 6, 1), 3)


def test_cbrp_first_compiles_with_cbrp_fusion():
    """The same for ``cbrp=True`` (arch-merge-quadruple): a cbrp on the model input made every model
    starting with ``cbrp(...)`` (the zoo's ResNet-50) fail to compile with ``cbrp=True`` ("'arch.cbrp'
    op cannot be the first layer"). Now the first conv + bn + relu is a cbr, the max pool follows."""
    net = build("seq(cbrp(8, 3, 1, 1, 2, 2, 0), conv(8, 3, 1, 1), bn(), relu(), maxpool(2, 2, 0), gap_fc(3, True))")
    module = compile(net, (8, 8, 1), num_classes=3, batch_size=BATCH, train_size=BATCH, val_size=BATCH, fuse=True,
                     cbrp=True)
    names = [op.name for op in module.ops.first.body.block.ops][:3]
    assert names == ["arch.cbr", "arch.maxpool", "arch.cbrp"]
