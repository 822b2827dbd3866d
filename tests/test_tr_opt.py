"""Tests of the ``tr-opt`` driver (``tr_mlir/tools/tr_opt.py``).

Most tests run :class:`TrOptMain` in-process (``SystemExit`` carries the exit code, ``capsys``
the streams); a few run the console script to check exit codes and the absence of tracebacks
end to end. Never pass ``--disable-verify`` or ``--syntax-highlight`` in-process: xDSL then
patches process-wide state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects import test as xdsl_test
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException, VerifyException

import tr_mlir.passes
from tr_mlir.dialects.arch import ModelOp, OutputOp, ReluOp, SeqOp, YieldOp, nhwc_type
from tr_mlir.tools import opt_parser, tr_opt
from tr_mlir.tools.opt_parser import MAX_INTEGER_WIDTH, MAX_REGION_DEPTH, DominanceError, check_dominance
from tr_mlir.tools.opt_pipeline import PipelineSyntaxError, mlir_pipeline_to_xdsl
from tr_mlir.tools.tr_opt import TrOptMain

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

MODEL = """\
arch.model @m input(8, 8, 3) num_classes = 10 {
^bb0(%x: tensor<?x8x8x3xf32>):
  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>
  %r = arch.relu %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  %dup = arch.relu %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>
  arch.output %r : tensor<?x8x8x8xf32>
}
"""


def tr_opt_script() -> list[str]:
    """The installed console script next to this Python, else ``python -m``."""
    script = Path(sys.executable).with_name("tr-opt")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tr_mlir.tools.tr_opt"]


def run_cli(args: list[str], stdin: str | None = None, env: dict[str, str] | None = None):
    """Run the ``tr-opt`` executable; returns the CompletedProcess (text mode)."""
    full_env = {k: v for k, v in os.environ.items() if k != tr_opt.TRACEBACK_ENV}
    full_env.update(env or {})
    return subprocess.run(
        [*tr_opt_script(), *args], input=stdin, capture_output=True, text=True, timeout=120,
        env=full_env,
    )


def run_main(args: list[str], capsys, main_cls: type[TrOptMain] = TrOptMain):
    """Run the driver in-process: (exit code, stdout, stderr)."""
    try:
        main_cls(args=args).run()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, text: str, name: str = "in.mlir") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------------------
# --pass-pipeline translation
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mlir", "xdsl"),
    [
        ("builtin.module(cse)", "cse"),
        ("builtin.module(cse,dce)", "cse,dce"),
        ("  builtin.module ( cse ,  canonicalize , dce )  ", "cse,canonicalize,dce"),
        ("builtin.module(arch-expand{fuse=true}, cse)", "arch-expand{fuse=true},cse"),
        ("builtin.module(p{a=1 b=x,y}, q)", "p{a=1 b=x,y},q"),
        ('builtin.module(p{s="a, (b)"},q)', 'p{s="a, (b)"},q'),
        ('builtin.module(p{s="say \\"x)\\""})', 'p{s="say \\"x)\\""}'),
        ("builtin.module()", ""),
        ("builtin.module( )", ""),
        ("", ""),
    ],
)
def test_pipeline_translation(mlir: str, xdsl: str) -> None:
    assert mlir_pipeline_to_xdsl(mlir) == xdsl


@pytest.mark.parametrize(
    ("mlir", "message"),
    [
        ("cse,dce", "anchored on 'builtin.module(...)'"),
        ("func.func(cse)", "anchored on 'builtin.module(...)'"),
        ("builtin.module", "anchored on 'builtin.module(...)'"),
        ("builtin.module(func.func(cse))", "nested pass pipelines"),
        ("builtin.module(cse, any(dce))", "nested pass pipelines"),
        ("builtin.module(cse", "missing ')'"),
        ("builtin.module(cse) dce", "unexpected text 'dce'"),
        ("builtin.module(cse,,dce)", "empty pass name"),
        ("builtin.module(cse,)", "empty pass name"),
        ("builtin.module(p{a=1)", "unbalanced '{'"),
        ("builtin.module(p}a)", "unbalanced '}'"),
        ('builtin.module(p{s="x})', "unterminated string"),
    ],
)
def test_pipeline_translation_errors(mlir: str, message: str) -> None:
    with pytest.raises(PipelineSyntaxError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mlir_pipeline_to_xdsl(mlir)


def test_pass_pipeline_matches_p(tmp_path: Path, capsys) -> None:
    src = str(EXAMPLES / "resnet_tiny.mlir")
    code_p, out_p, _ = run_main([src, "-p", "arch-expand{fuse=false},arch-deduce-shapes,cse"], capsys)
    code_pp, out_pp, _ = run_main(
        [src, "--pass-pipeline=builtin.module(arch-expand{fuse=false}, arch-deduce-shapes, cse)"],
        capsys,
    )
    assert code_p == code_pp == 0
    assert out_p == out_pp
    assert "arch.seq" not in out_p and "tensor<?x?x?x?xf32>" not in out_p


def test_both_pipeline_flags_rejected(tmp_path: Path, capsys) -> None:
    code, out, err = run_main(
        [write(tmp_path, MODEL), "-p", "cse", "--pass-pipeline=builtin.module(cse)"], capsys
    )
    assert code == 1 and out == ""
    assert err == "tr-opt: error: use either -p/--passes or --pass-pipeline, not both\n"


def test_passes_run(tmp_path: Path, capsys) -> None:
    code, out, err = run_main([write(tmp_path, MODEL), "-p", "dce"], capsys)
    assert (code, err) == (0, "")
    assert "%dup" not in out and "arch.relu %c" in out


# --------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------


def test_parse_error_is_one_line_plus_context(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, MODEL.replace("arch.relu %c", "arch.relux %c", 1))
    code, out, err = run_main([path], capsys)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"tr-opt: error: {path}:4:8: Operation arch.relux is not registered"
    assert lines[1].startswith("  %r = arch.relux %c")
    assert lines[2] == "       " + "^" * len("arch.relux")
    assert len(lines) == 3


def test_undefined_value_points_at_its_use(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, MODEL.replace("arch.output %r", "arch.output %nope"))
    code, _, err = run_main([path], capsys)
    assert code == 1
    assert err.splitlines()[0] == f"tr-opt: error: {path}:6:15: use of undefined value '%nope'"


def test_verifier_error_names_file_line_op(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, MODEL.replace("k = 3 p = 1", "k = 3 s = 0 p = 1"))
    code, out, err = run_main([path], capsys)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"tr-opt: error: {path}:3:8: 'arch.conv' op expected s >= 1, got 0"
    assert lines[1] == '"builtin.module"() ({'
    assert "| Operation does not verify: 'arch.conv' op expected s >= 1, got 0" in err
    assert "Traceback" not in err


def test_split_input_file_line_numbers(tmp_path: Path, capsys) -> None:
    bad = MODEL.replace("k = 3 p = 1", "k = 3 s = 0 p = 1")
    path = write(tmp_path, f"{MODEL}// -----\n{bad}")
    code, out, err = run_main([path, "--split-input-file"], capsys)
    assert code == 1
    assert "arch.model @m" in out  # the first chunk was printed before the failure
    assert err.splitlines()[0].startswith(f"tr-opt: error: {path}:11:8: 'arch.conv' op")
    path2 = write(tmp_path, f"{MODEL}// -----\n{MODEL.replace('arch.relu %c', 'arch.nope %c', 1)}")
    code, _, err = run_main([path2, "--split-input-file"], capsys)
    assert code == 1
    assert err.splitlines()[0].startswith(f"tr-opt: error: {path2}:12:8: Operation arch.nope")


def test_verify_diagnostics_keeps_xdsl_behaviour(tmp_path: Path, capsys) -> None:
    bad = MODEL.replace("k = 3 p = 1", "k = 3 s = 0 p = 1")
    path = write(tmp_path, f"{bad}// -----\n{MODEL}")
    code, out, err = run_main([path, "--split-input-file", "--verify-diagnostics"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("'arch.conv' op expected s >= 1, got 0\n")
    assert "arch.model @m" in out.split("// -----")[1]


def test_parsing_diagnostics_keeps_xdsl_behaviour(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, '"test.op"() {a = 1 : i99999999999} : () -> ()\n')
    code, out, err = run_main([path, "--parsing-diagnostics"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith(f"{path}:1:22\n")
    assert "integer bitwidth is limited to 16777215 bits, got i99999999999" in out


def test_missing_input_file(tmp_path: Path, capsys) -> None:
    missing = str(tmp_path / "nope.mlir")
    code, out, err = run_main([missing], capsys)
    assert code == 1 and out == ""
    assert err == f"tr-opt: error: could not open input file '{missing}': No such file or directory\n"


def test_bad_output_file(tmp_path: Path, capsys) -> None:
    out_path = str(tmp_path / "no" / "such" / "dir.mlir")
    code, _, err = run_main([write(tmp_path, MODEL), "-o", out_path], capsys)
    assert code == 1
    assert err.startswith(f"tr-opt: error: could not open output file '{out_path}'")


def test_any_file_name_is_mlir(tmp_path: Path, capsys) -> None:
    code, out, _ = run_main([write(tmp_path, MODEL, "model.txt")], capsys)
    assert code == 0 and "arch.model @m" in out


@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        (["-p", "nope"], "tr-opt: error: invalid pass pipeline: Unrecognized passes: ['nope']"),
        (["-p", "cse{x=1}"], "tr-opt: error: invalid pass pipeline: pass 'cse': Provided arguments [\"x\"] not"),
        (["-p", "arch-expand{fuse=3}"],
         "tr-opt: error: invalid pass pipeline: pass 'arch-expand': option 'fuse' expects true or false, got 3"),
        (["-p", "arch-plan{num_classes=ten}"],
         "tr-opt: error: invalid pass pipeline: pass 'arch-plan': option 'num_classes' expects an integer, got 'ten'"),
        (["-p", "arch-plan{num_classes}"],
         "tr-opt: error: invalid pass pipeline: pass 'arch-plan': option 'num_classes' needs a value"),
        (["-p", "cse{"], "tr-opt: error: invalid pass pipeline: Expected argument name here (in 'cse{')"),
        (["-p", "cse,,dce"], "tr-opt: error: invalid pass pipeline: Expected pass name here"),
        (["--pass-pipeline=builtin.module(func.func(cse))"],
         "tr-opt: error: invalid pass pipeline: nested pass pipelines (e.g. 'func.func(...)')"),
        (["-t", "nope"], "tr-opt: error: argument -t/--target: invalid choice: 'nope'"),
        (["-t", "mlir{"], "tr-opt: error: invalid target: Expected argument name here (in 'mlir{')"),
        (["--frobnicate"], "tr-opt: error: unrecognized arguments: --frobnicate"),
    ],
)
def test_command_line_errors(tmp_path: Path, capsys, args: list[str], first_line: str) -> None:
    code, out, err = run_main([write(tmp_path, MODEL), *args], capsys)
    assert code == 1 and out == ""
    assert err.splitlines()[0].startswith(first_line)
    assert "Traceback" not in err


def test_version(capsys) -> None:
    code, out, _ = run_main(["--version"], capsys)
    assert code == 0
    assert out.startswith("tr-opt 0.1.0 (tr-mlir) built from xdsl version 0.74")


def test_registries(capsys) -> None:
    main = TrOptMain(args=[])
    assert {"builtin", "func", "arith", "test", "arch"} <= set(main.ctx.registered_dialect_names)
    assert {"cse", "dce", "canonicalize", *tr_mlir.passes.PASSES} == set(main.available_passes)
    assert {"mlir", "archplan-yaml"} <= set(main.available_targets)


def test_binary_input(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bin.mlir"
    path.write_bytes(b'"test.op"() : () -> ()\n\xff\xfe\n')
    code, _, err = run_main([str(path)], capsys)
    assert code == 1
    assert err == f"tr-opt: error: {path}:2: input is not valid UTF-8 text (byte 0xff at offset 23)\n"


def test_empty_input_is_an_empty_module(tmp_path: Path, capsys) -> None:
    code, out, err = run_main([write(tmp_path, "// only a comment\n")], capsys)
    assert (code, out, err) == (0, "builtin.module {\n}\n\n", "")


# --------------------------------------------------------------------------------------
# Pass failures and internal errors
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailingPass(ModulePass):
    """Fails on the first arch.conv with a PassFailedException (the idiomatic way)."""

    name = "test-fail"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        conv = next(o for o in op.walk() if o.name == "arch.conv")
        conv.emit_error("out_ch exceeds the limit", PassFailedException("'arch.conv' op out_ch exceeds the limit"))


@dataclass(frozen=True)
class BuggyPass(ModulePass):
    """A bug: raises KeyError."""

    name = "test-bug"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise KeyError("oops")


@dataclass(frozen=True)
class RecursingPass(ModulePass):
    """Raises RecursionError, as a recursive pass on very deep IR would."""

    name = "test-recursion"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise RecursionError("maximum recursion depth exceeded")


@dataclass(frozen=True)
class BreakDominancePass(ModulePass):
    """Moves the last op before the terminator to the start of the model body."""

    name = "test-break-dominance"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        model = next(o for o in op.walk() if isinstance(o, ModelOp))
        block = model.body.block
        victim = block.last_op.prev_op
        victim.detach()
        block.insert_op_before(victim, block.first_op)


class OptWithTestPasses(TrOptMain):
    """tr-opt with the test passes above."""

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for cls in (FailingPass, BuggyPass, RecursingPass, BreakDominancePass):
            self.register_pass(cls.name, lambda cls=cls: cls)


def test_pass_failure(tmp_path: Path, capsys) -> None:
    code, out, err = run_main([write(tmp_path, MODEL), "-p", "cse,test-fail"], capsys, OptWithTestPasses)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == f"tr-opt: error: {tmp_path / 'in.mlir'}: 'arch.conv' op out_ch exceeds the limit"
    assert lines[1] == "tr-opt: note: in pass 'test-fail'"
    assert "| out_ch exceeds the limit" in err


def test_pass_failure_with_verify_diagnostics(tmp_path: Path, capsys) -> None:
    code, out, err = run_main(
        [write(tmp_path, MODEL), "-p", "test-fail", "--verify-diagnostics"], capsys, OptWithTestPasses
    )
    assert (code, err) == (0, "")
    assert out.startswith("'arch.conv' op out_ch exceeds the limit\n")


def test_dominance_checked_after_each_pass(tmp_path: Path, capsys) -> None:
    code, _, err = run_main(
        [write(tmp_path, MODEL), "-p", "test-break-dominance,cse"], capsys, OptWithTestPasses
    )
    assert code == 1
    lines = err.splitlines()
    # the moved op keeps its parse position
    assert lines[0] == (
        f"tr-opt: error: {tmp_path / 'in.mlir'}:5:10: 'arch.relu' op operand #0 does not "
        "dominate this use: %c is defined later in the same block (by 'arch.conv')"
    )
    assert lines[1] == "tr-opt: note: the IR does not verify after pass 'test-break-dominance'"


def test_internal_error(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv(tr_opt.TRACEBACK_ENV, raising=False)
    code, out, err = run_main([write(tmp_path, MODEL), "-p", "test-bug"], capsys, OptWithTestPasses)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == "tr-opt: internal error: KeyError: 'oops'"
    assert f"tr-opt: note: while running a pass ({tmp_path / 'in.mlir'})" in lines
    assert "tr-opt: note: in pass 'test-bug'" in lines
    assert "please report it" in lines[-1] and "TR_OPT_TRACEBACK=1" in lines[-1]
    assert "Traceback" not in err


def test_internal_error_traceback_on_request(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv(tr_opt.TRACEBACK_ENV, "1")
    code, _, err = run_main([write(tmp_path, MODEL), "-p", "test-bug"], capsys, OptWithTestPasses)
    assert code == 1
    assert err.startswith("Traceback (most recent call last):")
    assert "tr-opt: internal error: KeyError: 'oops'" in err


def test_recursion_error_in_pass(tmp_path: Path, capsys) -> None:
    code, _, err = run_main([write(tmp_path, MODEL), "-p", "test-recursion"], capsys, OptWithTestPasses)
    assert code == 1
    assert err.splitlines()[0] == (
        f"tr-opt: error: {tmp_path / 'in.mlir'}: IR nested too deeply while running a pass "
        "(Python recursion limit reached)"
    )


def test_pass_with_missing_module(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(tr_mlir.passes.PASSES, "arch-not-written-yet", "ArchNotWrittenYetPass")
    # registration is lazy: other pipelines still work
    code, _, err = run_main([write(tmp_path, MODEL), "-p", "cse"], capsys)
    assert (code, err) == (0, "")
    code, out, err = run_main([write(tmp_path, MODEL), "-p", "cse,arch-not-written-yet"], capsys)
    assert code == 1 and out == ""
    assert err == (
        "tr-opt: error: pass 'arch-not-written-yet' is not available: cannot import module "
        "'tr_mlir.passes.arch_not_written_yet' (No module named "
        "'tr_mlir.passes.arch_not_written_yet')\n"
    )


# --------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------


def test_archplan_yaml_target(capsys) -> None:
    code, out, err = run_main([str(EXAMPLES / "mlp.mlir"), "-p", "arch-plan", "-t", "archplan-yaml"], capsys)
    assert (code, err) == (0, "")
    assert "layers:" in out and "input_spec:" in out


def test_archplan_yaml_target_without_module(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tr_mlir.archplan_yaml", None)
    code, out, err = run_main([write(tmp_path, MODEL), "-t", "archplan-yaml"], capsys)
    assert code == 1 and out == ""
    assert err.startswith(
        "tr-opt: error: target 'archplan-yaml' is not available: cannot import module "
        "'tr_mlir.archplan_yaml'"
    )


# --------------------------------------------------------------------------------------
# xDSL 0.74 holes (DESIGN section 6)
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "column", "spelling"),
    [
        ('"test.op"() {a = 1 : i99999999999} : () -> ()', 22, "i99999999999"),
        ('"test.op"() {a = 1 : si16777216} : () -> ()', 22, "si16777216"),
        ('"test.op"() : () -> tensor<2xui99999999999>', 30, "ui99999999999"),
        ('"test.op"() {a = dense<1> : tensor<2xi99999999999>} : () -> ()', 38, "i99999999999"),
        ('"test.op"() {a = array<i99999999999: 1, 2>} : () -> ()', 24, "i99999999999"),
    ],
)
def test_absurd_integer_width(tmp_path: Path, capsys, text: str, column: int, spelling: str) -> None:
    code, out, err = run_main([write(tmp_path, text + "\n")], capsys)
    assert code == 1 and out == ""
    assert err.splitlines()[0] == (
        f"tr-opt: error: {tmp_path / 'in.mlir'}:1:{column}: integer bitwidth is limited to "
        f"{MAX_INTEGER_WIDTH} bits, got {spelling}"
    )


def test_widest_integer_type_accepted(tmp_path: Path, capsys) -> None:
    code, out, _ = run_main([write(tmp_path, f'"test.op"() : () -> i{MAX_INTEGER_WIDTH}\n')], capsys)
    assert code == 0 and f"i{MAX_INTEGER_WIDTH}" in out


def test_absurd_integer_width_does_not_hang() -> None:
    """End to end, in a fresh process: fails fast (stock xdsl-opt allocates ~12 GB here)."""
    proc = run_cli([], stdin='"test.op"() {a = 1 : i99999999999} : () -> ()\n')
    assert proc.returncode == 1
    assert proc.stderr.startswith("tr-opt: error: stdin:1:22: integer bitwidth is limited")


def test_unterminated_string_does_not_hang(tmp_path: Path, capsys) -> None:
    """xDSL's string regex backtracks 2^(line length) times on an unclosed literal."""
    line = '%0 = "test.op"() {a = "' + "an unterminated string literal on a long line " * 3 + "\n"
    path = write(tmp_path, line + '"test.op"() : () -> ()\n')
    code, _, err = run_main([path], capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"tr-opt: error: {path}:1:23: End of file reached before closing string literal."
    )
    escaped = '"test.op"() {a = "tab\\t quote\\" hex\\4A end"} : () -> ()\n'
    code, out, err = run_main([write(tmp_path, escaped, "ok.mlir")], capsys)
    assert (code, err) == (0, "")
    assert 'a = "tab\\09 quote\\22 hexJ end"' in out  # xDSL prints escapes as hex


