"""The extension API (``tr_mlir.extend``) and the example plugin (``examples/plugins/conv_relu.py``).

Every test that registers something does so inside ``extend.scoped()`` (the registries are
process-wide: a plugin loaded here would fuse conv -> relu in every later test's fused models).

* the example plugin trains bit for bit like the unfused model (fp32 and AMP; NumPy path, the
  compiled-C path, the CUDA backend over the emulator), through ``Task(plugins=...)``, and a saved
  Task loads its plugins again;
* ``tr-train --plugin`` trains with it and records it;
* each piece a plugin leaves out gets a message naming it (no descriptor, no YAML form, no operand
  row, no kernel for a node op, a fusion step of an unknown pass, bad op and pass classes, a
  plugin whose code fails);
* the CUDA backend refuses only a model that runs a kernel it lacks, naming the kernel;
* the registry conventions hold for plugin entries as for built-in ones.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from xdsl.irdl import irdl_op_definition, prop_def
from xdsl.passes import ModulePass
from xdsl.dialects.builtin import I64, IntegerAttr

from tr_mlir import Task, TaskError, extend
from tr_mlir.blueprint import bn, conv, gap_fc, group_conv, maxpool, relu, seq
from tr_mlir.dialects import arch
from tr_mlir.errors import PluginError, TrMlirError

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "examples" / "plugins" / "conv_relu.py"


def net(classes: int = 10):
    """conv -> relu twice (one reading the model input, one grouped), a conv -> bn -> relu (a cbr
    when fused, untouched by the plugin), a max pool and the gap_fc head."""
    return seq(conv(8, 3, p=1), relu(), group_conv(8, 2, 3, s=2), relu(), conv(8, 3, p=1), bn(), relu(),
               maxpool(2, 2, 0), gap_fc(classes, True))


def _data(n=48, shape=(10, 10, 3), seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, *shape)).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)


def _train(task: Task, x, y, steps=3):
    b = task.batch_size
    losses = [task.train_step(x[i * b:(i + 1) * b], y[i * b:(i + 1) * b]) for i in range(steps)]
    return losses, task.parameters(), task.buffers(), task.predict(x)


def _assert_same(a, b):
    assert a[0] == b[0]
    for (na, pa), (nb, pb) in zip(a[1] + a[2], b[1] + b[2], strict=True):
        assert na == nb
        assert np.array_equal(pa, pb), na
    assert np.array_equal(a[3], b[3])


def _ops(task: Task) -> list[str]:
    return [op.name for op in task.module.walk() if op.name.startswith("arch.") and op.name != "arch.model"]


@pytest.mark.parametrize("amp", [False, True])
@pytest.mark.parametrize("cc", ["0", "1"])
def test_plugin_trains_bit_for_bit_like_the_unfused_model(monkeypatch, amp, cc):
    monkeypatch.setenv("TR_MLIR_CC", cc)
    x, y = _data()
    unfused = Task(net(), (10, 10, 3), 10, 16, fuse=False, amp=amp, seed=3)
    ref = _train(unfused, x, y)
    with extend.scoped():
        fused = Task(net(), (10, 10, 3), 10, 16, fuse=True, amp=amp, seed=3, plugins=[str(PLUGIN)])
        got = _train(fused, x, y)
        assert _ops(fused)[:3] == ["arch.conv_relu", "arch.conv_relu", "arch.cbr"]
    _assert_same(ref, got)


def test_plugin_on_the_cuda_emulator_and_a_cpu_only_kernel():
    from tr_mlir.lowering.cuda import emulator as emu

    if emu.host_compiler() is None:
        pytest.skip("no host C++ compiler for the kernel emulator")
    from tr_mlir.lowering.cuda.backend import CudaBackend

    x, y = _data(32)
    ref = _train(Task(net(), (10, 10, 3), 10, 16, fuse=False, seed=1, device=CudaBackend(emu.EmulatedDevice())),
                 x, y, steps=2)
    with extend.scoped():
        extend.load_plugin(PLUGIN)

        @extend.kernel("test_cpu_only_fwd", writes=["y"])
        def cpu_only(x, y):
            """A CPU-only kernel no model uses: the CUDA backend must still build."""
            y[...] = x

        extend.register_operands("test_cpu_only_fwd", extend.Operands(("x",), ("y",)))
        got = _train(Task(net(), (10, 10, 3), 10, 16, fuse=True, seed=1, device=CudaBackend(emu.EmulatedDevice())),
                     x, y, steps=2)
    _assert_same(ref, got)


def test_cuda_backend_names_the_kernel_a_model_lacks():
    from tr_mlir.lowering.cuda import emulator as emu
    from tr_mlir.lowering.cuda.backend import CudaBackend, missing_cuda_kernels

    assert missing_cuda_kernels() == []  # every built-in kernel has a CUDA implementation
    with extend.scoped():
        extend.load_plugin(PLUGIN)
        op = _own_kernel_plugin()
        assert missing_cuda_kernels() == ["test_double_bwd", "test_double_fwd"]
        model = custom_model(op.name)
        task = Task(model, (6, 6, 3), 10, 4, fuse=True, device=CudaBackend(emu.EmulatedDevice()))
        with pytest.raises(TaskError, match="kernel .test_double_(fwd|bwd). has no cuda implementation"):
            task.compile()
        # on the CPU the same model trains
        cpu = Task(model, (6, 6, 3), 10, 4, fuse=True)
        x, y = _data(8, (6, 6, 3))
        assert np.isfinite(cpu.train_step(x[:4], y[:4]))


def test_task_saved_with_a_plugin_loads_it_again(tmp_path):
    script = f"""
