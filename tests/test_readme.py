"""The README's Python example runs and prints what the README shows."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


def test_python_example_runs_and_prints_the_shown_ir():
    (code,) = blocks("python")[:1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    shown = blocks("mlir")[0]
    assert shown.strip() in out.getvalue()


def _task_example() -> tuple[str, str]:
    """The README's second python block (the Task API) and the output it shows."""
    (code, shown), = re.findall(r"```python\n(.*?)```\s*prints\s*```text\n(.*?)```",
                                README.read_text().split("## The Task API", 1)[1], flags=re.S)[:1]
    return code, shown


def test_task_example_runs_trains_and_prints_what_is_shown():
    code, shown = _task_example()
    assert code == blocks("python")[1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})  # the example asserts the reload itself
    printed = out.getvalue().strip().splitlines()
    lines = shown.strip().splitlines()
    assert len(printed) == len(lines)
    # same text; numbers may differ in the last digit (BLAS summation order), so compare shapes
    number = r"-?\d+(?:\.\d+)?"
    for got, want in zip(printed, lines):
        pattern = "".join(number if re.fullmatch(number, part) else re.escape(part)
                          for part in re.split(f"({number})", want))
        assert re.fullmatch(pattern, got), (got, want)
    accuracy = float(re.search(r"val top-1 ([\d.]+)%", printed[2]).group(1))
    assert accuracy >= 95.0


def test_run_command_is_the_makefile_run_target():
    makefile = (README.parent / "Makefile").read_text()
    recipe = re.search(r"^run: .*\n\t(.+)$", makefile, flags=re.M).group(1)
    shown = re.search(r"make run` is this command.*?```sh\n(.*?)\n```", README.read_text(), flags=re.S).group(1)
    assert recipe.replace("$(BIN)", ".venv/bin") == shown