def _nested_seqs(depth: int) -> str:
    """``depth`` nested regions: an arch.model holding depth - 1 nested arch.seq."""
    t = "tensor<?x8x8x4xf32>"
    lines = ["arch.model @deep input(8, 8, 4) num_classes = 10 {", f"^bb0(%in: {t}):"]
    prev = "%in"
    for i in range(depth - 1):
        lines += [f"%s{i} = arch.seq {prev} : {t} -> {t} {{", f"^bb0(%a{i}: {t}):"]
        prev = f"%a{i}"
    lines.append(f"%r = arch.relu {prev} : {t} -> {t}")
    last = "%r"
    for i in reversed(range(depth - 1)):
        lines += [f"arch.yield {last} : {t}", "}"]
        last = f"%s{i}"
    lines += [f"arch.output {last} : {t}", "}"]
    return "\n".join(lines) + "\n"


def test_deepest_nesting_round_trips_in_process(tmp_path: Path, capsys) -> None:
    """The limit leaves room for parsing, verifying, passes and printing, even under pytest."""
    path = write(tmp_path, _nested_seqs(MAX_REGION_DEPTH))
    code, generic, err = run_main([path, "--print-op-generic", "-p", "cse,canonicalize,dce"], capsys)
    assert (code, err) == (0, "")
    code, custom, err = run_main([write(tmp_path, generic, "generic.mlir")], capsys)
    assert (code, err) == (0, "")
    assert custom.count("arch.seq") == MAX_REGION_DEPTH - 1