import numpy as np, sys
from tr_mlir import Task
sys.path.insert(0, {str(REPO / 'tests')!r})
from test_extend import net, _data
x, y = _data(16)
t = Task(net(), (10, 10, 3), 10, 8, fuse=True, plugins=[{str(PLUGIN)!r}])
t.train_step(x[:8], y[:8])
t.save({str(tmp_path / 'ckpt')!r})
np.save({str(tmp_path / 'p.npy')!r}, t.predict(x))
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO)
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert cfg["plugins"] == [str(PLUGIN)]
    load = f"""
import numpy as np
from tr_mlir import Task
import sys; sys.path.insert(0, {str(REPO / 'tests')!r})
from test_extend import _data
x, _ = _data(16)
t = Task.load({str(tmp_path / 'ckpt')!r})
assert 'arch.conv_relu' in str(t.module), 'the loaded task did not fuse with the plugin'
assert np.array_equal(t.predict(x), np.load({str(tmp_path / 'p.npy')!r}))
"""
    subprocess.run([sys.executable, "-c", load], check=True, cwd=REPO)


def test_tr_train_with_a_plugin(tmp_path):
    bp = tmp_path / "net.py"
    bp.write_text("from tr_mlir.blueprint import seq, conv, relu, gap_fc\n"
                  "def build(num_classes):\n"
                  "    return seq(conv(8, 3, p=1), relu(), gap_fc(num_classes, True))\n")
    report = tmp_path / "r.json"
    out = subprocess.run([sys.executable, "-m", "tr_mlir.tools.tr_train", "--plugin", str(PLUGIN), "--blueprint",
                          f"{bp}:build", "--dataset", "digits", "--epochs", "1", "--fuse", "--dump-ir",
                          str(tmp_path / "ir"), "--report-json", str(report)],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ir" / "10-arch-merge-conv-relu.mlir").is_file()
    assert "arch.conv_relu" in (tmp_path / "ir" / "12-arch-mark-first-layer.mlir").read_text()
    assert json.loads(report.read_text())["config"]["plugins"] == [str(PLUGIN)]
    replay = subprocess.run(["sh", str(tmp_path / "ir" / "replay.sh")], capture_output=True, text=True,
                            env={**__import__("os").environ, "PATH": f"{Path(sys.executable).parent}:"
                                                                     f"{__import__('os').environ['PATH']}"})
    assert replay.returncode == 0 and "all passes replay identically" in replay.stdout, replay.stdout[-2000:]
    bad = subprocess.run([sys.executable, "-m", "tr_mlir.tools.tr_train", "--plugin", str(tmp_path / "no.py"),
                          "--dataset", "digits", "--epochs", "1"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 1
    assert "error: --plugin: plugin" in bad.stderr and "no such file" in bad.stderr
    assert "Traceback" not in bad.stderr


# -- what a plugin leaves out ---------------------------------------------------------------


def custom_model(op_name: str):
    """A module holding conv -> ``op_name`` -> gap_fc (6x6x3 input, 10 classes), parsed with the
    registered ops (a Task takes a tree-form module as well as a BluePrint)."""
    from xdsl.parser import Parser

    from tr_mlir.compile import make_context

    text = f"""
arch.model @m input(6, 6, 3) num_classes = 10 {{
^bb0(%x: tensor<?x6x6x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x6x6x3xf32> -> tensor<?x?x?x?xf32>
  %d = {op_name} %c : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %g = arch.gap_fc %d out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %l = arch.softmax_ce %g num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %l : tensor<?x?x?x?xf32>
}}
"""
    return Parser(make_context(), text).parse_module()


def _own_kernel_plugin():
    """Registers arch.test_double (y = 2 x) with its own descriptor, kernel and operand row, but no
    CUDA implementation."""

    @extend.register_op
    @irdl_op_definition
    class TestDoubleOp(extend.LayerOp):
        name = "arch.test_double"
        LAYER_KIND: ClassVar[str] = "TestDouble"
        assembly_format = "$input attr-dict `:` type($input) `->` type($output)"

    def build(ctx):
        lp = extend.LayerPlan()
        out = lp.add("double_output", ctx.feat, ctx.featdt, ctx.inputs[0])
        f = extend.NodePattern(f"TEST_DOUBLE_{ctx.prec}_FWD", ("$x",), (out,), ())
        lp.forward, lp.inference = [f], [f]
        lp.backward = [extend.NodePattern(f"TEST_DOUBLE_{ctx.prec}_BWD", ("$dy",), ("$dx",), ())]
        return lp

    extend.register_descriptor(TestDoubleOp, extend.Descriptor(build, "double_output"))
    extend.register_yaml_spec(TestDoubleOp, extend.LayerSpec(name="double"))

    @extend.kernel("test_double_fwd", writes=["y"])
    def fwd(x, y):
        """y = 2 x."""
        np.multiply(x, 2, out=y)

    @extend.kernel("test_double_bwd", writes=["dx"])
    def bwd(dy, dx):
        """dx = 2 dy."""
        np.multiply(dy, 2, out=dx)

    extend.register_operands("test_double_fwd", extend.Operands(("x",), ("y",)))
    extend.register_operands("test_double_bwd", extend.Operands(("dy",), ("dx",)))
    return TestDoubleOp


def test_own_descriptor_and_kernel_train():
    x, y = _data(8, (6, 6, 3))
    with extend.scoped():
        op = _own_kernel_plugin()
        extend.check()
        task = Task(custom_model(op.name), (6, 6, 3), 10, 4)
        assert "arch.test_double" in str(task._tree)
        assert np.isfinite(task.train_step(x[:4], y[:4]))
    with pytest.raises(Exception, match="arch.test_double"):  # outside the scope the op is gone
        custom_model("arch.test_double")


def _lone_op(name="arch.test_lone", kind="TestLone"):
    """A bare layer op class named ``name`` of kind ``kind`` (not registered)."""
    return irdl_op_definition(type("Lone", (extend.LayerOp,), {
        "name": name, "LAYER_KIND": kind, "__annotations__": {"LAYER_KIND": ClassVar[str]}}))


def test_check_names_each_missing_piece():
    with extend.scoped():
        @extend.register_op
        @irdl_op_definition
        class HalfOp(extend.LayerOp):
            name = "arch.test_half"
            LAYER_KIND: ClassVar[str] = "TestHalf"

        with pytest.raises(PluginError) as e:
            extend.check()
        assert "op 'arch.test_half' has no layer descriptor: tr_mlir.extend.register_descriptor(HalfOp" in str(e.value)
        assert "op 'arch.test_half' has no ArchPlan YAML form" in str(e.value)

        @extend.kernel("test_lonely_fwd", writes=["y"])
        def lonely(x, y):
            """No operand row."""

        with pytest.raises(PluginError, match=r"kernel 'test_lonely_fwd' has no operand row: "
                                              r"tr_mlir.extend.register_operands\('test_lonely_fwd'"):
            extend.check()


def test_descriptor_emitting_a_node_without_kernel_is_named_at_compile():
    with extend.scoped():
        @extend.register_op
        @irdl_op_definition
        class NoKernelOp(extend.LayerOp):
            name = "arch.test_nokernel"
            LAYER_KIND: ClassVar[str] = "TestNoKernel"
            assembly_format = "$input attr-dict `:` type($input) `->` type($output)"

        def build(ctx):
            lp = extend.LayerPlan()
            out = lp.add("nk_output", ctx.feat, ctx.featdt, ctx.inputs[0])
            lp.forward = lp.inference = [extend.NodePattern(f"TEST_NOKERNEL_{ctx.prec}_FWD", ("$x",), (out,), ())]
            lp.backward = [extend.NodePattern(f"TEST_NOKERNEL_{ctx.prec}_BWD", ("$dy",), ("$dx",), ())]
            return lp

        extend.register_descriptor(NoKernelOp, extend.Descriptor(build, "nk_output"))
        task = Task(custom_model(NoKernelOp.name), (6, 6, 3), 10, 4)
        with pytest.raises(TaskError) as e:
            task.compile()
        msg = str(e.value)
        assert "arch.test_nokernel" in msg and "TEST_NOKERNEL_FP32_FWD" in msg
        assert "@tr_mlir.extend.kernel('test_nokernel_fwd'" in msg
        assert "internal error" not in msg and "bug" not in msg


def test_registration_errors_name_the_thing():
    with extend.scoped():
        with pytest.raises(PluginError, match="must subclass tr_mlir.dialects.arch.LayerOp"):
            extend.register_op(int)  # type: ignore[arg-type]
        with pytest.raises(PluginError, match="the arch dialect already has an op 'arch.conv'"):
            extend.register_op(_lone_op("arch.conv", "TestConv2"))
        with pytest.raises(PluginError, match="LAYER_KIND 'Conv' is already the kind of 'arch.conv'"):
            extend.register_op(_lone_op("arch.test_conv2", "Conv"))
        with pytest.raises(PluginError, match="its name must be 'arch.<name>'"):
            extend.register_op(_lone_op("other.x", "TestOther"))
        with pytest.raises(PluginError, match="fusion step 'no-such-pass': no pass of that name is registered"):
            extend.register_fusion_step("no-such-pass")
        with pytest.raises(PluginError, match="'nowhere' is not a fusion step"):
            extend.register_fusion_step("arch-expand", after="nowhere")

        @dataclass(frozen=True)
        class BadName(ModulePass):
            name = "Bad_Name"

            def apply(self, ctx, op):
                pass

        with pytest.raises(PluginError, match="lower-case words joined by '-'"):
            extend.register_pass(BadName)

        @dataclass(frozen=True)
        class Dup(ModulePass):
            name = "arch-expand"

            def apply(self, ctx, op):
                pass

        with pytest.raises(PluginError, match="a pass named 'arch-expand' already exists"):
            extend.register_pass(Dup)
        with pytest.raises(PluginError, match="arch.relu and arch.relu both have|both have a property"):
            extend.fused_op("arch.test_two_convs", [arch.ConvOp, arch.ConvOp], layer_kind="TestTwoConvs")
        with pytest.raises(PluginError, match="already has an operand row"):
            extend.register_operands("conv_fwd", extend.Operands(("x",), ("y",)))
        with pytest.raises(PluginError, match="no kernel 'nope_fwd' is registered"):
            extend.register_cuda_kernel("nope_fwd", lambda ops: None)


def test_plugin_errors_name_the_plugin_and_line(tmp_path):
    with extend.scoped():
        with pytest.raises(PluginError, match="plugin '.*missing.py': no such file"):
            extend.load_plugin(tmp_path / "missing.py")
        with pytest.raises(PluginError, match="plugin 'no_such_module_xyz': no such file or importable module"):
            extend.load_plugin("no_such_module_xyz")
        broken = tmp_path / "broken.py"
        broken.write_text("from tr_mlir import extend\n\nraise RuntimeError('boom')\n")
        with pytest.raises(PluginError, match=r"broken.py:3: RuntimeError: boom"):
            extend.load_plugin(broken)
        syntax = tmp_path / "syntax.py"
        syntax.write_text("def f(:\n")
        with pytest.raises(PluginError, match=r"syntax.py:1: syntax error"):
            extend.load_plugin(syntax)
        incomplete = tmp_path / "incomplete.py"
        incomplete.write_text(
            "from typing import ClassVar\nfrom xdsl.irdl import irdl_op_definition\nfrom tr_mlir import extend\n\n"
            "@extend.register_op\n@irdl_op_definition\nclass HalfOp(extend.LayerOp):\n"
            "    name = 'arch.test_incomplete'\n    LAYER_KIND: ClassVar[str] = 'TestIncomplete'\n")
        with pytest.raises(PluginError, match="'arch.test_incomplete' has no layer descriptor"):
            extend.load_plugin(incomplete)
        with pytest.raises(TaskError, match="Task: plugin '.*missing.py': no such file"):
            Task(net(), (10, 10, 3), 10, 4, plugins=[str(tmp_path / "missing.py")])
    assert issubclass(PluginError, TrMlirError) and issubclass(TaskError, TrMlirError)


def test_fused_op_derives_rules_and_traits():
    with extend.scoped():
        mod = extend.load_plugin(PLUGIN)
        op = mod.ConvReluOp
        assert op.CHAIN == (arch.ConvOp, arch.ReluOp)
        assert op.has_trait(arch.IsFused) and op.has_trait(arch.AlignsAmpInput)
        assert not op.has_trait(arch.ReadsSpatialMap)
        assert set(op.get_irdl_definition().properties) == {"out_ch", "k", "s", "p", "groups"}
        # a chain of gap -> fc is a feature producer and reads no spatial map; flatten -> fc reads one
        gf = extend.fused_op("arch.test_flatten_fc", [arch.FlattenOp, arch.FcOp], layer_kind="TestFlattenFc")
        assert gf.has_trait(arch.ReadsSpatialMap) and gf.has_trait(arch.FeatureProducer)
        # prefixes name two ops' properties apart
        two = extend.fused_op("arch.test_conv_pool", [arch.ConvOp, arch.MaxPoolOp], layer_kind="TestConvPool",
                              prefixes=("conv", "pool"))
        assert {"conv_k", "pool_k", "conv_out_ch", "pool_s"} <= set(two.get_irdl_definition().properties)


def test_registry_conventions_hold_for_plugin_entries():
    """The checks of tests/test_registries.py and tests/test_memplan_phases.py, on the plugin's."""
    from tr_mlir.dialects import get_all_dialects
    from tr_mlir.passes import PASSES, get_all_passes
    from tr_mlir.passes._descriptors import DESCRIPTORS

    with extend.scoped():
        extend.load_plugin(PLUGIN)
        dialect = get_all_dialects()["arch"]()
        assert "arch.conv_relu" in [o.name for o in dialect.operations]
        assert all(o.name.startswith("arch.") for o in dialect.operations)
        cls = get_all_passes()["arch-merge-conv-relu"]()
        assert issubclass(cls, ModulePass) and cls.name == "arch-merge-conv-relu" and cls.__doc__
        assert PASSES["arch-merge-conv-relu"] is cls
        assert all(c in DESCRIPTORS for c in arch.layer_ops() if c is not arch.BnOp)
        extend.check()
    assert "arch-merge-conv-relu" not in PASSES


def test_fusion_step_can_be_opt_in():
    from tr_mlir.passes.arch_plan import plan_steps

    with extend.scoped():
        extend.register_fused_chain("arch.test_bn_relu", [arch.Bn2dOp, arch.ReluOp], layer_kind="TestBnRelu",
                                    pass_name="arch-merge-test-bn-relu", default=False)
        assert "arch-merge-test-bn-relu" not in plan_steps(True, False)
        assert "arch-merge-test-bn-relu" in plan_steps(True, False, extra="arch-merge-test-bn-relu")
        with pytest.raises(PluginError, match="extra names \\['nope'\\]"):
            plan_steps(True, False, extra="nope")


def test_bn_relu_after_add_trains_bit_for_bit():
    """A second chain (bn -> relu, which arch-merge-triple never sees after an add), opt-in."""
    from tr_mlir.blueprint import add2, identity

    block = seq(conv(8, 3, p=1), bn(), relu(), add2(identity(), seq(conv(8, 3, p=1))), bn(), relu(),
                gap_fc(10, True))
    x, y = _data(32, (6, 6, 3))
    ref = _train(Task(block, (6, 6, 3), 10, 8, fuse=False, seed=2), x, y)
    with extend.scoped():
        extend.register_fused_chain("arch.test_bn_relu", [arch.Bn2dOp, arch.ReluOp], layer_kind="TestBnRelu",
                                    pass_name="arch-merge-test-bn-relu")
        task = Task(block, (6, 6, 3), 10, 8, fuse=True, seed=2)
        got = _train(task, x, y)
        assert "arch.test_bn_relu" in _ops(task)
    _assert_same(ref, got)


_ = (IntegerAttr, I64, prop_def, maxpool)


def test_installed_plugins_load_through_their_entry_point(monkeypatch):
    """A package's ``tr_mlir.plugins`` entry point is loaded by every tool (load_plugins)."""
    import importlib.metadata as md

    class EP:
        name, value, group = "conv_relu_example", "tr_mlir_test_ep_plugin", "tr_mlir.plugins"
        module = "tr_mlir_test_ep_plugin"

    sys.path.insert(0, str(REPO / "examples" / "plugins"))
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    shutil.copy(PLUGIN, tmp / "tr_mlir_test_ep_plugin.py")
    monkeypatch.syspath_prepend(str(tmp))
    real = md.entry_points
    monkeypatch.setattr(md, "entry_points", lambda **kw: [EP()] if kw.get("group") == "tr_mlir.plugins" else real(**kw))
    from tr_mlir.passes import PASSES

    with extend.scoped():
        extend.load_plugins([])
        assert "arch-merge-conv-relu" in PASSES
    sys.path.remove(str(REPO / "examples" / "plugins"))
    sys.modules.pop("tr_mlir_test_ep_plugin", None)


def test_fused_chain_keeps_optional_properties():
    """fc without bias fuses (an optional property stays optional) and trains like the unfused model."""
    from tr_mlir.blueprint import fc, flatten

    model = seq(flatten(), fc(16, False), relu(), fc(12, True), relu(), fc(10, True))
    x, y = _data(16, (4, 4, 2))
    ref = _train(Task(model, (4, 4, 2), 10, 8, fuse=False), x, y, steps=2)
    with extend.scoped():
        extend.register_fused_chain("arch.test_fc_relu", [arch.FcOp, arch.ReluOp], layer_kind="TestFcRelu",
                                    pass_name="arch-merge-test-fc-relu")
        task = Task(model, (4, 4, 2), 10, 8, fuse=True)
        got = _train(task, x, y, steps=2)
        lines = [ln for ln in str(task.module).splitlines() if "= arch.test_fc_relu" in ln]
        assert len(lines) == 2 and "bias" not in lines[0] and " bias " in lines[1]
    _assert_same(ref, got)


def test_one_plugin_under_two_spellings_loads_once(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO / "examples" / "plugins"))
    with extend.scoped():
        a = extend.load_plugin("examples/plugins/conv_relu.py")
        assert extend.load_plugin(PLUGIN) is a
        assert extend.load_plugin("./examples/plugins/../plugins/conv_relu.py") is a
        assert extend.load_plugin("conv_relu") is a  # the module name of the same file
        assert extend.loaded_plugins() == (str(PLUGIN),)
        with pytest.raises(PluginError, match="is a directory"):
            extend.load_plugin(str(tmp_path) + "/")
    sys.modules.pop("conv_relu", None)


def test_plugin_code_failing_later_is_the_plugins_error(tmp_path):
    """An exception in a plugin's descriptor build (at compile) names the plugin's file and line in
    tr-opt, not 'internal error'; a descriptor naming no output tensor gets a diagnostic."""
    plugin = tmp_path / "bad_build.py"
    plugin.write_text(
        "from typing import ClassVar\nfrom xdsl.irdl import irdl_op_definition\nfrom tr_mlir import extend\n\n"
        "@extend.register_op\n@irdl_op_definition\nclass BadOp(extend.LayerOp):\n"
        "    name = 'arch.test_bad_build'\n    LAYER_KIND: ClassVar[str] = 'TestBadBuild'\n"
        "    assembly_format = '$input attr-dict `:` type($input) `->` type($output)'\n\n"
        "def build(ctx):\n    return ctx.no_such_field\n\n"
        "extend.register_descriptor(BadOp, extend.Descriptor(build, 'bad_output'))\n"
        "extend.register_yaml_spec(BadOp, extend.LayerSpec(name='bad'))\n")
    model = tmp_path / "m.mlir"
    model.write_text("""arch.model @m input(6, 6, 3) num_classes = 10 {
^bb0(%x: tensor<?x6x6x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x6x6x3xf32> -> tensor<?x?x?x?xf32>
  %d = arch.test_bad_build %c : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %g = arch.gap_fc %d out_features = 10 bias : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  %l = arch.softmax_ce %g num_classes = 10 : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
  arch.output %l : tensor<?x?x?x?xf32>
}
""")
    tr_opt = [sys.executable, "-m", "tr_mlir.tools.tr_opt", "--load-plugin", str(plugin), str(model), "-p",
              "tr-compile{batch_size=4 train_size=8 val_size=8}"]
    out = subprocess.run(tr_opt, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 1
    assert f"tr-opt: error: plugin '{plugin}': {plugin}:13: AttributeError" in out.stderr, out.stderr
    assert "internal error" not in out.stderr
    plugin.write_text(plugin.read_text().replace(
        "def build(ctx):\n    return ctx.no_such_field\n",
        "def build(ctx):\n    lp = extend.LayerPlan()\n    y = lp.add('y', ctx.feat, ctx.featdt, ctx.inputs[0])\n"
        "    f = extend.NodePattern(f'IDENTITY_{ctx.prec}_FWD', ('$x',), (y,), ())\n"
        "    lp.forward = lp.inference = [f]\n"
        "    lp.backward = [extend.NodePattern(f'IDENTITY_{ctx.prec}_BWD', ('$dy',), ('$dx',), ())]\n"
        "    return lp\n"))
    out = subprocess.run(tr_opt, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 1
    assert "its descriptor names output tensor 'bad_output', which is not one of its layer plan's tensors" in out.stderr


def test_kernel_declares_its_operand_row():
    with extend.scoped():
        @extend.kernel("test_row_fwd", writes=["y"], operands=extend.Operands(("x",), ("y",)))
        def row(x, y):
            """y = x."""
            y[...] = x

        from tr_mlir.lowering.operands import OPERANDS

        assert OPERANDS["test_row_fwd"] == extend.Operands(("x",), ("y",))
        extend.check()
        with pytest.raises(PluginError, match=r"names \['xx'\], which are not array arguments of bad"):
            @extend.kernel("test_badrow_fwd", writes=["y"], operands=extend.Operands(("xx",), ("y",)))
            def bad(x, y):
                """A row naming an argument the function lacks."""
        with pytest.raises(PluginError, match="not array arguments"):
            extend.check()
        with pytest.raises(PluginError, match="registered twice"):
            @extend.kernel("conv_fwd", writes=["y"])
            def again(x, y):
                """conv_fwd exists."""


# -- a residual block declared by its spec ----------------------------------------------------

_RES_1_3 = extend.ResidualSpec(
    "1x1-3x3 block",
    (extend.ConvStage("mid_ch", 1, 0), extend.ConvStage("out_ch", 3, 1, stride="stride", relu=False)),
    extend.Shortcut.PROJECTION, post_relu=True)
"""conv1x1(mid) bn relu conv3x3(out, s) bn, a projection shortcut, add, relu: no built-in block."""

_RES_1_3_ID = extend.ResidualSpec(
    "1x1-3x3 identity block",
    (extend.ConvStage("mid_ch", 1, 0), extend.ConvStage(extend.IN, 3, 1, relu=False)),
    extend.Shortcut.IDENTITY, post_relu=True)
"""The same with an identity shortcut: the 3x3 has the input's width (no out_ch property)."""


def _res_1_3_net(identity: bool):
    """cbr, then the 1x1-3x3 block written with add2 (shortcut first), then the head."""
    from tr_mlir.blueprint import add2, cbr
    from tr_mlir.blueprint import identity as identity_layer

    if identity:
        block = add2(identity_layer(), seq(conv(6, 1), bn(), relu(), conv(8, 3, p=1), bn()))
    else:
        block = add2(seq(conv(12, 1, s=2), bn()), seq(conv(6, 1), bn(), relu(), conv(12, 3, s=2, p=1), bn()))
    return seq(cbr(8, 3, 1, 1), block, relu(), gap_fc(10, True))


@pytest.mark.parametrize("spec, syntax, out", [
    (_RES_1_3, r"mid_ch = 6 out_ch = 12 stride = 2 ", (3, 3, 12)),
    (_RES_1_3_ID, r"mid_ch = 6 (:|\{)", (6, 6, 8)),
])
def test_residual_block_from_its_spec_merges_and_trains_bit_for_bit(spec, syntax, out):
    """register_residual_block: the op (shape rule from the spec, syntax), arch-merge-blocks fusing
    the spec's subgraph into it, and its derived descriptor training like the unfused block."""
    identity = spec.shortcut is extend.Shortcut.IDENTITY
    x, y = _data(32, (6, 6, 3))
    ref = _train(Task(_res_1_3_net(identity), (6, 6, 3), 10, 8, fuse=False, seed=4), x, y)
    with extend.scoped():
        op = extend.register_residual_block("arch.test_res_1_3", spec, layer_kind="TestRes13")
        extend.check()
        assert op.RESIDUAL is spec and issubclass(op, extend.ResidualBlockOp)
        task = Task(_res_1_3_net(identity), (6, 6, 3), 10, 8, fuse=True, seed=4)
        got = _train(task, x, y)
        assert _ops(task)[:2] == ["arch.cbr", "arch.test_res_1_3"]
        block = next(o for o in task.module.walk() if isinstance(o, op))
        assert block.infer_hwc((6, 6, 8)) == out and block.channels_after(8) == out[2]
        assert str(block.output.type) == f"tensor<?x{out[0]}x{out[1]}x{out[2]}xf32>"
        assert re.search(rf"arch.test_res_1_3 %\d+ {syntax}", str(task.module))
    _assert_same(ref, got)
    unplugged = Task(_res_1_3_net(identity), (6, 6, 3), 10, 8, fuse=True, seed=4).compile()
    assert "arch.test_res_1_3" not in str(unplugged.module)


def test_residual_block_registration_errors_name_the_property():
    bad = extend.ResidualSpec("bad", (extend.ConvStage("eps", 1, 0),), extend.Shortcut.NONE, post_relu=False)
    with extend.scoped(), pytest.raises(PluginError, match="'eps' cannot name a block property"):
        extend.register_residual_block("arch.test_bad_block", bad, layer_kind="TestBadBlock")
    with pytest.raises(ValueError, match="post-add relu needs a shortcut"):
        extend.ResidualSpec("bad", (extend.ConvStage("out_ch", 1, 0),), extend.Shortcut.NONE, post_relu=True)
    for key in ("input", "output", "RESIDUAL"):  # the op's operands and class fields
        clash = extend.ResidualSpec("bad", (extend.ConvStage(key, 1, 0),), extend.Shortcut.NONE, post_relu=False)
        with extend.scoped(), pytest.raises(PluginError, match=f"'{key}' cannot name a block property"):
            extend.register_residual_block("arch.test_bad_block", clash, layer_kind="TestBadBlock")
    ok = extend.ResidualSpec("ok", (extend.ConvStage("out_ch", 1, 0),), extend.Shortcut.NONE, post_relu=False)
    with extend.scoped(), pytest.raises(PluginError, match="expected the op name as a string"):
        extend.register_residual_block(7, ok, layer_kind="TestBadBlock")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected ConvStage stages in main, got 'conv'"):
        extend.ResidualSpec("bad", ("conv",), extend.Shortcut.NONE, post_relu=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected a Shortcut, got 'identity'"):
        extend.ResidualSpec("bad", (extend.ConvStage("out_ch", 1, 0),), "identity", post_relu=False)  # type: ignore[arg-type]