def test_too_deep_nesting(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, _nested_seqs(MAX_REGION_DEPTH + 1))
    code, _, err = run_main([path], capsys)
    assert code == 1
    line = 2 * MAX_REGION_DEPTH + 1  # the line of the first region too many
    assert err.splitlines()[0] == (
        f"tr-opt: error: {path}:{line}:67: regions nested more than {MAX_REGION_DEPTH} levels "
        "deep are not supported"
    )


def test_deeply_nested_attribute(tmp_path: Path, capsys) -> None:
    depth = 400
    path = write(tmp_path, '"test.op"() {a = ' + "[" * depth + "]" * depth + "} : () -> ()\n")
    code, _, err = run_main([path], capsys)
    assert code == 1
    first = err.splitlines()[0]
    assert first.startswith(f"tr-opt: error: {path}:1:")
    assert first.endswith("input nested too deeply for the parser (Python recursion limit reached); "
                          "flatten the nesting of regions, attributes or types")


@pytest.mark.parametrize(
    ("attr", "col", "message"),
    [
        ("1.0e39 : f32", 18, "numeric literal out of range for its type: '1.0e39 : f32' "
                             "(it is above the largest finite f32)"),
        ("-7.0e4 : f16", 18, "numeric literal out of range for its type: '-7.0e4 : f16'"),
        ("0x1FFFFFFFF : f32", 18, "numeric literal out of range for its type: '0x1FFFFFFFF : f32' "
                                  "(a hexadecimal f32 is a pattern of 32 bits)"),
        ("1.0e39 : bf16", 18, "numeric literal out of range for its type: '1.0e39 : bf16'"),
        # xDSL read these as infinity (exit 0)
        ("1.0e400 : f64", 18, "float literal 1.0e400 is out of range"),
        ("-1.0e400", 19, "float literal 1.0e400 is out of range"),
        ("array<f32: 1.0, 1.0e39>", 23, "value out of range for the element type of this dense array "
                                        "(a value is above the largest finite f32)"),
        ("dense<[1.0, 1.0e39]> : tensor<2xf32>", 30,
         "value 1.0e39 is out of range for the element type f32 of the dense literal"),
    ],
)
def test_float_overflow(tmp_path: Path, capsys, attr: str, col: int, message: str) -> None:
    check_literal_error(tmp_path, capsys, attr, col, message)


def check_literal_error(tmp_path: Path, capsys, attr: str, col: int, message: str) -> None:
    """``attr`` in an op is a parse error at ``1:col`` with ``message``, the source line under it."""
    line = f'"test.op"() {{a = {attr}}} : () -> ()'
    path = write(tmp_path, line + "\n")
    code, _, err = run_main([path], capsys)
    assert code == 1
    first, source = err.splitlines()[:2]
    assert first.startswith(f"tr-opt: error: {path}:1:{col}: {message}")
    assert source == line
    assert "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize(
    ("attr", "col", "message"),
    [
        # xDSL kept 10^23 (MLIR's index is a signed 64-bit integer)
        ("100000000000000000000000 : index", 18,
         "numeric literal out of range for its type: '100000000000000000000000 : index' "
         "(index holds -9223372036854775808 to 9223372036854775807)"),
        ("9223372036854775808 : index", 18, "numeric literal out of range for its type"),
        # xDSL: a VerifyException located after the type, without the source line
        ("300 : i8", 18, "numeric literal out of range for its type: '300 : i8' (i8 holds -128 to 255)"),
        # xDSL: "internal error: ValueError" / "struct.error", no location
        ("dense<[300]> : tensor<1xi8>", 25,
         "value 300 is out of range for the element type i8 of the dense literal (i8 holds -128 to 255)"),
        ("dense<[100000000000000000000000]> : tensor<1xindex>", 25,
         "value 100000000000000000000000 is out of range for the element type index"),
        ("dense<(1, 300)> : tensor<complex<i8>>", 24, "value (1, 300) is out of range"),
    ],
)
def test_integer_overflow(tmp_path: Path, capsys, attr: str, col: int, message: str) -> None:
    check_literal_error(tmp_path, capsys, attr, col, message)


def test_numbers_in_range(tmp_path: Path, capsys) -> None:
    text = ('"test.op"() {a = 3.0e38 : f32, b = 1.0e308 : f64, c = 1.0e-400 : f64, '
            'd = 0x7ff0000000000000 : f64, e = 9223372036854775807 : index, '
            'f = -9223372036854775808 : index, g = dense<[-128, 255]> : tensor<2xi8>} : () -> ()\n')
    code, out, _ = run_main([write(tmp_path, text)], capsys)
    assert code == 0
    for printed in ("3.000000e+38", "1.000000e+308", "0.000000e+00 : f64", "0x7ff0000000000000",
                    "9223372036854775807 : index", "-9223372036854775808 : index", "dense<[-128, -1]>"):
        assert printed in out


def test_literal_problem() -> None:
    from xdsl.dialects.builtin import ComplexType, IndexType, bf16, f32, f64, i8, i64

    assert opt_parser.literal_problem(127, i8) is None and opt_parser.literal_problem(255, i8) is None
    assert opt_parser.literal_problem(256, i8) == "i8 holds -128 to 255"
    assert opt_parser.literal_problem(-(1 << 63), IndexType()) is None
    assert opt_parser.literal_problem(1 << 63, IndexType()) is not None
    assert opt_parser.literal_problem((1 << 64) - 1, i64) is None  # signless: the unsigned values too
    assert opt_parser.literal_problem(3.4028234663852886e38, f32) is None
    assert opt_parser.literal_problem(3.5e38, f32) == "it is above the largest finite f32"
    assert opt_parser.literal_problem(3.5e38, bf16) == "it is above the largest finite bf16"
    assert opt_parser.literal_problem(10 ** 400, f64) is not None  # no float holds it
    assert opt_parser.literal_problem((1.0, 1e39), ComplexType(f32)) is not None
    assert opt_parser.literal_problem(1.0, i8) is None  # not an integer literal: xDSL's own error


# --------------------------------------------------------------------------------------
# Dominance
# --------------------------------------------------------------------------------------


def test_use_before_def(tmp_path: Path, capsys) -> None:
    text = MODEL.replace(
        "  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>\n"
        "  %r = arch.relu %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>\n",
        "  %r = arch.relu %c : tensor<?x8x8x8xf32> -> tensor<?x8x8x8xf32>\n"
        "  %c = arch.conv %x out_ch = 8 k = 3 p = 1 : tensor<?x8x8x3xf32> -> tensor<?x8x8x8xf32>\n",
    )
    path = write(tmp_path, text)
    code, _, err = run_main([path], capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"tr-opt: error: {path}:3:8: 'arch.relu' op operand #0 does not dominate this use: "
        "%c is defined later in the same block (by 'arch.conv')"
    )


def test_use_of_own_result(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, '%0 = "test.op"(%0) : (i32) -> i32\n')
    code, _, err = run_main([path], capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"tr-opt: error: {path}:1:6: 'test.op' op operand #0 does not dominate this use: "
        "the op uses its own result #0"
    )


MULTI_BLOCK = """\
"test.op"() ({
^bb0:
  "test.termop"() [^bb1, ^bb2] : () -> ()
^bb1:
  %a = "test.op"() : () -> i32
  "test.termop"() [^bb3] : () -> ()
^bb2:
  "test.termop"() [^bb3] : () -> ()
^bb3:
  "test.op"(USE) : (i32) -> ()
  "test.termop"() : () -> ()
^bb4:
  "test.op"(%a) : (i32) -> ()
  "test.termop"() : () -> ()
}) : () -> ()
"""


def test_multi_block_dominance(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, MULTI_BLOCK.replace("USE", "%a"))
    code, _, err = run_main([path], capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"tr-opt: error: {path}:10:3: 'test.op' op operand #0 does not dominate this use: "
        "%a is defined in a block that does not dominate this one"
    )
    # the use in ^bb4 (unreachable) is accepted, as in MLIR; a dominated use is fine
    ok = MULTI_BLOCK.replace('"test.op"(USE) : (i32) -> ()\n', "").replace(
        '  "test.termop"() [^bb3] : () -> ()\n^bb2', '  "test.op"(%a) : (i32) -> ()\n  "test.termop"() [^bb3] : () -> ()\n^bb2'
    )
    code, _, err = run_main([write(tmp_path, ok, "ok.mlir")], capsys)
    assert (code, err) == (0, "")


def _model_with_seq() -> tuple[ModuleOp, ModelOp, SeqOp]:
    model = ModelOp("m", (8, 8, 4), 10)
    block = model.body.block
    seq = SeqOp(model.input_value, result_type=nhwc_type(8, 8, 4))
    inner = ReluOp(seq.body.block.args[0], result_type=nhwc_type(8, 8, 4))
    seq.body.block.add_ops([inner, YieldOp(inner)])
    block.add_ops([seq, OutputOp(seq)])
    return ModuleOp([model]), model, seq


def test_dominance_accepts_valid_nesting() -> None:
    module, _, _ = _model_with_seq()
    module.verify()
    check_dominance(module)
    for name in ("resnet_tiny", "mobilenet_tiny"):
        from xdsl.parser import Parser

        ctx = TrOptMain(args=[]).ctx
        parsed = Parser(ctx, (EXAMPLES / f"{name}.mlir").read_text()).parse_module()
        check_dominance(parsed)


def test_dominance_value_from_non_enclosing_region() -> None:
    """Only a pass can produce this (the parser scopes names): a use outside the region."""
    module, model, seq = _model_with_seq()
    inner = seq.body.block.first_op
    leak = ReluOp(inner, result_type=nhwc_type(8, 8, 4))
    model.body.block.insert_op_before(leak, model.output_op)
    with pytest.raises(DominanceError, match="defined in a region that does not enclose this op") as info:
        check_dominance(module)
    assert info.value.op is leak
    assert "'arch.relu' op operand #0 does not dominate this use" in str(info.value)
    assert isinstance(info.value, VerifyException)


def test_dominance_result_used_in_own_region() -> None:
    module, _, seq = _model_with_seq()
    user = xdsl_test.TestOp(operands=[seq.output])
    seq.body.block.insert_op_before(user, seq.body.block.first_op)
    with pytest.raises(DominanceError, match="is a result of the enclosing 'arch.seq' op"):
        check_dominance(module)


def test_dominance_detached_region_value() -> None:
    module, model, _ = _model_with_seq()
    orphan = Region(Block(arg_types=[nhwc_type(8, 8, 4)]))
    user = ReluOp(orphan.block.args[0], result_type=nhwc_type(8, 8, 4))
    model.body.block.insert_op_before(user, model.output_op)
    with pytest.raises(DominanceError, match="not enclose"):
        check_dominance(module)


# --------------------------------------------------------------------------------------
# The console script, end to end
# --------------------------------------------------------------------------------------


def test_cli_garbage_stdin() -> None:
    proc = run_cli([], stdin="garbage\n")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "tr-opt: error: stdin:1:1: Operation garbage is not registered",
        "garbage",
        "^^^^^^^",
    ]


def test_cli_success_and_errors(tmp_path: Path) -> None:
    ok = run_cli([str(EXAMPLES / "mlp.mlir"), "-p", "arch-plan"])
    assert (ok.returncode, ok.stderr) == (0, "")
    assert "arch.softmax_ce" in ok.stdout
    bad = run_cli([write(tmp_path, MODEL.replace("k = 3 p = 1", "k = 3 s = 0 p = 1"))])
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("tr-opt: error: ")


def test_long_module_dump_cut_to_the_failing_op(capsys) -> None:
    """A pass failing on a big module prints the lines around the marked op, not the module."""
    code, _, err = run_main([str(EXAMPLES / "resnet50.mlir"), "-p", "tr-compile"], capsys)
    assert code == 1
    lines = err.splitlines()
    assert lines[0].endswith("memplan-select-conv-algo needs the option batch_size (no 'memplan.spec' to take it from)")
    assert any("| memplan-select-conv-algo needs the option batch_size" in line for line in lines)
    assert lines[-1].startswith("... (") and lines[-1].endswith("lines of the module left out)")
    assert len(lines) < 2 + tr_opt.DUMP_LINES


@pytest.mark.parametrize("n, mark", [(30, 10), (200, 3), (200, 100), (200, 196)])
def test_trim_dump_window(n: int, mark: int) -> None:
    lines = [f"line {i}" for i in range(n)]
    lines[mark] = "  ^^^^----"
    out = tr_opt._trim_dump(lines)
    if n <= tr_opt.DUMP_LINES:
        assert out == lines
        return
    assert "  ^^^^----" in out
    kept = [line for line in out if not line.startswith("... (")]
    assert kept == lines[max(0, mark - 9):mark + 7]
    dropped = sum(int(line.split("(")[1].split()[0]) for line in out if line.startswith("... ("))
    assert dropped + len(kept) == n


def test_trim_dump_without_marker() -> None:
    lines = [f"line {i}" for i in range(100)]
    out = tr_opt._trim_dump(lines)
    assert out[:tr_opt.DUMP_LINES] == lines[:tr_opt.DUMP_LINES]
    assert out[-1] == f"... ({100 - tr_opt.DUMP_LINES} more lines of the module left out)"
